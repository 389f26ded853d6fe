"""No verb prints its own error or returns a literal exit status (issue 16 point 3; docs/design.md,
"CLI verbs"): a walk over the verb modules of ``sotd.cli``, and ``sotd daemon``'s (``daemon/command.py``,
its ``install|uninstall`` in ``daemon/unit.py`` and its ``run`` in ``daemon/process.py``: issue 29), that
fails on ``return <int>`` in a function that returns a status (``run``, the entry points named below,
what they ``return`` from their own module, and any function returning an ``EXIT_*``), on
``err("ERROR…"|"FAILED…"|"usage:…")`` and on a ``sys.stderr.write`` outside a writer (``err``, ``_note``).
The functions of a module-level verb table (``cli/ocx.py``'s ``VERBS``: the verb -> its function) are
entry points too. Errors are raised as ``sotd.errors`` classes; only ``sotd.cli.main`` prints them. Out of
scope here: the hooks and install (their own owners) and the capsule (a separate program whose status is
its child's).
"""

from __future__ import annotations

import ast
import os

import pytest

import sotd.cli

pytestmark = pytest.mark.unit

CLI = os.path.dirname(sotd.cli.__file__)
NOT_HERE = {"capsule.py", "main.py", "__init__.py"}
ERROR_OPENINGS = ("ERROR", "FAILED", "usage:")
WRITERS = ("err", "_note")  # the stderr writers of a verb: progress and warnings, never an error
SOTD = os.path.dirname(CLI)
# sotd daemon's modules -> the functions ``sotd daemon`` calls for its status
DAEMON = {
    "daemon/command.py": ("run",),
    "daemon/unit.py": ("install", "uninstall"),
    "daemon/process.py": ("run_foreground",),
}


def _verb_files() -> list[str]:
    """The admin commands in ``cli/`` and ``cli/doctor/``, and the comm verbs and their helpers in
    ``cli/comm/``."""
    return sorted(
        os.path.join(d, f)
        for d in ("", "comm", "doctor")
        for f in os.listdir(os.path.join(CLI, d))
        if f.endswith(".py") and f not in NOT_HERE
    )


def _opening(node: ast.expr) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        return _opening(node.values[0])
    return ""


def _verb_table(tree: ast.Module, defs: dict[str, ast.FunctionDef]) -> set[str]:
    """The functions of a module-level dict whose values are all this module's functions (a verb table)."""
    found: set[str] = set()
    for node in tree.body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, ast.Dict) and value.values:
            named = [v.id for v in value.values if isinstance(v, ast.Name) and v.id in defs]
            if len(named) == len(value.values):
                found.update(named)
    return found


def _status_functions(tree: ast.Module, entries: tuple[str, ...]) -> list[ast.FunctionDef]:
    """The entry points, the functions of a verb table, what they return from this module (``return
    _start(...)``), transitively, and every function that returns an ``EXIT_*`` name."""
    defs = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    names = set(entries) | _verb_table(tree, defs)
    for name, fn in defs.items():
        for sub in ast.walk(fn):
            if (
                isinstance(sub, ast.Return)
                and isinstance(sub.value, ast.Name)
                and sub.value.id.startswith("EXIT_")
            ):
                names.add(name)
    todo = [n for n in names if n in defs]
    while todo:
        for sub in ast.walk(defs[todo.pop()]):
            if isinstance(sub, ast.Return) and isinstance(sub.value, ast.Call):
                callee = sub.value.func
                if isinstance(callee, ast.Name) and callee.id in defs and callee.id not in names:
                    names.add(callee.id)
                    todo.append(callee.id)
    return [defs[n] for n in sorted(names) if n in defs]


def _writes_stderr(node: ast.Call) -> bool:
    func = node.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "write"
        and isinstance(func.value, ast.Attribute)
        and func.value.attr == "stderr"
    )


