"""A box's link to its topology hub: one child process (ssh, or the local stdio bridge), kept up.

Spec: behaviour 2.4 ("Guest link", backoff, the ssh's last stderr line), 2.2 (the ssh command line, the
stdio bridge), 2.1 (hello; roles), D4 (the hub offers ``comm.file`` down this link).
Guarantee: while the daemon runs, a box whose topology names another hub holds at most one link to it and
redials after a failure at 1 s, doubling to 30 s (1 s again after a link that stayed up 60 s); after
shutdown it never redials, and its child is always killed. Lines before the first JSON line (a login
banner) are skipped.
What would break it: a reconnect loop without a floor (a dead hub would be hammered), or awaiting the
child's exit without a bound.

``backoff`` is pure (table-tested); ``Uplink`` is the shell.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from sotd import __version__
from sotd.daemon.server import Channel
from sotd.errors import WireError
from sotd.wire import messages
from sotd.wire.framing import Decoder, Envelope

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

log = logging.getLogger("sotd")

FIRST_S = 1.0
MAX_S = 30.0
RESET_AFTER_S = 60.0
CONNECT_WAIT_S = 30.0  # from spawning the child to the hub's hello answer
BANNER_MAX_LINES = 200
BANNER_MAX_BYTES = 1 << 16
KILL_WAIT_S = 2.0
_READ = 65536


def backoff(prev_s: float, lasted_s: float) -> float:
    """The wait before the next dial: 1 s first; doubling to 30 s; 1 s after a link that was up >= 60 s."""
    if prev_s <= 0 or lasted_s >= RESET_AFTER_S:
        return FIRST_S
    return min(prev_s * 2, MAX_S)


class LinkError(Exception):
    """The link failed (the message says how; the ssh's last stderr line is added by the caller)."""


def link_argv(endpoint: str, self_host: str, environ: Mapping[str, str]) -> list[str]:
    """The child that carries the link: ``ssh … <target> sotd stdio-bridge --host <self>`` for ``ssh:``;
    this interpreter's ``sotd stdio-bridge --endpoint unix:<path>`` for ``unix:``."""
    if endpoint.startswith("unix:"):
        return [sys.executable, "-m", "sotd.cli.main", "stdio-bridge", "--endpoint", endpoint]
    if endpoint.startswith("ssh:"):
        target = endpoint[4:].partition("/")[0]
        ssh = importlib.import_module("sotd.client.ssh")
        argv: list[str] = ssh.ssh_argv(target, ssh.bridge_argv(self_host), environ)
        return argv
    raise LinkError(f"this version cannot dial the hub endpoint '{endpoint}'")


def link_hello(self_host: str) -> dict[str, Any]:
    return messages.hello_payload(
        host=self_host,
        os_user=messages.os_user_for_uid(os.geteuid()),
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
    ) -> None:
        self.endpoint = endpoint
        self.self_host = self_host
        self.environ = environ
        self.handler = handler
        self.shutting_down = shutting_down
        self.channel: Channel | None = None
        self.last_error = "not connected yet"
        self.up = asyncio.Event()
        self.attempts = 0

    async def call(self, op: str, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
        """A request up the link; ``ConnectionError`` when the link is down, ``TimeoutError`` past the bound."""
        channel = self.channel
        if channel is None or channel.closed is not None:
            raise ConnectionError(f"the link to the hub is down ({self.last_error})")
        return await channel.call(op, payload, timeout)

    async def run(self) -> None:
        delay = 0.0
        while not self.shutting_down.is_set():
            self.attempts += 1
            started: list[float] = []
            try:
                await self._session(started)
                err = "the hub closed the link"
            except (LinkError, OSError, TimeoutError, WireError) as e:
                err = str(e) or type(e).__name__
            except Exception as e:  # a bug or a bad endpoint must not take the daemon down: log, redial
                log.exception("link to the hub at %s", self.endpoint)
                err = f"{type(e).__name__}: {e}"
            self.last_error = err
            if self.shutting_down.is_set():
                break
            lasted = time.monotonic() - started[0] if started else 0.0
            delay = backoff(delay, lasted)
            log.warning("link to the hub at %s: %s; dialling again in %ss", self.endpoint, err, f"{delay:g}")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self.shutting_down.wait()

    async def _session(self, started: list[float]) -> None:
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
            started.append(time.monotonic())
            self.up.set()
            log.info("link to the hub at %s is up", self.endpoint)
            await self._serve(proc.stdout, channel, decoder, queue)
        except (LinkError, OSError, WireError) as e:
            await _kill(proc)
            raise LinkError(
                _with_stderr(str(e) or type(e).__name__, await _settle(stderr_task, stderr_last))
            ) from None
        finally:
            self.up.clear()
            channel.fail_all("the link to the hub closed")
            if self.channel is channel:
                self.channel = None
            await _kill(proc)
            stderr_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stderr_task

    async def _hello(self, stdout: asyncio.StreamReader, channel: Channel) -> tuple[Decoder, list[Envelope]]:
        """Say hello; skip banner lines before the first JSON line; wait for the hello's answer."""
        await channel.send(Envelope(0, "req", messages.HELLO_OP, link_hello(self.self_host)))
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
            envs = decoder.feed(data)
            for i, env in enumerate(envs):
                if env.kind == "res" and env.op == messages.HELLO_OP and env.id == 0:
                    err = env.payload.get("error")
                    if err:
                        raise LinkError(f"hello refused: {err}")
                    queue.extend(envs[i + 1 :])
                    return decoder, queue
                queue.append(env)

    async def _serve(
        self, stdout: asyncio.StreamReader, channel: Channel, decoder: Decoder, queue: list[Envelope]
    ) -> None:
        """Serve the hub's requests (its offers) and hand responses to our own forwards."""
        async with asyncio.TaskGroup() as tg:
            while True:
                for env in queue:
                    if env.kind == "res":
                        channel.resolve(env)
                    elif env.kind == "req":
                        tg.create_task(self._answer(channel, env))
                data = await stdout.read(_READ)
                if not data:
                    return
                queue = decoder.feed(data)

    async def _answer(self, channel: Channel, env: Envelope) -> None:
        try:
            payload = await self.handler(env.op, env.payload, "offer")
        except Exception as e:
            log.exception("link: %s from the hub failed", env.op)
            payload = {"error": f"internal error: {e}", "code": "internal"}
        try:
            await channel.send(Envelope(env.id, "res", env.op, payload))
        except (ConnectionError, TimeoutError) as e:
            log.info("link: could not answer the hub's %s: %s", env.op, e)


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
