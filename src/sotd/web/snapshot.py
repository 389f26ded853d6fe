"""``sotd/web/snapshot.py``: the fleet as the page shows it, one JSON object (issue 30 item 1).

What it reads is what the CLI reads, through the CLI's own readers: the registry (``formats.registry``,
liveness by ``listing.stale_window`` as ``sotd comm list`` shows it), each local handle's unread count past
its cursor (``formats.unread.Counter``: the read of ``sotd comm unread``, kept until the inbox or the
cursor moves), each other box's handles with the unread counts that box's daemon gave
(``agents.list`` with fleet), this box's daemon (``version.query``: its role, the link to its hub and the boxes linked to it,
what ``sotd daemon status`` shows; ``workspace.list``: the rows and their phases), the rows' screens
(``terminal.tmux.Tmux.screens``, plain text of the daemon's private tmux server) and the last lines of this
box's inboxes (``formats.inbox.decode_line``).
Guarantee: every string that came from a peer, a file or a screen leaves here through ``sotd.text.inert``
(a control or bidi character is its ``\\u`` escape), and the page puts it in the document as text only; a
file or a daemon that cannot be read is a line saying so, never an exception out of ``read``.
What would break it: a field copied into the object without ``inert``, or a reader of its own beside the
CLI's (the two would disagree on a default).
The pure parts (``colour``, ``handle_view``, ``daemon_view``, ``mail_view``) have table tests in
``tests/unit/test_web.py``.
"""

from __future__ import annotations

import os
import secrets
import time

from sotd import _clock
from sotd.text import inert

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from sotd.cli.comm.common import Context

# the work states (workstate.STATES) as colours; anything else a registry holds is grey
COLOURS = {"working": "green", "blocked": "red", "waiting": "amber", "done": "blue", "idle": "grey"}
MAIL_SHOWN = 40  # the newest lines of this box's inboxes the page shows
MAIL_TAIL_BYTES = 64 * 1024  # read of each inbox's end
SCREEN_LINES = 60
RUNS_EVERY_S = 5.0
# a busy inbox is not waited on past this (``sotd comm unread`` waits 3 s, for a person who asked; the page
# reads every 0.5 s and shows no count until the writer is done, then the count)
UNREAD_LOCK_BOUND_S = 0.1


def colour(state: str) -> str:
    return COLOURS.get(state, "grey")


def handle_view(
    name: str, entry: object, now: float, window: int, *, unread: int | None, me: str
) -> dict[str, Any]:
    """One handle's row on the page, from its registry entry (whatever it holds). Pure."""
    from sotd.cli.comm.listing import age_text

    row = entry if isinstance(entry, dict) else {}
    seen = row.get("last_seen")
    age = _clock.age_of(seen, now)
    state = row.get("state") or "idle"
    state = state if isinstance(state, str) else "idle"
    summary = row.get("summary")
    return {
        "name": inert(name),
        "host": inert(str(row.get("host", ""))),
        "repo": inert(str(row.get("repo", ""))),
        "live": age <= window,
        "seen": age_text(age) if _clock.is_stamp(seen) else "never",
        "state": inert(state),
        "colour": colour(state),
        "summary": inert(str(summary)) if summary else "",
        "unread": unread,
        "me": name == me,
    }


def daemon_view(info: object, why: str = "") -> dict[str, Any]:
    """What ``sotd daemon status`` shows of a ``version.query`` answer's ``daemon`` object. Pure."""
    if not isinstance(info, dict):
        return {"up": False, "line": inert(f"no daemon answered: {why}" if why else "no daemon answered")}
    role = "hub" if info.get("hub") else "guest"
    out: dict[str, Any] = {
        "up": True,
        "line": inert(
            f"pid {info.get('pid')}, host {info.get('host')}, version {info.get('version')}, {role}"
        ),
        "link": None,
        "links": [],
        "error": inert(str(info.get("topology_error") or "")),
    }
    link = info.get("link")
    if isinstance(link, dict):
        out["link"] = {
            "endpoint": inert(str(link.get("endpoint", ""))),
            "up": link.get("up") is True,
            "since": inert(str(link.get("since", ""))),
            "error": inert(str(link.get("error") or "")),
        }
    links = info.get("links")
    if isinstance(links, list):
        out["links"] = [inert(str(x)) for x in links]
    return out


