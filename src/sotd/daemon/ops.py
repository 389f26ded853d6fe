"""The ops the daemon answers: ``comm.file``, ``agent.join``, ``agent.send``, ``version.query``,
``agents.list`` (ours: the registry's agents and this host's unread counts).

Spec: behaviour 2.3 (verdict order, texts, codes), 6.4 (daemon route, the append), D4 (hub offer), D5 (a
join outside any row). Seed 000 "The wire".
Guarantee: ``comm.file`` answers ``{ok: true}`` only after its line is synced in the inbox (or after the
hub or a linked box said ok), and every refusal carries one of the codes and the spec's sentence. The
verdicts run in the order of 2.3, so a bad handle is ``bad_handle`` even on a box with no comm folder.
An ``ok`` that reaches the kernel only after its frame's ``expires`` (a stall past the answer margin: its
sender may have said FAILED) is logged, never silent (``late_ok_text``, ``Ops.answered``).
What would break it: answering before ``inbox.append`` returned, running the blocking append on the event
loop (one slow lock would stall every connection), deciding a forward after reading the registry, or an
answer path (socket or link) that does not tell ``answered``.

The decisions are pure functions (``check_handles``, ``registry_verdict``, ``join_verdict``); ``Ops`` is the
thin shell that reads files in a thread (or on the loop, for a folder a thread found on a local disk:
``sotd.daemon.loopreads``), appends in a thread, and asks the hub logic (``sotd.daemon.hub``) to forward or
offer.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

from sotd import __version__, _clock, fsprim, handles
from sotd.errors import RegistryLinked, RegistryUnreadable, SotdError
from sotd.formats import inbox, lockmanager, registry, unread
from sotd.text import inert
from sotd.wire import answers, hello, payloads
from sotd.wire.answers import OK, quoted, refusal

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from sotd.daemon.loopreads import LoopReads
    from sotd.formats.layout import Layout

log = logging.getLogger("sotd")

# origins of a request: a local client; a guest's link up to this hub; an offer down our own link
CLIENT = "client"
LINK = "link"
OFFER = "offer"


def not_here_text(to: str) -> str:
    return f"no box knows that handle: {to}"


# ------------------------------------------------------------------------------------- pure decisions


def check_handles(to: object, frm: object, home_exists: bool) -> dict[str, Any] | None:
    """Steps 1-2 of the verdict order: ``to`` not a handle (the wire's ``payloads.not_a_handle``), then
    (ours, issue 25) ``from`` not a handle (``payloads.sender_not_a_handle``), then no comm folder. None:
    go on. Every origin's ``comm.file`` comes here: a client's, a guest's forward, a hub's offer."""
    if not handles.is_valid(to):
        return payloads.not_a_handle(to).answer()
    if not handles.is_valid(frm):
        return payloads.sender_not_a_handle(frm).answer()
    if not home_exists:
        return refusal(answers.NOT_HERE, not_here_text(str(to)))
    return None


UNLISTED = "unlisted"  # a not_here from steps 4-5: the hub may offer the handle to its linked boxes
# A forwarded or offered frame carries ``expires``: the sender's wall clock when it stops waiting. The
# receiver files only what it can finish by then, less this margin for the answer's way back, so a sender
# that said FAILED is not followed by a late filing (boxes' clocks are assumed to agree within it).
ANSWER_MARGIN_S = 0.25
EXPIRED = "the frame arrived after its sender stopped waiting for it, so nothing was filed"
# ``agents.list``'s unread counts (issue 30): a glance, so a busy inbox is not waited on past this bound,
# and all counting of one answer stops at the budget (the asking box waits 2 s for the whole answer)
UNREAD_LOCK_BOUND_S = 0.05
UNREAD_BUDGET_S = 0.5
UNREAD_MAX_BYTES = 64 << 20  # a larger inbox is left uncounted: the daemon lives long, a count is a glance


def budget(expires: object, now: float, lock_wait: float) -> float | None:
    """The inbox-lock bound a receiver may spend on a frame: ``lock_wait`` for a frame without ``expires``,
    less when its sender stops waiting sooner, None when it is too late to file at all."""
    if not payloads.is_deadline(expires):
        return lock_wait
    left = float(expires) - now - ANSWER_MARGIN_S
    if left <= 0:
        return None
    return min(lock_wait, left)


def filing_deadline(expires: object, now: float, mono_now: float) -> float | None:
    """The ``time.monotonic()`` moment a receiver's whole filing (lock wait, append, sync) must end by:
    ``expires`` less the answer margin, on the clock ``mono_now`` reads at wall time ``now``; None for a
    frame without ``expires`` (``inbox.deadline_action``, docs/contract.md "A filing's deadline")."""
    if not payloads.is_deadline(expires):
        return None
    return mono_now + (float(expires) - now - ANSWER_MARGIN_S)


def late_ok_text(to: str, expires: float | None, answer: dict[str, Any], now: float) -> str | None:
    """The warning for an ``ok`` that goes out at wall time ``now``, after the frame's ``expires``: the line
    is filed, and its sender (or the guest that forwarded it) has already stopped waiting and may have said
    FAILED. No margin covers a box stalled past ``ANSWER_MARGIN_S`` between a filing's last deadline check
    and its answer; this makes such a line never silent (docs/contract.md "A filing's deadline"). None
    for an answer in time, a refusal, or a frame without a deadline."""
    if expires is None or now <= expires or not answers.is_ok(answer):
        return None
    return (
        f"comm.file for @{to}: filed, but its ok went out {now - expires:.3f}s after its sender's deadline; "
        "the sender may have been told FAILED for a line that is in the inbox"
    )


def registry_verdict(
    to: str, doc: dict[str, Any] | RegistryUnreadable | None, now: float
) -> dict[str, Any] | None:
    """Steps 4-6 on a fresh registry read (None: absent; an exception: unreadable). None: append.

    A not_here answer carries ``UNLISTED: True`` (removed before it is sent) so the hub knows to offer.
    """
    if doc is None:
        return {**refusal(answers.NOT_HERE, not_here_text(to)), UNLISTED: True}
    if isinstance(doc, RegistryLinked):
        return refusal(answers.FILE_FAILED, doc.message)  # the link named (issue 25)
    try:
        if isinstance(doc, RegistryUnreadable):
            raise doc
        agents = registry.agents_of(doc)
    except RegistryUnreadable:
        return refusal(
            answers.FILE_FAILED, f"the registry could not be read, so @{to} is unverified; nothing was filed"
        )
    verdict = registry.AgentRow.of(agents, to).verdict(now)
    if verdict == registry.UNLISTED:
        return {**refusal(answers.NOT_HERE, not_here_text(to)), UNLISTED: True}
    if verdict == registry.NOT_LIVE:
        return refusal(answers.NO_LIVE_SESSION, f"no live session holds @{to}")
    return None


def join_verdict(workspace_id: object, handle: object, rows: JoinRows) -> dict[str, Any]:
    """``agent.join``: a bad handle; a question from outside any row (D5); a row's declaration."""
    if not handles.is_valid(handle):
        return refusal(answers.BAD_HANDLE, f"invalid handle: {quoted(handle)}")
    assert isinstance(handle, str)
    if workspace_id == "" or workspace_id is None:
        holder = rows.holder_of(handle)
        return OK if holder is None else refusal(answers.HELD_BY_ROW, f"@{handle} is held by row {holder}")
    if not isinstance(workspace_id, str) or not rows.exists(workspace_id):
        return refusal(answers.UNKNOWN_WORKSPACE, f"unknown workspace: {quoted(workspace_id)}")
    return rows.declare(workspace_id, handle)


# ----------------------------------------------------------------------------------------------- rows


class JoinRows(Protocol):
    """What ``agent.join`` needs of the rows the daemon runs (the rows themselves come with a later issue)."""

    def holder_of(self, handle: str) -> str | None: ...
    def exists(self, workspace_id: str) -> bool: ...
    def declare(self, workspace_id: str, handle: str) -> dict[str, Any]: ...


class NoRows:
    """A daemon that runs no rows yet: no handle is held by a row, and no workspace id is known."""

    def holder_of(self, handle: str) -> str | None:
        return None

    def exists(self, workspace_id: str) -> bool:
        return False

    def declare(self, workspace_id: str, handle: str) -> dict[str, Any]:
        return refusal(answers.UNKNOWN_WORKSPACE, f"unknown workspace: {quoted(workspace_id)}")


# ---------------------------------------------------------------------------------------- blocking work


class Route:
    __slots__ = ("lock_manager", "text", "where")

    def __init__(self, where: str, text: str, lock_manager: str) -> None:
        self.where = where
        self.text = text
        self.lock_manager = lock_manager


class MountMemo:
    """The lock identity of a folder (``lockmanager.lock_manager_of``) and this machine's id, computed again
    only when the mount table changed. Reading and parsing ``/proc/self/mountinfo`` cost about 0.7 ms, paid
    by every filing before (issue 27's scale: more than half of a routed send on the hub); the kernel marks
    an open ``mountinfo`` with ``POLLPRI`` at any mount or unmount, so a remount is seen at the next filing,
    as before. Off Linux, with the test seam set, or when ``mountinfo`` cannot be opened: no memo."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self.poller: Any = None
        self.known: dict[str, tuple[str, str | None]] = {}  # realpath -> (lock identity, machine id)
        self.lock = threading.Lock()  # filings run in worker threads: one at a time touches the descriptor

    def _changed(self) -> bool:
        import select

        if self.fd is None:
            try:
                self.fd = os.open(lockmanager.MOUNTINFO, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return True
            self.poller = select.poll()
            self.poller.register(self.fd, select.POLLPRI | select.POLLERR)
            return True
        if self.poller.poll(0):
            os.close(self.fd)  # a fresh descriptor starts from the table as it is now
            self.fd = None
            self.known.clear()
            self._changed()
            return True
        return False

    def identity(self, folder: str) -> tuple[str, str | None]:
        """(lock identity of ``folder``, machine id): from the memo while no mount changed."""
        if os.environ.get("SOT_COMM_TEST_LOCK_IDENTITY") or not sys.platform.startswith("linux"):
            return lockmanager.lock_manager_of(folder), lockmanager.machine_id_or_none()
        key = os.path.realpath(folder)
        with self.lock:
            if self._changed():
                self.known.clear()
            got = self.known.get(key)
            if got is None or self.fd is None:
                got = (lockmanager.lock_manager_of(folder), lockmanager.machine_id_or_none())
                if self.fd is not None:
                    self.known[key] = got
            return got


MOUNTS = MountMemo()  # the daemon's


def route_now(layout: Layout, is_hub: bool, forwarded: bool, self_host: str) -> Route:
    """Step 3 (blocking: reads the record and the mount table).

    Only reads: the hub writes its record at its start (``hub.record_at_start``), never here. A record
    deleted or changed while the hub runs is refused in 6.4's words (``no inbox lock record at <path>:
    restart this daemon to write it``; ``this hub's inbox lock is now … restart this daemon to re-record it
    after the remount``): rewriting it at a remount could leave two boxes each believing it manages the
    folder's locks (issue 28 item 6)."""
    lock_manager, mid = MOUNTS.identity(layout.inbox_dir)
    try:
        record = lockmanager.read_record(layout)
    except fsprim.LinkedPath:
        from sotd.formats.layout import link_refused

        return Route(lockmanager.REFUSE, link_refused(layout.lock_manager).message, lock_manager)
    except OSError as e:
        return Route(
            lockmanager.REFUSE,
            f"the inbox lock record {layout.lock_manager} cannot be read: {e.strerror or e}",
            lock_manager,
        )
    where, text = lockmanager.route(
        record,
        lock_manager,
        mid,
        is_hub,
        forwarded,
        path=layout.lock_manager,
        self_host=self_host,
    )
    return Route(where, text, lock_manager)


