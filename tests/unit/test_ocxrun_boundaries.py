"""The modules of ``sotd.ocxrun`` talk to each other, and to ``sotd.ocx``/``sotd.jobs``, through public names.

Issue 16 point 4: ``Session`` used to call ``Runs._finish``, ``_answer``, ``_record`` and ``node._bytes``
and take ``node._lock``. This walks each module of the package: an attribute with a leading underscore
may be read on ``self``/``cls``, or on another object only when this same module defines that name (a
class's own instance made in a classmethod, say); any other is reaching into someone else's internals.
On the module before the split it finds ``self.runs.node._bytes`` and ``self.r._disk_used``.

Issue 29: ``SessionRun(JobRun)`` overrode and called ``JobRun``'s private members across the package
wall. ``jobs_reaches`` fails on any dependence of an ``ocxrun`` module on a private member of
``sotd.jobs``: a class based on a ``sotd.jobs`` class (its private members become the subclass's), a
``_name`` imported from ``sotd.jobs``, and any ``x._name`` read (``self`` included) of a private name
``sotd.jobs`` defines and this module does not. On ``sessions.py`` before issue 29 it finds the
subclass and ``self._disk_used``.
"""

from __future__ import annotations

import ast
import os

import pytest

import sotd.jobs
import sotd.ocxrun

pytestmark = pytest.mark.unit

PACKAGE = os.path.dirname(sotd.ocxrun.__file__)
JOBS = os.path.dirname(sotd.jobs.__file__)
MODULES = ["records.py", "runs.py", "sessions.py", "settings.py"]


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


@pytest.mark.parametrize("name", MODULES)
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


def defined_names(tree: ast.AST) -> set[str]:
    """Every name a module defines: functions, classes, assigned names and attributes, arguments."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return out


def jobs_private() -> set[str]:
    """The private names (``_x``, not dunders) any module of ``sotd.jobs`` defines."""
    out: set[str] = set()
    for name in sorted(os.listdir(JOBS)):
        if name.endswith(".py"):
            with open(os.path.join(JOBS, name), encoding="utf-8") as f:
                out |= defined_names(ast.parse(f.read()))
    return {n for n in out if n.startswith("_") and not n.startswith("__")}


def jobs_reaches(source: str, private: set[str]) -> list[str]:
    """Where ``source`` (an ``ocxrun`` module) depends on a private member of ``sotd.jobs``."""
    tree = ast.parse(source)
    jobs_names: set[str] = set()  # names bound to sotd.jobs modules or to what they define
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sotd.jobs"):
            for a in node.names:
                jobs_names.add(a.asname or a.name)
                if a.name.startswith("_"):
                    out.append((node.lineno, f"line {node.lineno}: imports {a.name} from {node.module}"))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("sotd.jobs"):
                    jobs_names.add(a.asname or a.name.split(".")[0])
    own = defined_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                root = base
                while isinstance(root, ast.Attribute):
                    root = root.value
                if isinstance(root, ast.Name) and root.id in jobs_names:
                    out.append(
                        (node.lineno, f"line {node.lineno}: class {node.name} subclasses {ast.unparse(base)}")
                    )
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            on_jobs = isinstance(node.value, ast.Name) and node.value.id in jobs_names
            if on_jobs or (node.attr in private and node.attr not in own):
                out.append((node.lineno, f"line {node.lineno}: {ast.unparse(node)}"))
    return [text for _, text in sorted(out)]


@pytest.mark.parametrize("name", MODULES)
def test_no_module_depends_on_a_private_member_of_jobs(name: str) -> None:
    with open(os.path.join(PACKAGE, name), encoding="utf-8") as f:
        assert jobs_reaches(f.read(), jobs_private()) == []


def test_the_jobs_reader_finds_each_kind_of_reach() -> None:
    private = jobs_private()
    assert {"_disk_used", "_check_sources", "_close_binds", "_adopt"} <= private
    source = (
        "from sotd.jobs import runner\n"
        "from sotd.jobs.restart import _adopt\n"
        "class SessionRun(runner.JobRun):\n"
        "    def _own(self):\n"
        "        self._own()\n"
        "        used = self._disk_used()\n"
        "        runner._claims_locked('/')\n"
        "        self.r._check_sources()\n"
    )
    assert jobs_reaches(source, private) == [
        "line 2: imports _adopt from sotd.jobs.restart",
        "line 3: class SessionRun subclasses runner.JobRun",
        "line 6: self._disk_used",
        "line 7: runner._claims_locked",
        "line 8: self.r._check_sources",
    ]
    assert jobs_reaches("class Session:\n    def _x(self):\n        self._x()\n", private) == []
