"""How a ``sotd comm`` verb reaches a daemon: which endpoint, and one request with the 5 s verdict bound.

Behaviour 2.2 (endpoints) and decision D6. The local daemon is ``$SOT_SOCKET`` or the default socket of
this user's daemon; the relay endpoint (for a handle this folder does not list) is named explicitly or by
``hosts.toml`` and is never replaced by the local daemon (on the hub, ``hosts.toml`` names the hub's own
daemon as the relay: that daemon offers the handle to the linked boxes, D4).
"""

from __future__ import annotations

import os

from sotd.errors import EndpointDiscarded
from sotd.runtime import default_socket

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from sotd.cli.comm.common import Context

VERDICT_S = 5.0
VERDICT_MARGIN_S = 0.3  # for the answer's way back and printing it, within the bound
VERDICT_FLOOR_S = 1.0  # a command that started slowly still gives its daemon this long


def verdict_left(started: float, now: float) -> float:
    """What is left of the 5 s verdict bound (counted from the command's start, ``sotd.entry``) for one
    daemon call, less the way back; never under the floor, so a slow start still gets an answer (issue 27:
    4 of 460 verdicts took 5.4-6.6 s when the bound counted from the dial). Pure."""
    return max(VERDICT_S - (now - started) - VERDICT_MARGIN_S, VERDICT_FLOOR_S)


def left_now() -> float:
    """``verdict_left`` for this command; the whole bound from now in a process that did not start as a
    command (``sotd.entry.COMMAND_STARTED`` unset: a test calling ``main``)."""
    import sys
    import time

    started = getattr(sys.modules.get("sotd.entry"), "COMMAND_STARTED", None)
    if started is None:
        return VERDICT_S
    return verdict_left(started, time.monotonic())


def local_endpoint(environ: Mapping[str, str]) -> str | None:
    """``unix:<path>`` of this box's daemon, or None when no socket is there to dial."""
    path = environ.get("SOT_SOCKET") or default_socket(environ)
    import stat

    try:
        if stat.S_ISSOCK(os.stat(path).st_mode):
            return "unix:" + path
    except OSError:
        pass
    return "unix:" + path if environ.get("SOT_SOCKET") else None


def needed_endpoint(environ: Mapping[str, str]) -> tuple[str | None, str]:
    """``(endpoint, "")`` of this box's daemon for a command that cannot go on without it, starting it
    when no socket is there (``cli/comm/autostart.py``; not when ``SOT_DAEMON_AUTOSTART=off``); else
    ``(None or the unstarted endpoint, why it was not started)``. The notice of a start is printed once."""
    from sotd.cli.comm import autostart

    path = environ.get("SOT_SOCKET") or default_socket(environ)
    if autostart.is_socket(path):
        return "unix:" + path, ""
    unstarted = "unix:" + path if environ.get("SOT_SOCKET") else None
    if not autostart.wanted(environ):
        return unstarted, ""
    started = autostart.start(environ, os.path.abspath(path))
    if not started.ok:
        return unstarted, started.why
    if started.notice:
        from sotd.cli.comm.common import err

        err(started.notice)
    return "unix:" + path, ""


def chosen_relay_endpoint(environ: Mapping[str, str]) -> str | None:
    """``$SOT_RELAY_ENDPOINT``, else ``$SOT_SPAWN_ENDPOINT``, else what ``sotd topology relay-endpoint``
    prints (the hub named by this box's ``hosts.toml``; on the hub itself, its own daemon, where the
    offer to the linked boxes happens). Without a ``hosts.toml`` there is none: the local daemon is never
    a silent stand-in."""
    from sotd.client.dial import parse_endpoint

    for key in ("SOT_RELAY_ENDPOINT", "SOT_SPAWN_ENDPOINT"):
        value = environ.get(key, "")
        if not value:
            continue
        ep, discard = parse_endpoint(value)
        if discard:
            from sotd.cli.comm.common import err

            err(discard)
            continue
        if ep is not None:
            return value
    from sotd import runtime, topology  # only on a registry miss with no endpoint named

    own = environ.get("SOT_SOCKET") or default_socket(environ)
    named, _why = topology.relay_endpoint_or_reason(environ, runtime.self_host(environ), own)
    if not named:
        return None  # no hosts.toml, an unreadable one, or the hub's daemon is not there: "no daemon" text
    ep, discard = parse_endpoint(named)
    if discard:
        from sotd.cli.comm.common import err

        err(discard)
    return named if ep is not None else None


