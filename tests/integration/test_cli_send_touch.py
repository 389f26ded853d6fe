"""Behaviour 1.3 and 1.5 through the installed wrappers: the send texts the audit found untested, and the
best-effort ``last_seen`` touch (1 s lock bound) after a send and after a poll."""

from __future__ import annotations

import calendar
import time

import pytest

from tests.conftest import Comm, Session
from tests.integration.cli_support import (
    edit_row,
    put_registry,
    registry,
    registry_lock_held,
    row,
    snapshot,
    stamp,
)

pytestmark = pytest.mark.integration

OLD = 300  # seconds: still live by the 600 s rule, old enough that a touch shows


@pytest.fixture
def two(comm: Comm) -> tuple[Comm, Session, Session]:
    a, b = comm.session("alpha"), comm.session("beta")
    assert a.run("join", "--name", "alpha").code == 0
    assert b.run("join", "--name", "beta").code == 0
    return comm, a, b


def _age(comm: Comm, handle: str) -> float:
    last = registry(comm)["agents"][handle]["last_seen"]
    return time.time() - calendar.timegm(time.strptime(last, "%Y-%m-%dT%H:%M:%SZ"))


def test_1_3_identity_with_no_registry_row(two) -> None:
    comm, a, b = two
    assert b.run("leave", "--name", "alpha").code == 0
    before = snapshot(comm.home)
    r = a.run("send", "@beta", "hi")
    assert (r.code, r.out, r.err_lines) == (
        1,
        "",
        [
            "FAILED -> @beta: your identity @alpha has no registry row; reclaim it with "
            f"{comm.layout.bin_dir}/comm-join.sh --name alpha"
        ],
    ), r
    assert snapshot(comm.home) == before


def test_1_3_broadcast_copy_to_a_row_with_no_host(two) -> None:
    comm, a, _ = two
    doc = registry(comm)
    doc["agents"]["t"] = row(comm, "t", "/elsewhere/t", host="")
    put_registry(comm, doc)
    r = a.run("send", "--broadcast", "hello all")
    assert r.code == 1, r
    assert r.out_lines == ["  filed -> @beta", "Broadcast to 1 of 2 agent(s)."]
    assert r.err_lines == ["FAILED -> @t: no such handle: t"]
    assert comm.inbox_bytes("t") == b""
    assert comm.inbox_bytes("beta").count(b"\n") == 1


def test_1_3_broadcast_copy_to_a_row_with_no_host_key(two) -> None:
    comm, a, _ = two
    doc = registry(comm)
    doc["agents"]["t"] = {k: v for k, v in row(comm, "t", "/elsewhere/t").items() if k != "host"}
    put_registry(comm, doc)
    r = a.run("send", "--broadcast", "hello all")
    assert (r.code, r.err_lines) == (1, ["FAILED -> @t: no such handle: t"]), r


def test_1_4_relay_endpoint_this_version_cannot_dial_is_discarded(two) -> None:
    _, a, _ = two
    r = a.run("send", "@gamma", "hi", env={"SOT_RELAY_ENDPOINT": "tcp:10.0.0.1:9"})
    assert (r.code, r.out) == (1, ""), r
    assert r.err_lines == [
        "comm-lib: discarding an endpoint this version cannot dial: tcp:10.0.0.1:9",
        "FAILED -> @gamma: no sotd daemon found; set SOT_RELAY_ENDPOINT=unix:/path, ssh:target[/host], or "
        "(Windows) pipe:name",
        f"@gamma is not registered here ({a.comm.layout.registry}) and no hub is configured; see who is: "
        "sotd comm list",
    ]


# ------------------------------------------------------------------------------------ last_seen touch


def test_1_3_send_touches_the_senders_last_seen(two) -> None:
    comm, a, _ = two
    edit_row(comm, "alpha", last_seen=stamp(OLD))
    r = a.run("send", "@beta", "hi")
    assert (r.code, r.out_lines, r.err) == (0, ["  filed -> @beta"], ""), r
    assert _age(comm, "alpha") < 30


def test_1_3_failed_send_still_touches(two) -> None:
    comm, a, _ = two
    edit_row(comm, "alpha", last_seen=stamp(OLD))
    edit_row(comm, "beta", last_seen=stamp(601))
    r = a.run("send", "@beta", "hi")
    assert (r.code, r.err_lines) == (1, ["FAILED -> @beta: no live session holds @beta"]), r
    assert _age(comm, "alpha") < 30


def test_1_3_held_registry_lock_does_not_change_the_send(two) -> None:
    comm, a, _ = two
    old = stamp(OLD)
    edit_row(comm, "alpha", last_seen=old)
    with registry_lock_held(comm):
        t0 = time.monotonic()
        r = a.run("send", "@beta", "hi")
        took = time.monotonic() - t0
    assert (r.code, r.out_lines, r.err) == (0, ["  filed -> @beta"], ""), r
    assert registry(comm)["agents"]["alpha"]["last_seen"] == old  # the touch gave up
    assert took < 8, took  # within its 1 s bound (plus start-up), not the 10 s join bound
    assert comm.inbox_bytes("beta").count(b"\n") == 1


def test_1_5_poll_touches_last_seen(two) -> None:
    comm, a, b = two
    assert b.run("send", "@alpha", "mail").code == 0
    edit_row(comm, "alpha", last_seen=stamp(OLD))
    r = a.run("poll")
    assert r.code == 0 and r.out_lines[0].endswith("[beta:beta] mail"), r
    assert _age(comm, "alpha") < 30
    edit_row(comm, "alpha", last_seen=stamp(OLD))
    r = a.run("poll")
    assert (r.code, r.out_lines) == (0, ["No new messages."]), r
    assert _age(comm, "alpha") < 30


def test_1_5_held_registry_lock_does_not_change_the_poll(two) -> None:
    comm, a, b = two
    assert b.run("send", "@alpha", "mail").code == 0
    old = stamp(OLD)
    edit_row(comm, "alpha", last_seen=old)
    with registry_lock_held(comm):
        r = a.run("poll")
    assert (r.code, r.err) == (0, ""), r
    assert r.out_lines[0].endswith("[beta:beta] mail")
    assert registry(comm)["agents"]["alpha"]["last_seen"] == old
    r = a.run("poll")
    assert r.out_lines == ["No new messages."]  # the cursor moved even though the touch gave up