def _literal_statuses(value: ast.expr | None) -> list[int]:
    """The int literals a ``return`` gives: itself, or either branch of ``a if c else b``."""
    if isinstance(value, ast.Constant) and type(value.value) is int:
        return [value.value]
    if isinstance(value, ast.IfExp):
        return _literal_statuses(value.body) + _literal_statuses(value.orelse)
    return []


def offences(source: str, entries: tuple[str, ...] = ("run",)) -> list[str]:
    found = []
    tree = ast.parse(source)
    for fn in _status_functions(tree, entries):
        for sub in ast.walk(fn):
            if isinstance(sub, ast.Return):
                found += [f"line {sub.lineno}: return {n}" for n in _literal_statuses(sub.value)]
    writers = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in WRITERS]
    allowed = {id(sub) for w in writers for sub in ast.walk(w)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if (
            isinstance(node.func, ast.Name)
            and node.func.id in WRITERS
            and node.args
            and _opening(node.args[0]).startswith(ERROR_OPENINGS)
        ):
            found.append(f"line {node.lineno}: {node.func.id}({_opening(node.args[0])!r}...)")
        if _writes_stderr(node) and id(node) not in allowed:
            found.append(f"line {node.lineno}: sys.stderr.write outside {'/'.join(WRITERS)}")
    return sorted(found, key=lambda s: int(s.split()[1].rstrip(":")))


@pytest.mark.parametrize("name", _verb_files())
def test_the_verb_raises_its_errors_and_names_its_statuses(name: str) -> None:
    with open(os.path.join(CLI, name), encoding="utf-8") as f:
        assert offences(f.read()) == [], name


@pytest.mark.parametrize("name", sorted(DAEMON))
def test_sotd_daemon_raises_its_errors_and_names_its_statuses(name: str) -> None:
    with open(os.path.join(SOTD, name), encoding="utf-8") as f:
        assert offences(f.read(), DAEMON[name]) == [], name


def test_the_walk_finds_what_it_looks_for() -> None:
    bad = 'def run(argv):\n    err(f"ERROR: {x}")\n    err("usage: me")\n    return 1\n'
    assert offences(bad) == ["line 2: err('ERROR: '...)", "line 3: err('usage: me'...)", "line 4: return 1"]
    assert offences("def run(argv):\n    err('WARNING: x')\n    return EXIT_OK\n") == []


def test_the_walk_reads_a_verb_table_as_entry_points() -> None:
    table = (
        "def cmd_sync(argv):\n"
        "    return 1 if argv else EXIT_OK\n"
        "def cmd_post(argv):\n"
        "    return _report(argv)\n"
        "def _report(res):\n"
        "    return 3\n"
        "def width():\n"
        "    return 80\n"
        "VERBS = {'sync': cmd_sync, 'post': cmd_post}\n"
        "LIMITS = {'width': 80}\n"
        "def run(argv):\n"
        "    return VERBS[argv[0]](argv[1:])\n"
    )
    assert offences(table) == ["line 2: return 1", "line 6: return 3"]


def test_the_walk_covers_sotd_ocx() -> None:
    assert "ocx.py" in _verb_files()


def test_the_walk_follows_a_status_to_the_helpers_that_make_it() -> None:
    daemon = (
        "def run(argv):\n"
        "    return _stop(argv)\n"
        "def _stop(sock):\n"
        "    if not sock:\n"
        "        sys.stderr.write('sotd daemon: no daemon runs here')\n"
        "        return 1\n"
        "    return EXIT_OK\n"
        "def _start(sock):\n"
        "    if sock:\n"
        "        return EXIT_OK\n"
        "    return 2\n"
        "def _note(text):\n"
        "    sys.stderr.write(text)\n"
        "def stale_window():\n"
        "    return 600\n"
        "def install(path):\n"
        "    return 0\n"
    )
    assert offences(daemon) == [
        "line 5: sys.stderr.write outside err/_note",
        "line 6: return 1",
        "line 11: return 2",
    ]
    assert offences(daemon, ("run", "install")) == [
        "line 5: sys.stderr.write outside err/_note",
        "line 6: return 1",
        "line 11: return 2",
        "line 17: return 0",
    ]
