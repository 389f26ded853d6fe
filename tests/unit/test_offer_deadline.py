"""The hub's offer (D4) under its sender's deadline (``hub.Hub.offer``, issue 27 item 2): a frame that
reaches the hub with no time left to ask a linked box is refused in those words, with no box asked; a box
left unasked because the deadline passed counts as one that did not answer. Neither is ``no box knows that
handle``: that sentence says every linked box was asked and none lists it.

Found by CI (test_cross_box_faults::test_link_loss_and_reconnection): under load a send started slowly,
its frame reached the hub with under the answer margin left, the offer asked nobody, and the sender read
a bare ``no box knows that handle: bob`` for a handle its linked box lists. The links here are stand-ins
(an object with a channel that answers after a set delay): the decision is the hub's, not the wire's.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from sotd import topology
from sotd.daemon import hub, ops

pytestmark = pytest.mark.unit

TOPO = topology.parse(b'hub = "boxa"\n[boxes.boxa]\n[boxes.boxb]\n[boxes.boxc]\n[boxes.boxd]\n')
NH = {"error": "no box knows that handle: bob", "code": "not_here"}


class Channel:
    """A link's channel that answers ``answer`` after ``delay`` seconds, or not at all past its caller's
    bound; ``delay`` None: it answers at the bound itself."""

    def __init__(self, answer: dict[str, Any], delay: float | None) -> None:
        self.answer = answer
        self.delay = delay
        self.asked = 0

    async def call_prepared(self, prepared: Any, timeout: float) -> dict[str, Any]:
        self.asked += 1
        if self.delay is None:  # at the bound: not a moment before it (a loop may wake a timer early)
            end = time.monotonic() + timeout
            while time.monotonic() < end:
                await asyncio.sleep(max(0.001, end - time.monotonic()))
            return self.answer
        await asyncio.sleep(min(self.delay, timeout))
        if self.delay > timeout:
            raise TimeoutError
        return self.answer


class Link:
    def __init__(self, channel: Channel) -> None:
        self.channel = channel


class Server:
    def __init__(self, links: dict[str, Link]) -> None:
        self.links = links

    def link_state(self, host: str) -> tuple[float, str]:
        return (0.0, "never")


def the_hub(links: dict[str, Link]) -> hub.Hub:
    return hub.Hub(
        environ={"SOT_INBOX_LOCK_WAIT_SECS": "2"},
        self_host="boxa",
        hub=True,
        topology=TOPO,
        topology_error="",
        server=Server(links),  # type: ignore[arg-type]
        uplink=None,
        shutting_down=asyncio.Event(),
    )


def frame(expires: float | None) -> dict[str, Any]:
    f: dict[str, Any] = {"from": "cora", "to": "bob", "text": "again", "broadcast": False, "forwarded": True}
    if expires is not None:
        f["expires"] = round(expires, 3)
    return f


def test_a_frame_with_no_time_left_to_ask_is_refused_in_those_words_and_no_box_is_asked() -> None:
    boxb = Channel({"ok": True}, 0.0)
    h = the_hub({"boxb": Link(boxb), "boxc": Link(Channel({"ok": True}, 0.0))})
    h.where["bob"] = "boxb"
    left = ops.ANSWER_MARGIN_S / 2  # under the margin for the answer's way back
    got = asyncio.run(h.offer(frame(time.time() + left), "link:boxc"))
    assert got == {
        "error": "this folder does not list @bob, and its sender stops waiting before a linked box could "
        "answer, so it was offered to none; nothing was filed",
        "code": "file_failed",
    }
    assert boxb.asked == 0


def test_boxes_left_unasked_when_the_deadline_passed_are_named_as_not_answering() -> None:
    """The box that filed @bob last answers not_here just as the bound runs out: the others were never
    asked, so the verdict names them as not answering within the bound, not that nobody knows @bob."""
    bound = 0.2
    boxb = Channel(NH, None)  # its answer comes at the bound
    boxd = Channel({"ok": True}, 0.0)
    h = the_hub({"boxb": Link(boxb), "boxc": Link(Channel(NH, 0.0)), "boxd": Link(boxd)})
    h.where["bob"] = "boxb"
    got = asyncio.run(h.offer(frame(time.time() + ops.ANSWER_MARGIN_S + bound), "link:boxc"))
    assert boxb.asked == 1 and boxd.asked == 0
    assert got["code"] == "file_failed"
    assert got["error"].startswith("no box answered for @bob within 0.")
    assert got["error"].endswith("s: boxd (the bound ran out before they were asked)")


def test_with_time_left_the_others_are_asked_after_the_known_box_says_not_here() -> None:
    boxb = Channel(NH, 0.0)
    boxd = Channel({"ok": True}, 0.0)
    h = the_hub({"boxb": Link(boxb), "boxc": Link(Channel(NH, 0.0)), "boxd": Link(boxd)})
    h.where["bob"] = "boxb"
    got = asyncio.run(h.offer(frame(time.time() + 4.0), "link:boxc"))
    assert got == {"ok": True}
    assert (boxb.asked, boxd.asked) == (1, 1)
    assert h.where["bob"] == "boxd"
