"""``sot-capsule supervise <state>/workspaces/<row id> [--start] -- <agent argv…>``: a row's capsule (D16).

The capsule is the process whose arguments name the row, so the identity check (``sotd.ancestry``,
``capsule_names_row``) can prove that a comm command runs inside that row. It therefore runs the agent as
a CHILD and stays alive above it: exec'ing the agent would drop the capsule from the ancestry. It forwards
SIGTERM, SIGINT and SIGHUP to the child, exits with the child's status, and writes nothing else.

When the capsule owns the terminal's foreground (a tmux pane), the child gets its own process group and
the foreground, so a key that raises a signal reaches the child once, not once from the terminal and
once more through the capsule.

What would break it: ``os.execvp`` (no capsule in the ancestry), or an argument order that puts the row
path after ``--`` (the row test reads only the capsule's own arguments).
"""

from __future__ import annotations

import os
import signal
import sys

USAGE = "usage: sot-capsule supervise <state>/workspaces/<row id> [--start] -- <agent argv…>"
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def parse(argv: list[str]) -> tuple[str, bool, list[str]] | None:
    """``(row dir, start, child argv)`` from the arguments after the program name, or None (usage)."""
    if len(argv) < 2 or argv[0] != "supervise" or argv[1].startswith("-"):
        return None
    row_dir, rest = argv[1], argv[2:]
    start = False
    while rest and rest[0] != "--":
        if rest[0] != "--start":
            return None
        start = True
        rest = rest[1:]
    if not rest or len(rest) < 2:
        return None
    return row_dir, start, rest[1:]


def _foreground_tty() -> int | None:
    """The descriptor of our controlling terminal when our process group holds its foreground."""
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
                return fd
        except OSError:
            continue
    return None


def _exit_as(status: int) -> int:
    """Exit with the child's wait status: its code, or die by its signal (128 + N when that is not fatal)."""
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            if sig != signal.SIGKILL:
                signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        except (OSError, ValueError):
            pass
        return 128 + sig
    return 1


def supervise(child_argv: list[str]) -> int:
    tty_fd = _foreground_tty()
    own_group = tty_fd is not None
    pid_box: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        if pid_box:
            try:
                os.kill(pid_box[0], signum)
            except ProcessLookupError:
                pass

    # Handlers first, so a signal that lands while the child starts is still forwarded once it exists;
    # the child gets the default dispositions back (they are reset at exec for caught signals).
    for sig in FORWARDED:
        signal.signal(sig, forward)
    try:
        pid = os.fork()
    except OSError as e:
        print(f"sot-capsule: cannot start {child_argv[0]}: {e.strerror or e}", file=sys.stderr)
        return 127
    if pid == 0:  # child
        try:
            if tty_fd is not None:
                os.setpgid(0, 0)
                signal.signal(signal.SIGTTOU, signal.SIG_IGN)
                os.tcsetpgrp(tty_fd, os.getpgrp())
                signal.signal(signal.SIGTTOU, signal.SIG_DFL)
            for sig in FORWARDED:
                signal.signal(sig, signal.SIG_DFL)
            os.execvp(child_argv[0], child_argv)  # noqa: S606 (the agent's argv, run without a shell)
        except OSError as e:
            try:
                os.write(2, f"sot-capsule: cannot run {child_argv[0]}: {e.strerror or e}\n".encode())
            finally:
                os._exit(127)
        os._exit(127)
    pid_box.append(pid)
    if own_group:
        try:
            os.setpgid(pid, pid)  # both sides set it: no race with the child's exec
        except OSError:
            pass
    while True:
        try:
            _, status = os.waitpid(pid, 0)
        except InterruptedError:
            continue
        except ChildProcessError:
            return 1
        return _exit_as(status)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    parsed = parse(args)
    if parsed is None:
        print(USAGE, file=sys.stderr)
        return 2
    return supervise(parsed[2])


if __name__ == "__main__":
    sys.exit(main())
