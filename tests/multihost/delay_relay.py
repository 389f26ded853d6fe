"""A TCP relay with a fixed delay per chunk, for ``ssh -o ProxyCommand``: ``delay_relay.py HOST PORT MS``.

stdin -> HOST:PORT and HOST:PORT -> stdout, each chunk held ``MS`` milliseconds before it is passed on
(order kept; one thread per direction). Used to give the namespace links a round trip for the benchmark
(netem is not on this kernel, testing notes 2.1). Ends when either side closes.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time


def pipe(read, write, delay: float, done: threading.Event) -> None:
    try:
        while True:
            data = read()
            if not data:
                return
            time.sleep(delay)
            write(data)
    except OSError:
        return
    finally:
        done.set()


def main() -> int:
    host, port, ms = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    delay = ms / 1000.0
    sock = socket.create_connection((host, port), timeout=10)
    sock.settimeout(None)
    done = threading.Event()

    def to_stdout(data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(1, view)
            view = view[n:]

    up = threading.Thread(
        target=pipe, args=(lambda: os.read(0, 65536), sock.sendall, delay, done), daemon=True
    )
    down = threading.Thread(target=pipe, args=(lambda: sock.recv(65536), to_stdout, delay, done), daemon=True)
    up.start()
    down.start()
    done.wait()
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
