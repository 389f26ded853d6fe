"""``sotd web``'s command line (issue 30): its one stdout line, its usage, a port it cannot take, and a
clean exit on SIGTERM. Real processes; the page itself is tests/browser."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess

import pytest

from tests.conftest import SOTD, clean_env, wait_for

pytestmark = pytest.mark.integration


def env(tmp: str) -> dict[str, str]:
    e = clean_env()
    e.update(
        SOT_COMM_HOME=os.path.join(tmp, "comm"),
        SOT_SELF_HOST="testhost",
        SOT_SOCKET=os.path.join(tmp, "none.sock"),
    )
    return e


def test_usage_and_a_port_it_cannot_take(tmp_path: object) -> None:
    e = env(str(tmp_path))
    r = subprocess.run([SOTD, "web", "extra"], env=e, capture_output=True, text=True, timeout=30, check=False)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", "usage: sotd web [--port N] [--socket PATH]\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run(
            [SOTD, "web", "--port", str(port)], env=e, capture_output=True, text=True, timeout=30, check=False
        )
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == (
        f"sotd web: cannot listen on 127.0.0.1:{port}: Address already in use\n"
        "choose another port (--port N), or none and the system picks one\n"
    )


def test_prints_its_address_and_ends_on_sigterm(tmp_path: object) -> None:
    out = os.path.join(str(tmp_path), "out")
    with (
        open(out, "wb") as o,
        subprocess.Popen([SOTD, "web"], env=env(str(tmp_path)), stdout=o, stderr=subprocess.DEVNULL) as p,
    ):

        def line() -> str | None:
            with open(out, encoding="utf-8") as f:
                first = f.readline()
            return first if first.endswith("\n") else None

        first = wait_for(line, 20, "the address")
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/\?s=[A-Za-z0-9_-]{32}\n", first)
        p.send_signal(signal.SIGTERM)
        assert p.wait(10) == 0


def threads(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))


def test_nothing_reads_while_no_page_is_open(tmp_path: object) -> None:
    """The reading thread runs only while an event stream is open: one thread (the listener) before the
    first page, three with one open (its stream and the reader), one again within seconds after it
    closed (each stream looks for its end every second)."""
    import http.client

    out = os.path.join(str(tmp_path), "out")
    with (
        open(out, "wb") as o,
        subprocess.Popen([SOTD, "web"], env=env(str(tmp_path)), stdout=o, stderr=subprocess.DEVNULL) as p,
    ):
        try:

            def line() -> str | None:
                with open(out, encoding="utf-8") as f:
                    first = f.readline()
                return first if first.endswith("\n") else None

            url = wait_for(line, 20, "the address").strip()
            port, secret = int(url.split(":")[2].split("/")[0]), url.split("?s=")[1]
            assert threads(p.pid) == 1
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/events", headers={"Cookie": f"sotd_web_{port}={secret}"})
            r = conn.getresponse()
            assert (r.status, r.getheader("Content-Type")) == (200, "text/event-stream")
            assert r.readline() == b"event: state\n"
            assert threads(p.pid) == 3
            r.close()  # the response holds the socket too
            conn.close()
            wait_for(lambda: threads(p.pid) == 1, 5, "the stream's and the reader's threads to end")
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait(10)
