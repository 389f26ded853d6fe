"""``sotd daemon run|start|stop|status|reload|install|uninstall``: the command that manages the daemon.

``run`` serves in the foreground until SIGTERM/SIGINT (``sotd.daemon.process``, imported for ``run``
only); ``start`` detaches one (``sotd daemon run`` in a new session, stdio on the log file beside the
socket), waits until it answers, and prints the socket path; ``stop`` sends SIGTERM to the status file's
pid after checking its start tick; ``status`` proves liveness by a ``version.query`` round trip; ``reload``
asks for the ``daemon.reload`` op. Socket: ``--socket``, else ``$SOT_SOCKET``, else
``sotd.runtime.default_socket``. A refusal is raised as its ``sotd.errors`` class (``DaemonStartFailed``,
``DaemonStopFailed``, ``NoDaemonAnswered``, ``ReloadRefused``...) and printed by ``sotd.cli.main``; the
statuses returned are ``EXIT_*`` (tests/unit/test_verbs_raise.py); ``_note`` writes progress lines only.

The guarantee: every subcommand but ``run`` is a thin client (a socket round trip, the status file, a
child process), so ``sotd daemon status`` costs what a round trip costs. What would break it: a module-level
import of the process or anything it pulls in (asyncio, the rows, OCX) here; a test reads
``-X importtime`` of ``sotd daemon status`` (tests/unit/test_daemon_command_imports.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

from sotd import cmdtable, fsprim, runtime
from sotd.daemon import statusfile
from sotd.errors import (
    EXIT_OK,
    AnswerWithoutPart,
    DaemonStartFailed,
    DaemonStopFailed,
    NoDaemonAnswered,
    ReloadRefused,
    SocketFolderRefused,
    SotdError,
    UsageError,
)
from sotd.text import inert

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

START_WAIT_S = 15.0
STOP_WAIT_S = 10.0
USAGE = cmdtable.usages("daemon")  # made from the command table


def _out(text: str) -> None:
    """Writes ``text`` to stdout as it may reach a terminal (``sotd.text.inert``: a link's reason or a
    peer's version string is a peer's bytes)."""
    sys.stdout.write(inert(text, lines=True))


def _note(text: str) -> None:
    """Writes a progress line to stderr (started, already running), inert like ``_out``. Never an error:
    those are raised, and ``sotd.cli.main`` prints them."""
    sys.stderr.write(inert(text, lines=True))


def _parse(argv: list[str]) -> tuple[str, str | None]:
    if not argv:
        raise ValueError("a subcommand is needed")
    cmd, rest = argv[0], argv[1:]
    sock: str | None = None
    while rest:
        a = rest.pop(0)
        if a == "--socket" and rest:
            sock = rest.pop(0)
        elif a.startswith("--socket="):
            sock = a.split("=", 1)[1]
        else:
            raise ValueError(f"unknown argument '{a}'")
    if cmd not in ("run", "start", "stop", "status", "reload", "install", "uninstall"):
        raise ValueError(f"unknown subcommand '{cmd}'")
    return cmd, (os.path.abspath(sock) if sock else None)


def run(argv: list[str]) -> int:
    try:
        cmd, explicit = _parse(argv)
    except ValueError as e:
        raise UsageError(f"sotd daemon: {e}", hint=USAGE) from None
    environ = dict(os.environ)
    sock = os.path.abspath(runtime.socket_path(environ, explicit))
    if cmd == "run":
        from sotd.daemon import process  # the one subcommand that needs asyncio, rows and OCX

        return process.run_foreground(sock, environ)
    if cmd == "start":
        return _start(sock, environ)
    if cmd == "stop":
        return _stop(sock)
    if cmd == "reload":
        return _reload(sock, environ)
    if cmd in ("install", "uninstall"):
        from sotd.daemon import unit

        if cmd == "uninstall":
            return unit.uninstall(environ)
        running = None
        with contextlib.suppress(SotdError):
            running = query(sock, environ, 2.0).get("pid")
        return unit.install(sock, environ, running_pid=running)
    return _status(sock, environ)


def _hello(environ: dict[str, str]) -> dict[str, Any]:
    """The hello ``sotd daemon status|reload`` says (role ``cli``, name ``sotd-daemon-cli``)."""
    from sotd.wire import hello as wire_hello

    return wire_hello.hello_payload(
        host=runtime.self_host(environ) or "unknown",
        os_user=wire_hello.os_user_for_uid(os.geteuid()),
        role="cli",
        name="sotd-daemon-cli",
    )


def query(sock: str, environ: dict[str, str], deadline_s: float = 5.0) -> dict[str, Any]:
    """``version.query`` round trip; the ``daemon`` object. ``SotdError`` when nobody answers."""
    from sotd.client import unix
    from sotd.wire import payloads

    op = payloads.VERSION_QUERY
    answer = unix.request(sock, op, payloads.version_query_payload(), _hello(environ), deadline_s=deadline_s)
    daemon = answer.get("daemon")
    if not isinstance(daemon, dict):
        raise AnswerWithoutPart(f"the daemon at unix:{sock} answered {op} without a daemon object: {answer}")
    return daemon


def _start(sock: str, environ: dict[str, str]) -> int:
    """Start one daemon for ``sock`` unless one answers there. Two starts at once (two commands that
    each found no daemon: ``cli/comm/autostart.py``) take turns on a lock file beside the socket, and the
    second finds the first's daemon answering: one daemon per socket."""
    import fcntl

    # every level of the folder checked (and made 0700) before anything is written in it (issue 25);
    # SocketFolderRefused is printed by cli/main.py as the start's last line (autostart shows it)
    runtime.prepare_socket_folder(sock, environ)
    lock_fd = _open_beside(sock + ".start.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)  # held at most one start's wait (START_WAIT_S) by another
        return _start_locked(sock, environ)
    finally:
        os.close(lock_fd)


def _open_beside(path: str, flags: int) -> int:
    """A file beside the socket (its start lock, its log), never through a link at its name."""
    try:
        return fsprim.open_nofollow(path, flags, 0o600)
    except fsprim.LinkedPath:
        raise SocketFolderRefused(
            f"sotd daemon: {path} is a symbolic link, so nothing was written through it: remove it "
            "(its folder is this account's), then start the daemon again"
        ) from None


def folder_mismatch(info: dict[str, Any], ours: str) -> str | None:
    """The comm folder a daemon's ``version.query`` says it serves, when that is not ``ours`` (a real
    path); None when it is, or when the daemon does not say (one older than this check). Pure."""
    theirs = info.get("comm_folder")
    if isinstance(theirs, str) and theirs and theirs != ours:
        return theirs
    return None


def _check_folder(sock: str, info: dict[str, Any], environ: dict[str, str]) -> None:
    """``DaemonOfAnotherFolder`` when the daemon at ``sock`` serves another comm folder than this
    command's (issue 27 item 5: it used to be taken for this folder's, "already running")."""
    from sotd.errors import DaemonOfAnotherFolder

    ours = runtime.comm_folders(environ)[0]
    theirs = folder_mismatch(info, ours)
    if theirs is not None:
        hint = (
            "unset SOT_SOCKET (the default socket follows the comm folder), or set another one for this folder"
            if environ.get("SOT_SOCKET")
            else f"stop it first: sotd daemon stop --socket {sock}"
        )
        raise DaemonOfAnotherFolder(
            f"sotd daemon: the daemon at {sock} (pid {info.get('pid')}) serves the comm folder {theirs}, "
            f"not {ours}",
            hint=hint,
        )


def _start_locked(sock: str, environ: dict[str, str]) -> int:
    import subprocess

    logfile = runtime.log_path(sock)
    info: dict[str, Any] | None = None
    with contextlib.suppress(SotdError):
        info = query(sock, environ, 2.0)
    if info is not None:
        _check_folder(sock, info, environ)  # another folder's daemon is not this one "already running"
        _note(f"sotd daemon: already running at {sock} (pid {info.get('pid')}); its log is {logfile}\n")
        _out(sock + "\n")
        return EXIT_OK
    fd = _open_beside(logfile, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        # a new session: no controlling terminal, not in the caller's process group; the caller exits
        # right after, so the daemon is adopted by init (no zombie is left to anyone)
        proc = subprocess.Popen(
            [sys.executable, "-m", "sotd.cli.main", "daemon", "run", "--socket", sock],
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            env=environ,
            start_new_session=True,
            close_fds=True,
            cwd="/",
        )
    finally:
        os.close(fd)
    deadline = time.monotonic() + START_WAIT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DaemonStartFailed(
                f"sotd daemon: it exited at start (status {proc.returncode}); see {logfile}",
                after=tuple(_tail(logfile)),
            )
        try:
            query(sock, environ, 1.0)
        except SotdError:
            time.sleep(0.1)
            continue
        _note(f"sotd daemon: started pid {proc.pid} at {sock}; its log is {logfile}\n")
        _out(sock + "\n")
        return EXIT_OK
    raise DaemonStartFailed(f"sotd daemon: no answer at {sock} within {START_WAIT_S:g}s; see {logfile}")


def _tail(path: str, n: int = 5) -> list[str]:
    """The last ``n`` lines of the log (none when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            return f.read()[-8192:].decode("utf-8", "replace").splitlines()[-n:]
    except OSError:
        return []


def _stop(sock: str) -> int:
    path = runtime.status_path(sock)
    doc = statusfile.read(path)
    if doc is None:
        raise DaemonStopFailed(f"sotd daemon: no daemon runs at {sock} (no status file {path})")
    pid = doc.get("pid")
    if not statusfile.same_process(doc) or type(pid) is not int:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise DaemonStopFailed(
            f"sotd daemon: the status file names pid {pid}, which no longer runs that daemon: nothing signalled"
        )
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT_S
    while time.monotonic() < deadline:
        if not statusfile.same_process(doc):
            _out(f"stopped sotd daemon pid {pid} at {sock}\n")
            return EXIT_OK
        time.sleep(0.05)
    raise DaemonStopFailed(f"sotd daemon: pid {pid} did not stop within {STOP_WAIT_S:g}s of SIGTERM")


def _status(sock: str, environ: dict[str, str]) -> int:
    try:
        info = query(sock, environ)
    except SotdError as e:
        raise NoDaemonAnswered(
            f"sotd daemon: no daemon answered at {sock}: {e.message}", hint="start it: sotd daemon start"
        ) from None
    _check_folder(sock, info, environ)
    role = "hub" if info.get("hub") else "guest"
    _out(
        f"sotd daemon at {sock}: pid {info.get('pid')}, host {info.get('host')}, version {info.get('version')}, "
        f"protocol {info.get('protocol')}, {role}\n"
    )
    for line in status_lines(info):
        _out(line + "\n")
    if info.get("restart_requested"):
        _out(f"restart requested: {info['restart_requested']}\n")
    return EXIT_OK


def status_lines(info: dict[str, Any]) -> list[str]:
    """The link lines of ``sotd daemon status``: this box's link to its hub, the boxes linked here, and why
    ``hosts.toml`` cannot be read (with the fix) when it cannot. Pure."""
    out: list[str] = []
    link = info.get("link")
    if isinstance(link, dict):
        ep = link.get("endpoint")
        if link.get("up"):
            out.append(f"link to the hub at {ep}: up since {link.get('since')}")
        else:
            out.append(f"link to the hub at {ep}: down since {link.get('since')}: {link.get('error')}")
    links = info.get("links")
    if isinstance(links, list) and links:
        out.append(f"links from: {', '.join(str(x) for x in links)}")
    topo_error = info.get("topology_error")
    if isinstance(topo_error, str) and topo_error:
        out.append(f"{topo_error}: fix the file (sotd topology path names it), then: sotd daemon reload")
    return out


def _reload(sock: str, environ: dict[str, str]) -> int:
    """``daemon.reload``: the daemon reads ``hosts.toml`` again; print what changed."""
    from sotd.client import unix
    from sotd.wire import answers, payloads

    try:
        answer = unix.request(sock, payloads.DAEMON_RELOAD, {}, _hello(environ), deadline_s=10.0)
    except SotdError as e:
        raise NoDaemonAnswered(f"sotd daemon: no daemon answered at {sock}: {e.message}") from None
    if not answers.is_ok(answer):
        raise ReloadRefused(f"sotd daemon: reload refused: {answer.get('error', answer)}")
    changes = answer.get("changes") or []
    _out(f"reloaded {answer.get('path')}: {'; '.join(changes) if changes else 'no change'}\n")
    return EXIT_OK
