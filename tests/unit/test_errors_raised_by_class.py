"""Every coded error is raised by its class (issue 29 item 1; ``sotd/errors.py``'s header).

File: ``tests/unit/test_errors_raised_by_class.py``, a source walk over ``src/sotd`` on the shared parse
(``tests/source_trees.py``). Guarantee: outside an errors module (``errors.py``, ``jobs/errors.py``,
``ocx/errors.py``, ``wire/errors.py``) no call passes ``code="<literal>"``, and no call of an error class
passes ``code=`` or ``exit_status=`` at all, so ``except CursorFailed`` matches every cursor failure and
docs/errors.md lists every code a command can end with; and every error class is raised somewhere (called
by name or by an alias, or the base of one that is), so no class documents a code nothing raises; and no
``SotdError(...)`` is made outside an errors module (its code would be the bare ``error``).
What would break it: ``SotdError("...", code="cursor_failed")`` or a bare ``SotdError("...")`` again, a status given by hand
(``exit_status=3``), or a class left behind when its last raise moved.
One exception, named here: ``RemoteProtocolError`` carries the wire's answer code (``sotd.wire.answers``,
the refusal a peer is sent, behaviour 2.3), one class for the wire's whole table (h11's shape), not a
command's error code.
"""

from __future__ import annotations

import ast
import os

import pytest

import sotd
from tests import source_trees

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.abspath(sotd.__file__))
BASE = "SotdError"
CARRIES_THE_WIRE_CODE = {"RemoteProtocolError": "its code is the wire's answer code (sotd.wire.answers)"}
BY_HAND = ("code", "exit_status")

Modules = tuple[tuple[str, ast.Module], ...]


def is_errors_module(rel: str) -> bool:
    return os.path.basename(rel) == "errors.py"


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def error_family(mods: Modules) -> dict[str, list[str]]:
    """Every class below ``SotdError`` (by name, across the tree) -> the names of its direct subclasses."""
    bases: dict[str, list[str]] = {}
    for _rel, tree in mods:
        for node in source_trees.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [_name(b) for b in node.bases]
    family = {BASE: []}
    grew = True
    while grew:
        grew = False
        for cls, of in bases.items():
            if cls not in family and any(b in family for b in of):
                family[cls] = []
                grew = True
    for cls in family:
        for b in bases.get(cls, []):
            if b in family:
                family[b].append(cls)
    return family


def by_hand(mods: Modules, family: dict[str, list[str]]) -> list[str]:
    """``rel:line: ...`` for each code or status given by hand outside an errors module."""
    found = []
    for rel, tree in mods:
        if is_errors_module(rel):
            continue
        for node in source_trees.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            callee = _name(node.func)
            for kw in node.keywords:
                literal = kw.value.value if isinstance(kw.value, ast.Constant) else None
                if kw.arg == "code" and isinstance(literal, str):
                    found.append(f"{rel}:{node.lineno}: {callee}(code={literal!r}) by hand")
                elif kw.arg in BY_HAND and callee in family and callee not in CARRIES_THE_WIRE_CODE:
                    found.append(f"{rel}:{node.lineno}: {callee}({kw.arg}=...) by hand")
    return found


def base_made(mods: Modules) -> list[str]:
    """``rel:line`` for each ``SotdError(...)`` made outside an errors module: a code that has no class of
    its own (``except`` on a class cannot pick it out, docs/errors.md lists it as the bare ``error``)."""
    return [
        f"{rel}:{node.lineno}: {BASE}(...) made by hand"
        for rel, tree in mods
        if not is_errors_module(rel)
        for node in source_trees.walk(tree)
        if isinstance(node, ast.Call) and _name(node.func) == BASE
    ]


def never_raised(mods: Modules, family: dict[str, list[str]]) -> list[str]:
    """The error classes nothing calls (by name or through a module-level alias) and no subclass of which
    is called: a code documented that no command can end with."""
    alias: dict[str, str] = {}
    called: set[str] = set()
    for _rel, tree in mods:
        for node in tree.body:
            if isinstance(node, ast.Assign) and _name(node.value) in family:
                for target in node.targets:
                    alias[_name(target)] = _name(node.value)
        for node in source_trees.walk(tree):
            if isinstance(node, ast.Call):
                callee = _name(node.func)
                called.add(alias.get(callee, callee))
    called |= {alias[a] for a in called if a in alias}

    def raised(cls: str) -> bool:
        return cls in called or any(raised(sub) for sub in family[cls])

    return sorted(cls for cls in family if not raised(cls))


def _planted(sources: dict[str, str]) -> Modules:
    return tuple((rel, ast.parse(text)) for rel, text in sorted(sources.items()))


def test_no_code_or_status_is_given_by_hand() -> None:
    mods = source_trees.modules(ROOT)
    assert by_hand(mods, error_family(mods)) == []


def test_no_error_is_made_of_the_base_class() -> None:
    assert base_made(source_trees.modules(ROOT)) == []


def test_every_error_class_is_raised() -> None:
    mods = source_trees.modules(ROOT)
    assert never_raised(mods, error_family(mods)) == []


def test_the_walk_sees_the_whole_family() -> None:
    family = error_family(source_trees.modules(ROOT))
    for cls in (
        "CursorFailed",
        "HelloRefused",
        "SlotClaimed",
        "RemoteProtocolError",
        "StepFailed",
        "TmuxError",
    ):
        assert cls in family, cls


PLANTED = {
    "errors.py": (
        "class SotdError(Exception): pass\n"
        "class CursorFailed(SotdError): code = 'cursor_failed'\n"
        "class Unused(SotdError): code = 'unused'\n"
        "class Family(SotdError): pass\n"
        "class Member(Family): pass\n"
        "class Aliased(SotdError): pass\n"
        "def made(): return SotdError('m', code='allowed_in_its_module')\n"
    ),
    "formats/cursor.py": (
        "from sotd.errors import SotdError, Member\n"
        "Other = Aliased\n"
        "def read():\n"
        "    raise SotdError('the read cursor could not be read', code='cursor_failed')\n"
        "def write():\n"
        "    raise errors.SelfFileError('slot', code=SLOT_CLAIMED, exit_status=3)\n"
        "def fine():\n"
        "    raise Member('m')\n"
        "def aliased():\n"
        "    raise Other('m')\n"
        "def classify():\n"
        "    return verdict(exit_status=1, code=CODE)\n"
    ),
    "wire/errors.py": "class WireError(SotdError): pass\nclass RemoteProtocolError(WireError): pass\n",
    "wire/payloads.py": "def refused(): return RemoteProtocolError('m', code=answers.BAD_HANDLE)\n",
}


def test_the_walk_finds_what_it_looks_for() -> None:
    mods = _planted({**PLANTED, "cli/x.py": "class SelfFileError(SotdError): pass\n"})
    family = error_family(mods)
    assert by_hand(mods, family) == [
        "formats/cursor.py:4: SotdError(code='cursor_failed') by hand",
        "formats/cursor.py:6: SelfFileError(code=...) by hand",
        "formats/cursor.py:6: SelfFileError(exit_status=...) by hand",
    ]
    assert base_made(mods) == ["formats/cursor.py:4: SotdError(...) made by hand"]
    # Family is raised through Member, Aliased through its alias, SelfFileError (by hand) and the wire's
    # classes by their calls; CursorFailed's one raise is the base's with its code, so nothing raises it
    assert never_raised(mods, family) == ["CursorFailed", "Unused"]
