"""A fake daemon for client tests: a thread serving one Unix socket and speaking the wire.

Behaviour is scripted per instance through attributes (read at each connection):

- ``mode``: ``"answer"`` (default) answers the request with ``answer``; ``"silent"`` answers nothing and
  keeps the connection open; ``"close"`` closes right after reading the request; ``"garbage"`` sends
  ``garbage`` instead of an answer; ``"refuse"`` refuses the hello with ``refusal`` (and, when
  ``answer_after_refusal`` is set, answers the request afterwards too).
- ``event_first``: send an unrelated ``evt`` (and a response to another op) before anything else.
- ``delay_s``: sleep this long before answering the hello (the deadline covers the hello too, D6).
- ``answer``: the response payload for the request's op.

Everything it received is kept in ``received`` (decoded dicts, in order). Bounded: every wait has a timeout
and ``close()`` stops the thread.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from typing import Any


class FakeDaemon:
    def __init__(self, path: str) -> None:
        self.path = path
        self.mode = "answer"
        self.answer: dict[str, Any] = {"ok": True}
        self.refusal: dict[str, Any] = {"error": "no", "code": "forbidden"}
        self.answer_after_refusal = False
        self.garbage = b"this is not json\n"
        self.event_first = True
        self.delay_s = 0.0
        self.received: list[dict[str, Any]] = []
        self.received_at: list[float] = []  # time.time() of each frame in ``received``, in order
        self.connections = 0
        self._stop = threading.Event()
        self._srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._srv.bind(path)
        self._srv.listen(8)
        self._srv.settimeout(0.1)
        self._threads: list[threading.Thread] = []
        self._thread = threading.Thread(target=self._serve, name="fake-daemon", daemon=True)
        self._thread.start()

    # -- lifecycle

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for t in self._threads:
            t.join(5)
        self._srv.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def __enter__(self) -> FakeDaemon:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- serving

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            t = threading.Thread(target=self._handle, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _lines(self, conn: socket.socket, want: int) -> list[dict[str, Any]]:
        buf = b""
        out: list[dict[str, Any]] = []
        conn.settimeout(0.1)
        deadline = time.monotonic() + 10
        while len(out) < want and time.monotonic() < deadline and not self._stop.is_set():
            try:
                data = conn.recv(65536)
            except TimeoutError:
                continue
            if not data:
                break
            buf += data
            while b"\n" in buf and len(out) < want:
                line, buf = buf.split(b"\n", 1)
                obj = json.loads(line)
                out.append(obj)
                self.received.append(obj)
                self.received_at.append(time.time())
        return out

    @staticmethod
    def _res(req: dict[str, Any], payload: dict[str, Any]) -> bytes:
        env = {"v": 1, "id": req["id"], "kind": "res", "op": req["op"], "payload": payload}
        return json.dumps(env).encode() + b"\n"

    def _handle(self, conn: socket.socket) -> None:
        try:
            self._converse(conn)
        except OSError:
            pass  # the client went away: that is its right
        finally:
            conn.close()

    def _converse(self, conn: socket.socket) -> None:
        msgs = self._lines(conn, 2)
        if len(msgs) < 2:
            return
        hello, req = msgs
        if self.delay_s:
            self._stop.wait(self.delay_s)
        if self.event_first:
            evt = {"v": 1, "id": 7, "kind": "evt", "op": req["op"], "payload": {"note": "broadcast"}}
            other = {"v": 1, "id": 99, "kind": "res", "op": "workspace.list", "payload": {"workspaces": []}}
            conn.sendall(json.dumps(evt).encode() + b"\n" + json.dumps(other).encode() + b"\n")
        mode = self.mode
        if mode == "refuse":
            conn.sendall(self._res(hello, self.refusal))
            if self.answer_after_refusal:
                conn.sendall(self._res(req, self.answer))
        else:
            conn.sendall(self._res(hello, {"ok": True, "revision": 0}))
        if mode == "answer":
            conn.sendall(self._res(req, self.answer))
        elif mode == "garbage":
            conn.sendall(self.garbage)
        elif mode == "close":
            return
        if mode in ("silent", "refuse", "answer", "garbage"):
            # Keep the connection open (as a daemon would) until the client goes or we stop.
            conn.settimeout(0.1)
            while not self._stop.is_set():
                try:
                    if not conn.recv(65536):
                        return
                except TimeoutError:
                    continue
                except OSError:
                    return
