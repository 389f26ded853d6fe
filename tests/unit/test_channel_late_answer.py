"""An answer read in the same turn of the loop as its wait's bound is the answer (``server.Channel``).

After a stall of the whole process (a loaded or frozen box: the NFS tier's emulated guest), the response
and the wait's timer are ready together. Either can run first: the response before the timer's cancel
(the future is resolved, then the task is cancelled), or after it (the future is cancelled, then the
response is read). Both orders must hand the response to the caller; a response read a turn later is
late, and the wait is a timeout. Before this, both orders were timeouts: a hub that filed a line and
said ``ok`` in time had its answer dropped, and the guest told its sender FAILED for a filed line.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from sotd.daemon.server import Channel
from sotd.wire.framing import Envelope

pytestmark = pytest.mark.unit

BOUND_S = 0.05
STALL_S = 0.15  # past the bound: the timer is due when the stalled callback returns


class _Transport:
    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return False


class _Writer:
    """What ``Channel`` writes to: lines kept, always flushed."""

    def __init__(self) -> None:
        self.transport = _Transport()
        self.lines: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.lines.append(data)

    def is_closing(self) -> bool:
        return False


def _answer(rid: int) -> Envelope:
    return Envelope(rid, "res", "comm.file", {"ok": True})


async def _call_with_stall(order: str) -> Any:
    loop = asyncio.get_running_loop()
    channel = Channel(_Writer(), "test")  # type: ignore[arg-type]
    task = asyncio.create_task(channel.call("comm.file", {}, BOUND_S))
    await asyncio.sleep(0)  # the request is written and its wait begun
    (rid,) = channel.pending

    def stall() -> None:
        time.sleep(STALL_S)  # the whole loop stalls past the bound; the answer comes in meanwhile
        if order == "before the timer":
            loop.call_soon(channel.resolve, _answer(rid))  # ready before the due timer is moved in
        elif order == "after the timer":
            loop.call_soon(loop.call_soon, channel.resolve, _answer(rid))  # queued behind the timer
        # "a turn later": nothing now (below)

    loop.call_soon(stall)
    if order == "a turn later":
        await asyncio.sleep(STALL_S + BOUND_S)
        channel.resolve(_answer(rid))
    try:
        return await task
    except TimeoutError:
        return "timeout"
    finally:
        assert not channel.pending and not channel.late  # nothing kept after the wait ends


@pytest.mark.parametrize(
    ("order", "want"),
    [
        ("before the timer", {"ok": True}),
        ("after the timer", {"ok": True}),
        ("a turn later", "timeout"),
    ],
)
def test_an_answer_in_the_turn_of_the_bound_is_kept(order: str, want: object) -> None:
    assert asyncio.run(_call_with_stall(order)) == want


def test_an_answer_in_time_is_the_answer_and_none_is_a_timeout() -> None:
    async def run(answer: bool) -> Any:
        channel = Channel(_Writer(), "test")  # type: ignore[arg-type]
        task = asyncio.create_task(channel.call("comm.file", {}, BOUND_S))
        await asyncio.sleep(0)
        if answer:
            (rid,) = channel.pending
            assert channel.resolve(_answer(rid))
        try:
            return await task
        except TimeoutError:
            return "timeout"

    assert asyncio.run(run(True)) == {"ok": True}
    assert asyncio.run(run(False)) == "timeout"