def file_locally(
    layout: Layout, environ: Mapping[str, str], *, lock_manager: str, frm: str, to: str, text: str
) -> dict[str, Any]:
    """Steps 4-7 (blocking) for mail this daemon itself sends (the OCX node's answers): the fresh registry
    read and its verdict, then the append to ``to`` alone, with the default lock bound and no deadline."""
    verdict = registry_step(layout, to)
    if verdict is not None:
        return verdict
    return append_locally(
        layout, environ, lock_manager=lock_manager, frm=frm, to=to, text=text, broadcast=False
    )


def registry_step(layout: Layout, to: str) -> dict[str, Any] | None:
    """Steps 4-5 (blocking, reads only): the fresh registry read and its verdict; None: append it here."""
    doc: dict[str, Any] | RegistryUnreadable | None
    try:
        doc = registry.read(layout)
    except RegistryUnreadable as e:
        doc = e
    return registry_verdict(to, doc, _clock.now())


def append_locally(
    layout: Layout,
    environ: Mapping[str, str],
    *,
    lock_manager: str,
    frm: str,
    to: str,
    text: str,
    broadcast: bool,
    bound: float | None = None,
    deadline: float | None = None,
) -> dict[str, Any]:
    """Steps 6-7 (blocking, never on the event loop): the append under the inbox lock, synced."""
    line = inbox.encode_line(frm, "" if broadcast else to, "daemon", text, _clock.stamp())
    try:
        inbox.append(
            layout,
            to,
            line,
            nfs=lockmanager.is_nfs(lock_manager),
            bound=inbox.inbox_wait(environ) if bound is None else bound,
            note=log.warning,
            daemon=True,
            deadline=deadline,
        )
    except SotdError as e:
        log.warning("filing for @%s failed: %s", to, e.message)
        return refusal(answers.FILE_FAILED, e.message)
    return OK


