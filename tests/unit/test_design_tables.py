"""The module tables of docs/design.md and docs/jobs.md name modules and names that exist (issue 29 item 4).

File: ``tests/unit/test_design_tables.py``, beside ``test_design_layers`` (the layer block) and
``test_errors`` (docs/errors.md, generated). Guarantee: in design.md's "One spec rule, one home" and "Where
the spec lives in the code" tables every backticked module path (``formats/inbox.py``, ``daemon/decide``)
is a module of ``sotd``, every dotted or slashed name (``formats.registry.AgentRow.verdict``,
``daemon/decide.due``) resolves there (a module, then a top-level name, then a class member), and every
bare name (``Context``, ``chosen_name``) is defined somewhere in the package (a keyword argument such as
``sync=False`` and a pattern such as ``holder.*_field`` are not checked); docs/jobs.md's module table
has one row per module of ``sotd.jobs`` (but ``__init__`` and ``errors``, described below it), and each
name a row gives is defined in its module (``Class (member, ...)``: members of that class).
docs/daemon.md's command table has a row for each ``sotd daemon`` and ``sotd topology`` command of the
command table (``sotd.cmdtable``) and names no other, with only the options that command takes.
What would break it: a module renamed, split or moved with its row left behind (``runner.supervise`` after
the runner's split), or a new module of ``sotd.jobs`` with no row. The measurement tables (timings) are
not checked: they are records of a run, not claims about the code.
"""

from __future__ import annotations

import ast
import functools
import os
import re

import pytest

import sotd
from tests import source_trees

pytestmark = pytest.mark.unit

SRC = os.path.dirname(os.path.abspath(sotd.__file__))
DOCS = os.path.join(SRC, "..", "..", "docs")
CHECKED = ("## One spec rule, one home", "## Where the spec lives in the code")
TICKED = re.compile(r"`([^`]+)`")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# backticked words in those tables that are not names of this package: each says what it is
NOT_CODE = {
    "comm.file": "an op name on the wire (behaviour 2.3)",
    "expires": "a frame's field",
    "protocol_version": "registry.json's field",
    "daemon": "version.query's answer object",
    "ok": "an answer's field",
    "None": "Python's",
    "-": "the holder record's text for an unknown field",
    '""': "the empty declared host",
    "…": "and the rest",
}

Modules = dict[str, ast.Module]


@functools.cache
def _modules() -> Modules:
    return {
        rel.removesuffix(".py").removesuffix("/__init__"): tree for rel, tree in source_trees.modules(SRC)
    }


def _top_names(tree: ast.Module) -> dict[str, ast.AST]:
    out: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = node
        elif isinstance(node, ast.Assign):
            out.update((t.id, node) for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update(((a.asname or a.name).split(".")[0], node) for a in node.names)
    return out


def _members(node: ast.AST) -> set[str]:
    """A class's methods and attributes (its body's names and ``self.<x>`` stores)."""
    if not isinstance(node, ast.ClassDef):
        return set()
    names = set(_top_names(ast.Module(body=node.body, type_ignores=[])))
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store):
            names.add(sub.attr)
    return names


@functools.cache
def _everywhere() -> frozenset[str]:
    """Every name the package defines (top-level or as a member)."""
    names: set[str] = set()
    for tree in _modules().values():
        top = _top_names(tree)
        names.update(top)
        for node in top.values():
            names |= _members(node)
    return frozenset(names)


def resolves(token: str, mods: Modules) -> bool:
    """Does ``token`` (a module path, a dotted or slashed name, or a bare name) name something real?"""
    path = token.removesuffix(".py") if token.endswith(".py") else None
    if path is not None:
        return path in mods
    if token.startswith("sotd.") and token.count(".") == 1:  # a name of the package itself
        return token[5:] in _top_names(mods["__init__"])
    parts = token.replace("/", ".").split(".")
    if not all(IDENT.fullmatch(p) for p in parts):
        return False
    mod, rest = _module_of(parts, mods)
    if mod is None:
        return len(parts) == 1 and token in _everywhere()
    if not rest:
        return True
    top = _top_names(mods[mod])
    if rest[0] not in top:
        return False
    return len(rest) == 1 or (len(rest) == 2 and rest[1] in _members(top[rest[0]]))


def _module_of(parts: list[str], mods: Modules) -> tuple[str | None, list[str]]:
    """The module the longest leading run of ``parts`` names (a path from ``sotd``, or the one module of
    that base name: ``decide`` is ``daemon/decide``), and the names after it."""
    for cut in range(len(parts), 0, -1):
        mod = "/".join(parts[:cut])
        if mod in mods:
            return mod, parts[cut:]
    by_base = [m for m in mods if m.rsplit("/", 1)[-1] == parts[0]]
    if len(parts) > 1 and len(by_base) == 1:
        return by_base[0], parts[1:]
    return None, []


def _rows(text: str, heading: str) -> list[list[str]]:
    """The cells of the first table under ``heading`` (the header and rule rows dropped)."""
    part = text.split(heading, 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in part.splitlines() if ln.startswith("|")]
    return [[c.strip() for c in r.strip("|").split(" | ")] for r in rows[2:]]


def design_misses(text: str, mods: Modules) -> list[str]:
    out = []
    for heading in CHECKED:
        for row in _rows(text, heading):
            for token in TICKED.findall(" | ".join(row[1:])):
                if token in NOT_CODE or "*" in token or "=" in token:  # a pattern, a keyword argument
                    continue
                if not resolves(token, mods):
                    out.append(f"{heading[3:]}: {row[0]}: `{token}`")
    return out


