"""The daemon's private tmux server (D16): argv builders (pure) and a thin runner.

Every command names the server's socket with ``-S`` and runs with ``TMUX``/``TMUX_PANE`` removed from its
environment, so nothing here can ever reach a person's own tmux session. Each call has a timeout; tmux's
failures come out as ``TmuxError`` (no ``OSError`` or ``TimeoutExpired`` escapes unnamed).

What would break it: a command built without ``-S`` (it would talk to the default server, or to the one
``$TMUX`` names), or a single-word agent command handed to tmux unquoted (tmux runs a lone argument
through ``sh -c``).

A server keeps the environment of the client that started it and hands it to every new window; a later
client (a restarted daemon) makes it its own with ``sync_environment`` (issue 27 item 5, docs/rows.md),
so the windows it starts get its environment. What would break that: a word ending in ``;`` passed as it
is in a command sequence (tmux takes that ``;`` for a separator: ``_arg`` escapes it).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from typing import NamedTuple

from sotd.errors import SotdError

TMUX = "tmux"
TIMEOUT_SECS = 5.0
CURSOR_FORMAT = "#{cursor_x} #{cursor_y} #{pane_width}"
WINDOW_FORMAT = "#{session_name}\t#{window_id}\t#{window_name}\t#{pane_id}\t#{pane_pid}\t#{pane_dead}"
DEFAULT_SIZE = (200, 50)
NEW_WINDOW_TRIES = 3  # ``Tmux.new_window``: a server that exits as a window is added is started again
# what tmux says when the server it asked has just exited, or a session was just made by another call
RACE_TEXTS = (
    "no server running on ",
    "server exited unexpectedly",
    "error connecting to ",
    "duplicate session",
)


class TmuxError(SotdError):
    """A tmux command failed, timed out, or could not be started."""

    code = "tmux_failed"


class Window(NamedTuple):
    session: str
    window_id: str
    name: str
    pane_id: str
    pane_pid: int
    dead: bool


# ---------------------------------------------------------------------------------------------- argv


def base(socket_path: str, config: str | None = None) -> list[str]:
    """``tmux -S <socket>`` (plus ``-f <config>``, read only when this call starts the server)."""
    argv = [TMUX, "-S", socket_path]
    if config is not None:
        argv += ["-f", config]
    return argv


def _command(argv: list[str]) -> list[str]:
    # tmux runs a lone argument through ``sh -c``; quote it so a one-word argv runs that exact program.
    if len(argv) == 1:
        return [shlex.quote(argv[0])]
    return list(argv)


def _env_flags(env: dict[str, str]) -> list[str]:
    flags: list[str] = []
    for key in sorted(env):
        flags += ["-e", f"{key}={env[key]}"]
    return flags


def new_session_argv(
    socket_path: str,
    session: str,
    window: str,
    cwd: str,
    *,
    env: dict[str, str],
    argv: list[str],
    size: tuple[int, int] = DEFAULT_SIZE,
    config: str | None = None,
) -> list[str]:
    """A detached session whose first window runs ``argv``; prints the new pane's id."""
    return [
        *base(socket_path, config),
        "new-session",
        "-d",
        "-P",
        "-F",
        "#{pane_id}",
        "-s",
        session,
        "-n",
        window,
        "-c",
        cwd,
        "-x",
        str(size[0]),
        "-y",
        str(size[1]),
        *_env_flags(env),
        "--",
        *_command(argv),
    ]


def new_window_argv(
    socket_path: str, session: str, window: str, cwd: str, *, env: dict[str, str], argv: list[str]
) -> list[str]:
    """A detached window appended to ``session`` running ``argv``; prints the new pane's id."""
    return [
        *base(socket_path),
        "new-window",
        "-d",
        "-P",
        "-F",
        "#{pane_id}",
        "-t",
        f"={session}:",
        "-n",
        window,
        "-c",
        cwd,
        *_env_flags(env),
        "--",
        *_command(argv),
    ]


def capture_argv(socket_path: str, target: str) -> list[str]:
    """One tmux call for the frame and the cursor: the server runs both commands back to back, so the
    cursor belongs to the captured frame."""
    return [
        *base(socket_path),
        "capture-pane",
        "-e",
        "-p",
        "-t",
        target,
        ";",
        "display-message",
        "-p",
        "-t",
        target,
        CURSOR_FORMAT,
    ]


def send_text_argv(socket_path: str, target: str, text: str) -> list[str]:
    return [*base(socket_path), "send-keys", "-t", target, "-l", "--", text]


def send_enter_argv(socket_path: str, target: str) -> list[str]:
    return [*base(socket_path), "send-keys", "-t", target, "Enter"]


def kill_window_argv(socket_path: str, target: str) -> list[str]:
    return [*base(socket_path), "kill-window", "-t", target]


def list_windows_argv(socket_path: str) -> list[str]:
    return [*base(socket_path), "list-windows", "-a", "-F", WINDOW_FORMAT]


def kill_server_argv(socket_path: str) -> list[str]:
    return [*base(socket_path), "kill-server"]


