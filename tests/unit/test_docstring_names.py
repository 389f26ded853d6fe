"""A class a docstring names in double backticks exists (issue 29 item 4: docstrings true after renames).

File: ``tests/unit/test_docstring_names.py``, a source walk over ``src/sotd`` on the shared parse
(``tests/source_trees.py``). Guarantee: every ````CapWord```` (or ````CapWord.member````) in a module's
text names a class, function or constant defined or imported somewhere in the package, a builtin, or one
of the outside names below (hook events, tmux's and ssh's words, the row phases); so a rename that leaves
``Node`` or a ``Run`` action behind in a docstring fails here, not in a newcomer's head.
What would break it: a new outside word added to the prose without a line in ``OUTSIDE``, which fails
loudly (the failure names the file and line), or a stale name written without backticks (not checked).
"""

from __future__ import annotations

import ast
import builtins
import os
import re

import pytest

import sotd
from tests import source_trees

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.abspath(sotd.__file__))
NAMED = re.compile(r"``([A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*)(?:\.\w+)?(?:\(\))?``")
# words that are not this package's names: each says whose it is
OUTSIDE = {
    "Host": "an HTTP request header (sotd web's guard)",
    "Origin": "an HTTP request header (sotd web's guard)",
    "Cookie": "an HTTP request header (sotd web's guard)",
    "AskUserQuestion": "a Claude Code tool",
    "Notification": "a Claude Code hook event",
    "PermissionRequest": "a Claude Code hook event",
    "SessionStart": "a Claude Code hook event",
    "ControlPersist": "an OpenSSH option",
    "TimeoutExpired": "subprocess.TimeoutExpired",
    "Infinity": "a JSON number Python's json reads",
    "NaN": "a JSON number Python's json reads",
    "Starting": "a row phase (daemon/rows.py)",
    "Ready": "a row phase (daemon/rows.py)",
}


def defined(mods: tuple[tuple[str, ast.Module], ...]) -> set[str]:
    """Every name the package defines or imports (classes, functions, assigned names, import names)."""
    names = set(dir(builtins))
    for _rel, tree in mods:
        for node in source_trees.walk(tree):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[-1] for a in node.names)
    return names


def stale(texts: dict[str, str], names: set[str]) -> list[str]:
    """``rel:line: Name`` for each backticked CapWord in ``texts`` that names nothing known."""
    return [
        f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(1)}"
        for rel, text in sorted(texts.items())
        for m in NAMED.finditer(text)
        if m.group(1) not in names and m.group(1) not in OUTSIDE
    ]


def _texts() -> dict[str, str]:
    out = {}
    for rel, _tree in source_trees.modules(ROOT):
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            out[rel] = f.read()
    return out


def test_every_class_a_docstring_names_exists() -> None:
    assert stale(_texts(), defined(source_trees.modules(ROOT))) == []


def test_the_walk_finds_a_name_left_from_before_a_rename() -> None:
    text = '"""``Node``: syncs; ``NodeClones.poll_loop`` runs; each ``Run`` is served; ``Ready`` rows."""\n'
    names = defined((("x.py", ast.parse("class NodeClones: pass\n")),))
    assert stale({"x.py": text}, names) == ["x.py:1: Node", "x.py:1: Run"]
