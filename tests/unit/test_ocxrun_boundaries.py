"""The modules of ``sotd.ocxrun`` talk to each other, and to ``sotd.ocx``/``sotd.jobs``, through public names.

Issue 16 point 4: ``Session`` used to call ``Runs._finish``, ``_answer``, ``_record`` and ``node._bytes``
and take ``node._lock``. This walks each module of the package: an attribute with a leading underscore
may be read on ``self``/``cls``, or on another object only when this same module defines that name (a
class's own instance made in a classmethod, say); any other is reaching into someone else's internals.
On the module before the split it finds ``self.runs.node._bytes`` and ``self.r._disk_used``.
"""

from __future__ import annotations

import ast
import os

import pytest

import sotd.ocxrun

pytestmark = pytest.mark.unit

PACKAGE = os.path.dirname(sotd.ocxrun.__file__)


def private_reaches(source: str) -> list[str]:
    """``obj._name`` reads where ``obj`` is not ``self``/``cls`` and ``_name`` is not defined here."""
    tree = ast.parse(source)
    defined: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            defined.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        if node.attr in defined:
            continue
        out.append((node.lineno, f"line {node.lineno}: {ast.unparse(node)}"))
    return [text for _, text in sorted(out)]


def test_the_package_has_its_parts() -> None:
    names = sorted(n for n in os.listdir(PACKAGE) if n.endswith(".py"))
    assert names == ["__init__.py", "records.py", "runs.py", "sessions.py", "settings.py"]


@pytest.mark.parametrize("name", ["records.py", "runs.py", "sessions.py", "settings.py"])
def test_no_module_reaches_into_another_ones_internals(name: str) -> None:
    with open(os.path.join(PACKAGE, name), encoding="utf-8") as f:
        assert private_reaches(f.read()) == []


def test_the_reader_finds_a_reach() -> None:
    source = (
        "class Session:\n    def drive(self):\n        self.runs._finish(1)\n        self.runs.node._lock\n"
    )
    assert private_reaches(source) == ["line 3: self.runs._finish", "line 4: self.runs.node._lock"]
    assert (
        private_reaches(
            "class A:\n    def _x(self): ...\n    @classmethod\n    def m(cls):\n        cls()._x()\n"
        )
        == []
    )
