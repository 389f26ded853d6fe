"""The hot path stays light (docs/design.md "The hot path").

``sotd comm send|poll|unread|join`` run with ``PYTHONPROFILEIMPORTTIME=1`` through the console script in a
private comm folder, and the same verbs and the Stop hook through the wrappers ``sotd comm install`` wrote
(issue 17); none of the heavy modules below may be imported (``re``, and ``json`` which imports it, cost
most of a verb's start: ``sotd.fastjson`` reaches the same C code without them), and a wrapper starts the
interpreter without ``site``. On a failure the message names the import chain that pulled the module in
(read from the nesting of the importtime report).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import SOTD, Comm

pytestmark = pytest.mark.unit

FORBIDDEN = frozenset(
    (
        *(
            "asyncio",
            "subprocess",
            "logging",
            "dataclasses",
            "click",
            "typer",
            "rich",
            "pydantic",
            "argparse",
        ),
        *("re", "json", "enum", "typing", "pathlib"),
    )
)


# Modules a hot path does without (issue 17 target 1): ``math`` is a .so load, and each sotd module is
# found, read and unmarshalled at every call. A verb that needs one of them for its own work lists it.
UNNEEDED = frozenset(
    ("math", "sotd.cli.comm.hints", "sotd.cli.comm.sessionstart", "sotd.cli.comm.status", "sotd.cmdtable")
)
NEEDS = {
    "poll": {"sotd.cli.comm.poll"},
    "status-prompt": {"sotd.cli.comm.status"},
}  # the prompt hook is a status event
STOP_HOOK_UNNEEDED = frozenset(("sotd.cli.comm.poll", "sotd.formats.showline"))


def unneeded(names: set[str], verb: str, *, stop_hook: bool = False) -> set[str]:
    """The modules of ``UNNEEDED`` (and, for the Stop hook, ``STOP_HOOK_UNNEEDED``) that were imported."""
    extra = UNNEEDED | (STOP_HOOK_UNNEEDED if stop_hook else frozenset())
    return (names & extra) - NEEDS.get(verb, set())


def imported(stderr: str) -> list[tuple[int, str]]:
    """(depth, module) in import order from ``-X importtime`` lines (``import time: self | cum | name``)."""
    rows = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or line.count("|") < 2:
            continue
        name = line.split("|", 2)[2]
        if name.strip() == "imported package":
            continue
        stripped = name.lstrip(" ")
        rows.append(((len(name) - len(stripped) - 1) // 2, stripped.strip()))
    return rows


def chains(rows: list[tuple[int, str]]) -> dict[str, list[str]]:
    """For each forbidden module: the chain of imports that led to it, outermost first.

    importtime prints a module after the modules it imported (post-order), so the importer of a line is the
    next line below it with a smaller depth.
    """
    found: dict[str, list[str]] = {}
    for i, (depth, name) in enumerate(rows):
        if name.split(".")[0] not in FORBIDDEN or name in found:
            continue
        chain, want = [name], depth
        for d, n in rows[i + 1 :]:
            if d < want:
                chain.append(n)
                want = d
        found[name] = list(reversed(chain))
    return found


@pytest.fixture(scope="module")
def joined(tmp_path_factory: pytest.TempPathFactory):
    comm = Comm(str(tmp_path_factory.mktemp("hot")))
    a, b = comm.session("alpha"), comm.session("beta")
    assert a.run("join", "--name", "alpha").code == 0
    assert b.run("join", "--name", "beta").code == 0
    return comm, a


@pytest.mark.parametrize(
    "args",
    [
        ("send", "@beta", "hi"),
        ("send", "--broadcast", "all"),
        ("poll",),
        ("unread", "alpha"),
        ("unread",),
        ("join", "--name", "alpha"),
        ("hook", "stop"),
    ],
    ids=lambda a: "-".join(x.strip("@-") for x in a),
)
def test_no_heavy_imports(joined, args: tuple[str, ...]) -> None:
    """Through the console script as pip wrote it (``bin/sotd``), the Stop hook included."""
    _, a = joined
    env = dict(a.env, PYTHONPROFILEIMPORTTIME="1")
    env.pop("PYTHONIMPORTTIME", None)
    p = subprocess.run(
        [SOTD, "comm", *args],
        check=False,
        cwd=a.root,
        env=env,
        input=json.dumps(STOP) if args[0] == "hook" else "",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    rows = imported(p.stderr)
    names = {n for _, n in rows}
    assert "sotd.cli.main" in names, "the import report was not read"
    bad = chains(rows)
    assert not bad, "\n".join(f"{m}: " + " -> ".join(c) for m, c in bad.items())
    if args[0] != "join" and args[:2] != ("send", "--broadcast"):  # join and --broadcast read options
        assert not unneeded(names, args[0], stop_hook=args[0] == "hook")


def test_console_script_as_installed_imports_nothing_itself() -> None:
    """pip's ``bin/sotd``: the venv's interpreter, then only ``sys`` and ``sotd.entry`` (no ``re``: an
    old pip's script imported it to strip ``-script.pyw``). It cannot start the interpreter with ``-S``
    (pip rewrites a ``#!python`` line to the bare interpreter), so it pays ``site``: docs/benchmarks.md."""
    with open(SOTD) as f:
        text = f.read()
    first, _, body = text.partition("\n")
    assert first.startswith("#!") and first.split()[0].endswith("python"), first
    imports = sorted(
        line.strip() for line in body.splitlines() if line.strip().startswith(("import ", "from "))
    )
    assert imports == ["from sotd.entry import console", "import sys"], imports


STOP = {"session_id": "hot-1", "hook_event_name": "Stop", "stop_hook_active": False}


@pytest.mark.parametrize(
    ("script", "args", "stdin"),
    [
        ("comm-send.sh", ("@beta", "hi"), ""),
        ("comm-poll.sh", (), ""),
        ("comm-join.sh", ("--name", "alpha"), ""),
        ("comm-status-idle.sh", (), json.dumps(STOP)),
        ("comm-status-idle.sh", (), json.dumps({**STOP, "last_assistant_message": "SITREP: done [it] {x}"})),
        ("comm-status-prompt.sh", (), json.dumps({"session_id": "hot-1", "prompt": "go"})),
    ],
    ids=["send", "poll", "join", "stop-hook", "stop-hook-sitrep", "prompt-hook"],
)
def test_wrappers_as_installed_start_without_site_or_heavy_imports(
    joined, script: str, args, stdin: str
) -> None:
    comm, a = joined
    path = os.path.join(comm.layout.bin_dir, script)
    with open(path) as f:
        assert ' -S "$entry" ' in f.read()  # the direct entry (sotd/__main__.py), not the console script
    env = dict(a.env, PYTHONPROFILEIMPORTTIME="1")
    p = subprocess.run(
        [path, *args],
        check=False,
        cwd=a.root,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    rows = imported(p.stderr)
    names = {n for _, n in rows}
    assert "sotd.cli.main" in names, "the import report was not read"
    assert "site" not in names
    bad = chains(rows)
    assert not bad, "\n".join(f"{m}: " + " -> ".join(c) for m, c in bad.items())
    verb = script.removeprefix("comm-").removesuffix(".sh")
    if verb != "join":
        assert not unneeded(names, verb, stop_hook=verb == "status-idle")


def test_chain_reader() -> None:
    report = "\n".join(
        [
            "import time: self [us] | cumulative | imported package",
            "import time:        1 |          1 |     _weakref",
            "import time:        1 |          1 |       logging",
            "import time:        1 |          2 |     sotd.cli.comm.daemoncall",
            "import time:        1 |          3 |   sotd.cli.comm.send",
            "import time:        1 |          4 | sotd.cli.main",
        ]
    )
    assert chains(imported(report)) == {
        "logging": ["sotd.cli.main", "sotd.cli.comm.send", "sotd.cli.comm.daemoncall", "logging"]
    }


@pytest.mark.parametrize("package", ["sotd.cli", "sotd.cli.comm", "sotd.client", "sotd.formats", "sotd.wire"])
def test_a_hot_path_package_holds_no_code(package: str) -> None:
    """A verb imports each package above its module: its ``__init__.py`` is a docstring and nothing else
    (issue 29: the verbs moved into ``sotd.cli.comm``, which must cost one empty module and no more)."""
    import ast
    import importlib

    path = importlib.import_module(package).__file__
    assert path is not None
    with open(path, encoding="utf-8") as f:
        body = ast.parse(f.read()).body
    assert len(body) <= 1 and all(
        isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) for n in body
    ), path
