"""Hub and guests: who owns a comm folder, the guest's forward, and the hub's offer to linked boxes.

Spec: behaviour 2.4 (is-hub rule, the record written only by the hub), 2.3 (forward texts), 6.4 (record
rules and refusal texts), D4 (the offer and its texts); seed 001 "The wire: the daemon".
Guarantee: a guest never writes ``inbox-lock-manager``; a forward or an offer waits at most its bound
(inbox-lock wait + 5 s, + 1 s per offered box) and then answers with the spec's sentence; the first ok of
an offer wins, and an offer never reports ok unless a box said ok.
What would break it: treating a box that answered ``not_here`` as one that did not answer, or offering a
frame that arrived as an offer (two hubs would bounce it between them).

Every frame it builds is checked against the 1 MiB line bound where it is built (``frame_too_long``: a
``file_failed`` sentence, never ``internal``), and another daemon's odd answer it quotes is cut to fit
(``answers.quoted_answer``; issue 25).

``is_hub``, ``offer_outcome`` and ``frame_too_long`` are pure; ``Hub`` is the shell around the links.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from sotd.daemon import ops
from sotd.errors import WireError
from sotd.formats import inbox, lockmanager
from sotd.wire import answers as wire_answers
from sotd.wire import framing, payloads

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from sotd.daemon.links import Uplink
    from sotd.daemon.server import Conn, Server
    from sotd.formats.layout import Layout
    from sotd.topology import Topology

log = logging.getLogger("sotd")

FORWARD_SLACK_S = 5.0
WHERE_MAX = 100_000  # handles the hub remembers the box of (the oldest is forgotten first)
OFFER_SLACK_S = 1.0


def is_hub(topology: Topology | None, unreadable: bool, self_host: str, own_manager: str) -> bool:
    """Behaviour 2.4: no topology file; or the topology names this host as hub; or ``inbox/`` is on this
    machine's own disk (lock identity ``local …``). An unreadable file names no hub."""
    if topology is None and not unreadable:
        return True
    if topology is not None and topology.hub == self_host:
        return True
    return own_manager.startswith("local ")


def secs(x: float) -> str:
    return f"{x:g}"


