"""The ops: their names and each op's payload, as builders (what a client sends) and readers (what a
daemon takes from a request).

Spec: behaviour 2.3 (``comm.file {from, to, text, broadcast, forwarded}``, ``agent.join {workspace_id,
handle}``, ``agent.send``, ``version.query``, ``workspace.*``), seed 000 "The wire"; ``expires`` (ours,
docs/protocol.md): the sender's wall clock when it stops waiting.
Guarantee: a reader never fails on a field the spec gives a default (``text`` not a string reads as
``""``, ``broadcast`` and ``forwarded`` are true only when ``true``, an ``expires`` that is not a
number is no deadline) and refuses what the verdict order refuses first (``comm.file`` to a value that is
not a handle, then -- ours, issue 25 -- from one: ``bad_handle``, as a ``RemoteProtocolError`` that keeps
the connection); a builder writes the keys in the order the 0.6.6 scripts do and leaves out an optional key
that was not given.
What would break it: a reader stricter than the spec's defaults (a 0.6.6 client's frame refused: those
always send their own handle as ``from``), a reader that files a ``from`` which is not a handle (it reaches
every reader's poll line: an escape sequence, a newline, 4 KiB), or a daemon reading a payload field by
hand beside the reader (the two then disagree on a default).

Pure: a leaf of ``sotd.wire`` (imports ``sotd.handles``, ``sotd.wire.answers``, ``sotd.wire.errors``).
"""

from __future__ import annotations

from sotd import handles
from sotd.wire import answers
from sotd.wire.errors import RemoteProtocolError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypeGuard

COMM_FILE = "comm.file"
AGENT_JOIN = "agent.join"
AGENT_SEND = "agent.send"
VERSION_QUERY = "version.query"
DAEMON_RELOAD = "daemon.reload"  # ours: read hosts.toml again (a local client only)
WORKSPACE_LIST = "workspace.list"
WORKSPACE_CREATE = "workspace.create"
WORKSPACE_DESTROY = "workspace.destroy"
WORKSPACE_ACTIVATE = "workspace.activate"
WORKSPACE_OPS = (WORKSPACE_CREATE, WORKSPACE_LIST, WORKSPACE_DESTROY, WORKSPACE_ACTIVATE)
WORKSPACE_PREFIX = "workspace."
WORKSPACE_CHANGED = "workspace.changed"  # an event, not an op
AGENTS_LIST = (
    "agents.list"  # ours (issue 30): the registry's agents, read-only; with fleet, every linked box's
)
OPS = (COMM_FILE, AGENT_JOIN, AGENT_SEND, VERSION_QUERY, DAEMON_RELOAD, AGENTS_LIST, *WORKSPACE_OPS)


def is_deadline(value: object) -> TypeGuard[int | float]:
    """An ``expires`` that counts: a number (a JSON ``true`` is not one)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


# ------------------------------------------------------------------------------------------ comm.file


def comm_file_payload(
    frm: str,
    to: str,
    text: str,
    *,
    broadcast: bool = False,
    forwarded: bool | None = None,
    expires: float | None = None,
) -> dict[str, Any]:
    """``comm.file`` request payload; ``forwarded`` and ``expires`` are omitted unless given (a plain send
    sends neither key)."""
    p: dict[str, Any] = {"from": frm, "to": to, "text": text, "broadcast": broadcast}
    if forwarded is not None:
        p["forwarded"] = forwarded
    if expires is not None:
        p["expires"] = expires
    return p


def not_a_handle(to: object) -> RemoteProtocolError:
    """Step 1 of ``comm.file``'s verdict order: ``to`` is not a handle (the connection stays open)."""
    return RemoteProtocolError(f"not a handle: {answers.quoted(to)}", code=answers.BAD_HANDLE, closes=False)


SENDER_QUOTED_MAX = 128  # characters of a refused ``from`` quoted in the answer (a handle is at most 64)


def sender_not_a_handle(frm: object) -> RemoteProtocolError:
    """Ours (issue 25 item 1), right after step 1: ``from`` is not a handle (missing, not a string, or
    not 1-64 of ``A-Za-z0-9._-``); the value quoted as step 1 quotes, its quoted text cut after
    ``SENDER_QUOTED_MAX`` characters (then ``"…``) so the answer stays small whatever was sent, a string
    or a long array (the connection stays open)."""
    text = answers.quoted(frm)
    if len(text) > SENDER_QUOTED_MAX + 2:
        text = text[: SENDER_QUOTED_MAX + 1] + '"…'
    return RemoteProtocolError(f"the sender is not a handle: {text}", code=answers.BAD_HANDLE, closes=False)


