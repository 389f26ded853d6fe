"""The daemon's OCX node: when an OCX configuration exists, one thread runs the node's poll loop with the
``run`` and ``stop`` readers of layer 3 (``sotd.ocxrun``).

``start(environ)`` returns ``None`` when there is no configuration file (``sotd.ocx.config.config_path``)
and logs why when there is one that cannot be used; the daemon serves on either way. The thread first
looks again at runs a previous daemon left unfinished (adopted, or ended ``lost``), then syncs every
``interval`` seconds. ``stop(svc)`` asks the loop to end and waits for it (bounded); runs in progress are
left as they are, to be adopted or ended ``lost`` by the next start.

Sessions (O11): given the daemon's ``DaemonRows`` and its event loop, ``RowSessions`` is the node's
``SessionHost``: a session is one row (agent ``claude``, so the wake reads its screen) whose handle
``ocx-<RUN-HASH[:16]>`` is registered in the comm registry and declared on the row; deliveries are filed
with the comm folder's normal filing (``ops.file_locally``: the registry checks, then ``inbox.append``), so
the wake wakes the row; closing a session is ``workspace.destroy`` (window killed, registry pruned).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import Any

from sotd import _clock
from sotd.errors import SessionRowFailed, SotdError
from sotd.wire import answers

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Coroutine, Mapping

    from sotd.daemon.rows import DaemonRows
    from sotd.ocx.node import NodeClones
    from sotd.ocxrun import Runs

log = logging.getLogger("sotd")

STOP_WAIT_S = 15.0
ROW_OP_S = 30.0
REGISTRY_BOUND_S = 5.0


class RowSessions:
    """The ``sotd.ocxrun.SessionHost`` of a daemon: sessions as rows (see the module docstring)."""

    def __init__(self, rows: DaemonRows, loop: asyncio.AbstractEventLoop) -> None:
        self.rows = rows
        self.loop = loop
        self.handles: dict[str, str] = {}  # row id -> handle

    def _on_loop(self, coro: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(ROW_OP_S)

    def _register(self, handle: str, root: str, label: str, row_id: str) -> None:
        from sotd.daemon import regturn
        from sotd.formats import registry

        now = _clock.stamp()
        entry = {"host": self.rows.host, "workspace_id": row_id, "repo": label, "root": root,
                 "expertise": ["ocx session"], "status": "idle", "joined": now, "last_seen": now}  # fmt: skip

        def change(doc: dict[str, object]) -> tuple[bool, None]:
            registry.put(doc, handle, dict(entry))
            return True, None

        registry.ensure(self.rows.layout)
        regturn.update(self.rows.layout, self.rows.host, change, bound=REGISTRY_BOUND_S)

    def open(
        self, *, run_hash: str, label: str, root: str, argv: list[str], handle: str, before: list[str]
    ) -> str:
        payload = {
            "project_root": root,
            "agent": "claude",
            "agent_name": handle,
            "label": label,
            "command": argv,
        }
        ans = self._on_loop(self.rows.create(payload, before=before))
        if not answers.is_ok(ans):
            raise SessionRowFailed(str(ans.get("message") or ans.get("error") or ans))
        row_id = str(ans["workspace_id"])
        try:
            self._register(handle, root, label, row_id)

            async def declare() -> dict[str, Any]:
                return self.rows.declare(row_id, handle)

            got = self._on_loop(declare())
            if not answers.is_ok(got):
                raise SessionRowFailed(str(got.get("message") or got))
            lay = self.rows.layout
            os.close(os.open(lay.inbox(handle), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600))
        except (SotdError, OSError) as e:
            self.close(row_id)
            raise SessionRowFailed(getattr(e, "message", None) or str(e)) from None
        self.handles[row_id] = handle
        log.info("ocx: session of run %s: row %s holds @%s", run_hash[:12], row_id, handle)
        return row_id

    def phase(self, session_id: str) -> str:
        from sotd.daemon.rows import READY, STARTING

        row = self.rows.rows.get(session_id)
        if row is None or row.phase not in (READY, STARTING):
            return "ended"
        return "ready" if row.phase == READY and row.handle else "starting"

    def deliver(self, handle: str, sender: str, text: str) -> str | None:
        from sotd.daemon import ops
        from sotd.formats import lockmanager

        lay = self.rows.layout
        ans = ops.file_locally(
            lay,
            self.rows.environ,
            lock_manager=lockmanager.lock_manager_of(lay.inbox_dir),
            frm=sender,
            to=handle,
            text=text,
        )
        return None if answers.is_ok(ans) else str(ans.get("message") or ans)

    def close(self, session_id: str) -> None:
        if session_id not in self.rows.rows:
            return
        self._on_loop(self.rows.destroy({"workspace_id": session_id}))
        self.handles.pop(session_id, None)


class OcxService:
    """The daemon's OCX service: the node's clones (``NodeClones``), its readers (``Runs``), and the
    thread that runs them."""

    def __init__(self, node: NodeClones, runs: Runs) -> None:
        self.node = node
        self.runs = runs
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._main, name="ocx-node", daemon=True)

    def _main(self) -> None:
        try:
            again = self.runs.recover()
            if again:
                log.info("ocx: %d unfinished run(s) looked at again", len(again))
            self.node.poll_loop(self.stopping)
        except Exception:  # the daemon goes on without OCX; the log says why
            log.exception("ocx: the node's poll loop failed")

    def close(self, timeout: float = STOP_WAIT_S) -> None:
        self.stopping.set()
        self.thread.join(timeout)
        if self.thread.is_alive():
            log.warning("ocx: the node's poll loop did not stop within %gs", timeout)
            return
        self.node.close()


def start(
    environ: Mapping[str, str], rows: DaemonRows | None = None, loop: asyncio.AbstractEventLoop | None = None
) -> OcxService | None:
    """The running node when ``environ`` names an OCX configuration that exists, else ``None``. With
    ``rows`` and the daemon's ``loop``, the node runs sessions in those rows."""
    from sotd.ocx.config import config_path, load_config

    path = config_path(environ)
    if not os.path.exists(path):
        return None
    try:
        from sotd.ocx.node import NodeClones
        from sotd.ocxrun import Runs, load_settings

        config = load_config(environ)
        settings = load_settings(config, environ)
        node = NodeClones(config)
        host = RowSessions(rows, loop) if rows is not None and loop is not None else None
        svc = OcxService(node, Runs(node, settings, sessions=host).attach())
    except (SotdError, OSError) as e:
        log.error("ocx: not serving the clones of %s: %s", path, getattr(e, "message", e))
        return None
    svc.thread.start()
    log.info(
        "ocx: serving %d clone(s) of %s; node policy %s",
        len(config.clones),
        path,
        settings.path or "none (this node runs nothing)",
    )
    return svc


def stop(svc: OcxService | None) -> None:
    """Stop the node started by ``start`` (nothing when it returned ``None``)."""
    if svc is not None:
        svc.close()