def box_agents(
    box: str, agents: dict[str, Any], error: str, unread: dict[str, int] | None = None
) -> dict[str, Any]:
    """One box of an ``agents.list`` answer (issue 30): the box, its registry's agents, why they are
    missing (``""`` when they are not), and the unread counts of the handles whose inboxes it read (its
    own; ``{}`` when it counted none). Pure."""
    return {"box": box, "registry": agents, "error": error, "unread": unread or {}}


def own_handles(agents: dict[str, Any], self_host: str) -> list[str]:
    """The handles of a registry this box counts unread mail for: valid names whose entry says this host
    (a folder shared between boxes lists the others' too; their box counts them). Pure."""
    return sorted(
        name
        for name, entry in agents.items()
        if isinstance(entry, dict) and entry.get("host") == self_host and handles.is_valid(name)
    )


def far_box(
    box: str, answer: dict[str, Any] | None, why: str = "", *, own: bool = False
) -> list[dict[str, Any]]:
    """The boxes a linked daemon's ``agents.list`` answer gives, or the one box saying why none came: no
    answer (``why``), an older daemon (``unknown_op``), or a refusal. ``own``: the daemon was asked for its
    own list alone (a guest, by the hub), so its first entry is taken, under the name of the link it came
    down, and any other is dropped: a guest cannot speak for another box. Pure."""
    if answer is None:
        return [box_agents(box, {}, f"no answer: {why}" if why else "no answer")]
    if answers.code_of(answer) == answers.UNKNOWN_OP:
        return [
            box_agents(
                box, {}, "its daemon does not answer agents.list (an older sotd, or the 0.6.6 scripts)"
            )
        ]
    boxes = answer.get("boxes")
    if not answers.is_ok(answer) or not isinstance(boxes, list):
        return [box_agents(box, {}, f"it answered {answers.quoted_answer(answer)}")]
    entries = [b for b in boxes if isinstance(b, dict)]
    if own:
        entries = [{**entries[0], "box": box}] if entries else [{"box": box, "error": "it listed no box"}]
    return [
        box_agents(
            str(b.get("box", box)),
            b["registry"] if isinstance(b.get("registry"), dict) else {},
            str(b.get("error") or ""),
            payloads.read_box_unread(b),
        )
        for b in entries
    ]