class CommFile:
    """A ``comm.file`` request as the daemon reads it (``read_comm_file``)."""

    __slots__ = ("broadcast", "expires", "forwarded", "frm", "text", "to")

    def __init__(
        self, frm: str, to: str, text: str, *, broadcast: bool, forwarded: bool, expires: float | None
    ) -> None:
        self.frm = frm
        self.to = to
        self.text = text
        self.broadcast = broadcast
        self.forwarded = forwarded
        self.expires = expires

    def frame(self, *, broadcast: bool | None = None) -> dict[str, Any]:
        """The frame to pass on (a forward to the hub, an offer to a linked box): from, to, text,
        broadcast and the sender's deadline when it had one; ``forwarded`` is the passer's to add."""
        return comm_file_payload(
            self.frm,
            self.to,
            self.text,
            broadcast=self.broadcast if broadcast is None else broadcast,
            expires=self.expires,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CommFile):
            return NotImplemented
        return self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]

    def _key(self) -> tuple[object, ...]:
        return (self.frm, self.to, self.text, self.broadcast, self.forwarded, self.expires)

    def __repr__(self) -> str:
        return f"CommFile{self._key()!r}"


def read_to(payload: dict[str, Any]) -> object:
    """The ``to`` of a ``comm.file`` as sent (``None`` when missing): step 1 of the verdict order checks it."""
    return payload.get("to")


def read_from(payload: dict[str, Any]) -> object:
    """The ``from`` of a ``comm.file`` as sent (``None`` when missing): checked right after ``to``."""
    return payload.get("from")


def read_expires(payload: dict[str, Any]) -> float | None:
    """A frame's deadline: its ``expires`` when that is a number, else None (no deadline)."""
    expires = payload.get("expires")
    return float(expires) if is_deadline(expires) else None


def read_comm_file(payload: dict[str, Any]) -> CommFile:
    """A ``comm.file`` request; ``RemoteProtocolError`` (``bad_handle``) when ``to``, then ``from``, is
    not a handle."""
    to = read_to(payload)
    if not handles.is_valid(to):
        raise not_a_handle(to)
    assert isinstance(to, str)
    frm = read_from(payload)
    if not handles.is_valid(frm):
        raise sender_not_a_handle(frm)
    assert isinstance(frm, str)
    text = payload.get("text")
    return CommFile(
        frm,
        to,
        text if isinstance(text, str) else "",
        broadcast=payload.get("broadcast") is True,
        forwarded=payload.get("forwarded") is True,
        expires=read_expires(payload),
    )


# ----------------------------------------------------------------------------------- the other ops


def agent_join_payload(workspace_id: str, handle: str) -> dict[str, Any]:
    """``agent.join``: a row's declaration, or (``workspace_id`` empty) a question from outside any row."""
    return {"workspace_id": workspace_id, "handle": handle}


def read_agent_join(payload: dict[str, Any]) -> tuple[object, object]:
    """``(workspace_id, handle)`` as sent (a missing ``workspace_id`` is ``""``); the verdict checks them."""
    return payload.get("workspace_id", ""), payload.get("handle")


def read_agent_send_to(payload: dict[str, Any]) -> str:
    """The handle an ``agent.send`` names, ``""`` for none (a window notification)."""
    to = payload.get("to")
    return to if isinstance(to, str) else ""


def version_query_payload(*, comm_folder: bool = False) -> dict[str, Any]:
    """``version.query``; ``comm_folder`` (ours, ``sotd doctor``): also say which comm folder is served."""
    return {"comm_folder": True} if comm_folder else {}


def read_version_query(payload: dict[str, Any]) -> bool:
    """Whether a ``version.query`` asks for the comm folder too."""
    return payload.get("comm_folder") is True


def agents_list_payload(*, fleet: bool = False) -> dict[str, Any]:
    """``agents.list`` (ours, issue 30: ``sotd web``): this daemon's registry agents; with ``fleet``, also
    those of every box linked to it (the hub) or of the whole fleet through the hub (a guest)."""
    return {"fleet": True} if fleet else {}


