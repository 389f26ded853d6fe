"""The daemon's Unix socket: the I/O shell around the wire's connection machine, and link connections.

Spec: behaviour 2.1 (framing, hello first, a refused hello is the answer), 2.2 (user isolation: a socket in
a private folder, only this account's processes), 2.3 (``unknown op``), 2.4 (link-role connections).
Guarantee: one connection's bad bytes (not JSON, not UTF-8, a line past 1 MiB) close that connection only,
with its reason logged once (a link's state then says it sent bad input); every other connection keeps
being served. A peer that resets at any point is the INFO line ``closed by the peer``, never a traceback.
A connection from another uid gets a refused hello and is closed before any op runs. An event is written without waiting: a peer that does not
read its events is dropped, never waited on.
What would break it: a read loop that shares one ``ServerConnection`` between connections, a decision
about the protocol made here instead of in ``sotd.wire.serverconn``'s table, or an ``await`` on a slow
peer's drain inside the event fan-out.

The protocol is ``sotd.wire.serverconn.ServerConnection``: this module reads bytes, feeds them to it, and
performs the actions it returns in order (write an answer, record the peer, run a request and write
``answer(env, payload)``, resolve a response, close, end). What needs a clock or a socket stays here: the
peer's uid (``SO_PEERCRED``), the timers below, the connection cap, the link table and the event fan-out.

Bounds on what one same-user client can hold (docs/daemon.md, "Connection bounds"): ``HELLO_WAIT_S`` of
silence before hello, ``IDLE_WAIT_S`` of silence after it for a one-shot role with no request in flight,
and at most ``MAX_CONNECTIONS`` connections at once (fewer when the open-file limit, raised at the start to
its hard limit as far as needed, allows fewer: ``connection_cap``) (test seams ``SOTD_TEST_IDLE_SECS``,
``SOTD_TEST_MAX_CONNECTIONS``).

Requests run as tasks owned by their connection's TaskGroup, so a slow ``comm.file`` never holds up the
responses that arrive on the same connection (the hub's offers travel down a link as requests while the
guest's own forwards travel up it). End of input is not the end of the conversation: a one-shot client
(or the stdio bridge) half-closes after its request and still reads the answer, so the connection closes
only after its in-flight requests have answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
import struct
import time
from typing import TYPE_CHECKING, Any, Protocol

from sotd import __version__, runtime
from sotd.errors import AlreadyServed, SocketPathTaken, WireError
from sotd.wire import answers, hello, payloads, serverconn
from sotd.wire.framing import Envelope, PreparedRequest, encode
from sotd.wire.hello import (
    Peer,
    hello_verdict,  # noqa: F401 -- the hello's rule is the wire's; named here too
)
from sotd.wire.serverconn import Accepted, Answer, Close, End, Resolve, ServerConnection, ServeRequest

if TYPE_CHECKING:
    from collections.abc import Callable

    from sotd.wire.serverconn import Action

log = logging.getLogger("sotd")

HELLO_WAIT_S = 10.0  # a connection that says nothing this long after connecting is closed
IDLE_WAIT_S = 60.0  # a one-shot client (role cli/agent) silent this long after hello, nothing in flight
ONE_SHOT_ROLES = hello.ONE_SHOT_ROLES  # fe, bridge and link connections wait for events by design
MAX_CONNECTIONS = 4096  # connections served at once at most; one more is closed at accept, with a log line
FD_RESERVE = 256  # descriptors kept for everything but connections (log, rows' pipes and tmux, filings, ssh)
MIN_CONNECTIONS = 16  # what a daemon serves however few descriptors it may open
WRITE_WAIT_S = 5.0  # one response's drain
EVENT_BACKLOG_MAX = 1 << 20  # unsent bytes a peer may owe before an event drops it
_READ = 65536


def nofile_target(soft: int, hard: int) -> int:
    """The soft ``RLIMIT_NOFILE`` the daemon asks for at its start: enough for ``MAX_CONNECTIONS`` and the
    reserve, never past the hard limit (an unprivileged process may raise its soft limit up to it), never
    below what it has. Pure (``RLIM_INFINITY`` is -1 on Linux: no bound)."""
    want = MAX_CONNECTIONS + FD_RESERVE
    if hard >= 0:
        want = min(want, hard)
    return max(soft, want) if soft >= 0 else soft


def connection_cap(soft: int) -> int:
    """Connections served at once with ``soft`` descriptors: ``MAX_CONNECTIONS``, or fewer when the
    descriptors run out first (each connection holds one; ``FD_RESERVE`` stay for the rest), at least
    ``MIN_CONNECTIONS``. Pure."""
    if soft < 0:
        return MAX_CONNECTIONS
    return max(MIN_CONNECTIONS, min(MAX_CONNECTIONS, soft - FD_RESERVE))


def raise_nofile() -> int:
    """Raise this process's soft descriptor limit as ``nofile_target`` says (the ``ulimit -n`` a shell
    left is often 1,024 under a hard limit far above it); the connection cap that follows. Logged."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = nofile_target(soft, hard)
    if target != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as e:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, target, e)
    cap = connection_cap(soft)
    log.info("open-file limit %d (hard %s): at most %d connections at once", soft, hard, cap)
    return cap


