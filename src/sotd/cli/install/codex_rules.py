"""``sotd/cli/install/codex_rules.py``: the install part that writes Codex's ``rules/sot-comm.rules`` (the
mail wrappers run with no approval prompt) and removes it.

The rules file is ours whole: it starts with a mark line, and a file there without it is left alone.

What would break it: a rule for a wrapper outside ``ALLOWED`` (spawn and despawn start and end agents, so
a person approves those), or removing a file without our mark.
"""

from __future__ import annotations

import json
import os

from sotd.cli.comm.common import out
from sotd.cli.install.codex_config import codex_dir
from sotd.cli.install.record import note_made_dir, read_bytes, remove_made_dir, write_file
from sotd.cli.install.settings import ALLOWED

TYPE_CHECKING = False
if TYPE_CHECKING:
    from sotd.cli.install.part import Setup


CODEX_RULES = "sot-comm.rules"


CODEX_RULES_MARK = "# written by `sotd comm install --agent-settings`; `sotd comm uninstall` removes it"


def codex_rules_text(bin_dir: str, home: str | None = None) -> str:
    """``rules/sot-comm.rules``: Codex ``prefix_rule``s that let sotd's own mail wrappers (``ALLOWED``) run
    with no approval prompt, each in every form a session types it (the bare name, the absolute path, the
    ``~/`` path when ``bin/`` is below ``home``), and nothing else. Pure."""
    lines = [CODEX_RULES_MARK, "# sot-comm: reading and sending mail needs no approval (docs/agents.md)"]
    for name in ALLOWED:
        full = os.path.join(bin_dir, name)
        forms = [name, full]
        if home and home != "/" and full.startswith(home.rstrip("/") + "/"):
            forms.append("~/" + full[len(home.rstrip("/")) + 1 :])
        for form in forms:
            lines.append(f'prefix_rule(pattern = [{json.dumps(form)}], decision = "allow")')
    return "\n".join(lines) + "\n"


def write_codex_rules(path: str, bin_dir: str) -> str:
    """Write the rules file at ``path`` (ours whole: a file there without our mark is left alone); the
    line saying what happened."""
    text = codex_rules_text(bin_dir, os.path.expanduser("~"))
    data = read_bytes(path)
    if data is not None and not data.decode("utf-8", "replace").startswith(CODEX_RULES_MARK):
        return (
            f"{path} exists and is not sotd's: left as it is (sotd's wrappers may ask for approval in Codex)"
        )
    if data == text.encode():
        return f"The Codex rules were already in {path}"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_file(path, text, 0o644)
    return f"Allowed sotd's mail wrappers in Codex without approval: {path}"


def unwrite_codex_rules(path: str) -> str | None:
    data = read_bytes(path)
    if data is None or not data.decode("utf-8", "replace").startswith(CODEX_RULES_MARK):
        return None
    os.unlink(path)
    return f"Removed {path}"


def check(setup: Setup) -> None:
    """Nothing to refuse: a rules file that is not ours is left alone at install (and said so)."""


def install(setup: Setup, record: dict[str, object]) -> None:
    """With ``--agent-settings``: write the rules file, and list it in ``record["codex_rules"]`` when it
    holds our text."""
    if not setup.settings:
        return
    rules = os.path.join(codex_dir(), "rules", CODEX_RULES)
    rules_had = os.path.isdir(os.path.dirname(rules))
    out(write_codex_rules(rules, setup.lay.bin_dir))
    note_made_dir(record, os.path.dirname(rules), rules_had)
    if read_bytes(rules) == codex_rules_text(setup.lay.bin_dir, setup.home).encode():
        listed = record.setdefault("codex_rules", [])
        if isinstance(listed, list) and rules not in listed:
            listed.append(rules)


def uninstall(setup: Setup, record: dict[str, object]) -> int:
    """Remove each rules file ``record["codex_rules"]`` names that still starts with our mark."""
    rule_files = record.get("codex_rules")
    for path in rule_files if isinstance(rule_files, list) else []:
        if isinstance(path, str):
            line = unwrite_codex_rules(path)
            if line:
                out(line)
            remove_made_dir(record, os.path.dirname(path))  # ``rules/``, if we made it
    return 0
