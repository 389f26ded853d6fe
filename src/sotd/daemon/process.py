"""The daemon's process: what ``sotd daemon run`` serves until SIGTERM/SIGINT (``run_foreground``).

The command that manages it (``start|stop|status|reload|install``) is ``sotd.daemon.command``, a thin
client that imports this module only for ``run``; ``start`` runs ``sotd daemon run`` in a new session.

At start the daemon reads ``hosts.toml`` (``sotd.topology``), decides hub or guest (2.4), and as hub writes
the inbox-lock-manager record (6.4). A box whose topology names another hub holds a link to it. Each
minute it compares its package files with what it loaded and, when they changed, logs and reports (in
``version.query`` and ``status``) that it asks to be restarted. Shutdown closes the listener, cancels its
tasks, closes its link's ssh master, and removes the socket and the status file.

One daemon per box per comm folder (``onedaemon``): a second one for the same host and folder refuses to
start, naming the first. ``hosts.toml`` is read again on SIGHUP, on ``sotd daemon reload`` (the
``daemon.reload`` op, which answers what changed) and when the file's stat changes (checked every tick);
a reload keeps a link whose endpoint did not change, redials one whose did, and logs what changed
(``topology.describe_changes``). A file that cannot be read is never applied and never ends the daemon:
it keeps serving its folder with the topology it read last (or none), logs the reason once, and says it
in ``version.query`` (``topology_error``, shown by ``sotd daemon status``); ``daemon.reload`` answers it
as a ``topology_unreadable`` refusal (issue 25). On the hub, a link that keeps alive and goes silent for
``LINK_SILENT_S`` is closed (``Server.drop_silent_links``), so an offer names its state at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from typing import Any

from sotd import __version__, runtime, sysprobe, topology
from sotd.daemon import filers, loopreads, onedaemon, statusfile
from sotd.daemon import heartbeat as heartbeat_mod
from sotd.daemon import hub as hub_mod
from sotd.daemon import ocxnode as ocxnode_mod
from sotd.daemon import ops as ops_mod
from sotd.daemon import rows as rows_mod
from sotd.daemon import wake as wake_mod
from sotd.daemon.links import Uplink
from sotd.daemon.server import Server
from sotd.errors import EXIT_FAILED, EXIT_OK, DaemonWithoutHost, SotdError, WireError
from sotd.formats import lockmanager
from sotd.formats.layout import Layout, ensure_home
from sotd.wire import answers, payloads

log = logging.getLogger("sotd")

CODE_CHECK_S = 60.0
TICK_S = 2.0
TOPOLOGY_CHECK_S = 2.0
FLEET_BOUND_S = 2.0  # agents.list with fleet: each linked box's answer (issue 30)
LINK_SILENT_S = 10.0  # a link that pings every 3 s and sends nothing this long is closed by the hub


# ------------------------------------------------------------------------------------- code changes


def code_fingerprint(root: str) -> dict[str, tuple[int, int]]:
    """``{relative path: (mtime_ns, size)}`` of the package's ``.py`` files (blocking)."""
    out: dict[str, tuple[int, int]] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if name.endswith(".py"):
                p = os.path.join(folder, name)
                with contextlib.suppress(OSError):
                    st = os.stat(p)
                    out[os.path.relpath(p, root)] = (st.st_mtime_ns, st.st_size)
    return out


def changed_files(old: dict[str, tuple[int, int]], new: dict[str, tuple[int, int]]) -> list[str]:
    """Files added, removed or changed between two fingerprints, sorted. Pure."""
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


def restart_text(changed: list[str]) -> str:
    shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
    return f"its installed code changed since it started ({shown}): restart it (sotd daemon stop; sotd daemon start)"


# ------------------------------------------------------------------------------------------ daemon