def call(ctx: Context, endpoint: str, op: str, payload: dict[str, Any]) -> dict[str, Any]:
    """One request; the daemon's response payload. Raises ``DaemonUnreachable`` past the verdict bound."""
    from sotd.client import dial
    from sotd.wire import hello as wire_hello

    ep, discard = dial.parse_endpoint(endpoint)
    if ep is None:
        raise EndpointDiscarded(discard or f"ERROR: bad endpoint '{endpoint}'")
    hello = wire_hello.hello_payload(
        host=ctx.host,
        os_user=wire_hello.os_user_for_uid(os.geteuid()),
        role="agent" if ctx.environ.get("SOT_WORKSPACE") else "cli",
        name=ctx.name,
    )
    return dial.request(ep, op, payload, hello, deadline_s=left_now(), environ=ctx.environ)


def daemon_info(ctx: Context, endpoint: str) -> tuple[object, str]:
    """The ``daemon`` object of the ``version.query`` answer at ``endpoint`` (as sent) and the host it
    declares (``""`` when it names none: spawn then assumes this box, despawn refuses). ``SotdError`` when
    it does not answer."""
    from sotd.wire import payloads

    info = call(ctx, endpoint, payloads.VERSION_QUERY, payloads.version_query_payload()).get("daemon")
    host = info.get("host") if isinstance(info, dict) else None
    return info, host if isinstance(host, str) else ""


def chosen_endpoint(named: str, environ: Mapping[str, str]) -> str | None:
    """The daemon a spawn or despawn asks: ``named`` (``--endpoint``), else ``$SOT_SPAWN_ENDPOINT``, else
    this box's (started when none runs). A named endpoint that does not parse is refused
    (``EndpointRefused``), never replaced by the local daemon. None: no daemon could be found."""
    from sotd.client.dial import parse_endpoint

    for value in (named, environ.get("SOT_SPAWN_ENDPOINT", "")):
        if value:
            ep, discard = parse_endpoint(value)
            if ep is None:
                from sotd.errors import EndpointRefused

                raise EndpointRefused(
                    f"comm-lib: refusing to substitute a local daemon for the endpoint you named: {value}",
                    hint=discard,
                )
            return value
    return needed_endpoint(environ)[0]  # starts this box's daemon when none runs


def required_endpoint(named: str, environ: Mapping[str, str]) -> str:
    """``chosen_endpoint``, or ``DaemonNotFound`` (with the start command as its hint) when there is none:
    what spawn and despawn need before they ask anything."""
    endpoint = chosen_endpoint(named, environ)
    if endpoint is None:
        from sotd.cli.comm import hints
        from sotd.errors import DaemonNotFound

        raise DaemonNotFound(
            "ERROR: could not find the sotd daemon. Set --endpoint unix:/path or ssh:target[/host].",
            hint=f"or start this box's daemon: {hints.START_DAEMON}",
        )
    return endpoint


def silent_hint(environ: Mapping[str, str], endpoint: str) -> str:
    """The next step when the daemon at ``endpoint`` did not answer: none runs there (start it), or one
    is there and silent (check it), or a far box's (check it there)."""
    from sotd.cli.comm import autostart, hints

    path = endpoint[5:] if endpoint.startswith("unix:") else ""
    if path and not autostart.is_socket(path):
        return hints.no_daemon(path, "no socket appeared there" if autostart.wanted(environ) else "")
    return hints.endpoint_silent(endpoint)
