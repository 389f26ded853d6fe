"""Rows: the agent sessions this daemon runs, one tmux window each (D16, behaviour 4.1, 2.3, 2.6).

File: ``<state>/workspaces/<row id>/row.json`` (pretty JSON, written temp + fsync + rename) per row; the
daemon's private tmux server at ``<state>/tmux/tmux.sock``. ``<state>`` is ``$SOTD_STATE_DIR``, else the
``state`` folder beside the daemon's socket (a private 0700 folder).
Spec: D16 (capsule, private tmux server, persistence, phases), 4.1 (one row per root, one row per handle,
the pinned self file), 2.3 ``agent.join`` and ``workspace.*``, 2.6 (destroy's prune, activate, duplicate
handles at boot).
Guarantee: a row's agent runs as the child of ``sot-capsule supervise <state>/workspaces/<row id>`` with
``SOT_WORKSPACE_ID`` and ``SOT_COMM_SELF_FILE=<comm>/self/<host>__<row id>.txt`` set, so the identity check
can place every comm command it runs; a handle is declared by one row at most; a row record survives a
daemon restart (the tmux server and the agents keep running).
What would break it: declaring a handle without removing it from the other rows (two rows would stamp
and wake one handle), or answering ``ok`` to a join before the record is on disk.

Phases (stored as written here; the wire shows them lower-case):
``Starting`` (window started) -> ``Ready`` (its session declared its handle with ``agent.join``, or, for a
Claude row, its screen first read as a free prompt, or, for a plain command, at once) -> ``ended_no_respawn``
(its window is gone after the row was Ready: the agent ran and exited; the daemon never restarts it).
``terminal``: the window is gone while the row was still Starting (the agent failed or quit before it ever
came up: a command that is not there, a crash at start, a Codex session that never joined). Both are
final. A window that cannot be started at all makes no row (``start_failed``). Only Starting and Ready
keep a handle live; only Ready is woken.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import sys
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from sotd import _clock, fsprim, handles
from sotd.daemon import decide, regturn
from sotd.errors import SotdError
from sotd.formats import registry, selffile
from sotd.runtime import rows_state_dir, rows_tmux_socket
from sotd.terminal import prompt
from sotd.terminal.tmux import Tmux, TmuxError, Window
from sotd.wire import answers, payloads
from sotd.wire.answers import OK, quoted, refusal

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from sotd.formats.layout import Layout

log = logging.getLogger("sotd")

STARTING = "Starting"
READY = "Ready"
TERMINAL = "terminal"
ENDED = "ended_no_respawn"
LIVE = (STARTING, READY)
AGENTS = ("claude", "codex", "none")
SESSION = "sotd"
RECORD = "row.json"
PRUNE_BOUND = 10.0
ACTIVATE_BOUND = 1.0


def state_dir(environ: Mapping[str, str], socket_path: str) -> str:
    """``$SOTD_STATE_DIR``, else ``<socket folder>/state`` (the rule is ``runtime.rows_state_dir``)."""
    return rows_state_dir(environ, socket_path)


@dataclass(slots=True)
class RowRecord:
    """One row record (``row.json``)."""

    id: str
    label: str
    slug: str
    project_root: str
    agent: str = "claude"
    agent_name: str = ""
    account: str = ""
    handle: str = ""  # the declared comm handle
    runtime: str = "capsule"
    phase: str = STARTING
    argv: list[str] = field(default_factory=list)
    pane: str = ""
    created: str = ""
    joined_at: str = ""

    @classmethod
    def from_json(cls, doc: object) -> RowRecord | None:
        if not isinstance(doc, dict):
            return None
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in doc.items() if k in known}
        if not all(isinstance(kw.get(k), str) and kw.get(k) for k in ("id", "label", "slug", "project_root")):
            return None
        try:
            row = cls(**kw)
        except TypeError:
            return None
        if not isinstance(row.argv, list) or not all(isinstance(a, str) for a in row.argv):
            row.argv = []
        return row

    def wire(self) -> dict[str, Any]:
        """The row as ``workspace.list`` shows it."""
        return {
            "workspace_id": self.id,
            "slug": self.slug,
            "label": self.label,
            "project_root": self.project_root,
            "runtime": self.runtime,
            "phase": self.phase.lower(),
            "agent": self.agent,
            "agent_name": self.agent_name,
            "account": self.account,
            "handle": self.handle,
            "pane": self.pane,
        }


# ------------------------------------------------------------------------------------------ pure rules


def dedupe_handles(rows: list[RowRecord], last_joiner: Mapping[str, str]) -> list[tuple[str, str]]:
    """Boot rule (2.6): a handle several rows declare stays only on the row the registry names as its last
    joiner (``last_joiner[handle]`` = that entry's ``workspace_id``); when the registry names none of them,
    the row that joined last keeps it. Clears the others in place; returns ``(row id, handle)`` cleared."""
    by_handle: dict[str, list[RowRecord]] = {}
    for r in rows:
        if r.handle:
            by_handle.setdefault(r.handle, []).append(r)
    cleared: list[tuple[str, str]] = []
    for h, group in by_handle.items():
        if len(group) < 2:
            continue
        named = [r for r in group if r.id == last_joiner.get(h)]
        keeper = named[0] if named else max(group, key=lambda r: (r.joined_at, r.id))
        for r in group:
            if r is not keeper:
                r.handle = ""
                cleared.append((r.id, h))
    return cleared


def gone_phase(phase: str) -> str:
    """The final phase of a row whose window is gone: ``terminal`` when it never got past Starting (it
    failed to come up), else ``ended_no_respawn`` (it ran, then ended)."""
    return TERMINAL if phase == STARTING else ENDED


def prune_change(row: RowRecord, host: str) -> Callable[[dict[str, object]], tuple[bool, list[str]]]:
    """``workspace.destroy``'s registry prune (2.6): entries on this host (ASCII case ignored; a hostless
    entry never) whose handle is the row's agent name or declared handle (with no or the same
    ``workspace_id``), or whose ``workspace_id`` is the row's."""
    names = {n for n in (row.agent_name, row.handle) if n}

    def change(doc: dict[str, object]) -> tuple[bool, list[str]]:
        agents = registry.agents_of(doc)
        gone: list[str] = []
        for name, entry in list(agents.items()):
            if not isinstance(entry, dict):
                continue
            eh = entry.get("host")
            if not isinstance(eh, str) or not eh or eh.lower() != host.lower():
                continue
            ws = entry.get("workspace_id")
            if (name in names and ws in (None, "", row.id)) or ws == row.id:
                del agents[name]
                gone.append(name)
        return bool(gone), gone

    return change


