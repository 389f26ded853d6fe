"""This box's daemon on demand: the first command that needs it and finds none starts it.

Spec: issue 13 "Any order works" (a per-user agent started on first use, as ssh's or gpg's agent is);
behaviour 6.4 (a box that cannot take the inbox lock itself hands the line to this box's daemon).
Guarantee: a command that needs this box's daemon (a send that must be filed by it, a spawn) finds one
answering, or says why not; it starts at most one (``sotd daemon start`` takes a start lock beside the
socket and re-asks before it starts one), says so once on stderr, and never when
``SOT_DAEMON_AUTOSTART=off``. The started daemon does not carry the session's identity (its self file,
workspace and terminal variables are dropped), so it is this user's daemon, not the session's.
What would break it: starting a daemon for a socket that answers (two daemons on one socket), or a
daemon that inherits one session's self file and acts as that session.

``wanted`` and ``daemon_environ`` are pure; ``start`` runs ``sotd daemon start`` as a child process (the
CLI never imports the daemon: docs/design.md).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

OFF_WORDS = ("off", "0", "no", "false")
# a session's own identity and terminal: a per-user daemon must not inherit them
SESSION_KEYS = (
    "SOT_COMM_SELF_FILE",
    "SOT_WORKSPACE",
    "SOT_WORKSPACE_ID",
    "TMUX",
    "TMUX_PANE",
    "PWD",
    "CLAUDECODE",  # "inside a Claude Code session": a row's agent started under it would think so too
    "CLAUDE_CODE_ENTRYPOINT",
)
START_BOUND_S = 30.0  # ``sotd daemon start`` waits 15 s for an answer, and may wait its turn for the lock


def wanted(environ: Mapping[str, str]) -> bool:
    """False when ``$SOT_DAEMON_AUTOSTART`` says off (off, 0, no, false; any case)."""
    return environ.get("SOT_DAEMON_AUTOSTART", "").strip().lower() not in OFF_WORDS


def daemon_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment the started daemon gets: the caller's, less the session's identity keys."""
    return {k: v for k, v in environ.items() if k not in SESSION_KEYS}


class Started:
    """The outcome of one try: ``ok``; ``notice`` (the one stderr line, "" when another start won);
    ``why`` (the start's own last words when it failed)."""

    __slots__ = ("notice", "ok", "why")

    def __init__(self, ok: bool, notice: str, why: str) -> None:
        self.ok = ok
        self.notice = notice
        self.why = why


def start(environ: Mapping[str, str], socket_path: str) -> Started:
    """Run ``sotd daemon start --socket <socket_path>`` and wait for its verdict."""
    import subprocess

    argv = [sys.executable, "-m", "sotd.cli.main", "daemon", "start", "--socket", socket_path]
    try:
        done = subprocess.run(
            argv,
            check=False,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=daemon_environ(environ),
            cwd="/",
            timeout=START_BOUND_S,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return Started(False, "", f"sotd daemon start did not finish: {e}")
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    if done.returncode != 0:
        return Started(False, "", lines[-1] if lines else f"sotd daemon start exited {done.returncode}")
    started = [line for line in lines if line.startswith("sotd daemon: started ")]
    notice = ""
    if started:
        notice = (
            f"sotd: this box had no daemon running, so one was started ({started[0][len('sotd daemon: ') :]}); "
            "SOT_DAEMON_AUTOSTART=off turns this off"
        )
    return Started(True, notice, "")


def is_socket(path: str) -> bool:
    import stat

    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False
