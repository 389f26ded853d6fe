"""The ``sotd`` console script: a lazy command table.

Only the module of the command asked for is imported, so ``sotd comm send`` pays for what a send needs
and nothing else (see docs/design.md, "The hot path"). This is the one place that prints an error and
exits; everything below raises ``SotdError``. What it prints is inert (``sotd.text.inert``).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from sotd.errors import SotdError

# verb -> module with a ``run(argv: list[str]) -> int`` (synopsis, options and help: ``sotd.cmdtable``)
COMM_VERBS = {
    "context": "sotd.cli.comm.context",
    "join": "sotd.cli.comm.join",
    "leave": "sotd.cli.comm.leave",
    "send": "sotd.cli.comm.send",
    "poll": "sotd.cli.comm.poll",
    "unread": "sotd.cli.comm.unread",
    "list": "sotd.cli.comm.listing",
    "status": "sotd.cli.comm.status",
    "spawn": "sotd.cli.comm.spawn",
    "despawn": "sotd.cli.comm.despawn",
    "install": "sotd.cli.install.command",
    "uninstall": "sotd.cli.install.uninstall",
    "hook": "sotd.cli.comm.hooks",
    "relay": "sotd.cli.comm.relay",  # comm-relay.sh send (behaviour 1.4)
}

# top-level command -> module with a ``run(argv: list[str]) -> int`` (``sotd <command> [args]``)
COMMANDS = {
    "stdio-bridge": "sotd.cli.bridge",
    "daemon": "sotd.daemon.command",  # named by string: nothing imports the daemon until asked
    "topology": "sotd.cli.topology_command",
    "session-socket-path": "sotd.cli.sessionsocket",  # behaviour 2.2: how a 0.6.6 client finds the daemon
    "ocx": "sotd.cli.ocx",
}

# the commands whose first word picks a subcommand (their members are in ``sotd.cmdtable``)
GROUPS = ("daemon", "ocx")
COMMANDS["doctor"] = "sotd.cli.doctor.command"  # top level: it checks more than the comm folder
COMMANDS["mcp"] = "sotd.cli.mcp"  # mail as MCP tools (issue 26): one stdio server per agent session
COMMANDS["web"] = "sotd.cli.web"  # the fleet as a local live page (issue 30): a server beside the daemon


def _import(module: str) -> object:
    __import__(module)
    return sys.modules[module]


def _quiet_stdout() -> None:
    """Point fd 1 at /dev/null, so the interpreter's last flush of a closed pipe raises nothing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    """Run one command. A reader that closed stdout (``sotd comm list | head``) ends it quietly with
    ``CLOSED_STDOUT`` (128 + SIGPIPE, what a shell reports for ``cat`` in the same place), never a
    traceback; a process started with no stdout at all writes its lines nowhere and keeps its status."""
    if sys.stdout is None:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (lives as long as the process)
    try:
        status = _main(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()
        return CLOSED_STDOUT
    return status


CLOSED_STDOUT = 141  # sotd.errors.EXIT_CLOSED_STDOUT (not imported here: a closed pipe needs nothing)


def _main(argv: list[str] | None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        return _help("", 0 if args else 2)
    if args[0] == "--version":
        from sotd import __version__

        sys.stdout.write(f"sotd {__version__}\n")
        return 0
    if args[0] == "comm":
        if len(args) < 2 or args[1] in ("-h", "--help"):
            return _help("comm", 0 if len(args) > 1 else 2)
        if args[1] not in COMM_VERBS:
            return _refuse("comm", f"unknown verb '{args[1]}'")
        module = COMM_VERBS[args[1]]
        path, rest = f"comm {args[1]}", args[2:]
        checked = rest
    elif args[0] in COMMANDS:
        module = COMMANDS[args[0]]
        path, rest = args[0], args[1:]
        checked = rest
        if args[0] in GROUPS:
            if not rest or rest[0] in ("-h", "--help"):
                return _help(path, 0 if rest else 2)
            from sotd import cmdtable  # the command table: for help, a group, or an argument with "-"

            sub = f"{path} {rest[0]}"
            if sub not in cmdtable.TABLE:
                return _refuse(path, f"unknown subcommand '{rest[0]}'")
            path, checked = sub, rest[1:]
    else:
        return _refuse("", f"unknown command '{args[0]}'")
    if any(a[:1] == "-" for a in checked):
        from sotd import cmdtable

        verdict, problem = cmdtable.check(path, checked)
        if verdict == cmdtable.HELP:
            return _help(path, 0)
        if verdict == cmdtable.BAD and not cmdtable.TABLE[path].pinned:
            return _refuse(path, problem)  # a pinned verb's own parser says it in the spec's words
    os.umask(0o077)
    if args[0] == "comm" and args[1] != "hook" and os.environ.get("CODEX_THREAD_ID"):
        # a Codex session's command: its private self file (hooks find theirs from session_id)
        from sotd.cli.comm.hooks.shared import adopt_command_self_file

        adopt_command_self_file()
    from sotd.errors import SotdError

    try:
        run = _import(module).run  # type: ignore[attr-defined]
        status: int = run(rest)
    except SotdError as e:
        _print_error(e)
        status = e.exit_status
    except KeyboardInterrupt:
        from sotd.errors import EXIT_INTERRUPTED

        status = EXIT_INTERRUPTED
    return status


def _print_error(e: SotdError) -> None:
    """The one place an error is shown: its lines (reason, sentence, hint, after) on stderr, or on stdout
    for a class that says so, each inert (``sotd.text.inert``: a control or bidi character a sentence
    quotes shows as its ``\\u`` escape). Text a stream cannot encode is replaced, never raised."""
    from sotd.text import inert

    stream = sys.stdout if e.stdout else sys.stderr
    text = "".join(inert(line, lines=True) + "\n" for line in e.lines())
    try:
        stream.write(text)
    except UnicodeEncodeError:
        enc = getattr(stream, "encoding", None) or "utf-8"
        stream.write(text.encode(enc, "replace").decode(enc, "replace"))


def _help(path: str, status: int) -> int:
    """The help of ``path`` from the command table: on stdout and exit 0 when asked for, on stderr with
    ``status`` (2) when the command line was not complete."""
    from sotd import cmdtable

    text = cmdtable.help_text(path, os.environ.get("SOT_COMM_PROG", ""))
    (sys.stdout if status == 0 else sys.stderr).write(text)
    return status


def _refuse(path: str, problem: str) -> int:
    """An unknown command, verb, subcommand or option: the problem and the usage on stderr, exit 2. The
    problem quotes a word of argv, shown inert as one field (its newlines escaped too)."""
    from sotd import cmdtable
    from sotd.text import inert

    prog = os.environ.get("SOT_COMM_PROG", "")
    name = cmdtable.name_of(path, prog)
    usage = cmdtable.usage(path, prog)
    sys.stderr.write(f"{name}: {inert(problem)} (see: {name} --help)\n{usage}\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
