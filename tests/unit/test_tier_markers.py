"""Every test module carries a tier marker, so ``-m unit`` (and every tier's run) finds all of its tests.

File: ``tests/unit/test_tier_markers.py`` (issue 29: 50 unit tests had none and ran in no tier). A test
module passes when its module-level ``pytestmark`` names a tier, when its folder's ``conftest.py`` adds one
to every item (``add_marker(pytest.mark.<tier>)``: the fuzz and real-agent folders), or when each of its
top-level tests is decorated with one. The tiers are the markers ``pyproject.toml`` declares but ``serial``,
``root`` and ``long``, which say how a test runs, not which tier it is in.
What would break it: a tier marker spelt in a way the walk does not read (a marker built at run time).
"""

from __future__ import annotations

import ast
import os
import tomllib

import pytest

import tests

pytestmark = pytest.mark.unit

TESTS = os.path.dirname(os.path.abspath(tests.__file__))
NOT_TIERS = frozenset(("serial", "root", "long"))


def tiers() -> frozenset[str]:
    with open(os.path.join(TESTS, "..", "pyproject.toml"), "rb") as f:
        declared = tomllib.load(f)["tool"]["pytest"]["ini_options"]["markers"]
    return frozenset(m.split(":", 1)[0].strip() for m in declared) - NOT_TIERS


def named_tiers(node: ast.AST) -> set[str]:
    """The tiers ``pytest.mark.<tier>`` names anywhere in ``node``."""
    return {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Attribute)
        and n.value.attr == "mark"
        and n.attr in tiers()
    }


def folder_adds_a_tier(folder: str) -> bool:
    path = os.path.join(folder, "conftest.py")
    if not os.path.exists(path):
        return False
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    return any(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "add_marker"
        and named_tiers(n)
        for n in ast.walk(tree)
    )


def unmarked(source: str) -> bool:
    """True when the module has no tier: not on ``pytestmark`` and not on every top-level test."""
    tree = ast.parse(source)
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
            and named_tiers(node.value)
        ):
            return False
    tests_here = [
        n
        for n in tree.body
        if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name.startswith(("test_", "Test"))
    ]
    return not tests_here or not all(any(named_tiers(d) for d in n.decorator_list) for n in tests_here)


def every_test_module() -> list[str]:
    found = []
    for base, dirs, files in os.walk(TESTS):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.startswith("test_") and name.endswith(".py"):
                found.append(os.path.join(base, name))
    return found


def test_every_test_module_has_a_tier() -> None:
    missing = []
    for path in every_test_module():
        if folder_adds_a_tier(os.path.dirname(path)):
            continue
        with open(path, encoding="utf-8") as f:
            if unmarked(f.read()):
                missing.append(os.path.relpath(path, TESTS))
    assert not missing, f"test modules with no tier marker: {missing}"


@pytest.mark.parametrize(
    ("source", "bare"),
    [
        ("import pytest\npytestmark = pytest.mark.unit\ndef test_a(): pass\n", False),
        (
            "import pytest\npytestmark = [pytest.mark.integration, pytest.mark.serial]\ndef test_a(): pass\n",
            False,
        ),
        ("import pytest\npytestmark = pytest.mark.serial\ndef test_a(): pass\n", True),
        ("import pytest\n@pytest.mark.transcripts\ndef test_a(): pass\n", False),
        ("import pytest\n@pytest.mark.unit\ndef test_a(): pass\ndef test_b(): pass\n", True),
        ("def test_a(): pass\n", True),
    ],
)
def test_the_reader(source: str, bare: bool) -> None:
    assert unmarked(source) is bare