# ----------------------------------------------------------------------------------------------- shell


class Ops:
    """Answers one request's payload. The hub logic is injected: ``forward`` (a guest's) and ``offer``."""

    def __init__(
        self,
        *,
        layout: Layout,
        environ: Mapping[str, str],
        self_host: str,
        is_hub: bool,
        forward: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]],
        offer: Callable[[dict[str, Any], str], Awaitable[dict[str, Any] | None]],
        version_info: Callable[[], dict[str, Any]],
        rows: JoinRows | None = None,
        workspaces: Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]] | None = None,
        reload: Callable[[], Awaitable[dict[str, Any]]] | None = None,
        blocking: Callable[..., Awaitable[Any]] = asyncio.to_thread,
        fleet: Callable[[], Awaitable[list[dict[str, Any]]]] | None = None,
        loop_reads: LoopReads | None = None,
    ) -> None:
        self.layout = layout
        self.environ = environ
        self.self_host = self_host
        self.is_hub = is_hub
        self.forward = forward
        self.offer = offer
        self.version_info = version_info
        self.rows: JoinRows = rows if rows is not None else NoRows()
        self.workspaces = workspaces  # the ``workspace.*`` ops, when this daemon runs rows
        self.reload = reload  # ``daemon.reload``: read hosts.toml again (a local client only)
        self.blocking = blocking  # runs comm.file's blocking steps in a thread (the daemon's ``Filers``)
        self.fleet = fleet  # ``agents.list`` with fleet: the other boxes' lists (the hub's links, or the hub)
        self.unread = unread.Counter(layout, bound=UNREAD_LOCK_BOUND_S, max_bytes=UNREAD_MAX_BYTES)
        # whether comm.file's read-only steps may run on the loop (``daemon.loopreads``); None: never
        self.loop_reads = loop_reads

    async def handle(self, op: str, payload: dict[str, Any], origin: str) -> dict[str, Any]:
        """The answer to one request, by the wire's op names (``sotd.wire.payloads``)."""
        if op == payloads.COMM_FILE:
            answer = await self.comm_file(payload, origin)
            answer.pop(UNLISTED, None)
            return answer
        if op == payloads.AGENT_JOIN:
            return join_verdict(*payloads.read_agent_join(payload), self.rows)
        if op == payloads.AGENT_SEND:
            return self.agent_send(payload)
        if op == payloads.VERSION_QUERY and origin.startswith(LINK + ":"):
            return {"daemon": keepalive_payload(self.self_host, self.is_hub)}
        if op == payloads.VERSION_QUERY:
            # ``debug.tasks``: the daemon's live asyncio tasks (tests check that a vanished client leaves none)
            version: dict[str, Any] = {
                "daemon": self.version_info(),
                "debug": {"tasks": len(asyncio.all_tasks())},
            }
            if payloads.read_version_query(payload):  # ours: asked by ``sotd doctor`` (docs/doctor.md)
                mark = await asyncio.to_thread(lockmanager.folder_mark, self.layout)
                version["comm_folder"] = {"path": self.layout.home, "mark": mark}
            return version
        if op == payloads.DAEMON_RELOAD and self.reload is not None and origin == CLIENT:
            return await self.reload()
        if op == payloads.AGENTS_LIST:
            boxes = [await asyncio.to_thread(self.own_agents)]
            if payloads.read_agents_list(payload) and self.fleet is not None and origin != OFFER:
                boxes += [b for b in await self.fleet() if b.get("box") != self.self_host]
            return answers.ok_with({"boxes": boxes})
        if op.startswith(payloads.WORKSPACE_PREFIX) and self.workspaces is not None:
            return await self.workspaces(op, payload)
        return answers.unknown_op(op)

    def own_agents(self) -> dict[str, Any]:
        """This box's entry of an ``agents.list`` answer: its registry's agents as they are (the reader
        shows them inert), or why they could not be read; with the unread counts of this host's handles
        (``formats.unread.Counter``: an inbox is read again only when it or its cursor moved; one busy
        past ``UNREAD_LOCK_BOUND_S`` or larger than ``UNREAD_MAX_BYTES`` is left uncounted, and counting
        stops at ``UNREAD_BUDGET_S``)."""
        try:
            doc = registry.read(self.layout)
        except SotdError as e:
            return box_agents(self.self_host, {}, e.message)
        agents = registry.agents_of(doc) if doc is not None else {}
        mine = own_handles(agents, self.self_host)
        self.unread.forget_all_but(set(mine))
        counts: dict[str, int] = {}
        stop = time.monotonic() + UNREAD_BUDGET_S
        for name in mine:
            if time.monotonic() > stop:
                break
            n = self.unread.count(name)
            if n is not None:
                counts[name] = n
        return box_agents(self.self_host, agents, "", counts)

    def agent_send(self, payload: dict[str, Any]) -> dict[str, Any]:
        to = payloads.read_agent_send_to(payload)
        if to:
            return refusal(
                answers.MAIL_REQUIRES_COMM_FILE,
                f"agent.send carries window notifications only; mail to @{to} goes through comm.file",
            )
        return OK

    async def comm_file(self, payload: dict[str, Any], origin: str) -> dict[str, Any]:
        # steps 1-7 in one worker thread (one hop, not three: issue 27's scale), or the read-only steps on
        # the loop while ``loop_reads`` says the folder is on a local disk and only the append in a thread;
        # a forward and an offer are the event loop's
        answer: dict[str, Any] | None
        req: payloads.CommFile | None
        if self.loop_reads is not None and self.loop_reads.fresh(time.monotonic()):
            answer, req, append = self._read_steps(payload, origin)
            if append is not None:
                answer = await self.blocking(append)
        else:
            answer, req = await self.blocking(self._local_steps, payload, origin)
        if req is None:
            assert answer is not None  # answered before the frame was read
            return answer
        return await self._comm_file_answer(answer, req, origin)

    def answered(self, op: str, frame: dict[str, Any], answer: dict[str, Any]) -> None:
        """Told by the socket (or the link) once an answer is in the kernel's buffer: a ``comm.file`` ok
        that went out after its frame's ``expires`` is logged (``late_ok_text``)."""
        if op != payloads.COMM_FILE:
            return
        to = payloads.read_to(frame)
        late = late_ok_text(
            to if isinstance(to, str) else "?", payloads.read_expires(frame), answer, time.time()
        )
        if late is not None:
            log.warning("%s", late)

    async def _comm_file_answer(
        self, answer: dict[str, Any] | None, req: payloads.CommFile, origin: str
    ) -> dict[str, Any]:
        """The answer to a frame read as ``req``: this box's own, the hub's to a forward, or an offer's."""
        if answer is None:
            # the sender's deadline caps the forward's (hub.Hub.forward)
            return await self.forward(req.frame())
        if answer.get(UNLISTED) and self.is_hub and origin != OFFER and not req.broadcast:
            # a forwarded frame's own deadline caps the offers it causes
            offered = await self.offer(req.frame(broadcast=False), origin)
            if offered is not None:
                return offered
        return answer

    def _local_steps(
        self, payload: dict[str, Any], origin: str
    ) -> tuple[dict[str, Any] | None, payloads.CommFile | None]:
        """Blocking (a filing thread): the verdict order up to the filing, and the filing. ``(answer,
        None)``: answered before the frame was read (a bad handle, no comm folder); ``(None, req)``: forward
        ``req`` to the hub; ``(answer, req)``: this box's answer (an unlisted ``not_here`` may still be
        offered). Then, when the memo has run out, whether the loop may do the reads itself for a while."""
        answer, req, append = self._read_steps(payload, origin)
        if append is not None:
            answer = append()
        if self.loop_reads is not None:
            self.loop_reads.verify(self.layout)  # checked again once its last verdict ran out
        return answer, req

    def _read_steps(
        self, payload: dict[str, Any], origin: str
    ) -> tuple[dict[str, Any] | None, payloads.CommFile | None, Callable[[], dict[str, Any]] | None]:
        """Blocking, reads only (``_local_steps``'s answers); and the append still to run (in a thread), or
        None when the answer is already known."""
        home = os.path.isdir(self.layout.home)
        to = payloads.read_to(payload)
        early = check_handles(to, payloads.read_from(payload), home)
        if early is not None:
            if early["code"] == answers.BAD_HANDLE and handles.is_valid(to):  # the sender's was refused
                log.warning("comm.file from %s refused: %s", origin, inert(early["error"]))
            return early, None, None
        req = payloads.read_comm_file(payload)  # ``to`` and ``from`` are handles now: this never refuses
        route = route_now(self.layout, self.is_hub, req.forwarded, self.self_host)
        if route.where == lockmanager.REFUSE:
            log.error("comm.file for @%s refused: %s", req.to, route.text)
            return refusal(answers.FILE_FAILED, route.text), req, None
        if route.where == lockmanager.FORWARD:
            return None, req, None
        if self._lock_bound(req, origin) is None:
            return refusal(answers.FILE_FAILED, EXPIRED), req, None
        verdict = registry_step(self.layout, req.to)
        if verdict is not None:
            return verdict, req, None
        return None, req, functools.partial(self._append_step, req, route.lock_manager, origin)

    def _lock_bound(self, req: payloads.CommFile, origin: str) -> float | None:
        """The inbox-lock wait ``req`` may still take (``budget``), or None (logged) when its sender has
        already stopped waiting."""
        bound = budget(req.expires, time.time(), inbox.inbox_wait(self.environ))
        if bound is None:
            log.warning("comm.file for @%s from %s: %s", req.to, origin, EXPIRED)
        return bound

    def _append_step(self, req: payloads.CommFile, lock_manager: str, origin: str) -> dict[str, Any]:
        """Blocking (a filing thread): the append. Its bound and deadline are taken when it starts, as when
        every step ran in one job: the time a job waits for a free thread is not the inbox lock's wait."""
        bound = self._lock_bound(req, origin)
        if bound is None:
            return refusal(answers.FILE_FAILED, EXPIRED)
        return append_locally(
            self.layout,
            self.environ,
            lock_manager=lock_manager,
            frm=req.frm,
            to=req.to,
            text=req.text,
            broadcast=req.broadcast,
            bound=bound,
            deadline=filing_deadline(req.expires, time.time(), time.monotonic()),
        )


