"""``sotd comm uninstall``: take out what ``sotd comm install`` put in (``install.command.uninstall``).

Issue 11 part 2 item 7: the settings entries, allow rules and skill the installs recorded, the scripts
in ``bin/.installed``; a settings file nobody changed since goes back byte for byte. Mail, the registry
and self files stay. What would break it: removing anything the record does not name.
"""

from __future__ import annotations


def run(argv: list[str]) -> int:
    from sotd.cli.install import command

    return command.uninstall(argv)