def attach_argv(socket_path: str, target: str | None = None) -> list[str]:
    argv = [*base(socket_path), "attach-session"]
    if target is not None:
        argv += ["-t", target]
    return argv


def row_attach_argv(socket_path: str, pane: str) -> list[str]:
    """Attach to the session holding ``pane`` with that pane's window shown (one command sequence)."""
    return [*base(socket_path), "attach-session", "-t", pane, ";", "select-window", "-t", pane]


def screens_argv(socket_path: str, panes: list[str], marker: str) -> list[str]:
    """One tmux call for the plain text (no ``-e``: no escape sequences) of every pane in ``panes``, each
    followed by a line holding ``marker`` alone (``split_screens``). ``marker`` is the caller's secret, so
    no screen can print it and shift the split."""
    argv = base(socket_path)
    for i, pane in enumerate(panes):
        if i:
            argv.append(";")
        argv += ["capture-pane", "-p", "-t", pane, ";", "display-message", "-p", marker]
    return argv


def split_screens(out: str, marker: str, count: int) -> list[str] | None:
    """The ``count`` screens of ``screens_argv``'s output, or None when it does not hold that many."""
    parts = out.split(marker + "\n")
    if len(parts) != count + 1 or parts[-1] != "":
        return None
    return parts[:-1]


def show_environment_argv(socket_path: str, session: str | None = None) -> list[str]:
    """The server's global environment (``-g``), or ``session``'s own."""
    target = ["-g"] if session is None else ["-t", f"={session}"]
    return [*base(socket_path), "show-environment", *target]


def parse_environment(out: str) -> dict[str, str | None]:
    """``show-environment``'s lines: ``KEY=value`` set, ``-KEY`` marked removed (None). A line of neither
    shape (the rest of a value that held a newline) names nothing."""
    env: dict[str, str | None] = {}
    for line in out.splitlines():
        if line.startswith("-"):
            if line[1:]:
                env[line[1:]] = None
            continue
        key, eq, value = line.partition("=")
        if eq and key:
            env[key] = value
    return env


def _arg(word: str) -> str:
    """One word of a tmux command sequence: a word ending in ``;`` would end the command there (tmux
    takes that ``;`` for the separator), so its last ``;`` is written ``\\;``, which tmux reads as ``;``."""
    return word[:-1] + "\\;" if word.endswith(";") else word


def environment_sync_argv(
    socket_path: str,
    session: str,
    have: dict[str, str | None],
    session_env: dict[str, str | None],
    want: dict[str, str],
) -> list[str] | None:
    """One tmux call that makes the server's global environment ``want`` (what a server started now by
    this client would hold): each variable set that differs, each one ``want`` lacks unset, and every
    variable of ``session``'s own environment unset (tmux copies some there from the first client, and
    a session's value wins over the global one). None when there is nothing to change."""
    cmds: list[list[str]] = []
    for key in sorted(want):
        if have.get(key) != want[key]:
            cmds.append(["set-environment", "-g", key, want[key]])
    for key in sorted(have):
        if key not in want and have[key] is not None:
            cmds.append(["set-environment", "-g", "-u", key])
    for key in sorted(session_env):
        cmds.append(["set-environment", "-t", f"={session}", "-u", key])
    if not cmds:
        return None
    argv = base(socket_path)
    for i, cmd in enumerate(cmds):
        if i:
            argv.append(";")
        argv += [_arg(w) for w in cmd]
    return argv


def clean_environ(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a tmux client: ``TMUX`` and ``TMUX_PANE`` removed (never type into the caller's
    own session), and ``COLUMNS``/``LINES`` too: the server hands its environment to every pane, and a
    fixed width there would make an agent draw for the wrong terminal size."""
    src = dict(os.environ if environ is None else environ)
    for name in ("TMUX", "TMUX_PANE", "COLUMNS", "LINES"):
        src.pop(name, None)
    return src


def parse_capture(out: str) -> tuple[str, int, int, int]:
    """Split ``capture_argv``'s output into the frame and the cursor line that ``display-message`` added."""
    body = out[:-1] if out.endswith("\n") else out
    frame, _sep, last = body.rpartition("\n")
    fields = last.split()
    if len(fields) != 3 or not all(f.lstrip("-").isdigit() for f in fields):
        raise TmuxError(f"tmux gave no cursor line: {last!r}")
    x, y, w = (int(f) for f in fields)
    return (frame + "\n" if frame else ""), x, y, w


def parse_windows(out: str) -> list[Window]:
    windows = []
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) != 6:
            continue
        session, wid, name, pane, pid, dead = parts
        windows.append(Window(session, wid, name, pane, int(pid) if pid.isdigit() else 0, dead == "1"))
    return windows


def lost_race(why: str) -> bool:
    """``why`` (a ``TmuxError``'s text) says the server went away between two calls, or a session was
    made between a check and its creation: the call may be tried again. A server whose last window ends
    exits (tmux's ``exit-empty``), so a row whose agent exits at once takes the server with it while the
    next row's window is being added (seen in CI: ``tmux failed: server exited unexpectedly``)."""
    return any(text in why for text in RACE_TEXTS)


