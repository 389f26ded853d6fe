"""The argv of an agent row (behaviour 4.1; issues 11 and 12): what a spawned Claude Code or Codex row is
started with beyond the command the user named.

Both the daemon (which starts rows) and ``sotd comm install`` (which writes the settings file a Claude
Code row loads, and prints what a Codex row gets) need these, so they live here rather than in the CLI:
the daemon may not import the CLI (an import-linter contract). Pure but for one ``isfile``.

What would break it: adding ``--settings`` to a command the user gave with its own settings, or a Codex
row whose model shell has lost ``bin/`` from its PATH (the wake line's ``comm-poll.sh`` would not be found).
"""

from __future__ import annotations

import json
import os

from sotd import ancestry

ROW_SETTINGS = "claude-settings.json"  # what a spawned Claude Code row loads with --settings
CODEX_FIRST_PROMPT = "[sot-comm] this row has started: run comm-poll.sh once to read any mail already waiting"


def codex_row_argv(argv: list[str], path: str) -> list[str]:
    """A Codex row's argv, when it is the bare ``codex`` (a command given with arguments is the caller's
    own, kept as it is): ``shell_environment_policy.set.PATH`` = the row's ``PATH`` (``bin/`` first),
    because the model's commands run in a shell whose environment comes from a login shell's snapshot
    (Debian's /etc/profile resets PATH, and the bare ``comm-poll.sh`` the wake line names is not found),
    and ``CODEX_FIRST_PROMPT`` as its prompt. Pure."""
    if len(argv) != 1:
        return argv
    return [*argv, "-c", f"shell_environment_policy.set.PATH={json.dumps(path)}", CODEX_FIRST_PROMPT]


def row_argv(argv: list[str], bin_dir: str, path: str = "") -> list[str]:
    """A Claude Code row's argv with ``--settings <bin>/claude-settings.json`` added, when the argv runs
    Claude Code and that file is there; a Codex row's with its ``PATH`` and first prompt
    (``codex_row_argv``; ``path`` is the row's ``PATH``); any other argv as it is."""
    if ancestry.agent_of(argv) == "codex":
        return codex_row_argv(argv, path or bin_dir + os.pathsep + os.defpath)
    path = os.path.join(bin_dir, ROW_SETTINGS)
    if ancestry.agent_of(argv) != "claude" or "--settings" in argv or not os.path.isfile(path):
        return argv
    return [*argv, "--settings", path]
