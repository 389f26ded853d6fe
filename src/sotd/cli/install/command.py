"""``sotd/cli/install/command.py``: ``sotd comm install`` and ``sotd comm uninstall``, one walk over ``PARTS``.

Behaviour 1.12 and seed 000 "Upgrading to 0.7.0"; issue 11 part 2 items 2, 7 and 8 (docs/agents.md,
"Install"); issue 29 (install as a list of parts). Install checks every part (a file we could not merge
into is refused before anything at all is written), then installs each in order into one install record;
uninstall walks the same list backwards over that record: it takes out exactly what the installs
recorded, so a settings file nobody changed since goes back byte for byte. Mail, the registry and self
files stay.

What would break it: a part installed outside ``PARTS`` (uninstall would never take it out), or a part
written before every ``check`` has passed.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace

from sotd.cli.comm.common import out
from sotd.cli.install import codex_config, codex_functions, codex_rules, mcp, scripts, settings, skill
from sotd.cli.install.part import Setup
from sotd.cli.install.record import read_scripts_record, read_settings_record, write_settings_record
from sotd.errors import UsageError
from sotd.formats.layout import Layout

TYPE_CHECKING = False
if TYPE_CHECKING:
    from sotd.cli.install.part import Part

# The parts in install order; uninstall walks them backwards. A new part: one module beside these
# (``check``, ``install``, ``uninstall``: ``sotd.cli.install.part.Part``) and one entry here.
PARTS: tuple[Part, ...] = (scripts, skill, codex_rules, codex_functions, mcp, settings)


def instructions(bin_dir: str) -> list[str]:
    lines = [
        "",
        "Register the hooks and allow rules with Claude Code (~/.claude/settings.json), or re-run with",
        "--agent-settings:",
    ]
    snippet: dict[str, object] = {}
    settings.merge_claude_settings(
        snippet, bin_dir, allow=settings.allow_rules(bin_dir, os.path.expanduser("~"))
    )
    lines += ["  " + ln for ln in json.dumps(snippet, indent=2, ensure_ascii=False).splitlines()]
    codex: dict[str, object] = {}
    settings.merge_claude_settings(codex, bin_dir, settings.CODEX_EVENTS)
    lines += [
        "",
        "Register them with Codex in ~/.codex/hooks.json (or a project's .codex/hooks.json; --agent-settings",
        "writes it), then trust them in Codex with /hooks:",
    ]
    lines += ["  " + ln for ln in json.dumps(codex, indent=2, ensure_ascii=False).splitlines()]
    lines += [
        "",
        "So that a Codex session outside a sotd row finds the scripts by name, add to ~/.codex/config.toml",
        "(--agent-settings adds them):",
        f"  {codex_config.HEADER}",
    ]
    lines += ["  " + ln for ln in codex_config.function_lines(codex_functions.codex_functions(bin_dir))]
    lines += [
        "A Codex without lifecycle hooks reads its mail only when it polls: tell it so in AGENTS.md",
        f"('run {bin_dir}/comm-poll.sh after each task').",
    ]
    return lines


def _setup(argv: list[str]) -> Setup:
    """The choices ``argv`` makes (``--agent-settings[=PATH]``, ``--skill``, ``--sotd[=]PATH``)."""
    settings_path: str | None = None
    sotd = ""
    skill_wanted = False
    args = list(argv)
    if "--sotd" in args[:-1]:  # ``--sotd PATH`` as the command table shows it, the same as ``--sotd=PATH``
        i = args.index("--sotd")
        args[i : i + 2] = ["--sotd=" + args[i + 1]]
    for a in args:
        if a == "--skill":
            skill_wanted = True
        elif a == "--agent-settings":
            settings_path = os.path.join(os.path.expanduser("~"), ".claude", "settings.json")
        elif a.startswith("--agent-settings="):
            settings_path = a.split("=", 1)[1]
        elif a.startswith("--sotd="):
            sotd = os.path.abspath(a.split("=", 1)[1])
            if not os.access(sotd, os.X_OK) or os.path.isdir(sotd):
                raise UsageError(f"sotd comm install: --sotd={sotd} is not an executable file")
        else:  # --help and unknown options never get here: sotd.cli.main answers them from sotd.cmdtable
            raise UsageError(f"sotd comm install: unknown argument '{a}' (see --help)")
    return Setup(
        Layout.from_env(),
        sotd=sotd,
        settings=os.path.abspath(settings_path) if settings_path else None,
        skill_wanted=skill_wanted,
    )


def run(argv: list[str]) -> int:
    """``sotd comm install``: check every part, then install each into the one record."""
    setup = _setup(argv)
    for part in PARTS:
        part.check(setup)
    setup = replace(setup, sotd=setup.sotd or scripts.sotd_executable())
    record = read_settings_record(setup.lay)
    for part in PARTS:
        part.install(setup, record)
    write_settings_record(setup.lay, record)
    if not setup.settings:
        for line in instructions(setup.lay.bin_dir):
            out(line)
        if not setup.skill_wanted:
            out(f"The {skill.SKILL} skill for Claude Code: re-run with --agent-settings or --skill.")
    return 0


def uninstall(argv: list[str]) -> int:
    """``sotd comm uninstall``: the parts backwards, each taking out exactly what the installs recorded;
    the comm folder's mail, registry and self files stay. 1 when a file had to be left as it was."""
    for a in argv:
        if a in ("-h", "--help"):
            out("usage: sotd comm uninstall     (takes out what sotd comm install put in; mail stays)")
            return 0
        raise UsageError(f"sotd comm uninstall: unknown argument '{a}' (see --help)")
    setup = Setup(Layout.from_env())
    record = read_settings_record(setup.lay)
    if not record and not read_scripts_record(setup.lay):
        out(f"Nothing recorded by sotd comm install in {setup.lay.bin_dir}; nothing was removed")
        return 0
    status = 0
    for part in reversed(PARTS):
        status = max(status, part.uninstall(setup, record))
    out("The comm folder's mail, registry and self files were left as they are.")
    return status