# -------------------------------------------------------------------------------------------- runner


class Tmux:
    """A private tmux server at ``socket_path``; windows live in ``session``."""

    def __init__(
        self,
        socket_path: str,
        session: str = "sotd",
        *,
        config: str | None = "/dev/null",
        timeout: float = TIMEOUT_SECS,
        size: tuple[int, int] = DEFAULT_SIZE,
        environ: dict[str, str] | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.session = session
        self.config = config
        self.timeout = timeout
        self.size = size
        self.environ = environ  # the tmux client's environment (None: this process's), cleaned

    def run(self, argv: list[str], *, check: bool = True) -> str:
        try:
            p = subprocess.run(
                argv,
                env=clean_environ(self.environ),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=self.timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as e:
            raise TmuxError(f"tmux {argv[3] if len(argv) > 3 else ''} timed out after {self.timeout}s") from e
        except OSError as e:
            raise TmuxError(f"cannot run tmux: {e.strerror or e}") from e
        out = p.stdout.decode("utf-8", "replace")
        if check and p.returncode != 0:
            why = p.stderr.decode("utf-8", "replace").strip() or f"exit {p.returncode}"
            raise TmuxError(f"tmux failed: {why}")
        return out

    def sync_environment(self) -> bool:
        """Give a running server this client's environment for the windows it starts from now on (a
        server outlives the daemon that started it, and keeps that daemon's environment: issue 27 item
        5). Windows already running keep their own. False when no server runs (the next one starts with
        this environment anyway)."""
        if not self.has_session():
            return False
        have = parse_environment(self.run(show_environment_argv(self.socket_path)))
        session_env = parse_environment(self.run(show_environment_argv(self.socket_path, self.session)))
        argv = environment_sync_argv(
            self.socket_path, self.session, have, session_env, clean_environ(self.environ)
        )
        if argv is not None:
            self.run(argv)
        return True

    def has_session(self) -> bool:
        try:
            self.run([*base(self.socket_path), "has-session", "-t", f"={self.session}"])
        except TmuxError:
            return False
        return True

    def new_session(self, name: str, cwd: str, env: dict[str, str], argv: list[str]) -> str:
        """Start the server's session (named ``self.session``) with a first window ``name``; the pane id."""
        out = self.run(
            new_session_argv(
                self.socket_path,
                self.session,
                name,
                cwd,
                env=env,
                argv=argv,
                size=self.size,
                config=self.config,
            )
        )
        return out.strip()

    def new_window(self, name: str, cwd: str, env: dict[str, str], argv: list[str]) -> str:
        """A window ``name`` running ``argv``; starts the server and its session when there is none yet,
        or when the server exits between the check and the window (``lost_race``: tried again, bounded)."""
        for _ in range(NEW_WINDOW_TRIES - 1):
            try:
                return self._add_window(name, cwd, env, argv)
            except TmuxError as e:
                if not lost_race(e.message):
                    raise
        return self._add_window(name, cwd, env, argv)

    def _add_window(self, name: str, cwd: str, env: dict[str, str], argv: list[str]) -> str:
        if not self.has_session():
            return self.new_session(name, cwd, env, argv)
        return self.run(
            new_window_argv(self.socket_path, self.session, name, cwd, env=env, argv=argv)
        ).strip()

    def capture(self, target: str) -> tuple[str, int, int, int]:
        """``(capture-pane -e -p text, cursor_x, cursor_y, pane_width)`` of ``target``."""
        return parse_capture(self.run(capture_argv(self.socket_path, target)))

    def send_text(self, target: str, text: str) -> None:
        self.run(send_text_argv(self.socket_path, target, text))

    def send_enter(self, target: str) -> None:
        self.run(send_enter_argv(self.socket_path, target))

    def kill_window(self, target: str) -> None:
        self.run(kill_window_argv(self.socket_path, target))

    def list_windows(self) -> list[Window]:
        """Every window of the server; none when no server runs."""
        try:
            out = self.run(list_windows_argv(self.socket_path))
        except TmuxError:
            return []
        return parse_windows(out)

    def screens(self, panes: list[str], marker: str) -> list[str]:
        """The plain text of each pane of ``panes`` (``screens_argv``), ``""`` for one that is gone."""
        if not panes:
            return []
        try:
            got = split_screens(self.run(screens_argv(self.socket_path, panes, marker)), marker, len(panes))
        except TmuxError:
            got = None
        if got is not None:
            return got
        out = []
        for pane in panes:  # one is gone: each on its own, so the others still show
            try:
                out.append(self.run([*base(self.socket_path), "capture-pane", "-p", "-t", pane]))
            except TmuxError:
                out.append("")
        return out

    def kill_server(self) -> None:
        self.run(kill_server_argv(self.socket_path), check=False)

    def attach_command(self) -> str:
        """The command a person types to watch the rows (``tmux -S <socket> attach-session -t <session>``)."""
        return shlex.join(attach_argv(self.socket_path, f"={self.session}"))