def activate_change(handle: str, host: str) -> Callable[[dict[str, object]], tuple[bool, bool]]:
    """``workspace.activate {read: true}`` (2.6): drop the ``done`` fact of the row's entry (same host
    only); ``state`` becomes ``idle`` only if it was ``done``; nothing else changes."""

    def change(doc: dict[str, object]) -> tuple[bool, bool]:
        entry = registry.agents_of(doc).get(handle)
        if not isinstance(entry, dict):
            return False, False
        eh = entry.get("host")
        if not isinstance(eh, str) or eh.lower() != host.lower():
            return False, False
        changed = False
        if "done" in entry:
            del entry["done"]
            changed = True
        if entry.get("state") == "done":
            entry["state"] = "idle"
            changed = True
        return changed, changed

    return change


def agent_argv(agent: str, command: object, environ: Mapping[str, str]) -> list[str] | None:
    """The agent's own argv: the request's ``command`` (a list of strings), else
    ``$SOTD_AGENT_ARGV_<AGENT>`` (a JSON list), else the agent's name; None for ``none`` without one."""
    if isinstance(command, list) and command and all(isinstance(a, str) and a for a in command):
        return list(command)
    raw = environ.get(f"SOTD_AGENT_ARGV_{agent.upper()}", "")
    if raw:
        with contextlib.suppress(ValueError):
            v = json.loads(raw)
            if isinstance(v, list) and v and all(isinstance(a, str) and a for a in v):
                return v
    return None if agent == "none" else [agent]