def keepalive_payload(host: str, is_hub: bool) -> dict[str, Any]:
    """``version.query``'s ``daemon`` asked down a link (the guest's keepalive, every ``links.PING_S``): who
    answers, and nothing that costs a walk of the fleet. The full answer (``version_payload``) lists every
    link and front end and counts every task: at 1,000 guests that was 333 walks of 1,000 a second
    (issue 27's scale). A guest reads only that an answer came. Pure."""
    return {
        "host": host,
        "version": __version__,
        "pid": os.getpid(),
        "protocol": hello.PROTOCOL,
        "hub": is_hub,
        "keepalive": True,
    }


def version_payload(
    host: str,
    restart: str,
    is_hub: bool,
    *,
    up_s: int = 0,
    frontends: list[dict[str, str]] | None = None,
    send_command: str = "",
    link: dict[str, Any] | None = None,
    links: list[str] | None = None,
    topology_error: str = "",
    comm_folder: str = "",
    topology_hub: str = "",
) -> dict[str, Any]:
    """``version.query``'s ``daemon``: who answers, and the front ends (``fe`` connections) attached now.
    ``comm_folder`` (ours): the real path of the comm folder this daemon serves, so a command can tell
    a daemon of another folder at its socket (issue 27 item 5).
    ``send_command`` (ours): the command this box's rows reply with, for a task mail spawned from another
    box (``rows.send_command``). ``link`` (ours): this box's link to its hub (``endpoint``, ``up``,
    ``since``, ``error``), None when it holds none; ``links``: the boxes linked to this daemon now;
    ``topology_error`` (ours): why ``hosts.toml`` cannot be read and what the daemon goes on with, or ``""``;
    ``topology_hub`` (ours): the hub its ``hosts.toml`` names, ``""`` for none (``sotd doctor`` checks that
    every box names the same one, issue 27)."""
    return {
        "host": host,
        "version": __version__,
        "pid": os.getpid(),
        "protocol": hello.PROTOCOL,
        "hub": is_hub,
        "restart_requested": restart,
        "up_s": up_s,
        "frontends": list(frontends or []),
        "send_command": send_command,
        "link": link,
        "links": sorted(links or []),
        "topology_error": topology_error,
        "comm_folder": comm_folder,
        "topology_hub": topology_hub,
    }


__all__ = [
    "ANSWER_MARGIN_S",
    "CLIENT",
    "EXPIRED",
    "LINK",
    "OFFER",
    "UNLISTED",
    "JoinRows",
    "NoRows",
    "Ops",
    "Route",
    "append_locally",
    "budget",
    "check_handles",
    "file_locally",
    "filing_deadline",
    "join_verdict",
    "keepalive_payload",
    "late_ok_text",
    "not_here_text",
    "registry_step",
    "registry_verdict",
    "route_now",
    "version_payload",
]
