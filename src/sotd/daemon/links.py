"""A box's link to its topology hub: one child process (ssh, or the local stdio bridge), kept up.

Spec: behaviour 2.4 ("Guest link", backoff, the ssh's last stderr line), 2.2 (the ssh command line, the
stdio bridge), 2.1 (hello; roles), D4 (the hub offers ``comm.file`` down this link).
Guarantee: while the daemon runs, a box whose topology names another hub holds at most one link to it;
after a failure it redials within 1.5 s (a 1 s wait, jittered) while the outage is young (under 30 s),
however many restarts of the hub came before (each link its hub answered and that held 1 s ends the
outage), or while its dials never reach the far box; only then doubling to 30 s. A login or host key that
ssh refuses waits 30 s at once and says it will not fix itself (``next_delay``, ``failure_kind``; the rule
and why: docs/daemon.md, "Redial"); ``sotd daemon reload`` ends the wait (``dial_now``).
A keepalive (``version.query``) goes up every 3 s; no answer within 3 s ends the link, so a dead link is
noticed within 6 s, not at the next send; the ssh dial has a 3 s connect timeout, and a dead link's ssh
master is closed before the redial (a new dial never rides a dead TCP connection). After shutdown it
never redials, its child is always killed and its ssh master closed (also after a failure that may have
left the connection dead: ``master_suspect``). Lines before the first JSON line (a
login banner) are skipped.
Bad input from the hub (no envelope, a line past 1 MiB) ends the link with one log line naming it
(``bad_input_text``), which is also the link's state in ``sotd daemon status``; an answer of ours too long
for the line bound is cut to fit (``serverconn.answer_line``), so the link never dies of its own frame and
the offers in flight on it are answered (issue 25).
What would break it: a reconnect loop without a floor (a box whose far side keeps failing would be
hammered), awaiting the child's exit without a bound, or redialling through a master whose connection
is dead.

``next_delay``, ``jittered``, ``failure_kind``, ``redial_text``, ``reached_far_side``, ``end_reason`` and
``master_suspect`` are pure (table-tested); ``Uplink`` is the shell.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import sys
import time
from typing import TYPE_CHECKING, Any

from sotd import __version__
from sotd.daemon.server import Channel
from sotd.errors import WireError
from sotd.wire import answers, payloads, serverconn
from sotd.wire import hello as wire_hello
from sotd.wire.framing import Decoder, Envelope

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

log = logging.getLogger("sotd")

FIRST_S = 1.0
MAX_S = 30.0
FAST_WINDOW_S = 30.0  # an outage younger than this is redialled every second
STABLE_S = (
    1.0  # a link up at least this long (after its hello) ends an outage; a shorter one is a failed dial
)
JITTER_LOW = 0.5  # each wait is spread over [0.5, 1.5) of its base
JITTER_HIGH = 1.5
PING_S = 3.0  # keepalive period up the link
PING_WAIT_S = 3.0  # a keepalive unanswered this long ends the link
DIAL_CONNECT_S = 3  # ssh ConnectTimeout of the link's dial
MASTER_EXIT_WAIT_S = 3.0
CONNECT_WAIT_S = 30.0  # from spawning the child to the hub's hello answer
BANNER_MAX_LINES = 200
BANNER_MAX_BYTES = 1 << 16
KILL_WAIT_S = 2.0
EXIT_WAIT_S = 0.5  # a failed child's own exit, before it is killed
_READ = 65536
HUB_CLOSED = "the hub closed the link"


def next_delay(prev_s: float, outage_s: float, kind: str) -> float:
    """The base wait before the next dial (docs/daemon.md, "Redial"), before ``jittered``.

    ``outage_s``: how long the box has been without a link (since the last link whose hub answered hello
    and that stayed up ``STABLE_S``, or since the daemon started): so a hub restarted five times in a row
    starts five fresh outages, and each is redialled at once. ``kind`` (``failure_kind``): ``UNREACHED``
    (ssh never got a connection: it costs the far box nothing, the connect timeout paces it) stays at 1 s;
    ``LOGIN_REFUSED`` (a wrong key, a changed or unknown host key: it will not fix itself, and each dial is
    a failed login in the far sshd's log) waits ``MAX_S`` at once; any other failure is redialled every
    second while the outage is younger than ``FAST_WINDOW_S``, then doubling from the last wait to
    ``MAX_S`` (a hub that stays down is not hammered).
    """
    if kind == LOGIN_REFUSED:
        return MAX_S
    if outage_s < FAST_WINDOW_S or kind == UNREACHED:
        return FIRST_S
    return min(max(prev_s, FIRST_S) * 2, MAX_S)


def jittered(base_s: float, spread: float) -> float:
    """``base_s`` spread over ``[JITTER_LOW, JITTER_HIGH)`` of itself by ``spread`` in ``[0, 1)`` (a random
    number in the shell): a fleet whose hub restarts does not redial in step. The 1 s wait stays under
    1.5 s, so a hub that is back is dialled within 2 s (the dial itself included on a LAN)."""
    return base_s * (JITTER_LOW + (JITTER_HIGH - JITTER_LOW) * min(max(spread, 0.0), 1.0))


UNREACHED = "unreached"
LOGIN_REFUSED = "login_refused"
FAILED = "failed"

_UNREACHED = ("ssh: connect to host", "Could not resolve hostname", "Network is unreachable")
_LOGIN_REFUSED = (
    "Permission denied",
    "Host key verification failed",
    "REMOTE HOST IDENTIFICATION HAS CHANGED",
    "No matching host key type",
    "Too many authentication failures",
)


def reached_far_side(err: str) -> bool:
    """False when the failure says ssh never got a connection to the far box (connect failed or timed
    out, no route, no name); True for anything else (the far box ran something, or refused us)."""
    return not any(marker in err for marker in _UNREACHED)


def failure_kind(err: str, was_up: bool) -> str:
    """Which redial rule a failed dial (or an ended link) falls under: ``LOGIN_REFUSED`` when ssh says the
    login or the host key was refused, ``UNREACHED`` when it never got a connection (and the link never came
    up), else ``FAILED``."""
    if any(marker in err for marker in _LOGIN_REFUSED):
        return LOGIN_REFUSED
    if not was_up and not reached_far_side(err):
        return UNREACHED
    return FAILED


def redial_text(endpoint: str, err: str, kind: str, delay_s: float) -> str:
    """The log line (and, after the error, the link's state) for a failed dial: what failed and when the
    next dial is; a refused login says it will not fix itself and what to do."""
    line = f"link to the hub at {endpoint}: {err}; dialling again in {delay_s:.1f}s"
    if kind == LOGIN_REFUSED:
        line += REFUSED_NOTE
    return line


REFUSED_NOTE = (
    " (ssh refused the login or the host key: this will not fix itself; fix the key on this box,"
    " then sotd daemon reload dials at once)"
)


def end_reason(returncode: int | None, last_stderr: str, keepalive: str) -> str:
    """Why a link that was up ended. ``keepalive``: the keepalive's failure, if that ended it. The hub is
    said to have closed the link only when the child ended cleanly (exit 0: the far bridge saw its daemon
    close); a network failure is the child's exit status and its last stderr line."""
    if keepalive:
        return _with_stderr(keepalive, last_stderr)
    if returncode == 0:
        return HUB_CLOSED
    status = "was killed" if returncode is None or returncode < 0 else f"exited {returncode}"
    return _with_stderr(f"the link's child {status}", last_stderr)


def master_suspect(exit_code: int | None, keepalive_failed: bool) -> bool:
    """Whether the link's ssh connection (and so the master it rides) may be dead: a keepalive failed, the
    child hung until it was killed (None), or ssh itself failed (255). A far side that ran and exited (0:
    the hub closed; 1: its bridge refused, e.g. no daemon socket; 127: no ``sotd``) left the connection
    fine, and its master is kept for the next dial and the sessions' sends."""
    return keepalive_failed or exit_code is None or exit_code == 255


class LinkError(Exception):
    """The link failed (the message says how; the ssh's last stderr line is added by the caller)."""


def link_argv(endpoint: str, self_host: str, environ: Mapping[str, str]) -> list[str]:
    """The child that carries the link: ``ssh … <target> sotd stdio-bridge --host <self>`` for ``ssh:``;
    this interpreter's ``sotd stdio-bridge --endpoint unix:<path>`` for ``unix:``."""
    from sotd.client.dial import parse_endpoint

    ep, _discard = parse_endpoint(endpoint)
    if ep is None:  # hosts.toml's check refuses these; never a traceback per dial if one gets here
        raise LinkError(f"this version cannot dial the hub endpoint {endpoint!r}")
    if ep.kind == "unix":
        return [sys.executable, "-m", "sotd.cli.main", "stdio-bridge", "--endpoint", endpoint]
    from sotd.client import ssh

    argv: list[str] = ssh.ssh_argv(
        ep.target, ssh.bridge_argv(self_host), environ, connect_timeout=DIAL_CONNECT_S
    )
    return argv


def link_hello(self_host: str) -> dict[str, Any]:
    return wire_hello.hello_payload(
        host=self_host,
        os_user=wire_hello.os_user_for_uid(os.geteuid()),
        role="link",
        name=f"sotd-{self_host}",
        client_id=f"sotd-hub-link-{os.getpid()}",
        app_version=f"sotd {__version__}",
    )


class Uplink:
    """The link from this box to the topology hub; serves the hub's requests with ``handler``."""

    def __init__(
        self,
        endpoint: str,
        self_host: str,
        environ: Mapping[str, str],
        handler: Callable[[str, dict[str, Any], str], Awaitable[dict[str, Any]]],
        shutting_down: asyncio.Event,
        *,
        answered: Callable[[str, dict[str, Any], dict[str, Any]], None] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.self_host = self_host
        self.environ = environ
        self.handler = handler
        self.answered = answered  # told of each answer to the hub once written (``ops.Ops.answered``)
        self.shutting_down = shutting_down
        self.channel: Channel | None = None
        self.last_error = "not connected yet"
        self.down_since = time.time()
        self.up_since = 0.0
        self.up = asyncio.Event()
        self.last_exit: int | None = None  # the last child's own exit status; None when it was killed
        self.failure = ""  # the last failure's kind (``failure_kind``), "" before any
        self.dial_now = asyncio.Event()  # set by a reload: the wait before the next dial ends now

    async def call(self, op: str, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
        """A request up the link; ``ConnectionError`` when the link is down, ``TimeoutError`` past the bound."""
        channel = self.channel
        if channel is None or channel.closed is not None:
            raise ConnectionError(self.down_text())
        return await channel.call(op, payload, timeout)

    def state(self) -> dict[str, Any]:
        """For ``version.query``: the endpoint, up or not, since when (UTC) and the last error."""
        up = self.channel is not None and self.channel.closed is None
        since = self.up_since if up else self.down_since
        return {
            "endpoint": self.endpoint,
            "up": up,
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since)),
            "error": "" if up else self.last_error,
        }

    def down_text(self) -> str:
        """The link's state for a forward that cannot go up: since when it is down, and why."""
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.down_since))
        return f"the link to the hub is down since {since}: {self.last_error}"

    async def run(self) -> None:
        try:
            link_argv(self.endpoint, self.self_host, self.environ)
        except LinkError as e:
            # no dial can succeed: said once, kept as the link's state, never redialled (issue 25)
            self.last_error = str(e)
            log.error("link to the hub: %s; fix hosts.toml, then: sotd daemon reload", e)
            await self.shutting_down.wait()
            return
        base = 0.0
        outage_start = time.monotonic()
        try:
            while not self.shutting_down.is_set():
                started: list[float] = []
                keepalive: list[str] = []
                try:
                    await self._session(started, keepalive)
                    err = HUB_CLOSED
                except (LinkError, OSError, TimeoutError, WireError) as e:
                    err = str(e) or type(e).__name__
                except Exception as e:  # a bug or a bad endpoint must not take the daemon down: log, redial
                    log.exception("link to the hub at %s", self.endpoint)
                    err = f"{type(e).__name__}: {e}"
                self.down_since = time.time()
                if self.shutting_down.is_set():
                    self.last_error = err
                    break
                now = time.monotonic()
                if started and now - started[0] >= STABLE_S:
                    outage_start = now  # the hub answered and the link held: a new outage starts
                    base = 0.0
                if master_suspect(self.last_exit, bool(keepalive)):
                    await self._close_master()  # a new dial must not ride a dead connection's master
                kind = failure_kind(err, bool(started))
                # the link's state (``sotd daemon status``, a send's hint) says a refused login will not heal
                self.last_error = err + REFUSED_NOTE if kind == LOGIN_REFUSED else err
                base = next_delay(base, now - outage_start, kind)
                delay = jittered(base, random.random())  # noqa: S311 (a spread, not a secret)
                self.failure = kind
                log.warning("%s", redial_text(self.endpoint, err, kind, delay))
                self.dial_now.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await _first(self.shutting_down, self.dial_now)
        finally:
            await self._close_master()

    async def _close_master(self) -> None:
        """``ssh -O exit`` for the link's target: the connection-sharing master this link may have started
        (or ridden) ends now, not ControlPersist later. Bounded; nothing to do for ``unix:``."""
        from sotd.client import ssh
        from sotd.client.dial import parse_endpoint

        ep, _discard = parse_endpoint(self.endpoint)
        if ep is None or ep.kind != "ssh":
            return  # nothing to close for unix:, and no master was ever started for an endpoint not dialled
        argv = ssh.master_exit_argv(ep.target, self.environ)
        if argv is None:
            return
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as e:
            log.info("link: could not run ssh -O exit: %s", e)
            return
        try:
            async with asyncio.timeout(MASTER_EXIT_WAIT_S):
                _out, errb = await proc.communicate()
            text = errb.decode("utf-8", "replace").strip()
            if proc.returncode == 0:
                log.info("link: closed the ssh master for %s%s", self.endpoint, f" ({text})" if text else "")
        except TimeoutError:
            await _kill(proc)

    async def _session(self, started: list[float], keepalive: list[str]) -> None:
        argv = link_argv(self.endpoint, self.self_host, self.environ)
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        stderr_last = [""]
        stderr_task = asyncio.create_task(_last_line(proc.stderr, stderr_last))
        channel = Channel(proc.stdin, f"link to {self.endpoint}")
        try:
            try:
                async with asyncio.timeout(CONNECT_WAIT_S):
                    decoder, queue = await self._hello(proc.stdout, channel)
            except TimeoutError:
                raise LinkError(f"no hello answer within {CONNECT_WAIT_S:g}s") from None
            self.channel = channel
            self.up_since = time.time()
            started.append(time.monotonic())
            self.up.set()
            log.info("link to the hub at %s is up", self.endpoint)
            pinger = asyncio.create_task(self._keepalive(channel, proc, keepalive))
            try:
                await self._serve(proc.stdout, channel, decoder, queue)
            finally:
                pinger.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pinger
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(KILL_WAIT_S):
                    await proc.wait()
            raise LinkError(
                end_reason(
                    proc.returncode,
                    await _settle(stderr_task, stderr_last),
                    keepalive[0] if keepalive else "",
                )
            )
        except (LinkError, OSError, WireError) as e:
            with contextlib.suppress(TimeoutError):  # its own exit status, when it is ending anyway
                async with asyncio.timeout(EXIT_WAIT_S):
                    await proc.wait()
            await _kill(proc)
            if isinstance(e, LinkError) and started:
                raise
            raise LinkError(
                _with_stderr(str(e) or type(e).__name__, await _settle(stderr_task, stderr_last))
            ) from None
        finally:
            self.last_exit = proc.returncode if proc.returncode is not None and proc.returncode >= 0 else None
            self.up.clear()
            channel.fail_all("the link to the hub closed")
            if self.channel is channel:
                self.channel = None
            await _kill(proc)
            stderr_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stderr_task

    async def _keepalive(self, channel: Channel, proc: asyncio.subprocess.Process, failed: list[str]) -> None:
        """A ``version.query`` up the link every ``PING_S``; no answer within ``PING_WAIT_S`` ends the link
        (the child is killed, so the reader sees the end at once)."""
        while True:
            await asyncio.sleep(PING_S)
            try:
                await channel.call(payloads.VERSION_QUERY, payloads.version_query_payload(), PING_WAIT_S)
            except TimeoutError:
                failed.append(f"no answer to the link's keepalive within {PING_WAIT_S:g}s")
            except ConnectionError as e:
                failed.append(f"the link's keepalive could not be sent ({e})")
            if failed:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                return

    async def _hello(self, stdout: asyncio.StreamReader, channel: Channel) -> tuple[Decoder, list[Envelope]]:
        """Say hello; skip banner lines before the first JSON line; wait for the hello's answer."""
        await channel.send(Envelope(0, "req", wire_hello.HELLO_OP, link_hello(self.self_host)))
        buf = b""
        skipped = 0
        decoder = Decoder()
        queue: list[Envelope] = []
        json_mode = False
        while True:
            data = await stdout.read(_READ)
            if not data:
                raise LinkError("the link closed before the hub answered hello")
            if not json_mode:
                buf += data
                while b"\n" in buf and not buf.lstrip().startswith(b"{"):
                    line, _, buf = buf.partition(b"\n")
                    skipped += 1
                    if line.strip():
                        log.info("link banner: %s", line[:200].decode("utf-8", "replace"))
                    if skipped > BANNER_MAX_LINES:
                        raise LinkError(f"{skipped} lines came before any JSON (a login banner?)")
                if not buf.lstrip().startswith(b"{"):
                    if len(buf) > BANNER_MAX_BYTES:
                        raise LinkError("a long line that is not JSON came before the hello answer")
                    continue
                json_mode = True
                data, buf = buf, b""
            try:
                envs = decoder.feed(data)
            except WireError as e:
                raise LinkError(bad_input_text(e.message)) from None
            for i, env in enumerate(envs):
                if env.kind == "res" and env.op == wire_hello.HELLO_OP and env.id == 0:
                    err = env.payload.get("error")
                    if err:
                        raise LinkError(f"hello refused: {err}")
                    queue.extend(envs[i + 1 :])
                    return decoder, queue
                queue.append(env)

    async def _serve(
        self, stdout: asyncio.StreamReader, channel: Channel, decoder: Decoder, queue: list[Envelope]
    ) -> None:
        """Serve the hub's requests (its offers) and hand responses to our own forwards. Malformed input
        from the hub ends the link as a ``LinkError`` saying so (``bad_input_text``: one log line and the
        link's state), after the offers already handed out have answered — never a traceback."""
        bad = ""
        async with asyncio.TaskGroup() as tg:
            while True:
                for env in queue:
                    if env.kind == "res":
                        channel.resolve(env)
                    elif env.kind == "req":
                        tg.create_task(self._answer(channel, env))
                data = await stdout.read(_READ)
                if not data:
                    break
                try:
                    queue = decoder.feed(data)
                except WireError as e:
                    bad = e.message
                    break
        if bad:
            raise LinkError(bad_input_text(bad))

    async def _answer(self, channel: Channel, env: Envelope) -> None:
        try:
            payload = await self.handler(env.op, env.payload, "offer")
        except Exception as e:
            log.exception("link: %s from the hub failed", env.op)
            payload = answers.internal(e)
        try:  # an answer too long for the line bound is cut to fit: the link never dies of it
            await channel.send_line(serverconn.answer_line(env.id, env.op, payload))
        except (ConnectionError, TimeoutError, WireError) as e:
            log.info("link: could not answer the hub's %s: %s", env.op, e)
        else:
            if self.answered is not None:
                self.answered(env.op, env.payload, payload)


