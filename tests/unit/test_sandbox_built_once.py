"""A sandbox's cgroups, seccomp filter and bwrap argv are built one way, for a job and a session alike.

File: ``tests/unit/test_sandbox_built_once.py`` (issue 29: the direct run and the row session each built
their own cgroup, seccomp descriptor and bwrap argv). A source walk over ``src/sotd`` on the shared parse
(``tests/source_trees.py``). Guarantee: ``sandbox.bwrap_argv`` is called only by
``launchers.sandbox_argv``, a ``limits.Cgroups`` is made only by ``launchers.make_cgroups`` (an adopted
run's are reopened by ``Cgroups.existing``), the filter's memfd (``seccomp.memfd``) is made only where a
sandbox is exec'd (``launchers.Direct.start``, and ``launch.fill`` in a session's row), and both the
direct launcher and the session's row argv (``ocxrun/sessions.row_argv``) build on ``sandbox_argv``.
What would break it: a launcher with a bwrap argv or a cgroup of its own again.
"""

from __future__ import annotations

import ast
import os

import pytest

import sotd
from tests import source_trees

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.abspath(sotd.__file__))
# callee -> the functions (module path: function) that may call it
ONE_WAY = {
    "bwrap_argv": {"jobs/launchers.py:sandbox_argv"},
    "Cgroups": {"jobs/launchers.py:make_cgroups"},
    "memfd": {"jobs/launchers.py:start", "jobs/launch.py:fill"},
}
USERS = {"sandbox_argv": {"jobs/launchers.py:start", "ocxrun/sessions.py:row_argv"}}


def _callee(node: ast.Call) -> str:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def callers(mods: tuple[tuple[str, ast.Module], ...], names: set[str]) -> dict[str, set[str]]:
    """callee -> the ``module:function`` of each call of it (``module:`` at module level)."""
    found: dict[str, set[str]] = {n: set() for n in names}
    for rel, tree in mods:

        def visit(node: ast.AST, fn: str, rel: str = rel) -> None:
            for child in ast.iter_child_nodes(node):
                inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else fn
                if isinstance(child, ast.Call) and _callee(child) in found:
                    found[_callee(child)].add(f"{rel}:{fn}")
                visit(child, inner)

        visit(tree, "")
    return found


def test_each_part_of_a_sandbox_is_built_in_one_place() -> None:
    got = callers(source_trees.modules(ROOT), set(ONE_WAY))
    assert got == ONE_WAY


def test_the_job_and_the_session_both_build_on_sandbox_argv() -> None:
    assert callers(source_trees.modules(ROOT), set(USERS)) == USERS


def test_the_walk_names_a_second_builder() -> None:
    mods = (
        ("jobs/launchers.py", ast.parse("def sandbox_argv(p):\n    return sbx.bwrap_argv(p)\n")),
        ("ocxrun/sessions.py", ast.parse("class R:\n    def start(self):\n        lim.Cgroups(p, 'x')\n")),
    )
    assert callers(mods, {"bwrap_argv", "Cgroups"}) == {
        "bwrap_argv": {"jobs/launchers.py:sandbox_argv"},
        "Cgroups": {"ocxrun/sessions.py:start"},
    }