def send_command(layout: Layout) -> str:
    """The command a row on this box replies with: ``<comm>/bin/comm-send.sh`` when installed (the rows'
    PATH starts there), else this installation's own ``sotd comm send``."""
    wrapper = os.path.join(layout.bin_dir, "comm-send.sh")
    if os.access(wrapper, os.X_OK):
        return wrapper
    exe = shutil.which("sotd", path=os.path.dirname(sys.executable)) or "sotd"
    return f"{exe} comm send"


def capsule_exe() -> str | None:
    return shutil.which("sot-capsule", path=os.path.dirname(sys.executable)) or shutil.which("sot-capsule")


# --------------------------------------------------------------------------------------------- rows


class DaemonRows:
    """The rows of this daemon: records, the tmux server, and the ops on them (``ops.JoinRows`` and more)."""

    def __init__(
        self,
        *,
        state: str,
        layout: Layout,
        host: str,
        socket_path: str,
        environ: Mapping[str, str],
        publish: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        self.state = state
        self.layout = layout
        self.host = host
        self.socket_path = socket_path
        self.environ = environ
        self.publish = publish
        self.rows: dict[str, RowRecord] = {}
        self.tmux = Tmux(rows_tmux_socket(state), session=SESSION, environ=dict(environ))
        self.on_change: Callable[[str], None] | None = None  # row id whose handle or phase changed
        # why a Starting row's screen does not read ready yet (``is_free``'s reason), for ``workspace.list``
        # (a spawn that gives up says it); written by ``refresh_plan``'s thread, read for display only
        self.waiting_on: dict[str, str] = {}

    # ----------------------------------------------------------------------------------- persistence

    def ws_dir(self, row_id: str) -> str:
        return os.path.join(self.state, "workspaces", row_id)

    def _mkdirs(self) -> None:
        for d in (self.state, os.path.join(self.state, "workspaces"), os.path.dirname(self.tmux.socket_path)):
            os.makedirs(d, mode=0o700, exist_ok=True)
            with contextlib.suppress(OSError):
                os.chmod(d, 0o700)

    def save(self, row: RowRecord) -> None:
        """Write the record (blocking; small). ``OSError`` when it cannot be written."""
        d = self.ws_dir(row.id)
        os.makedirs(d, mode=0o700, exist_ok=True)
        data = (json.dumps(asdict(row), indent=2, ensure_ascii=False) + "\n").encode("utf-8")
        fsprim.write_atomic(os.path.join(d, RECORD), data)

    def load(self) -> list[RowRecord]:
        """Every readable record (blocking); an unreadable one is logged and skipped."""
        base = os.path.join(self.state, "workspaces")
        out: list[RowRecord] = []
        try:
            names = sorted(os.listdir(base))
        except FileNotFoundError:
            return out
        for name in names:
            path = os.path.join(base, name, RECORD)
            try:
                with open(path, "rb") as f:
                    row = RowRecord.from_json(json.loads(f.read().decode("utf-8")))
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as e:
                log.warning("row record %s cannot be read: %s", path, e)
                continue
            if row is None or row.id != name:
                log.warning("row record %s is not a row record; skipped", path)
                continue
            out.append(row)
        return out

    def boot(self) -> None:
        """Load the records, keep a duplicated handle on the registry's last joiner, give a tmux server
        that outlived the last daemon this daemon's environment (``Tmux.sync_environment``), and mark rows
        whose window is gone as ended (blocking; at daemon start)."""
        self._mkdirs()
        rows = self.load()
        last: dict[str, str] = {}
        with contextlib.suppress(SotdError, OSError):
            doc = registry.read(self.layout)
            for h, entry in (registry.agents_of(doc) if doc else {}).items():
                if isinstance(entry, dict) and isinstance(entry.get("workspace_id"), str):
                    last[h] = entry["workspace_id"]
        for rid, h in dedupe_handles(rows, last):
            log.warning(
                "row %s no longer declares @%s: another row holds it (the registry's last joiner)", rid, h
            )
        try:  # the rows' tmux server outlived the last daemon: new rows get this daemon's environment
            if self.tmux.sync_environment():
                log.info("the rows' tmux server is running: new rows get this daemon's environment")
        except SotdError as e:
            log.warning("the rows' tmux server kept the environment it started with: %s", e.message)
        windows = self.windows()
        panes = {p for p, w in (windows or {}).items() if not w.dead}
        for r in rows:
            if windows is not None and r.phase in LIVE and r.pane not in panes:
                r.phase = gone_phase(r.phase)
                log.info("row %s: its window is gone; phase %s", r.id, r.phase)
            with contextlib.suppress(OSError):
                self.save(r)
            self.rows[r.id] = r
        if rows:
            log.info(
                "%d row(s) loaded from %s; watch them with: %s",
                len(rows),
                self.state,
                self.tmux.attach_command(),
            )

    # ------------------------------------------------------------------------------ ops.JoinRows

    def holder_of(self, handle: str) -> str | None:
        for r in self.rows.values():
            if r.handle == handle:
                return r.id
        return None

    def exists(self, workspace_id: str) -> bool:
        return workspace_id in self.rows

    def declare(self, workspace_id: str, handle: str) -> dict[str, Any]:
        """``agent.join`` for a row: the handle becomes this row's and no other row's; persisted first."""
        row = self.rows.get(workspace_id)
        if row is None:
            return refusal(answers.UNKNOWN_WORKSPACE, f"unknown workspace: {quoted(workspace_id)}")
        now = _clock.stamp()
        new = replace(row, handle=handle, joined_at=now, phase=READY if row.phase == STARTING else row.phase)
        others = [r for r in self.rows.values() if r.id != row.id and r.handle == handle]
        try:
            self.save(new)
            for o in others:
                self.save(replace(o, handle=""))
        except OSError as e:
            log.error("row %s: could not persist @%s: %s", row.id, handle, e)
            return refusal(answers.PERSIST_FAILED, f"could not persist row {row.id}: {e.strerror or e}")
        self.rows[row.id] = new
        for o in others:
            o.handle = ""
            log.info("row %s gave up @%s (row %s declared it)", o.id, handle, row.id)
        log.info("row %s declared @%s (phase %s)", row.id, handle, new.phase)
        self._changed(row.id, "agent_joined")
        return OK

    def _changed(self, row_id: str, action: str) -> None:
        if self.publish is not None:
            row = self.rows.get(row_id)
            payload: dict[str, Any] = {"action": action, "workspace_id": row_id}
            if row is not None:
                payload["workspace"] = row.wire()
            self.publish(payloads.WORKSPACE_CHANGED, payload)
        if self.on_change is not None:
            self.on_change(row_id)

    def set_phase(self, row_id: str, phase: str) -> None:
        row = self.rows.get(row_id)
        if row is None or row.phase == phase:
            return
        row.phase = phase
        try:
            self.save(row)
        except OSError as e:
            log.warning("row %s: phase %s not persisted: %s", row_id, phase, e)
        log.info("row %s (%s): phase %s", row_id, row.label, phase)
        self._changed(row_id, "phase")

    # ------------------------------------------------------------------------------------ views

    def views(self) -> list[decide.RowView]:
        """What the heartbeat and the wake need of each row (blocking: reads the pinned self files)."""
        out = []
        for r in list(self.rows.values()):
            line = ""
            if r.phase in LIVE and not r.handle:
                try:
                    rec = selffile.read_record(self.layout.self_file(self.host, r.id))
                except SotdError:  # a slot that is a link names nobody (issue 25: never read through)
                    rec = None
                line = rec.handle if rec is not None else ""
            out.append(
                decide.RowView(
                    row_id=r.id,
                    phase=r.phase,
                    declared=r.handle,
                    self_line=line,
                    agent_name=r.agent_name,
                    agent=r.agent,
                    runtime=r.runtime,
                )
            )
        return out

    def refresh_plan(self) -> list[tuple[str, str]]:
        """Each tick (blocking; no row changes): ``(row id, new phase)`` for rows whose window is gone
        (ended), and for a Starting Claude row whose screen reads free or a Starting plain command (Ready).
        ``apply`` makes the changes on the event loop. For a Starting row whose screen is not free yet it
        notes why in ``waiting_on``."""
        # a row whose window is still being made has no pane yet: never judge it (it would read as gone)
        live = [
            (r.id, r.phase, r.pane, r.agent) for r in list(self.rows.values()) if r.phase in LIVE and r.pane
        ]
        starting = {rid for rid, phase, _pane, _agent in live if phase == STARTING}
        for rid in [r for r in self.waiting_on if r not in starting]:  # Ready, ended or destroyed since
            self.waiting_on.pop(rid, None)
        if not live:
            return []
        windows = self.windows()
        if windows is None:
            return []
        plan: list[tuple[str, str]] = []
        for rid, phase, pane, agent in live:
            w = windows.get(pane)
            if w is None or w.dead:
                if w is not None:
                    with contextlib.suppress(TmuxError):
                        self.tmux.kill_window(pane)
                plan.append((rid, gone_phase(phase)))
                continue
            if phase != STARTING:
                continue
            if agent == "none":
                plan.append((rid, READY))
            elif agent in prompt.AGENTS_WITH_PREDICATE:
                try:
                    free, why = prompt.is_free(prompt.screen_from_capture(*self.tmux.capture(pane)), agent)
                except TmuxError as e:
                    self.waiting_on[rid] = f"its screen could not be read ({e.message})"
                    continue
                if free:
                    plan.append((rid, READY))
                    self.waiting_on.pop(rid, None)
                else:
                    self.waiting_on[rid] = why or "not free"
        return plan

    def apply(self, plan: list[tuple[str, str]]) -> None:
        for rid, planned in plan:
            row = self.rows.get(rid)
            if row is None or row.phase not in LIVE:
                continue
            if planned == READY and row.phase != STARTING:
                continue
            # a join may have made it Ready since the plan was read: the phase it has now decides the end
            self.set_phase(rid, gone_phase(row.phase) if planned in (TERMINAL, ENDED) else planned)

    def windows(self) -> dict[str, Window] | None:
        """The server's windows by pane id; ``{}`` when no server runs; None when tmux did not answer
        (a slow tmux must never end a row)."""
        from sotd.terminal.tmux import list_windows_argv, parse_windows

        try:
            out = self.tmux.run(list_windows_argv(self.tmux.socket_path))
        except TmuxError as e:
            text = e.message.lower()
            if "no server running" in text or "error connecting" in text or "no such file" in text:
                return {}
            log.warning("tmux did not list the rows' windows: %s", e.message)
            return None
        return {w.pane_id: w for w in parse_windows(out)}

    # ------------------------------------------------------------------------------ workspace ops

    async def workspace_op(self, op: str, payload: dict[str, Any]) -> dict[str, Any]:
        if op == payloads.WORKSPACE_LIST:
            return {"workspaces": self.listing()}
        if op == payloads.WORKSPACE_CREATE:
            return await self.create(payload)
        if op == payloads.WORKSPACE_DESTROY:
            return await self.destroy(payload)
        if op == payloads.WORKSPACE_ACTIVATE:
            return await self.activate(payload)
        return answers.unknown_op(op)

    def listing(self) -> list[dict[str, Any]]:
        """``workspace.list``'s rows, in creation order."""
        return [self._listed(r) for r in sorted(self.rows.values(), key=lambda r: r.created)]

    def _listed(self, row: RowRecord) -> dict[str, Any]:
        """``workspace.list``'s entry: the row, and for a Starting row why its screen is not ready yet
        (``waiting_on``, ours; ``""`` when not known)."""
        doc = row.wire()
        if row.phase == STARTING:
            doc["waiting_on"] = self.waiting_on.get(row.id, "")
        return doc

    def _row_for(self, payload: dict[str, Any]) -> RowRecord | dict[str, Any]:
        wid = payloads.read_workspace_id(payload)
        row = self.rows.get(wid) if isinstance(wid, str) else None
        if row is None:
            return refusal(answers.UNKNOWN_WORKSPACE, f"unknown workspace: {quoted(wid)}")
        return row

    async def create(self, payload: dict[str, Any], *, before: list[str] | None = None) -> dict[str, Any]:
        """``workspace.create``. ``before`` (in-process callers only, never from the wire) is a command
        prefix that execs the row's ``sot-capsule`` in place: an OCX session joins its cgroups with it."""
        req = payloads.read_workspace_create(payload)
        root_in = req.project_root
        if not isinstance(root_in, str) or not os.path.isabs(root_in):
            return refusal(
                answers.BAD_REQUEST, f"project_root must be an absolute path, not {quoted(root_in)}"
            )
        try:
            root = await asyncio.to_thread(os.path.realpath, root_in, strict=True)
        except OSError as e:
            return refusal(
                answers.BAD_REQUEST, f"project root {root_in} cannot be resolved: {e.strerror or e}"
            )
        if not os.path.isdir(root):
            return refusal(answers.BAD_REQUEST, f"project root {root} is not a folder")
        agent = req.agent
        if agent not in AGENTS:
            return refusal(
                answers.BAD_REQUEST, f"agent must be one of {', '.join(AGENTS)}, not {quoted(agent)}"
            )
        name = req.agent_name
        if not isinstance(name, str) or (name and not handles.is_valid(name)):
            return refusal(answers.BAD_HANDLE, f"invalid handle: {quoted(name)}")
        label = req.label or os.path.basename(root)
        if not isinstance(label, str):
            return refusal(answers.BAD_REQUEST, f"label must be a string, not {quoted(label)}")
        account = req.account
        for r in self.rows.values():
            if r.project_root == root:
                return refusal(
                    answers.ROOT_TAKEN,
                    f"{root} already has a workspace: '{r.label}' (slug '{r.slug}', id {r.id})",
                )
            if name and (r.handle == name or (r.phase in LIVE and r.agent_name == name and not r.handle)):
                return refusal(answers.HELD_BY_ROW, f"@{name} is held by row {r.id}")
        argv = agent_argv(str(agent), req.command, self.environ)
        if argv is None:
            return refusal(answers.BAD_REQUEST, "a row with agent 'none' needs a command")
        if req.command is None:  # an explicit command runs exactly as given
            from sotd import rowargv  # Claude Code rows: --settings; Codex rows: PATH and a first prompt

            path = self.layout.bin_dir + os.pathsep + self.environ.get("PATH", os.defpath)
            argv = rowargv.row_argv(argv, self.layout.bin_dir, path)
        capsule = capsule_exe()
        if capsule is None:
            return refusal(answers.START_FAILED, "sot-capsule is not installed beside this sotd")
        slug = handles.slug(label)
        taken = {r.slug for r in self.rows.values()}
        base, n = slug, 2
        while slug in taken:
            slug, n = f"{base}-{n}", n + 1
        row_id = "ws-" + os.urandom(6).hex()
        row = RowRecord(
            id=row_id,
            label=label,
            slug=slug,
            project_root=root,
            agent=str(agent),
            agent_name=name,
            account=str(account),
            created=_clock.stamp() + f".{os.urandom(2).hex()}",
        )
        ws = self.ws_dir(row_id)
        row.argv = [*(before or ()), capsule, "supervise", ws, "--start", "--", *argv]
        self.rows[row_id] = row  # reserved now: a concurrent create for the same root is refused
        try:
            pane = await asyncio.to_thread(self._start, row)
        except (OSError, SotdError) as e:
            self.rows.pop(row_id, None)
            await asyncio.to_thread(shutil.rmtree, ws, True)
            why = e.message if isinstance(e, SotdError) else (e.strerror or str(e))
            log.error("row %s (%s) could not start: %s", row_id, label, why)
            return refusal(answers.START_FAILED, f"the row's window could not be started: {why}")
        started = self._started(row, pane)
        if started is None:
            log.info("row %s (%s) was destroyed while its window was starting", row_id, label)
            return refusal(answers.START_FAILED, "the row was destroyed while its window was starting")
        row = started
        log.info("row %s (%s) started in %s: %s", row_id, label, row.pane, " ".join(row.argv))
        self._changed(row_id, "created")
        return answers.ok_with({"workspace": row.wire(), "attach": self.tmux.attach_command(), **row.wire()})

    def row_env(self, row: RowRecord) -> dict[str, str]:
        env = {
            "SOT_COMM_HOME": self.layout.home,
            "SOT_SELF_HOST": self.host,
            "SOT_WORKSPACE_ID": row.id,
            "SOT_WORKSPACE": row.id,
            "SOT_COMM_SELF_FILE": self.layout.self_file(self.host, row.id),
            "SOT_SOCKET": self.socket_path,
            "PWD": row.project_root,
            "PATH": self.layout.bin_dir + os.pathsep + self.environ.get("PATH", os.defpath),
        }
        if row.agent_name:
            env["SOT_COMM_NAME"] = row.agent_name
        return env

    def _start(self, row: RowRecord) -> str:
        """The row's window started (blocking, in a thread): its pane. The record is saved first, without
        the pane; ``_started`` adds it, on the loop."""
        self._mkdirs()
        os.makedirs(self.ws_dir(row.id), mode=0o700, exist_ok=True)
        self.save(row)
        env = self.row_env(row)
        # tmux gives a new session's first window the client's PATH whatever ``-e`` says, so PATH is set
        # by ``env``, which execs the capsule in place (the capsule stays the pane's process)
        argv = [shutil.which("env") or "/usr/bin/env", "PATH=" + env.pop("PATH"), *row.argv]
        return self.tmux.new_window(row.slug, row.project_root, env, argv)

    def _started(self, row: RowRecord, pane: str) -> RowRecord | None:
        """The record of a row whose window came up in ``pane``, saved (on the loop, with no await between
        the read and the write). The agent in that window may have joined while ``new_window`` was still
        returning: ``declare`` then put a new record in ``self.rows``, and that one (the handle, the phase)
        is the one that takes the pane; the record ``_start`` began with would lose the join (issue 31's
        suite saw a restart bring a row back with its pane and no handle)."""
        current = self.rows.get(row.id)
        if current is None:  # destroyed while its window was starting (None): the window goes too
            with contextlib.suppress(TmuxError):
                self.tmux.kill_window(pane)
            return None
        current.pane = row.pane = pane
        try:
            self.save(current)
        except OSError as e:
            log.error("row %s: could not persist its pane %s: %s", row.id, pane, e)
        return current

    async def destroy(self, payload: dict[str, Any]) -> dict[str, Any]:
        row = self._row_for(payload)
        if isinstance(row, dict):
            return row
        del self.rows[row.id]
        if row.pane:
            with contextlib.suppress(TmuxError):
                await asyncio.to_thread(self.tmux.kill_window, row.pane)
        pruned: list[str] = []
        try:
            _doc, pruned = await asyncio.to_thread(
                regturn.update, self.layout, self.host, prune_change(row, self.host), bound=PRUNE_BOUND
            )
        except (SotdError, OSError) as e:
            why = e.message if isinstance(e, SotdError) else str(e)
            log.warning("row %s destroyed; its registry entries were not pruned: %s", row.id, why)
        await asyncio.to_thread(shutil.rmtree, self.ws_dir(row.id), True)
        # the row's self-file slot in this folder (a despawn from another box cannot reach it)
        with contextlib.suppress(OSError):
            await asyncio.to_thread(os.unlink, self.layout.self_file(self.host, row.id))
        log.info("row %s (%s) destroyed; pruned %s", row.id, row.label, pruned or "nothing")
        if self.publish is not None:
            self.publish(payloads.WORKSPACE_CHANGED, {"action": "destroyed", "workspace_id": row.id})
        return answers.ok_with(
            {"workspace_id": row.id, "slug": row.slug, "label": row.label, "pruned": pruned}
        )

    async def activate(self, payload: dict[str, Any]) -> dict[str, Any]:
        row = self._row_for(payload)
        if isinstance(row, dict):
            return row
        if not payloads.read_activate_read(payload):
            return OK
        handle = row.handle or row.agent_name
        if not handle or not os.path.exists(self.layout.registry):
            return OK
        try:
            await asyncio.to_thread(
                regturn.update,
                self.layout,
                self.host,
                activate_change(handle, self.host),
                bound=ACTIVATE_BOUND,
            )
        except (SotdError, OSError) as e:
            log.info("workspace.activate for row %s: nothing written: %s", row.id, e)
        return OK

    def attach_command(self) -> str:
        return self.tmux.attach_command()
