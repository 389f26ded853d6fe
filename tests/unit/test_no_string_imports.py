"""Nothing reaches a module by a string (issue 16): an import the linter cannot see is one it cannot hold
to the layers. The one exception is the console script's lazy command table (``cli/main._import``), and
every module it names is one the layers would let ``sotd.cli`` import by a plain statement: a CLI module, or
the ``sotd daemon`` command (the CLI sits above the daemon in the import-linter layers)."""

from __future__ import annotations

import ast
import importlib.util
import os
import tomllib

import pytest

import sotd
from sotd.cli import main
from tests import source_trees

pytestmark = pytest.mark.unit

PACKAGE = os.path.dirname(os.path.abspath(sotd.__file__))
TOP = os.path.dirname(os.path.dirname(PACKAGE))
ALLOWED = {("cli/main.py", "_import")}


def string_imports(root: str) -> list[tuple[str, str]]:
    """(module path, enclosing function) of every ``__import__`` / ``importlib.import_module`` call."""
    found = []
    for rel, tree in source_trees.modules(root):  # one parse per process (tests/source_trees.py)
        for fn in [
            n for n in source_trees.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        ]:
            for call in [n for n in source_trees.walk(fn) if isinstance(n, ast.Call)]:
                f_ = call.func
                by_name = isinstance(f_, ast.Name) and f_.id == "__import__"
                by_lib = isinstance(f_, ast.Attribute) and f_.attr == "import_module"
                if by_name or by_lib:
                    found.append((rel, fn.name))
    return sorted(set(found))


def test_only_the_command_table_imports_by_string() -> None:
    assert set(string_imports(PACKAGE)) <= ALLOWED


def test_the_walk_finds_a_planted_string_import(tmp_path) -> None:
    (tmp_path / "x.py").write_text("import importlib\ndef f():\n    return importlib.import_module('os')\n")
    assert string_imports(str(tmp_path)) == [("x.py", "f")]


def test_every_module_the_table_names_is_one_the_cli_may_import() -> None:
    targets = set(main.COMM_VERBS.values()) | set(main.COMMANDS.values())
    for module in targets:
        assert module.startswith("sotd.cli.") or module == "sotd.daemon.command", module
        assert importlib.util.find_spec(module) is not None, module
    with open(os.path.join(TOP, "pyproject.toml"), "rb") as f:
        contracts = tomllib.load(f)["tool"]["importlinter"]["contracts"]
    layers = next(c["layers"] for c in contracts if c["type"] == "layers")
    assert layers.index("sotd.cli") < layers.index("sotd.daemon")  # the CLI is above: it may import it
