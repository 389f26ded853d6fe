"""No verb prints its own error or returns a literal exit status (issue 16 point 3; docs/design.md,
"CLI verbs"): a walk over the verb modules of ``sotd.cli`` that fails on ``return <int>`` in a ``run``
and on ``err("ERROR…"|"FAILED…"|"usage:…")``. Errors are raised as ``sotd.errors`` classes; only
``sotd.cli.main`` prints them. Out of scope here: the hooks, install and ocx (their own owners) and the
capsule (a separate program whose status is its child's).
"""

from __future__ import annotations

import ast
import os

import pytest

import sotd.cli

pytestmark = pytest.mark.unit

CLI = os.path.dirname(sotd.cli.__file__)
NOT_HERE = {"ocx.py", "capsule.py", "main.py", "__init__.py"}
ERROR_OPENINGS = ("ERROR", "FAILED", "usage:")


def _verb_files() -> list[str]:
    """The admin commands in ``cli/`` and the comm verbs and their helpers in ``cli/comm/``."""
    return sorted(
        os.path.join(d, f)
        for d in ("", "comm")
        for f in os.listdir(os.path.join(CLI, d))
        if f.endswith(".py") and f not in NOT_HERE
    )


def _opening(node: ast.expr) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        return _opening(node.values[0])
    return ""


def offences(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == "run":
            for sub in ast.walk(node):
                if (
                    isinstance(sub, ast.Return)
                    and isinstance(sub.value, ast.Constant)
                    and type(sub.value.value) is int
                ):
                    found.append(f"line {sub.lineno}: return {sub.value.value}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "err"
            and node.args
            and _opening(node.args[0]).startswith(ERROR_OPENINGS)
        ):
            found.append(f"line {node.lineno}: err({_opening(node.args[0])!r}...)")
    return sorted(found, key=lambda s: int(s.split()[1].rstrip(":")))


@pytest.mark.parametrize("name", _verb_files())
def test_the_verb_raises_its_errors_and_names_its_statuses(name: str) -> None:
    with open(os.path.join(CLI, name), encoding="utf-8") as f:
        assert offences(f.read()) == [], name


def test_the_walk_finds_what_it_looks_for() -> None:
    bad = 'def run(argv):\n    err(f"ERROR: {x}")\n    err("usage: me")\n    return 1\n'
    assert offences(bad) == ["line 2: err('ERROR: '...)", "line 3: err('usage: me'...)", "line 4: return 1"]
    assert offences("def run(argv):\n    err('WARNING: x')\n    return EXIT_OK\n") == []
