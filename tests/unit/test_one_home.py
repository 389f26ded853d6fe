"""One spec rule, one home (issue 16, point 1): a rule that has a home is defined nowhere else.

The test reads every module of the ``sotd`` package (ast, nothing is imported) and fails on:

- a second ``def`` of a rule's name outside the rule's home module (``HOMES``);
- a call of ``os.replace`` / ``os.rename`` outside ``sotd.fsprim`` (whole-file replacement has one home;
  a move between two folders by descriptor, ``src_dir_fd=``, is not one);
- a module-level ``ROLES`` or ``PROTOCOL_VERSION`` given a literal outside its home;
- a read of the liveness stamp rule (``_clock.is_fresh``) outside the registry's row view;
- a string ``"stat"`` path part or ``.../stat`` f-string (a ``/proc/<pid>/stat`` read) outside ``sotd.sysprobe``;
- the registry's ``"agents"`` object reached by subscript or ``.get`` outside ``formats/registry.py``
  (``registry.agents_of`` is its home; the daemon's pure decisions get the entry from their caller).

A second walk holds the wire's names to ``sotd.wire``: outside it, no string literal spells an op name
(``wire/payloads.py``, ``wire/hello.py``) or an answer code (``wire/answers.py``), and no answer's ``ok``
is read by hand (``answers.is_ok``), but for the few literals in ``WIRE_NAME_ELSEWHERE`` that are other
things with the same spelling.

There are no other exemptions. ``SOTD_ONE_HOME_ROOT`` points the walk at another tree (used to check that the old tree
fails this test).
"""

from __future__ import annotations

import ast
import os

import pytest

import sotd
from tests import source_trees

pytestmark = pytest.mark.unit

ROOT = os.environ.get("SOTD_ONE_HOME_ROOT") or os.path.dirname(os.path.abspath(sotd.__file__))

# rule name -> the module (path below the package folder) that is its one home
HOMES = {
    # /proc probes and box facts
    "start_tick": "sysprobe.py",
    "stat_of": "sysprobe.py",
    "split_stat": "sysprobe.py",
    "pidns": "sysprobe.py",
    "boot_id": "sysprobe.py",
    "machine_id": "sysprobe.py",
    "declared_host": "sysprobe.py",
    "self_host": "sysprobe.py",  # runtime.self_host is an import of sysprobe.declared_host
    # file-system primitives
    "write_atomic": "fsprim.py",
    "fsync_dir": "fsprim.py",
    "write_all": "fsprim.py",
    "is_open": "fsprim.py",
    "is_private_folder": "fsprim.py",
    "owned_private": "fsprim.py",
    # registry rows: liveness, the sender's verdict, the agent list
    "is_live": "formats/registry.py",
    "agents_of": "formats/registry.py",
    # mail
    "is_directed": "handles.py",
    "comm_file_payload": "wire/payloads.py",
    "unlink_quiet": "fsprim.py",
    "_unlink_quiet": "fsprim.py",  # the private spelling of unlink_quiet, which each module once had
}

# Names no module may define, whose rule lives in its home under another name.
NOT_DEFINED_BY_NAME = {"self_host": "sysprobe.declared_host", "_unlink_quiet": "fsprim.unlink_quiet"}

CONSTANT_HOMES = {"ROLES": "wire/hello.py", "PROTOCOL_VERSION": "__init__.py"}

# A rename between two folders given by descriptors (``src_dir_fd=``) moves a file; it replaces nothing whole.
MOVE_KEYWORD = "src_dir_fd"

FRESH_HOME = "formats/registry.py"
STAT_HOME = "sysprobe.py"


def _modules(root: str) -> tuple[tuple[str, ast.Module], ...]:
    return source_trees.modules(root)  # one parse per process, shared by the walks (tests/source_trees.py)


def _is_os_attr(node: ast.AST, names: tuple[str, ...]) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr in names
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
    )