def far_view(box: dict[str, Any]) -> dict[str, Any]:
    """Another box as ``agents.list`` gave it: its name, how many handles, why none (``""``). Pure."""
    agents = box.get("registry")
    return {
        "box": inert(str(box.get("box", ""))),
        "handles": len(agents) if isinstance(agents, dict) else 0,
        "error": inert(str(box.get("error") or "")),
    }


def unlinked_boxes(
    agents: dict[str, Any], self_host: str, sotd_boxes: set[str], now: float, window: int
) -> list[dict[str, Any]]:
    """The hosts this comm folder's registry lists handles of that no sotd daemon answers for: boxes on the
    0.6.6 scripts sharing the folder (they keep no daemon link), or a sotd box whose daemon is not linked
    here. Each with what its registry rows say: how many handles, how many live. Pure."""
    counts: dict[str, list[int]] = {}
    for entry in agents.values():
        if not isinstance(entry, dict):
            continue
        host = entry.get("host")
        if not isinstance(host, str) or not host or host == self_host or host in sotd_boxes:
            continue
        c = counts.setdefault(host, [0, 0])
        c[0] += 1
        c[1] += _clock.age_of(entry.get("last_seen"), now) <= window
    return [
        {"box": inert(h), "handles": n, "live": live, "error": "", "scripts": True}
        for h, (n, live) in sorted(counts.items())
    ]


def mail_view(obj: dict[str, Any]) -> dict[str, str]:
    """One inbox line as the page shows it (the message text keeps its newlines). Pure."""
    return {
        "from": inert(str(obj.get("from", ""))),
        "to": inert(str(obj.get("to", ""))),
        "ts": inert(str(obj.get("ts", ""))),
        "msg": inert(str(obj.get("msg", "")), lines=True),
    }


def row_view(row: dict[str, Any], screen: str, attach: str) -> dict[str, Any]:
    """One row of ``workspace.list`` with its screen's last lines. Pure."""
    lines = screen.rstrip("\n").split("\n")[-SCREEN_LINES:] if screen else []
    return {
        "id": inert(str(row.get("workspace_id", ""))),
        "label": inert(str(row.get("label", ""))),
        "phase": inert(str(row.get("phase", ""))),
        "agent": inert(str(row.get("agent", ""))),
        "handle": inert(str(row.get("handle") or "")),
        "root": inert(str(row.get("project_root", ""))),
        "attach": inert(attach),
        "screen": inert("\n".join(lines), lines=True),
    }


def run_view(rec: dict[str, Any]) -> dict[str, Any]:
    """One OCX run of this node: its answers record and, once ended, the ``ended`` body. Pure."""
    ended = rec.get("ended") if isinstance(rec.get("ended"), dict) else {}
    assert isinstance(ended, dict)
    outputs = ended.get("outputs") if isinstance(ended.get("outputs"), dict) else {}
    hits = ended.get("limits_hit") if isinstance(ended.get("limits_hit"), list) else []
    assert isinstance(outputs, dict) and isinstance(hits, list)
    return {
        "run": inert(str(rec.get("run", ""))[:16]),
        "repo": inert(str(rec.get("repo", ""))),
        "to": inert(str(rec.get("to", ""))),
        "sender": inert(str(rec.get("sender", ""))),
        "phase": inert(str(rec.get("phase", ""))),
        "outcome": inert(str(ended.get("outcome", ""))),
        "limit": inert(str(ended.get("limit") or "")),
        "limits_hit": [inert(str(x)) for x in hits],
        "outputs": [inert(f"{k} {str(v)[:16]}") for k, v in sorted(outputs.items())],
    }


