"""docs/design.md's layer table says what each part of ``sotd`` imports, and a walk holds it to the code.

File: ``tests/unit/test_design_layers.py`` (issue 29: the table had drifted in three rows). The table is the
fenced block under "Layers": ``<part> -> <part>, <part>, ...   <what it is>``. Every import of ``sotd.<x>``
in a part's modules, the lazy ones inside functions included, must be named on its row (``leaves`` names
the leaves row's members; ``sysprobe`` and ``fsprim`` may be imported by any part, as their rows say); and
every part a row names by itself must really be imported there (a part named ``(by name ...)`` must appear
as a ``sotd.<x>.`` string: the lazy command table). The import-linter contracts in ``pyproject.toml`` forbid;
this test describes, so the page cannot say more or less than the code does.
What would break it: a row edited without the code (or the code without the row), or an import written in
a form the walk does not read (``importlib.import_module`` with a computed name: ``test_no_string_imports``
refuses those).
"""

from __future__ import annotations

import ast
import functools
import os
import re

import pytest

import sotd
from tests.source_trees import modules, walk

pytestmark = pytest.mark.unit

SRC = os.path.dirname(os.path.abspath(sotd.__file__))
DESIGN = os.path.join(SRC, "..", "..", "docs", "design.md")
ANY_LAYER = frozenset(("sysprobe", "fsprim"))


@functools.cache
def table() -> dict[str, list[str]]:
    """part -> the names its row gives after ``->`` (a parenthesised note kept on its name)."""
    with open(DESIGN, encoding="utf-8") as f:
        text = f.read()
    block = text.split("## Layers", 1)[1].split("```", 2)[1]
    rows: dict[str, list[str]] = {}
    for line in block.strip("\n").splitlines():
        part, _, rest = line.strip().partition(" ")
        rest = rest.strip()
        if rest.startswith("->"):
            names = re.split(r"\s{2,}", rest[2:].strip(), maxsplit=1)[0]
        elif part == "leaves":  # its members
            names = re.split(r"\s{2,}", rest, maxsplit=1)[0]
        else:  # sysprobe, fsprim: what they are, no arrow
            names = ""
        rows[part] = [d.strip() for d in re.split(r",(?![^(]*\))", names) if d.strip()]
    return rows


@functools.cache
def imports() -> dict[str, set[str]]:
    """part (the first name below ``sotd``) -> the other parts its modules import."""
    found: dict[str, set[str]] = {}
    for rel, tree in modules(SRC):
        part = rel.split("/")[0].removesuffix(".py")
        got = found.setdefault(part, set())
        for node in walk(tree):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module.startswith("sotd."):
                    names = [node.module.split(".")[1]]
                elif node.module == "sotd":
                    names = [
                        a.name for a in node.names if not a.name.isupper() and not a.name.startswith("__")
                    ]
            elif isinstance(node, ast.Import):
                names = [a.name.split(".")[1] for a in node.names if a.name.startswith("sotd.")]
            got.update(n for n in names if n != part)
    return found


@functools.cache
def by_name(part: str) -> set[str]:
    """The parts named in a string ``"sotd.<x>."`` in ``part``'s modules (the lazy command table)."""
    out: set[str] = set()
    for rel, tree in modules(SRC):
        if rel.split("/")[0].removesuffix(".py") == part:
            for node in walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    out.update(re.findall(r"\bsotd\.(\w+)\.", node.value))
    return out


def test_the_table_is_read() -> None:
    rows = table()
    assert {"leaves", "formats", "wire", "client", "cli", "daemon", "ocx", "ocxrun"} <= set(rows), rows
    assert "errors" in rows["leaves"]


def _rows() -> list[str]:
    return sorted(p for p in table() if p != "demo")


@pytest.mark.parametrize("part", _rows())
def test_a_row_names_every_part_its_modules_import(part: str) -> None:
    rows = table()
    leaves = set(rows["leaves"])
    members = sorted(leaves) if part == "leaves" else [part]
    allowed = {re.sub(r"\s*\(.*\)", "", d) for d in rows[part]} | ANY_LAYER
    if part == "leaves" or "leaves" in allowed:
        allowed |= leaves
    used = imports()
    extra = sorted({f"{m} -> {d}" for m in members for d in used.get(m, set()) - allowed - {m}})
    assert not extra, f"docs/design.md's {part} row does not name: {extra}"


@pytest.mark.parametrize("part", [p for p in _rows() if p != "leaves"])
def test_every_part_a_row_names_is_imported(part: str) -> None:
    used = imports().get(part, set())
    stale = []
    for dep in table()[part]:
        name = re.sub(r"\s*\(.*\)", "", dep)
        if name == "leaves":
            continue
        seen = by_name(part) if "(by name" in dep else used
        if name not in seen:
            stale.append(dep)
    assert not stale, f"docs/design.md's {part} row names what its modules never import: {stale}"


def test_demo_is_imported_by_nothing_of_the_product() -> None:
    assert not [p for p, deps in imports().items() if "demo" in deps and p != "demo"]