def second_homes(root: str) -> list[str]:
    """Every place that defines or re-derives a rule outside its home, as ``file:line: what``."""
    found: list[str] = []
    for rel, tree in _modules(root):
        for node in source_trees.walk(tree):
            where = f"{rel}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                home = HOMES.get(node.name)
                if home is not None and rel != home:
                    found.append(f"{where}: def {node.name} (its home is {home})")
            elif isinstance(node, ast.Call):
                if (
                    _is_os_attr(node.func, ("replace", "rename"))
                    and rel != "fsprim.py"
                    and not any(k.arg == MOVE_KEYWORD for k in node.keywords)
                ):
                    found.append(f"{where}: hand-rolled os.{node.func.attr} (use fsprim.write_atomic)")
                func = node.func
                if isinstance(func, ast.Attribute) and func.attr == "is_fresh" and rel != FRESH_HOME:
                    found.append(f"{where}: liveness read by hand (use registry.AgentRow.is_live)")
                if (
                    isinstance(func, ast.Attribute)
                    and func.attr == "get"
                    and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and node.args[0].value == "agents"
                    and rel != "formats/registry.py"
                ):
                    found.append(f'{where}: .get("agents") (use registry.agents_of)')
                if rel != STAT_HOME and any(
                    isinstance(a, ast.Constant) and a.value == "stat" for a in node.args
                ):
                    found.append(f'{where}: a "stat" path part (use sysprobe.stat_of / stat_bytes)')
            elif isinstance(node, ast.Subscript):
                sl = node.slice
                if isinstance(sl, ast.Constant) and sl.value == "agents" and rel != "formats/registry.py":
                    found.append(f'{where}: ["agents"] (use registry.agents_of)')
            elif isinstance(node, ast.JoinedStr) and rel != STAT_HOME:
                tail = node.values[-1] if node.values else None
                if isinstance(tail, ast.Constant) and str(tail.value).endswith("/stat"):
                    found.append(f"{where}: a /proc/<pid>/stat path (use sysprobe.stat_of / stat_bytes)")
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign) and not isinstance(stmt.value, ast.Name | ast.Attribute):
                for target in stmt.targets:
                    if isinstance(target, ast.Name) and target.id in CONSTANT_HOMES:
                        home = CONSTANT_HOMES[target.id]
                        if rel != home:
                            found.append(
                                f"{rel}:{stmt.lineno}: {target.id} spelled again (its home is {home})"
                            )
    return found


def test_every_rule_with_a_home_lives_only_there() -> None:
    found = second_homes(ROOT)
    assert not found, "a rule that has a home is written again:\n" + "\n".join(found)


def test_every_home_defines_its_rule() -> None:
    """A home that lost its rule (renamed, moved) would make the walk above vacuous for that name."""
    defined: dict[str, set[str]] = {}
    for rel, tree in _modules(ROOT):
        for node in source_trees.walk(tree):
            if isinstance(node, ast.FunctionDef):
                defined.setdefault(rel, set()).add(node.name)
    missing = [
        f"{name} in {home}"
        for name, home in HOMES.items()
        if name not in NOT_DEFINED_BY_NAME and name not in defined.get(home, set())
    ]
    assert not missing, missing


def test_the_walk_finds_a_planted_copy(tmp_path) -> None:
    """The oracle itself: a tree with one copy of each kind is reported, line by line."""
    pkg = tmp_path / "pkg"
    (pkg / "formats").mkdir(parents=True)
    (pkg / "fsprim.py").write_text("import os\ndef write_atomic():\n    os.rename('a', 'b')\n")
    (pkg / "mover.py").write_text("import os\nos.replace('a', 'a', src_dir_fd=3, dst_dir_fd=4)\n")
    (pkg / "copy.py").write_text(
        "import os\n"
        "ROLES = ('cli',)\n"
        "def start_tick(pid):\n    return open(f'/proc/{pid}/stat')\n"
        "def f(doc, row, clock):\n"
        "    os.replace('t', 'p')\n"
        "    clock.is_fresh(row.get('last_seen'))\n"
        "    return doc['agents'], doc.get('agents'), os.path.join('/proc', '1', 'stat')\n"
    )
    got = second_homes(str(pkg))
    kinds = sorted((g.split(": ", 1)[0], g.split(": ", 1)[1].split(" (")[0]) for g in got)
    assert kinds == [
        ("copy.py:2", "ROLES spelled again"),
        ("copy.py:3", "def start_tick"),
        ("copy.py:4", "a /proc/<pid>/stat path"),
        ("copy.py:6", "hand-rolled os.replace"),
        ("copy.py:7", "liveness read by hand"),
        ("copy.py:8", '.get("agents")'),
        ("copy.py:8", '["agents"]'),
        ("copy.py:8", 'a "stat" path part'),
    ], got


def class_names_used_twice(root: str) -> dict[str, list[str]]:
    """Class names defined in more than one module of the package (issue 16 point 5: a name says which
    thing it is, so two classes never share one)."""
    where: dict[str, list[str]] = {}
    for rel, tree in _modules(root):
        for node in source_trees.walk(tree):
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(rel)
    return {name: rels for name, rels in where.items() if len(rels) > 1}


# (file, literal) -> why that literal is not the wire's name
WIRE_NAME_ELSEWHERE = {
    ("errors.py", "bad_handle"): "the CLI's own error code (docs/errors.md); a leaf may not import the wire",
    ("errors.py", "file_failed"): "the CLI's own error code (docs/errors.md); a leaf may not import the wire",
    ("demo/scripted_agent.py", "hello"): "the text the scripted agent drafts, not the hello op",
}