class _Idle(Exception):
    """A one-shot connection said nothing for ``IDLE_WAIT_S`` after hello (internal)."""


def _env_number(name: str, default: float) -> float:
    """A positive number from the environment (a test seam), else ``default``."""
    try:
        v = float(os.environ.get(name, ""))
    except ValueError:
        return default
    return v if v > 0 else default


def _flushed(writer: Any) -> bool:
    """Whether every byte written to ``writer`` is in the kernel already, so a drain has nothing to wait for
    (False when it cannot tell: then the caller drains)."""
    transport = getattr(writer, "transport", None)
    closing = getattr(transport, "is_closing", None)
    if transport is None or closing is None:
        return False
    return bool(transport.get_write_buffer_size() == 0 and not closing())


def peer_uid(sock: socket.socket | None) -> int | None:
    """The uid of the process at the other end (``SO_PEERCRED``), None when the OS cannot say."""
    if sock is None or not hasattr(socket, "SO_PEERCRED"):
        return None
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


class Channel:
    """One newline-JSON stream we write to: lines out, and responses matched to the requests we sent."""

    def __init__(self, writer: asyncio.StreamWriter, label: str) -> None:
        self.writer = writer
        self.label = label
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.late: dict[int, dict[str, Any]] = {}  # responses to waits just cancelled (``resolve``)
        self._next_id = 1
        self.closed: str | None = None

    async def send(self, env: Envelope) -> None:
        await self.send_line(encode(env))

    async def send_line(self, data: bytes) -> None:
        """Write one encoded line and wait (bounded) for it to drain."""
        if self.closed is not None:
            raise ConnectionError(self.closed)
        self.writer.write(data)
        if _flushed(self.writer):
            return  # all of it is in the kernel's buffer already: nothing to drain (no timer per line)
        async with asyncio.timeout(WRITE_WAIT_S):
            await self.writer.drain()

    def send_nowait(self, env: Envelope) -> bool:
        """Write without waiting; False (and nothing written) when the peer already owes too much."""
        if self.closed is not None or self.writer.is_closing():
            return False
        transport = self.writer.transport
        if transport.get_write_buffer_size() > EVENT_BACKLOG_MAX:
            return False
        self.writer.write(encode(env))
        return True

    async def call(self, op: str, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send a request and wait (bounded) for its response's payload."""
        return await self.call_line(lambda rid: encode(Envelope(rid, "req", op, payload)), timeout)

    async def call_prepared(self, request: PreparedRequest, timeout: float) -> dict[str, Any]:
        """``call`` for a request encoded once (``framing.PreparedRequest``: one offer down many links)."""
        return await self.call_line(request.line, timeout)

    async def call_line(self, line: Callable[[int], bytes], timeout: float) -> dict[str, Any]:
        """Send ``line(id)`` and wait (bounded) for the response to that id.

        A response read in the same turn of the loop as the bound's end is the response, not a timeout:
        after a stall (a loaded or frozen box) the answer and the timer are ready at once, and the timer's
        cancel may land first. A filing box answered ``ok`` before its deadline then; dropping that answer
        told a sender FAILED for a filed line (the NFS tier's tight-deadline point, seq 6 of 100).
        """
        rid = self._next_id
        self._next_id += 1
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[rid] = fut
        try:
            async with asyncio.timeout(timeout):
                await self.send_line(line(rid))
                return await fut
        except TimeoutError:
            if fut.done() and not fut.cancelled():
                return fut.result()  # resolved before the timer's cancel reached this task
            late = self.late.pop(rid, None)
            if late is not None:
                return late  # read after the timer cancelled the wait, in that same turn
            raise
        finally:
            self.pending.pop(rid, None)
            self.late.pop(rid, None)

    def resolve(self, env: Envelope) -> bool:
        """Hand a response to the request that waits for it; False when none does (late or unknown).

        A response to a wait that its bound has just cancelled (its task has not run since) is kept in
        ``late`` for that task to take (``call_line``)."""
        fut = self.pending.get(env.id)
        if fut is None:
            return False
        if fut.cancelled():
            self.late[env.id] = env.payload
            return True
        if fut.done():
            return False
        fut.set_result(env.payload)
        return True

    def fail_all(self, why: str) -> None:
        self.closed = why
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError(why))