def jobs_misses(text: str, mods: Modules) -> list[str]:
    """docs/jobs.md's module table against ``sotd.jobs``: a row per module, each name in its module."""
    table = _rows("\n## start\n" + text, "## start")
    out, seen = [], set()
    for row in table:
        mod = "jobs/" + row[0].strip("`").removesuffix(".py")
        seen.add(mod)
        if mod not in mods:
            out.append(f"{row[0]}: no such module")
            continue
        top = _top_names(mods[mod])
        for cell in row[1:]:
            # ``Name`` or ``Name (`member`, ...)``: members belong to the name before the bracket
            for name, members in re.findall(r"`([A-Za-z_][\w.]*)`(?:\s*\(([^)]*)\))?", cell):
                owner, _, member = name.partition(".")
                if owner not in top:
                    out.append(f"{row[0]}: `{name}`")
                    continue
                wanted = [member] if member else []
                wanted += [m for m in TICKED.findall(members) if IDENT.fullmatch(m)]
                out += [f"{row[0]}: `{owner}.{m}`" for m in wanted if m not in _members(top[owner])]
    jobs = {m for m in mods if m.startswith("jobs/")} - {"jobs", "jobs/errors"}
    out += [f"no row for {m}.py" for m in sorted(jobs - seen)]
    return out


def command_misses(text: str, table: dict[str, object]) -> list[str]:
    """docs/daemon.md's "Commands" table against ``table`` (``cmdtable.TABLE``): the ``daemon`` and
    ``topology`` commands, each row's options among its command's."""
    out, seen = [], set()
    for row in _rows(text, "## Commands"):
        words = row[0].strip("`").split()[1:]  # after "sotd"
        path = " ".join(w for w in words if not w.startswith(("[", "-")) and w.islower())
        opts = {w.strip("[]") for w in words if w.startswith(("[--", "--"))}
        seen.add(path)
        entry = table.get(path)
        parent, _, last = path.rpartition(" ")
        if entry is None:
            above = table.get(parent)
            if above is None or last not in getattr(above, "synopsis", "").split("|"):
                out.append(f"{row[0]}: no such command")
            continue
        taken = {o[0] for o in getattr(entry, "options", ())}
        out += [f"{row[0]}: {o} is not an option of sotd {path}" for o in sorted(opts - taken)]
    wanted = {k for k in table if k.startswith("daemon ")}
    topo = table.get("topology")
    wanted |= {f"topology {w}" for w in getattr(topo, "synopsis", "").split("|") if w}
    out += [f"no row for sotd {k}" for k in sorted(wanted - seen)]
    return out


def _read(name: str) -> str:
    with open(os.path.join(DOCS, name), encoding="utf-8") as f:
        return f.read()


def test_the_design_tables_name_what_exists() -> None:
    assert design_misses(_read("design.md"), _modules()) == []


def test_the_jobs_module_table_matches_the_package() -> None:
    assert jobs_misses(_read("jobs.md"), _modules()) == []


def test_the_daemon_command_table_matches_the_command_table() -> None:
    from sotd import cmdtable

    assert command_misses(_read("daemon.md"), dict(cmdtable.TABLE)) == []


def test_the_command_reader_finds_a_stale_row() -> None:
    class Entry:
        def __init__(self, synopsis: str, options: tuple[tuple[str, str, str], ...] = ()) -> None:
            self.synopsis, self.options = synopsis, options

    table: dict[str, object] = {
        "daemon start": Entry("[options]", (("--socket", "PATH", "the socket"),)),
        "daemon stop": Entry("[options]"),
        "topology": Entry("relay-endpoint|path"),
    }
    text = (
        "## Commands\n\n| command | what |\n|---|---|\n"
        "| `sotd daemon start [--socket P]` | starts |\n"
        "| `sotd daemon stop [--socket P]` | stops |\n"
        "| `sotd daemon nap` | naps |\n"
        "| `sotd topology path` | the path |\n"
    )
    assert command_misses(text, table) == [
        "`sotd daemon stop [--socket P]`: --socket is not an option of sotd daemon stop",
        "`sotd daemon nap`: no such command",
        "no row for sotd topology relay-endpoint",
    ]


def test_the_readers_find_a_stale_row() -> None:
    mods = {
        "jobs/runner": ast.parse("class JobRun:\n    def start(self): pass\ndef adopt(): pass\n"),
        "jobs/outcome": ast.parse("def classify(): pass\n"),
        "jobs/errors": ast.parse(""),
        "daemon/decide": ast.parse("def due(): pass\n"),
    }
    jobs = (
        "| module | pure | io |\n|---|---|---|\n"
        "| `runner.py` | | `JobRun` (`start`, `wait`), `supervise`, `adopt` |\n"
        "| `gone.py` | `x` | |\n"
    )
    assert jobs_misses(jobs, mods) == [
        "`runner.py`: `JobRun.wait`",
        "`runner.py`: `supervise`",
        "`gone.py`: no such module",
        "no row for jobs/outcome.py",
    ]
    assert resolves("daemon/decide.due", mods) and resolves("daemon/decide", mods)
    assert resolves("decide.due", mods)  # the one module of that base name
    assert not resolves("daemon/decide.scan", mods) and not resolves("daemon/wake.py", mods)
