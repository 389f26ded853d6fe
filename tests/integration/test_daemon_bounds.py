"""Issue 19 part 3: what one same-user client can hold at a real daemon (docs/daemon.md, "Connection bounds").

A one-shot connection (role ``cli``/``agent``) that says hello and then nothing is closed after the idle
bound; a request still running keeps its connection; front ends (``fe``) wait for events and are not cut;
past the connection limit a new connection is closed at once, and served again when one leaves. The bounds
are shortened through the daemon's test seams (``SOTD_TEST_IDLE_SECS``, ``SOTD_TEST_MAX_CONNECTIONS``); the
daemon is the real ``sotd daemon run`` subprocess.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from typing import Any

import pytest

from sotd.daemon import server
from sotd.wire import hello as wire_hello
from tests.conftest import wait_for
from tests.integration.test_daemon import Daemon, eof, folder, live, put_agents, raw, read_lines

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "daemon.md")


def hello_line(role: str, rid: int = 1) -> bytes:
    hello = wire_hello.hello_payload(host="testhost", os_user=f"uid:{os.geteuid()}", role="cli")
    hello["role"] = role  # the comm tools say cli/agent/link; a front end says fe
    return (json.dumps({"v": 1, "id": rid, "kind": "req", "op": "hello", "payload": hello}) + "\n").encode()


def said_hello(sock_path: str, role: str) -> socket.socket:
    s = raw(sock_path)
    s.sendall(hello_line(role))
    assert read_lines(s, 1)[0]["payload"]["ok"] is True
    return s


def hello_answered(sock_path: str) -> bool:
    """A new connection's hello is answered (False while the daemon is still at its limit)."""
    try:
        s = said_hello(sock_path, "cli")
    except (OSError, IndexError, KeyError):
        return False
    s.close()
    return True


def closed_within(s: socket.socket, seconds: float) -> bool:
    s.settimeout(seconds)
    return eof(s)


def test_19_silent_one_shot_connection_is_closed_after_the_idle_bound(
    tmp_path: Any, daemons: list[Daemon]
) -> None:
    work = str(tmp_path)
    lay = folder(work, "comm")
    d = Daemon(work, "a", lay.home, "testhost", env={"SOTD_TEST_IDLE_SECS": "1"})
    daemons.append(d)
    cli, fe = said_hello(d.sock, "cli"), said_hello(d.sock, "fe")
    try:
        t0 = time.monotonic()
        assert closed_within(cli, 8)
        assert 0.8 <= time.monotonic() - t0 < 8
        # the front end waits for events: still open and served well past the bound
        fe.sendall(b'{"v":1,"id":2,"kind":"req","op":"version.query","payload":{}}\n')
        assert read_lines(fe, 1)[0]["payload"]["daemon"]["host"] == "testhost"
    finally:
        cli.close()
        fe.close()
    assert "nothing sent for 1s after hello" in d.logtext()


def test_19_a_request_in_flight_keeps_its_connection_past_the_idle_bound(
    tmp_path: Any, daemons: list[Daemon]
) -> None:
    work = str(tmp_path)
    lay = folder(work, "comm")
    put_agents(lay, alice=live())
    d = Daemon(
        work, "a", lay.home, "testhost", env={"SOTD_TEST_IDLE_SECS": "1", "SOT_INBOX_LOCK_WAIT_SECS": "3"}
    )
    daemons.append(d)
    lock = os.open(lay.inbox_lock("alice"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    s = said_hello(d.sock, "cli")
    try:
        s.sendall(
            b'{"v":1,"id":2,"kind":"req","op":"comm.file","payload":{"from":"x","to":"alice","text":"t"}}\n'
        )
        time.sleep(2.0)  # past the idle bound, while the filing waits for the lock we hold
        fcntl.flock(lock, fcntl.LOCK_UN)
        s.settimeout(10)
        assert read_lines(s, 1)[0]["payload"] == {"ok": True}
    finally:
        os.close(lock)
        s.close()


def test_19_connections_past_the_limit_are_closed_at_once(tmp_path: Any, daemons: list[Daemon]) -> None:
    work = str(tmp_path)
    lay = folder(work, "comm")
    d = Daemon(work, "a", lay.home, "testhost", env={"SOTD_TEST_MAX_CONNECTIONS": "4"})
    daemons.append(d)
    held = [said_hello(d.sock, "fe") for _ in range(4)]
    try:
        extra = raw(d.sock)
        assert closed_within(extra, 5)
        extra.close()
        held.pop().close()
        wait_for(lambda: hello_answered(d.sock), timeout=10, what="a connection served after one left")
    finally:
        for s in held:
            s.close()
    assert "4 connections are served already" in d.logtext()


def test_19_the_bounds_are_documented() -> None:
    with open(DOCS, encoding="utf-8") as f:
        text = f.read()
    assert f"{server.IDLE_WAIT_S:g} s" in text
    assert f"{server.HELLO_WAIT_S:g} s" in text
    assert f"{server.MAX_CONNECTIONS} connections" in text