class Conn:
    """One accepted connection."""

    _seq = 0

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, wire: ServerConnection
    ) -> None:
        Conn._seq += 1
        self.n = Conn._seq
        self.reader = reader
        self.writer = writer
        self.wire = wire  # the protocol: bytes read go in, what to do comes out
        self.channel = Channel(writer, f"connection {self.n}")
        self.role = ""
        self.host = ""
        self.name = ""
        self.client_id = ""
        self.inflight = 0  # requests running for this connection
        self.last_rx = 0.0  # monotonic time of the last bytes read (the link watchdog's clock)
        self.pings = 0  # keepalives seen on a link connection (a link that never pings is never timed)
        self.gone_why = ""  # why this connection ended, when the server knows better than "it ended"

    def __repr__(self) -> str:
        who = f"{self.role} {self.client_id or '?'}@{self.host or '?'}" if self.role else "before hello"
        return f"connection {self.n} ({who})"


class OpHandler(Protocol):
    async def __call__(self, op: str, payload: dict[str, Any], origin: str) -> dict[str, Any]: ...


def prepare_folder(path: str) -> None:
    """Make the socket's folder (0700, ours; ``runtime.prepare_socket_folder``) or refuse (``SotdError``);
    remove a stale socket file."""
    runtime.prepare_socket_folder(path, os.environ)  # every level: ours or root's, private (issue 25)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise SocketPathTaken(f"refusing to serve {path}: something that is not a socket is there")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except OSError:
        os.unlink(path)  # nobody answers: a dead daemon's socket
        return
    finally:
        probe.close()
    raise AlreadyServed(f"a daemon already serves {path}")