class Daemon:
    def __init__(self, socket_path: str, environ: dict[str, str]) -> None:
        self.socket_path = socket_path
        self.environ = environ
        self.layout = Layout.from_env(environ)
        self.host = runtime.self_host(environ)
        self.status_path = runtime.status_path(socket_path)
        self.shutting_down = asyncio.Event()
        self.restart = ""
        self.is_hub = True
        self.server: Server | None = None
        self.started = time.monotonic()
        self.started_wall = time.time()
        self.lock_manager = ""
        self.uplink: Uplink | None = None
        self.link_task: asyncio.Task[None] | None = None
        self.tg: asyncio.TaskGroup | None = None
        self.topo_sig: tuple[int, int, int] | None = None
        self.folder_lock: int | None = None

    def version_info(self) -> dict[str, Any]:
        fe = self.server.frontends() if self.server is not None else []
        return ops_mod.version_payload(
            self.host,
            self.restart,
            self.is_hub,
            up_s=int(time.monotonic() - self.started),
            frontends=fe,
            send_command=rows_mod.send_command(self.layout),
            link=self.uplink.state() if self.uplink is not None else None,
            links=list(self.server.links) if self.server is not None else [],
            topology_hub=self.hub.topology.hub if self.hub.topology is not None else "",
            topology_error=(
                f"{self.hub.topology_error}; {kept_text(self.hub.topology)}"
                if self.hub.topology_error
                else ""
            ),
            comm_folder=os.path.realpath(self.layout.home),
        )

    async def serve(self) -> None:
        if not self.host:
            raise DaemonWithoutHost(
                "sotd daemon: this box's declared host could not be read (set SOT_SELF_HOST)"
            )
        # the socket's folder, before anything is written in it or beside the socket (issue 25)
        await asyncio.to_thread(runtime.prepare_socket_folder, self.socket_path, self.environ)
        self.folder_lock = await asyncio.to_thread(onedaemon.claim, self.layout, self.host, self.socket_path)
        self.topo_sig = await asyncio.to_thread(topology.signature, self.environ)
        topo, topo_error = _load_topology(self.environ)
        if topo_error:
            log.error("%s", topo_error)
        self.lock_manager = manager = await asyncio.to_thread(
            lockmanager.lock_manager_of, self.layout.inbox_dir
        )
        self.is_hub = hub_mod.is_hub(topo, bool(topo_error), self.host, manager)
        if self.is_hub and not os.path.isdir(self.layout.home):
            made: str | None = await asyncio.to_thread(self._make_folder)
            manager = made or manager
        log.info(
            "sotd %s on %s (pid %d): comm folder %s, lock identity %s, %s",
            __version__,
            self.host,
            os.getpid(),
            self.layout.home,
            manager,
            "hub" if self.is_hub else "guest",
        )
        if os.path.isdir(self.layout.home):
            try:
                decision = await asyncio.to_thread(hub_mod.record_at_start, self.layout, self.is_hub, manager)
                log.info("inbox lock record %s: %s", self.layout.lock_manager, decision)
                if decision == lockmanager.FOREIGN:
                    log.error("the inbox lock record names another lock manager: filings will be refused")
            except SotdError as e:
                log.error("%s", e.message)
        else:
            log.warning(
                "no comm folder at %s: every filing answers not_here until it is made, and a hub then "
                "refuses filings until it is restarted (it writes its inbox lock record at its start)",
                self.layout.home,
            )

        uplink_ep = topology.relay_endpoint(topo, self.host) if topo is not None else None
        self.rows = rows = rows_mod.DaemonRows(
            state=rows_mod.state_dir(self.environ, self.socket_path),
            layout=self.layout,
            host=self.host,
            socket_path=self.socket_path,
            environ=self.environ,
            publish=self._publish,
        )
        await asyncio.to_thread(rows.boot)
        filing_threads = filers.Filers()
        ops = ops_mod.Ops(
            layout=self.layout,
            environ=self.environ,
            self_host=self.host,
            is_hub=self.is_hub,
            forward=self._forward,
            offer=self._offer,
            version_info=self.version_info,
            rows=rows,
            workspaces=rows.workspace_op,
            reload=self._reload_op,
            blocking=filing_threads.run,
            fleet=self._fleet,
            loop_reads=loopreads.LoopReads(),
        )
        self.ops = ops
        self.server = server = Server(self.socket_path, self.host, ops.handle, ops.answered)
        server.started_wall = self.started_wall  # "down since" for a box not linked since the start
        self.uplink = uplink = (
            Uplink(uplink_ep, self.host, self.environ, ops.handle, self.shutting_down, answered=ops.answered)
            if uplink_ep
            else None
        )
        self.hub = hub_mod.Hub(
            environ=self.environ,
            self_host=self.host,
            hub=self.is_hub,
            topology=topo,
            topology_error=topo_error,
            server=server,
            uplink=uplink,
            shutting_down=self.shutting_down,
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        loop.add_signal_handler(signal.SIGHUP, self._on_hup)
        await server.start()
        ocx_node = None
        try:
            await asyncio.to_thread(statusfile.write, self.status_path, self._status_doc())
            ocx_node = ocxnode_mod.start(self.environ, rows, loop)  # OCX runs, stops, sessions (ocx.toml)
            async with asyncio.TaskGroup() as tg:
                self.tg = tg
                watcher = tg.create_task(self._watch_code())
                topo_watch = tg.create_task(self._watch_topology())
                link_watch = tg.create_task(self._watch_links(server))
                self.link_task = tg.create_task(uplink.run()) if uplink is not None else None
                rows_task = tg.create_task(self._run_rows(rows))
                await self.shutting_down.wait()
                log.info("shutting down")
                for t in (watcher, topo_watch, link_watch, rows_task):
                    t.cancel()
                if self.link_task is not None:
                    self.link_task.cancel()
                await server.close()
        finally:
            await server.close()
            await filing_threads.close()  # the filings already running end (appended and synced)
            await asyncio.to_thread(ocxnode_mod.stop, ocx_node)
            statusfile.remove(self.status_path, os.getpid())
            if self.folder_lock is not None:
                os.close(self.folder_lock)
            log.info("stopped")

    def _make_folder(self) -> str | None:
        """A hub that finds no comm folder makes it, with the modes every command makes it with
        (``layout.ensure_home``, then the registry skeleton), so it can write its record (issue 13); the
        lock identity is computed again for the folder that now exists. None when it cannot be made (it
        is logged; filings then answer not_here until a command makes it, and are refused after that
        until this daemon is restarted: behaviour 6.4, the record is written at a hub's start only)."""
        from sotd.formats import registry

        try:
            for warning in ensure_home(self.layout):
                log.warning("%s", warning)
            registry.ensure(self.layout)
        except SotdError as e:
            log.error("no comm folder at %s, and it could not be made: %s", self.layout.home, e.message)
            return None
        log.info("made the comm folder %s (it was not there)", self.layout.home)
        return lockmanager.lock_manager_of(self.layout.inbox_dir)

    def _publish(self, op: str, payload: dict[str, Any]) -> None:
        if self.server is not None:
            self.server.publish(op, payload)

    async def _run_rows(self, rows: rows_mod.DaemonRows) -> None:
        """The 2 s tick of the rows: phases, the heartbeat (2.5) and the wake (3.1-3.3)."""
        tick = _float_env(self.environ, "SOTD_TEST_TICK_SECS", TICK_S)
        beat = heartbeat_mod.Heartbeat(
            self.layout,
            self.host,
            period=_float_env(self.environ, "SOTD_TEST_HEARTBEAT_SECS", heartbeat_mod.HEARTBEAT_SECS),
        )
        waker = wake_mod.Waker(rows, self.layout)
        waker.use_inotify = self.environ.get("SOTD_WAKE_INOTIFY", "on") != "off"
        waker.streak_silent = _float_env(self.environ, "SOTD_TEST_STREAK_SECS", waker.streak_silent)

        async def one_tick() -> None:
            try:
                rows.apply(await asyncio.to_thread(rows.refresh_plan))
            except Exception:
                log.exception("rows: the phase refresh failed")
            views = await asyncio.to_thread(rows.views)
            try:
                await asyncio.to_thread(beat.tick, views)
            except Exception:
                log.exception("heartbeat: the pass failed")
            waker.tick(views)

        try:
            while True:
                await one_tick()
                await asyncio.sleep(tick)
        finally:
            waker.close()

    async def _forward(self, payload: dict[str, Any]) -> dict[str, Any]:
        return await self.hub.forward(payload)

    async def _fleet(self) -> list[dict[str, Any]]:
        """``agents.list`` with fleet (issue 30): each linked box's own list (the hub), or the hub's fleet
        list (a guest), each within ``FLEET_BOUND_S``; a box that does not answer says so."""

        async def ask(box: str, call: Any, fleet: bool) -> list[dict[str, Any]]:
            try:
                got = await call(
                    payloads.AGENTS_LIST, payloads.agents_list_payload(fleet=fleet), FLEET_BOUND_S
                )
            except (TimeoutError, ConnectionError, WireError) as e:
                return ops_mod.far_box(box, None, str(e) or f"none within {FLEET_BOUND_S:.0f} s")
            return ops_mod.far_box(box, got, own=not fleet)

        asks = []
        if self.server is not None:
            asks += [ask(box, conn.channel.call, False) for box, conn in self.server.links.items()]
        if self.uplink is not None and self.uplink.channel is not None:
            hub = self.hub.topology.hub if self.hub.topology is not None else "the hub"
            asks.append(ask(hub, self.uplink.call, True))
        out: list[dict[str, Any]] = []
        for boxes in await asyncio.gather(*asks):
            out += boxes
        return out

    async def _offer(self, payload: dict[str, Any], origin: str) -> dict[str, Any] | None:
        return await self.hub.offer(payload, origin)

    def _on_signal(self, sig: int) -> None:
        log.info("signal %d", sig)
        self.shutting_down.set()

    def _on_hup(self) -> None:
        log.info("SIGHUP: reading hosts.toml again")
        if self.tg is not None and not self.shutting_down.is_set():
            self.tg.create_task(self._reload_logged("SIGHUP"))

    async def _reload_op(self) -> dict[str, Any]:
        try:
            changes = await self.reload_topology("sotd daemon reload")
        except topology.TopologyError as e:
            return answers.refusal(e.code, f"{e.message}; {kept_text(self.hub.topology)}")
        return answers.ok_with({"path": topology.path(self.environ), "changes": changes})

    async def _reload_logged(self, why: str) -> None:
        """``reload_topology`` for the watch and SIGHUP: an unreadable file was logged by it; a failure of
        ours is logged here, and the daemon keeps serving either way."""
        try:
            await self.reload_topology(why)
        except topology.TopologyError:
            pass
        except Exception:
            log.exception("hosts.toml: applying it again (%s) failed", why)

    async def _watch_topology(self) -> None:
        every = _float_env(self.environ, "SOTD_TEST_TOPOLOGY_CHECK_SECS", TOPOLOGY_CHECK_S)
        while True:
            await asyncio.sleep(every)
            sig = await asyncio.to_thread(topology.signature, self.environ)
            if sig != self.topo_sig:
                await self._reload_logged("the file changed")

    async def _watch_links(self, server: Server) -> None:
        while True:
            await asyncio.sleep(1.0)
            server.drop_silent_links(time.monotonic(), LINK_SILENT_S)

    async def reload_topology(self, why: str) -> list[str]:
        """Read ``hosts.toml`` again and apply it: the hub's view of the boxes, this box's role, and its
        link (kept when its endpoint is the same, redialled when it changed, ended when there is none).
        What changed is logged and returned. A file that cannot be read changes nothing: ``TopologyError``
        (its reason logged once, and kept for ``version.query``)."""
        self.topo_sig = await asyncio.to_thread(topology.signature, self.environ)
        old, old_error = self.hub.topology, self.hub.topology_error
        try:
            topo = await asyncio.to_thread(topology.load, self.environ)
        except topology.TopologyError as e:
            # a file that cannot be read is never applied: this daemon keeps serving its folder with the
            # topology it read last (or none), and says why once (issue 25)
            if e.message != old_error:
                self.hub.topology_error = e.message
                log.error("hosts.toml changed (%s): %s; %s", why, e.message, kept_text(old))
            else:
                log.info("hosts.toml read again (%s): it still cannot be read; %s", why, kept_text(old))
            raise
        topo_error = ""
        changes = topology.describe_changes(old, topo)
        if old_error:
            changes.append("hosts.toml can be read again")
        if self.uplink is not None:
            self.uplink.dial_now.set()  # a fixed key or host key is dialled now, not after the wait
        if not changes:
            log.info("hosts.toml read again (%s): no change", why)
            return []
        log.info("hosts.toml changed (%s): %s", why, "; ".join(changes))
        self.hub.topology, self.hub.topology_error = topo, topo_error
        is_hub = hub_mod.is_hub(topo, bool(topo_error), self.host, self.lock_manager)
        if is_hub != self.is_hub:
            changes.append(f"this box is now {'the hub' if is_hub else 'a guest'}")
            log.info("this box is now %s", "the hub" if is_hub else "a guest")
            self.is_hub = self.hub.hub = self.ops.is_hub = is_hub
            if os.path.isdir(self.layout.home):
                try:
                    decision = await asyncio.to_thread(
                        hub_mod.record_at_start, self.layout, is_hub, self.lock_manager
                    )
                    log.info("inbox lock record %s: %s", self.layout.lock_manager, decision)
                except SotdError as e:
                    log.error("%s", e.message)
            await asyncio.to_thread(statusfile.write, self.status_path, self._status_doc())
        endpoint = topology.relay_endpoint(topo, self.host) if topo is not None else None
        current = self.uplink.endpoint if self.uplink is not None else None
        if endpoint != current:
            if self.link_task is not None:
                self.link_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self.link_task
                self.link_task = None
            self.uplink = self.hub.uplink = None
            if endpoint is not None and self.tg is not None:
                self.uplink = Uplink(endpoint, self.host, self.environ, self.ops.handle, self.shutting_down)
                self.hub.uplink = self.uplink
                self.link_task = self.tg.create_task(self.uplink.run())
            change = f"the link to the hub: {current or 'none'} -> {endpoint or 'none'}"
            changes.append(change)
            log.info("%s", change)
        return changes

    def _status_doc(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "start_tick": sysprobe.start_tick(os.getpid()),
            "socket": self.socket_path,
            "version": __version__,
            "host": self.host,
            "hub": self.is_hub,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started_wall)),
        }

    async def _watch_code(self) -> None:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        first = await asyncio.to_thread(code_fingerprint, root)
        every = _float_env(self.environ, "SOTD_TEST_CODE_CHECK_SECS", CODE_CHECK_S)
        while True:
            await asyncio.sleep(every)
            now = await asyncio.to_thread(code_fingerprint, root)
            changed = changed_files(first, now)
            if changed and not self.restart:
                self.restart = restart_text(changed)
                log.warning("this daemon asks to be restarted: %s", self.restart)