def wire_names() -> set[str]:
    from sotd.wire import answers, hello, payloads

    return {*payloads.OPS, payloads.WORKSPACE_CHANGED, hello.HELLO_OP, *answers.CODES}


def wire_names_by_hand(root: str, names: set[str]) -> list[str]:
    """Every op name or answer code spelled outside ``sotd.wire``, and every ``.get("ok")``, as
    ``file:line: what``."""
    found: list[str] = []
    seen: set[tuple[str, str]] = set()
    for rel, tree in _modules(root):
        if rel.startswith("wire/"):
            continue
        for node in source_trees.walk(tree):
            where = f"{rel}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                if (rel, node.value) in WIRE_NAME_ELSEWHERE:
                    seen.add((rel, node.value))
                else:
                    found.append(f"{where}: {node.value!r} spelled by hand (use sotd.wire's constant)")
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value == "ok"
            ):
                found.append(f'{where}: .get("ok") (use wire.answers.is_ok)')
    if root == ROOT:
        for rel, value in sorted(set(WIRE_NAME_ELSEWHERE) - seen):
            found.append(
                f"{rel}: {value!r} is in WIRE_NAME_ELSEWHERE but not spelled there any more: drop it"
            )
    return found


def test_op_names_and_answer_codes_are_spelled_only_in_the_wire() -> None:
    found = wire_names_by_hand(ROOT, wire_names())
    assert not found, "an op name or answer code is written outside sotd.wire:\n" + "\n".join(found)


def test_the_wire_name_walk_finds_a_planted_spelling(tmp_path) -> None:
    (tmp_path / "wire").mkdir()
    (tmp_path / "wire" / "payloads.py").write_text("COMM_FILE = 'comm.file'\n")
    (tmp_path / "hub.py").write_text(
        "def f(a, call):\n    call('comm.file')\n    return a.get('ok'), {'code': 'not_here'}\n"
    )
    got = wire_names_by_hand(str(tmp_path), wire_names())
    assert sorted(g.split(" (")[0] for g in got) == [
        "hub.py:2: 'comm.file' spelled by hand",
        "hub.py:3: 'not_here' spelled by hand",
        'hub.py:3: .get("ok")',
    ], got


def test_no_two_classes_of_the_package_share_a_name() -> None:
    assert class_names_used_twice(ROOT) == {}


def test_the_class_name_walk_finds_a_planted_twin(tmp_path) -> None:
    (tmp_path / "a.py").write_text("class Row:\n    pass\n")
    (tmp_path / "b.py").write_text("class Row:\n    pass\nclass Other:\n    pass\n")
    assert class_names_used_twice(str(tmp_path)) == {"Row": ["a.py", "b.py"]}


# A request's payload is read through sotd.wire.payloads' readers only (issue 16 point 2: the daemon never
# reads a payload field by hand beside the reader). Each exemption is not a request payload, with why.
PAYLOAD_READ_ELSEWHERE = {
    ("daemon/links.py", "error"): "a hello answer's refusal text, read as the link reports it",
}


def payload_reads_by_hand(root: str) -> list[str]:
    """Every ``payload.get("key")`` / ``<x>.payload.get("key")`` outside ``sotd.wire``, as
    ``file:line: key``."""
    found: list[str] = []
    for rel, tree in _modules(root):
        if rel.startswith("wire/"):
            continue
        for node in source_trees.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            owner = node.func.value
            named = (isinstance(owner, ast.Name) and owner.id == "payload") or (
                isinstance(owner, ast.Attribute) and owner.attr == "payload"
            )
            if node.func.attr == "get" and named and node.args and isinstance(node.args[0], ast.Constant):
                key = node.args[0].value
                if (rel, key) not in PAYLOAD_READ_ELSEWHERE:
                    found.append(f"{rel}:{node.lineno}: payload.get({key!r})")
    return found


def test_request_payloads_are_read_only_by_the_wire_readers() -> None:
    found = payload_reads_by_hand(ROOT)
    assert not found, "a payload field read by hand (add a reader to sotd.wire.payloads):\n" + "\n".join(
        found
    )


def test_the_payload_walk_finds_a_planted_read(tmp_path) -> None:
    (tmp_path / "rows.py").write_text(
        "def f(payload, env):\n    return payload.get('label'), env.payload.get('x')\n"
    )
    assert payload_reads_by_hand(str(tmp_path)) == [
        "rows.py:2: payload.get('label')",
        "rows.py:2: payload.get('x')",
    ]