def wall_text(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def link_down_text(box: str, since: float, why: str) -> str:
    """The state of a box's missing link: ``the link from <box> is down since <UTC time>: <last error>``."""
    return f"the link from {box} is down since {wall_text(since)}: {why}"


def offer_outcome(
    handle: str,
    answers: Iterable[tuple[str, dict[str, Any] | None]],
    should_link: Iterable[str],
    linked: Iterable[str],
    bound_s: float,
    *,
    down: Mapping[str, tuple[float, str]] | None = None,
    known: str | None = None,
    unasked: Iterable[str] = (),
) -> dict[str, Any]:
    """D4. ``answers``: each offered box and its answer (None: none within the bound), in arrival order.

    The first ok wins; else the first answer other than not_here (a box that lists the handle and refused);
    else the boxes that did not answer; else nobody lists it, naming the boxes that should hold a link and
    hold none — the D4 sentence byte for byte, ending at ``(no link from: <boxes>)`` — and, per such box
    named in ``down``, its link's state (``link_down_text``, joined by ``; ``) in the answer's ``hint``
    (ours; the send prints it on its next line), so the answer says which link is down and since when,
    rather than only that nobody knows the handle. ``known``: the box that last filed the handle
    (``remember``); when it holds no link, the hint starts with it (``@<h> was last filed on <box>, and the
    link from <box> is down since <UTC time>: <why>``): the target's box is known, and its link is the cause.
    ``unasked``: linked boxes the bound ran out before asking (the box asked first took it all); when no
    asked box was silent they are named as not answering, since nobody can say they do not list it.
    """
    answers = list(answers)
    for _box, a in answers:
        if a is not None and wire_answers.is_ok(a):
            return dict(wire_answers.OK)
    for box, a in answers:
        if a is None or wire_answers.code_of(a) == wire_answers.NOT_HERE:
            continue
        if wire_answers.refusal_text(a) is not None:
            return dict(a)
        return wire_answers.refusal(
            wire_answers.FILE_FAILED,
            f"{box} answered neither ok nor a refusal: {wire_answers.quoted_answer(a)}",
        )
    silent = sorted(box for box, a in answers if a is None)
    if silent:
        return wire_answers.refusal(
            wire_answers.FILE_FAILED,
            f"no box answered for @{handle} within {secs(bound_s)}s: {', '.join(silent)}",
        )
    if unasked:
        return wire_answers.refusal(
            wire_answers.FILE_FAILED,
            f"no box answered for @{handle} within {secs(bound_s)}s: {', '.join(sorted(unasked))} "
            "(the bound ran out before they were asked)",
        )
    missing = sorted(set(should_link) - set(linked))
    text = ops.not_here_text(handle)
    states = []
    if missing:
        text += f" (no link from: {', '.join(missing)})"
    lead = known if known is not None and known not in set(linked) and down and known in down else None
    states = [link_down_text(box, *down[box]) for box in missing if down and box in down and box != lead]
    if lead is not None and down is not None:
        states.insert(0, f"@{handle} was last filed on {lead}, and {link_down_text(lead, *down[lead])}")
    return wire_answers.with_hint(
        wire_answers.refusal(wire_answers.NOT_HERE, text), wire_answers.cut_text("; ".join(states))
    )


def too_late_to_offer_text(handle: str) -> str:
    """Why an offer asked no box: the frame reached the hub with less than the answer margin left before
    its sender stops waiting, so no linked box could answer in time. Not ``no box knows that handle``:
    nobody was asked, so nobody said it (a slow start can leave a send 1 s, issue 27 item 2)."""
    return (
        f"this folder does not list @{handle}, and its sender stops waiting before a linked box could "
        "answer, so it was offered to none; nothing was filed"
    )


def remember(where: dict[str, str], handle: str, box: str | None, cap: int = WHERE_MAX) -> None:
    """Record (``box``) or forget (None) which linked box last filed ``handle``; at most ``cap`` entries,
    the least recently filed forgotten first (a dict keeps insertion order). Pure but for ``where``."""
    where.pop(handle, None)
    if box is None:
        return
    where[handle] = box
    while len(where) > cap:
        del where[next(iter(where))]


def offer_order(known: str | None, linked: Iterable[str]) -> tuple[list[str], list[str]]:
    """Which linked boxes the offer asks first, and which after: the box that last filed the handle alone
    first when it is linked (one frame, not one per linked box: issue 27's scale), then the others. Pure."""
    boxes = sorted(linked)
    if known is not None and known in boxes:
        return [known], [b for b in boxes if b != known]
    return boxes, []


def frame_too_long(frame: dict[str, Any], what: str) -> str:
    """Why a ``comm.file`` frame this daemon built (the sender's, plus ``forwarded`` and ``expires``) cannot
    be sent to ``what``, or ``""`` when it fits the line bound. A legal frame from a sender can outgrow the
    bound by what is added, so it is checked where it is built and refused in words (issue 25). Pure."""
    return prepared_frame(frame, what)[1]


def prepared_frame(frame: dict[str, Any], what: str) -> tuple[framing.PreparedRequest | None, str]:
    """``frame`` as a ``comm.file`` request encoded once (sent down one link or many with ids of their
    own), and ``""``; or None and why it cannot be sent to ``what`` (``frame_too_long``'s words). Pure."""
    try:
        prepared = framing.PreparedRequest(payloads.COMM_FILE, frame)
    except WireError as e:
        return None, f"the message cannot be framed to {what}: {e.message}"
    n = prepared.widest
    if n <= framing.MAX_LINE:
        return prepared, ""
    return None, (
        f"the message is too long to {what}: its frame would be {n} bytes, over the "
        f"{framing.MAX_LINE}-byte line bound (send it in parts)"
    )


def record_at_start(layout: Layout, hub: bool, manager: str) -> str:
    """The hub writes the lock-manager record by the rules of 6.4 (blocking); a guest never does."""
    if not hub:
        return lockmanager.GUEST
    return lockmanager.write_for_hub(layout, manager, lockmanager.machine_id_or_none())


class Hub:
    """The forward (a guest's) and the offer (the hub's), over the links."""

    def __init__(
        self,
        *,
        environ: Mapping[str, str],
        self_host: str,
        hub: bool,
        topology: Topology | None,
        topology_error: str,
        server: Server,
        uplink: Uplink | None,
        shutting_down: asyncio.Event,
    ) -> None:
        self.environ = environ
        self.self_host = self_host
        self.hub = hub
        self.topology = topology
        self.topology_error = topology_error
        self.server = server
        self.uplink = uplink
        self.shutting_down = shutting_down
        self.where: dict[str, str] = {}  # handle -> the linked box that last filed it (``remember``)

    def lock_wait(self) -> float:
        return inbox.inbox_wait(self.environ)

    async def forward(self, payload: dict[str, Any]) -> dict[str, Any]:
        """A guest hands a frame it cannot file to the hub (``forwarded: true``); the hub's answer verbatim."""
        if self.uplink is None:
            why = self.topology_error or "no hosts.toml names a hub"
            return wire_answers.refusal(wire_answers.FILE_FAILED, why)
        ep = self.uplink.endpoint
        # never wait (nor let the hub file) past the sending command's own deadline: a send that has
        # already said FAILED must not be followed by a filing (found by the NFS tier, issue 15)
        bound = ops.budget(payloads.read_expires(payload), time.time(), self.lock_wait() + FORWARD_SLACK_S)
        if bound is None:
            return wire_answers.refusal(wire_answers.FILE_FAILED, ops.EXPIRED)
        frame = dict(payload, forwarded=True, expires=round(time.time() + bound, 3))
        too_long = frame_too_long(frame, "hand it to the hub")
        if too_long:
            log.warning("forward of a comm.file to the hub: %s", too_long)
            return wire_answers.refusal(wire_answers.FILE_FAILED, too_long)
        try:
            answer = await self.uplink.call(payloads.COMM_FILE, frame, bound)
        except TimeoutError:
            err = f"{ep}: no reply to {payloads.COMM_FILE} within {secs(bound)}s"
        except ConnectionError as e:
            err = f"{ep}: the daemon is shutting down" if self.shutting_down.is_set() else f"{ep}: {e}"
        else:
            if wire_answers.is_ok(answer) or wire_answers.refusal_text(answer) is not None:
                return answer
            return wire_answers.refusal(
                wire_answers.FILE_FAILED,
                f"the hub answered neither ok nor a refusal: {wire_answers.quoted_answer(answer)}",
            )
        log.warning("forward of a comm.file to the hub failed: %s", err)
        return wire_answers.refusal(wire_answers.FILE_FAILED, f"the hub did not answer at {ep}: {err}")

    def should_link(self) -> list[str]:
        """The topology's boxes other than this hub (each should hold a link to it)."""
        if self.topology is None:
            return []
        return [b for b in self.topology.boxes if b not in (self.self_host, self.topology.hub)]

    async def offer(self, payload: dict[str, Any], origin: str) -> dict[str, Any] | None:
        """D4: offer a handle this folder does not list to every linked daemon (not the one it came from).

        None when there is nobody to ask and no topology box is missing (the caller's own not_here stands).
        The steady state costs O(1) in the number of links (issue 27's scale): the box that filed the
        handle last is asked alone first (``offer_order``'s first round, without listing the others), the
        frame is encoded once for every box asked, and the topology's boxes are walked only when no box
        said ok (to name the missing links). The sender's deadline caps the bound; with no time left to
        ask, no box is asked and the answer says so (``too_late_to_offer_text``), never ``not_here``.
        """
        exclude = origin[5:] if origin.startswith("link:") else None
        links = self.server.links
        to = payloads.read_to(payload)
        handle = to if isinstance(to, str) else ""
        # the sender's deadline caps the offer (its ``expires`` less the answer margin, ``ops.budget``)
        in_time = ops.budget(payloads.read_expires(payload), time.time(), self.lock_wait() + OFFER_SLACK_S)
        bound = 0.0 if in_time is None else in_time
        known = self.where.get(handle)
        lost = known is not None and known not in links  # its box is known, its link is not up
        askable = len(links) - (1 if exclude is not None and exclude in links else 0)
        if not askable and not lost and not self._missing(exclude):
            return None
        if in_time is None and askable:
            return wire_answers.refusal(wire_answers.FILE_FAILED, too_late_to_offer_text(handle))
        frame = dict(payload, forwarded=True, expires=round(time.time() + bound, 3))
        prepared, too_long = prepared_frame(frame, "offer it to the linked boxes") if askable else (None, "")
        if too_long:
            log.warning("offer of @%s: %s", handle, too_long)
            return wire_answers.refusal(
                wire_answers.FILE_FAILED, f"this folder does not list @{handle}, and {too_long}"
            )
        answers: list[tuple[str, dict[str, Any] | None]] = []
        unasked: list[str] = []
        deadline = time.monotonic() + bound

        async def ask(box: str, conn: Conn) -> tuple[str, dict[str, Any] | None]:
            try:
                left = max(0.0, deadline - time.monotonic())
                assert prepared is not None
                return box, await conn.channel.call_prepared(prepared, left)
            except (TimeoutError, ConnectionError, WireError) as e:
                log.info("offer of @%s to %s: no answer (%s)", handle, box, e or "timeout")
                return box, None

        def others(skip: str | None) -> dict[str, Conn]:
            return {h: c for h, c in self.server.links.items() if h not in (exclude, skip)}

        filed = False
        # the known box alone when it is linked: ``offer_order(known, links)`` without sorting every link
        fast = known is not None and known != exclude and known in links
        for round_no in (0, 1):
            if round_no == 0:
                group = {known: links[known]} if fast and known is not None else others(None)
                order = [known] if fast and known is not None else offer_order(None, group)[0]
            else:
                if filed or not fast:
                    break
                group = others(known)  # the links up now, less the box already asked
                order = offer_order(None, group)[0]
            if not order:
                continue
            if time.monotonic() >= deadline:
                unasked.extend(order)  # the bound ran out first (``offer_outcome``'s ``unasked``)
                continue
            if len(order) == 1:  # one box (the steady state): asked in this task, no task per box
                box, answer = await ask(order[0], group[order[0]])
                answers.append((box, answer))
                filed = self._heard(handle, box, answer)
                continue
            tasks = [asyncio.create_task(ask(box, group[box])) for box in order]
            try:
                for next_done in asyncio.as_completed(tasks):
                    box, answer = await next_done
                    answers.append((box, answer))
                    if self._heard(handle, box, answer):
                        filed = True
                        break
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        if filed:
            return offer_outcome(handle, answers, (), (), bound)
        should = [b for b in self.should_link() if b != exclude]
        down = {b: self.server.link_state(b) for b in should if b not in self.server.links}
        if lost and known is not None:
            down[known] = self.server.link_state(known)
        return offer_outcome(
            handle, answers, should, self.server.links, bound, down=down, known=known, unasked=unasked
        )

    def _heard(self, handle: str, box: str, answer: dict[str, Any] | None) -> bool:
        """Note what ``box`` answered an offer of ``handle`` (``remember``); True when it filed it."""
        if answer is not None and wire_answers.is_ok(answer):
            if self.where.get(handle) != box:  # logged when it is learnt, not at every send
                log.info("offer of @%s: filed by %s", handle, box)
            remember(self.where, handle, box)
            return True
        if answer is not None and self.where.get(handle) == box:
            remember(self.where, handle, None)  # it no longer files it there
        return False

    def _missing(self, exclude: str | None) -> bool:
        """Whether a topology box (other than ``exclude``) should hold a link and holds none."""
        return any(b != exclude and b not in self.server.links for b in self.should_link())