def kept_text(kept: topology.Topology | None) -> str:
    """What a daemon whose ``hosts.toml`` cannot be read goes on with (its last good topology). Pure."""
    if kept is None:
        return "this daemon keeps serving its folder with no topology until the file can be read"
    return f"this daemon keeps serving its folder with the topology it read last (hub {kept.hub})"


def _load_topology(environ: dict[str, str]) -> tuple[topology.Topology | None, str]:
    """The topology and, when the file cannot be read, the sentence that says so."""
    try:
        return topology.load(environ), ""
    except topology.TopologyError as e:
        return None, e.message


def _float_env(environ: dict[str, str], name: str, default: float) -> float:
    try:
        v = float(environ.get(name, ""))
    except ValueError:
        return default
    return v if v > 0 else default


# ------------------------------------------------------------------------------------- foreground


def run_foreground(sock: str, environ: dict[str, str]) -> int:
    """``sotd daemon run``: serve on ``sock`` in this process until SIGTERM/SIGINT; log on stderr."""
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s sotd[%(process)d] %(levelname)s %(message)s",
    )
    os.umask(0o077)
    try:
        asyncio.run(Daemon(sock, environ).serve())
    except SotdError as e:
        log.error("%s%s", e.message, f" ({e.hint})" if e.hint else "")
        sys.stderr.flush()
        return EXIT_FAILED
    return EXIT_OK