def bad_input_text(why: str) -> str:
    """The link's end when the hub sent bytes that are no envelope (the log line and the link's state)."""
    return f"bad input from the hub: {why}"


def _with_stderr(err: str, last: str) -> str:
    return f"{err}: {last}" if last else err


async def _last_line(stream: asyncio.StreamReader, out: list[str]) -> None:
    while True:
        try:
            line = await stream.readline()
        except (ValueError, asyncio.LimitOverrunError):
            continue
        if not line:
            return
        text = line.decode("utf-8", "replace").strip()
        if text:
            out[0] = text[:500]
            log.info("link stderr: %s", out[0])


async def _settle(task: asyncio.Task[None], last: list[str]) -> str:
    """The child's last stderr line, after giving the reader a moment to catch up."""
    with contextlib.suppress(TimeoutError, asyncio.CancelledError):
        async with asyncio.timeout(0.5):
            await asyncio.shield(task)
    return last[0]


async def _first(*events: asyncio.Event) -> None:
    """Until any of ``events`` is set."""
    waits = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
        await asyncio.gather(*waits, return_exceptions=True)


async def _kill(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        async with asyncio.timeout(KILL_WAIT_S):
            await proc.wait()
            return
    except TimeoutError:
        pass
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(KILL_WAIT_S):
            await proc.wait()
