"""The pieces that let one hub serve 1,000 linked guests (issue 27 item 8; bench/hubscale.py measures them).

- ``framing.PreparedRequest``: an offer's frame encoded once gives, for every id, the bytes ``encode``
  gives, and refuses what ``encode`` refuses (``hub.prepared_frame`` says a too-long frame in words).
- ``server.nofile_target`` / ``server.connection_cap``: the open-file limit the daemon asks for and the
  connections it serves with what it got (table tests).
- ``ops.keepalive_payload``: a link's keepalive is answered without a walk of the fleet.
- ``filers.Filers``: every job runs once, in a thread, its result or exception back to its caller; jobs
  run side by side (one slow filing does not hold the others); ``close`` waits for the running ones.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from sotd.daemon import filers, hub, ops, server
from sotd.errors import WireError
from sotd.wire import framing, payloads

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "payload",
    [
        {"from": "a", "to": "b", "text": "hi", "forwarded": True, "expires": 1.5},
        {"from": "a", "to": "b", "text": 'é ✓ \x7f \ud800 \n"\\', "broadcast": False},
        {},
    ],
)
@pytest.mark.parametrize("rid", [0, 1, 42, framing.U64_MAX])
def test_prepared_request_is_encode_byte_for_byte(payload: dict[str, object], rid: int) -> None:
    prepared = framing.PreparedRequest("comm.file", payload)
    assert prepared.line(rid) == framing.encode(framing.Envelope(rid, "req", "comm.file", payload))
    assert prepared.widest == framing.request_length("comm.file", payload)


def test_prepared_request_refuses_what_encode_refuses() -> None:
    with pytest.raises(WireError, match="not JSON"):
        framing.PreparedRequest("comm.file", {"x": float("nan")})
    with pytest.raises(WireError, match="'op' must be a non-empty string"):
        framing.PreparedRequest("", {})
    with pytest.raises(WireError, match="unsigned 64-bit"):
        framing.PreparedRequest("comm.file", {}).line(-1)
    big = framing.PreparedRequest("comm.file", {"text": "x" * framing.MAX_LINE})
    with pytest.raises(WireError, match="longer than"):
        big.line(1)


def test_prepared_frame_says_too_long_in_words() -> None:
    frame = {"from": "a", "to": "b", "text": "x" * framing.MAX_LINE}
    prepared, why = hub.prepared_frame(frame, "offer it to the linked boxes")
    assert prepared is None
    assert why.startswith("the message is too long to offer it to the linked boxes: its frame would be ")
    assert why == hub.frame_too_long(frame, "offer it to the linked boxes")
    ok, none = hub.prepared_frame({"from": "a", "to": "b", "text": "hi"}, "x")
    assert ok is not None and none == ""


@pytest.mark.parametrize(
    ("soft", "hard", "want"),
    [
        (1024, 1048576, server.MAX_CONNECTIONS + server.FD_RESERVE),  # raised as far as needed
        (1024, 1024, 1024),  # the hard limit is the ceiling
        (1024, 2000, 2000),
        (100000, 1048576, 100000),  # never lowered
        (1024, -1, server.MAX_CONNECTIONS + server.FD_RESERVE),  # RLIM_INFINITY
        (-1, -1, -1),
    ],
)
def test_nofile_target(soft: int, hard: int, want: int) -> None:
    assert server.nofile_target(soft, hard) == want


@pytest.mark.parametrize(
    ("soft", "want"),
    [
        (server.MAX_CONNECTIONS + server.FD_RESERVE, server.MAX_CONNECTIONS),
        (1024, 1024 - server.FD_RESERVE),
        (100000, server.MAX_CONNECTIONS),
        (200, server.MIN_CONNECTIONS),
        (-1, server.MAX_CONNECTIONS),
    ],
)
def test_connection_cap(soft: int, want: int) -> None:
    assert server.connection_cap(soft) == want


def test_keepalive_answer_names_the_daemon_only() -> None:
    got = ops.keepalive_payload("boxa", True)
    assert got["host"] == "boxa" and got["hub"] is True and got["keepalive"] is True
    assert "links" not in got and "frontends" not in got


def test_filers_run_each_job_once_in_a_thread_with_its_result_or_exception() -> None:
    loop_thread: list[int] = []
    seen: list[int] = []

    def job(i: int) -> int:
        seen.append(threading.get_ident())
        return i * 2

    def bad() -> None:
        raise ValueError("the job's own error")

    async def main() -> list[int]:
        loop_thread.append(threading.get_ident())
        f = filers.Filers(max_threads=3)
        got = await asyncio.gather(*(f.run(job, i) for i in range(50)))
        with pytest.raises(ValueError, match="the job's own error"):
            await f.run(bad)
        assert len(f.threads) <= 3
        await f.close()
        with pytest.raises(RuntimeError, match="closed"):
            await f.run(job, 1)
        return list(got)

    assert asyncio.run(main()) == [i * 2 for i in range(50)]
    assert len(seen) == 50 and loop_thread[0] not in seen


def test_filers_run_jobs_side_by_side_and_close_waits_for_them() -> None:
    done: list[str] = []

    def slow() -> str:
        time.sleep(0.5)
        done.append("slow")
        return "slow"

    def quick() -> str:
        return "quick"

    async def main() -> tuple[float, float]:
        f = filers.Filers(max_threads=2)
        t0 = time.monotonic()
        slow_task = asyncio.ensure_future(f.run(slow))
        await asyncio.sleep(0.05)
        assert await f.run(quick) == "quick"
        quick_s = time.monotonic() - t0
        slow_task.cancel()  # its caller gives up; the job still runs to its end
        await f.close()
        return quick_s, time.monotonic() - t0

    quick_s, closed_s = asyncio.run(main())
    assert quick_s < 0.4  # not behind the slow one
    assert done == ["slow"] and closed_s >= 0.45  # close waited for the running job


def test_a_link_keepalive_origin_gets_the_short_answer() -> None:
    async def nothing(*_a: object) -> dict[str, object]:
        return {}

    o = ops.Ops(
        layout=None,  # type: ignore[arg-type]  # not read by version.query
        environ={},
        self_host="hub",
        is_hub=True,
        forward=nothing,
        offer=nothing,  # type: ignore[arg-type]
        version_info=lambda: {"host": "hub", "links": ["g1"]},
    )
    short = asyncio.run(o.handle(payloads.VERSION_QUERY, {}, "link:g1"))
    assert short == {"daemon": ops.keepalive_payload("hub", True)}
    full = asyncio.run(o.handle(payloads.VERSION_QUERY, {}, ops.CLIENT))
    assert full["daemon"] == {"host": "hub", "links": ["g1"]} and "tasks" in full["debug"]
