"""The ``sotd`` console script: a lazy command table.

Only the module of the command asked for is imported, so ``sotd comm send`` pays for what a send needs
and nothing else (see docs/design.md, "The hot path"). This is the one place that prints an error and
exits; everything below raises ``SotdError``.
"""

from __future__ import annotations

import os
import sys

# verb -> module with a ``run(argv: list[str]) -> int``
COMM_VERBS = {
    "context": "sotd.cli.context",
    "join": "sotd.cli.join",
    "leave": "sotd.cli.leave",
    "send": "sotd.cli.send",
    "poll": "sotd.cli.poll",
    "unread": "sotd.cli.unread",
    "list": "sotd.cli.listing",
    "status": "sotd.cli.status",
    "spawn": "sotd.cli.spawn",
    "despawn": "sotd.cli.despawn",
    "install": "sotd.cli.install",
    "uninstall": "sotd.cli.uninstall",
    "hook": "sotd.cli.hooks",
    "relay": "sotd.cli.relay",  # comm-relay.sh send (behaviour 1.4)
}

# top-level command -> module with a ``run(argv: list[str]) -> int`` (``sotd <command> [args]``)
COMMANDS = {
    "stdio-bridge": "sotd.cli.bridge",
    "daemon": "sotd.daemon.main",  # named by string: nothing imports the daemon until asked
    "topology": "sotd.cli.topology",
    "ocx": "sotd.cli.ocx",
}

USAGE = """\
usage: sotd comm <verb> [args]     the commands sessions type (comm-<verb>.sh wraps each)
  verbs: context join leave send poll unread list status spawn despawn install uninstall hook relay
       sotd stdio-bridge [--endpoint unix:<path>] [--host <h>]
       sotd daemon run|start|stop|status [--socket <path>]
       sotd topology relay-endpoint
       sotd ocx post|answer|list|show|answers|sync|rebuild|clone|server-code|node ...
       sotd --version
"""


def _import(module: str) -> object:
    __import__(module)
    return sys.modules[module]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        sys.stdout.write(USAGE)
        return 0 if args else 2
    if args[0] == "--version":
        from sotd import __version__

        sys.stdout.write(f"sotd {__version__}\n")
        return 0
    if args[0] == "comm":
        if len(args) < 2 or args[1] not in COMM_VERBS:
            sys.stderr.write(USAGE)
            return 2
        module = COMM_VERBS[args[1]]
        rest = args[2:]
    elif args[0] in COMMANDS:
        module = COMMANDS[args[0]]
        rest = args[1:]
    else:
        sys.stderr.write(f"sotd: unknown command '{args[0]}'\n{USAGE}")
        return 2
    os.umask(0o077)
    from sotd.errors import SotdError

    try:
        run = _import(module).run  # type: ignore[attr-defined]
        status: int = run(rest)
    except SotdError as e:
        if e.reason:
            sys.stderr.write(e.reason + "\n")
        sys.stderr.write(e.message + "\n")
        if e.hint:
            sys.stderr.write(e.hint + "\n")
        status = e.exit_status
    except KeyboardInterrupt:
        status = 130
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    return status


if __name__ == "__main__":
    sys.exit(main())