class Reader:
    """Reads the fleet for one ``sotd web`` process. Inbox work is redone only for an inbox or cursor whose
    size or mtime moved since the last read; the daemon is asked at most once per ``daemon_every``."""

    def __init__(self, environ: dict[str, str], socket: str, *, daemon_every: float = 1.0) -> None:
        from sotd import runtime
        from sotd.cli.comm.common import Context

        self.environ = environ
        self.ctx: Context = Context(environ)
        self.socket = socket
        self.tmux_socket = runtime.rows_tmux_socket(runtime.rows_state_dir(environ, socket))
        self.marker = "sotd-web-" + secrets.token_hex(16)
        self.daemon_every = daemon_every
        self._daemon_at = -1e9
        self._window = 600
        self._agents: dict[str, Any] = {}  # the registry's agents, as the last ``handles`` read them
        self._daemon: dict[str, Any] = {"up": False, "line": "not asked yet"}
        self._rows: list[dict[str, Any]] = []
        self._far: list[dict[str, Any]] = []
        self._runs_at = -1e9
        self._runs: dict[str, Any] = {
            "runs": [],
            "why": "",
        }  # the other boxes of agents.list (fleet), as answered
        from sotd.formats import unread

        self._counter = unread.Counter(self.ctx.layout, bound=UNREAD_LOCK_BOUND_S)
        self._mail: tuple[object, list[dict[str, str]]] = (None, [])

    # ------------------------------------------------------------------------------- the file side

    def unread(self, handle: str) -> int | None:
        """``sotd comm unread <handle>``'s count; None when it could not be counted (busy, unreadable)."""
        return self._counter.count(handle)

    def handles(self) -> tuple[list[dict[str, Any]], list[str], str]:
        """Every handle the registry lists, this box's handles, and a problem line (``""``)."""
        from sotd import handles as handles_mod
        from sotd.cli.comm.listing import stale_window
        from sotd.errors import SotdError
        from sotd.formats import registry

        try:
            doc = registry.read(self.ctx.layout)
        except (SotdError, OSError):
            return [], [], "the registry could not be read"
        agents = self._agents = registry.agents_of(doc) if doc is not None else {}
        now = _clock.now()
        window = self._window = stale_window(self.environ)
        out, local = [], []
        for name in sorted(agents):
            entry = agents[name]
            here = isinstance(entry, dict) and entry.get("host") == self.ctx.host
            count = self.unread(name) if here and handles_mod.is_valid(name) else None
            if here and handles_mod.is_valid(name):
                local.append(name)
            out.append(handle_view(name, entry, now, window, unread=count, me=self.ctx.name))
        return out, local, ""

    def far_handles(self, listed: set[str]) -> list[dict[str, Any]]:
        """The handles other boxes' daemons list (``agents.list`` with fleet) that this registry does not, each
        with the unread count its box gave (none from an older daemon, or for an inbox it could not read)."""
        now = _clock.now()
        window = self._window
        out = []
        from sotd.wire.payloads import read_box_unread

        for box in self._far:
            agents = box.get("registry")
            if not isinstance(agents, dict):
                continue
            counts = read_box_unread(box)  # what that box's daemon counted of its own inboxes
            for name in sorted(agents):
                if name in listed:
                    continue
                listed.add(name)
                view = handle_view(str(name), agents[name], now, window, unread=counts.get(name), me="")
                view["box"] = inert(str(box.get("box", "")))
                out.append(view)
        return out

    def mail(self, local: list[str]) -> list[dict[str, str]]:
        """The newest ``MAIL_SHOWN`` lines of the inboxes of ``local``, newest first."""
        lay = self.ctx.layout
        from sotd.formats import inbox, unread

        key = tuple((h, unread.stamp_of(lay, h)) for h in local)
        if self._mail[0] == key:
            return self._mail[1]

        got: list[tuple[str, int, dict[str, str]]] = []
        for h in local:
            try:
                with open(lay.inbox(h), "rb") as f:
                    size = f.seek(0, os.SEEK_END)
                    f.seek(max(0, size - MAIL_TAIL_BYTES))
                    data = f.read(MAIL_TAIL_BYTES)
            except OSError:
                continue
            lines = data.split(b"\n")[1:-1] if size > MAIL_TAIL_BYTES else data.split(b"\n")[:-1]
            for i, raw in enumerate(lines[-MAIL_SHOWN:]):
                obj = inbox.decode_line(raw)
                if obj is not None:
                    got.append((str(obj.get("ts", "")), i, mail_view(obj)))
        got.sort(key=lambda t: (t[0], t[1]), reverse=True)
        shown = [m for _ts, _i, m in got[:MAIL_SHOWN]]
        self._mail = (key, shown)
        return shown

    # ----------------------------------------------------------------------------- the daemon side

    def _request(self, op: str, payload: dict[str, Any], bound: float = 2.0) -> dict[str, Any]:
        from sotd.client import unix
        from sotd.wire import hello as wire_hello

        hello = wire_hello.hello_payload(
            host=self.ctx.host, os_user=wire_hello.os_user_for_uid(os.geteuid()), role="cli", name="sotd-web"
        )
        return unix.request(self.socket, op, payload, hello, deadline_s=bound)

    def ask_daemon_now(self) -> None:
        """The next ``daemon`` asks again whatever the time (an action just changed the rows)."""
        self._daemon_at = -1e9

    def daemon(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """``version.query`` and ``workspace.list`` of this box's daemon, at most once per ``daemon_every``,
        with the rows' screens."""
        now = time.monotonic()
        if now - self._daemon_at < self.daemon_every:
            return self._daemon, self._rows
        self._daemon_at = now
        from sotd.errors import SotdError
        from sotd.terminal.tmux import Tmux, row_attach_argv
        from sotd.wire import payloads

        try:
            info = self._request(payloads.VERSION_QUERY, payloads.version_query_payload()).get("daemon")
            self._daemon = daemon_view(info)
            listed = self._request(payloads.WORKSPACE_LIST, {}).get("workspaces")
        except (SotdError, OSError) as e:
            self._daemon = daemon_view(None, getattr(e, "message", str(e)))
            self._rows, self._far = [], []
            return self._daemon, self._rows
        try:
            boxes = self._request(payloads.AGENTS_LIST, payloads.agents_list_payload(fleet=True), 5.0).get(
                "boxes"
            )
        except (SotdError, OSError) as e:
            boxes = [{"box": "?", "registry": {}, "error": f"agents.list: {getattr(e, 'message', e)}"}]
        self._far = [
            b
            for b in (boxes if isinstance(boxes, list) else [])
            if isinstance(b, dict) and b.get("box") != self.ctx.host
        ]
        self._daemon["boxes"] = [far_view(b) for b in self._far]
        rows = [r for r in listed if isinstance(r, dict)] if isinstance(listed, list) else []
        panes = [
            str(r.get("pane") or "")
            for r in rows
            if r.get("phase") in ("starting", "ready") and r.get("pane")
        ]
        panes = [p for p in panes if p.startswith("%") and p[1:].isdigit()]
        screens = dict(zip(panes, Tmux(self.tmux_socket).screens(panes, self.marker), strict=True))
        import shlex

        self._rows = [
            row_view(
                r,
                screens.get(str(r.get("pane") or ""), ""),
                shlex.join(row_attach_argv(self.tmux_socket, str(r.get("pane"))))
                if str(r.get("pane") or "") in screens
                else "",
            )
            for r in rows
        ]
        return self._daemon, self._rows

    def ocx_runs(self) -> dict[str, Any]:
        """The OCX runs this box's node took, read again at most every ``RUNS_EVERY_S``."""
        now = time.monotonic()
        if now - self._runs_at >= RUNS_EVERY_S:
            self._runs_at = now
            from sotd.cli.ocx import node_runs

            runs, why = node_runs(self.environ)
            self._runs = {"runs": [run_view(r) for r in runs], "why": inert(why)}
        return self._runs

    def read(self) -> dict[str, Any]:
        """The whole page's object."""
        handles, local, problem = self.handles()
        daemon, rows = self.daemon()
        handles += self.far_handles({h["name"] for h in handles})
        # the boxes a sotd daemon answered for (agents.list through the links, the links held here); the
        # registry's other hosts are listed beside them as such
        answered = {str(b.get("box", "")) for b in self._far} | {str(x) for x in daemon.get("links", [])}
        daemon = dict(daemon)
        daemon["boxes"] = list(daemon.get("boxes", [])) + unlinked_boxes(
            self._agents, self.ctx.host, answered, _clock.now(), self._window
        )
        return {
            "box": {
                "host": inert(self.ctx.host),
                "comm": inert(self.ctx.layout.home),
                "me": inert(self.ctx.name),
            },
            "problem": problem,
            "handles": handles,
            "daemon": daemon,
            "rows": rows,
            "mail": self.mail(local),
            "ocx": self.ocx_runs(),
        }