def read_agents_list(payload: dict[str, Any]) -> bool:
    """Whether an ``agents.list`` asks for the fleet (anything but ``true`` is this box alone)."""
    return payload.get("fleet") is True


UNREAD_MAX = 10**12  # more unread lines than any inbox holds: a peer's number past it is not a count


def read_box_unread(box: dict[str, Any]) -> dict[str, int]:
    """The unread counts an ``agents.list`` box entry gives (``"unread": {handle: n}``, issue 30), kept only
    for handles its ``registry`` lists and only where ``n`` is a whole number from 0 below ``UNREAD_MAX``
    (a bool, a float, a string or a negative is dropped: the page shows no count rather than a wrong one).
    An older daemon sends none: ``{}``."""
    counts, agents = box.get("unread"), box.get("registry")
    if not isinstance(counts, dict) or not isinstance(agents, dict):
        return {}
    return {
        name: n for name, n in counts.items() if name in agents and type(n) is int and 0 <= n < UNREAD_MAX
    }


# ---------------------------------------------------------------------------------------- workspace.*


def workspace_create_payload(
    *,
    label: str,
    project_root: str,
    agent: str,
    agent_name: str,
    account: str | None = None,
    command: list[str] | None = None,
) -> dict[str, Any]:
    """``workspace.create`` as ``sotd comm spawn`` sends it: a row that boots its agent, with no task;
    ``account`` and ``command`` only when given."""
    p: dict[str, Any] = {
        "label": label,
        "project_root": project_root,
        "autostart_claude": True,
        "agent": agent,
        "agent_name": agent_name,
        "task": "",
        "boot": True,
    }
    if account is not None:
        p["account"] = account
    if command is not None:
        p["command"] = command
    return p


class WorkspaceCreate:
    """A ``workspace.create`` request as the daemon reads it (``read_workspace_create``): each field as
    sent, with the defaults of a missing or empty key applied; the daemon checks the types and values."""

    __slots__ = ("account", "agent", "agent_name", "command", "label", "project_root")

    def __init__(
        self,
        project_root: object,
        *,
        agent: object,
        agent_name: object,
        label: object,
        account: object,
        command: object,
    ) -> None:
        self.project_root = project_root
        self.agent = agent  # "claude" when missing or empty
        self.agent_name = agent_name  # "" when missing or empty
        self.label = label  # None when missing or empty: the daemon names the row after its folder
        self.account = account  # "" when missing or empty
        self.command = command  # None when missing: the agent's own command line


def read_workspace_create(payload: dict[str, Any]) -> WorkspaceCreate:
    """A ``workspace.create`` request (never refuses: the daemon's checks come after)."""
    return WorkspaceCreate(
        payload.get("project_root"),
        agent=payload.get("agent") or "claude",
        agent_name=payload.get("agent_name") or "",
        label=payload.get("label") or None,
        account=payload.get("account") or "",
        command=payload.get("command"),
    )


def workspace_id_payload(workspace_id: str) -> dict[str, Any]:
    """``workspace.destroy`` and ``workspace.activate`` (without ``read``): the row they name."""
    return {"workspace_id": workspace_id}


def read_workspace_id(payload: dict[str, Any]) -> object:
    """The row a ``workspace.destroy`` or ``workspace.activate`` names, as sent (the daemon looks it up)."""
    return payload.get("workspace_id")


def read_activate_read(payload: dict[str, Any]) -> bool:
    """Whether a ``workspace.activate`` also marks the row's mail read (``read: true``, behaviour 2.6)."""
    return payload.get("read") is True


__all__ = [
    "AGENT_JOIN",
    "AGENT_SEND",
    "COMM_FILE",
    "DAEMON_RELOAD",
    "OPS",
    "VERSION_QUERY",
    "WORKSPACE_OPS",
    "CommFile",
    "WorkspaceCreate",
    "agent_join_payload",
    "comm_file_payload",
    "read_activate_read",
    "read_agent_join",
    "read_comm_file",
    "read_expires",
    "read_to",
    "read_version_query",
    "read_workspace_create",
    "read_workspace_id",
    "workspace_create_payload",
    "workspace_id_payload",
]