class Server:
    """The listener, its connections, and the link-role connections by the peer's declared host."""

    def __init__(
        self,
        path: str,
        host: str,
        handler: OpHandler,
        answered: Callable[[str, dict[str, Any], dict[str, Any]], None] | None = None,
    ) -> None:
        self.path = path
        self.host = host
        self.handler = handler
        # told of each answer once it is in the kernel's buffer (``ops.Ops.answered``: a late ok is logged)
        self.answered = answered
        self.conns: set[Conn] = set()
        self.fes: set[Conn] = set()  # the front ends among them (``frontends``: no scan of every connection)
        self.links: dict[str, Conn] = {}
        # a box whose link ended: since when (wall clock) and why; cleared when it links again
        self.links_down: dict[str, tuple[float, str]] = {}
        self.started_wall = time.time()
        self._srv: asyncio.Server | None = None
        self.idle_wait = _env_number("SOTD_TEST_IDLE_SECS", IDLE_WAIT_S)
        self.max_connections = MAX_CONNECTIONS  # ``start`` lowers it to what the descriptors allow
        self.test_max = os.environ.get("SOTD_TEST_MAX_CONNECTIONS")

    async def start(self) -> None:
        self.max_connections = raise_nofile()
        if self.test_max:
            self.max_connections = int(_env_number("SOTD_TEST_MAX_CONNECTIONS", MAX_CONNECTIONS))
        await asyncio.to_thread(prepare_folder, self.path)
        old = os.umask(0o177)
        try:
            self._srv = await asyncio.start_unix_server(self._on_conn, path=self.path, limit=_READ)
        finally:
            os.umask(old)
        log.info("listening on %s", self.path)

    async def close(self) -> None:
        if self._srv is not None:
            self._srv.close()
        for conn in list(self.conns):
            conn.channel.fail_all("the daemon is shutting down")
            conn.writer.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)

    # ------------------------------------------------------------------------------------ connections

    async def _on_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        wire = ServerConnection(
            host=self.host,
            version=__version__,
            own_uid=os.geteuid(),
            peer_uid=peer_uid(writer.get_extra_info("socket")),
        )
        conn = Conn(reader, writer, wire)
        if len(self.conns) >= self.max_connections:
            log.warning("%s: closed at once: %d connections are served already", conn, len(self.conns))
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            return
        self.conns.add(conn)
        try:
            await self._serve(conn)
        except ConnectionError as e:  # a reset before hello
            log.info("%s: closed by the peer (%s)", conn, e or type(e).__name__)
        except TimeoutError as e:
            log.info("%s: closed (%s)", conn, e or type(e).__name__)
        except Exception:
            log.exception("%s: closed after an internal error", conn)
        finally:
            self.conns.discard(conn)
            self.fes.discard(conn)
            conn.channel.fail_all(f"{conn} closed")
            if conn.role == "link" and self.links.get(conn.host) is conn:
                del self.links[conn.host]
                why = conn.gone_why or "its connection ended"
                self.links_down[conn.host] = (time.time(), why)
                log.info("link from %s is gone: %s", conn.host, why)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _read(self, conn: Conn) -> list[Action]:
        """What the next bytes read mean (an ``End`` at the end of input)."""
        data = await conn.reader.read(_READ)
        conn.last_rx = time.monotonic()
        return conn.wire.receive_data(data)

    async def _serve(self, conn: Conn) -> None:
        """Feed the connection's bytes to its ``ServerConnection`` and perform what it answers."""
        actions: list[Action] = []
        async with asyncio.timeout(HELLO_WAIT_S):
            while conn.wire.state in (serverconn.AWAITING_HELLO, serverconn.FOREIGN):
                actions = await self._read(conn)
        origin = ""
        async with asyncio.TaskGroup() as tg:
            while True:
                for act in actions:
                    if isinstance(act, Answer):
                        if not await self._say(conn, act.data):
                            return
                    elif isinstance(act, Accepted):
                        origin = self._accepted(conn, act.peer)
                    elif isinstance(act, Resolve):
                        conn.channel.resolve(act.env)
                    elif isinstance(act, ServeRequest):
                        if conn.role == hello.LINK_ROLE and act.env.op == payloads.VERSION_QUERY:
                            conn.pings += 1
                        tg.create_task(self._request(conn, act.env, origin))
                    elif isinstance(act, Close):
                        log.log(
                            logging.WARNING if act.level == "warning" else logging.INFO,
                            "%s: %s",
                            conn,
                            act.log,
                        )
                        if conn.role == hello.LINK_ROLE:
                            conn.gone_why = f"it sent bad input: {act.error.message}"
                        if conn.wire.peer is not None:
                            # close at once: the peer hears nothing more; its in-flight requests end unanswered
                            conn.channel.fail_all(f"{conn} sent malformed input")
                            conn.writer.close()
                        return
                    elif isinstance(act, End):
                        return  # as at the end of a conversation: in-flight requests still answer
                try:
                    actions = await self._read_after_hello(conn)
                except _Idle:
                    log.info("%s: closed: nothing sent for %gs after hello", conn, self.idle_wait)
                    break
                except ConnectionError as e:
                    # the peer went away (a reset: it closed with answers unread); as at end of input, its
                    # in-flight requests run to their end and their answers are dropped
                    log.info("%s: closed by the peer (%s)", conn, e or type(e).__name__)
                    break

    async def _say(self, conn: Conn, data: bytes) -> bool:
        """Write an answer the wire made itself (the hello's); False, logged, when the peer has gone (a
        reset right after its hello is the peer closing, never an internal error: issue 25)."""
        try:
            await conn.channel.send_line(data)
        except ConnectionError as e:
            log.info("%s: closed by the peer (%s)", conn, e or type(e).__name__)
            return False
        except TimeoutError:
            log.info("%s: closed: it did not read its answer within %gs", conn, WRITE_WAIT_S)
            return False
        return True

    def _accepted(self, conn: Conn, peer: Peer) -> str:
        """Record who said hello (a link replaces an older link from its host); the requests' origin."""
        conn.role = peer.role
        conn.host = peer.host
        conn.name = peer.name
        conn.client_id = peer.client_id
        if conn.role == "fe":
            self.fes.add(conn)
        if conn.role != hello.LINK_ROLE:
            return "client"
        old = self.links.get(conn.host)
        self.links[conn.host] = conn
        self.links_down.pop(conn.host, None)
        log.info("link from %s (%s) is up", conn.host, conn.client_id)
        if old is not None and old is not conn:
            old.gone_why = f"replaced by a newer link from {conn.host}"
            old.channel.fail_all(old.gone_why)
            old.writer.close()
        return f"link:{conn.host}"

    async def _read_after_hello(self, conn: Conn) -> list[Action]:
        """``_read``, bounded for a one-shot role: ``_Idle`` after ``idle_wait`` of silence with no request
        in flight (a request that is still running keeps its connection, however long it takes)."""
        if conn.role not in ONE_SHOT_ROLES:
            return await self._read(conn)
        while True:
            try:
                async with asyncio.timeout(self.idle_wait):
                    return await self._read(conn)
            except TimeoutError:
                if conn.inflight == 0:
                    raise _Idle from None

    async def _request(self, conn: Conn, env: Envelope, origin: str) -> None:
        conn.inflight += 1
        try:
            await self._request_inner(conn, env, origin)
        finally:
            conn.inflight -= 1

    async def _request_inner(self, conn: Conn, env: Envelope, origin: str) -> None:
        try:
            payload = await self.handler(env.op, env.payload, origin)
        except Exception as e:
            log.exception("%s: %s failed", conn, env.op)
            payload = answers.internal(e)
        try:
            await conn.channel.send_line(conn.wire.answer(env, payload))
        except (ConnectionError, TimeoutError, WireError) as e:
            log.info("%s: could not answer %s: %s", conn, env.op, e)
        else:
            if self.answered is not None:
                self.answered(env.op, env.payload, payload)

    def link_state(self, host: str) -> tuple[float, str]:
        """Since when (wall clock) and why ``host`` holds no link; never linked: since this server started."""
        return self.links_down.get(host, (self.started_wall, "it has not linked since this daemon started"))

    def drop_silent_links(self, now: float, silent_s: float) -> list[str]:
        """Close every link that keeps alive (it has pinged) and has sent nothing for ``silent_s``: its box
        is partitioned or gone, and an offer down it could only time out. The hosts closed."""
        closed = []
        for host, conn in list(self.links.items()):
            if conn.pings and now - conn.last_rx > silent_s:
                conn.gone_why = f"nothing came from {host} for {silent_s:g}s (keepalives stopped)"
                log.warning("link from %s: %s; closing it", host, conn.gone_why)
                conn.channel.fail_all(conn.gone_why)
                conn.writer.close()
                transport = conn.writer.transport
                if transport is not None:
                    transport.abort()
                closed.append(host)
        return closed

    def frontends(self) -> list[dict[str, str]]:
        """The front ends attached now (``fe`` connections past their hello), in connection order."""
        fe = sorted(self.fes, key=lambda c: c.n)
        return [{"host": c.host, "client_id": c.client_id, "name": c.name} for c in fe]

    # ------------------------------------------------------------------------------------------ events

    def publish(self, op: str, payload: dict[str, Any]) -> None:
        """Send an event to every front end; a peer that owes too many bytes is dropped, never awaited."""
        env = Envelope(0, "evt", op, payload)
        for conn in list(self.conns):
            if conn.role not in hello.EVENT_ROLES:
                continue
            if not conn.channel.send_nowait(env):
                log.warning("%s: dropped: it does not read its events", conn)
                conn.writer.close()
