"""Transcript tests: every ``.t`` file under ``cases/`` is a session script with its exact output.

Format (one block per command):

    # a comment
    $ alpha join --name alpha          run `sotd comm join --name alpha` as session alpha
    Joined sot-comm as @alpha  (alpha on testhost).     an exact stdout line (<blank> for an empty one)
    ! comm: something                   an exact stderr line
    [exit 3]                            the exit status (0 when absent)
    % stale beta                        a set-up step (see STEPS below)

Expected lines may hold {HOME}, {BIN}, {ROOT:<session>}, {TS} (any stamp) and {ANY} (any text). Stdout and
stderr are each compared whole, line by line, in order.
"""

from __future__ import annotations

import json
import os
import re
import shlex

import pytest

from tests.conftest import Comm

CASES = os.path.join(os.path.dirname(__file__), "cases")
STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


def _registry(comm: Comm) -> dict:
    with open(comm.layout.registry) as f:
        return json.load(f)


def _put_registry(comm: Comm, doc: dict) -> None:
    with open(comm.layout.registry, "w") as f:
        f.write(json.dumps(doc, indent=2) + "\n")


def step_stale(comm: Comm, handle: str) -> None:
    """Make a handle's last_seen 601 s old (stale by the 600 s rule)."""
    import time

    doc = _registry(comm)
    doc["agents"][handle]["last_seen"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 601))
    _put_registry(comm, doc)


def step_garbage_registry(comm: Comm) -> None:
    with open(comm.layout.registry, "w") as f:
        f.write('{"agents": 5}\n')


def step_foreign_row(comm: Comm, handle: str, root: str) -> None:
    """A live row for ``handle`` held by another project's root."""
    import time

    doc = _registry(comm)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    doc["agents"][handle] = {
        "host": comm.host,
        "workspace_id": "",
        "repo": os.path.basename(root),
        "root": root,
        "expertise": [],
        "status": "idle",
        "joined": now,
        "last_seen": now,
    }
    _put_registry(comm, doc)


def step_raw_line(comm: Comm, handle: str, *text: str) -> None:
    """Append raw bytes (\\n and \\0 escapes understood) to an inbox, as a dead or foreign writer would."""
    data = " ".join(text).encode("latin-1").decode("unicode_escape").encode("latin-1")
    with open(comm.layout.inbox(handle), "ab") as f:
        f.write(data)


STEPS = {
    "stale": step_stale,
    "garbage-registry": step_garbage_registry,
    "foreign-row": step_foreign_row,
    "raw": step_raw_line,
}


class Block:
    def __init__(self, lineno: int, who: str, args: list[str]) -> None:
        self.lineno = lineno
        self.who = who
        self.args = args
        self.out: list[str] = []
        self.err: list[str] = []
        self.code = 0


def parse(path: str) -> list[Block | tuple[str, list[str]]]:
    items: list[Block | tuple[str, list[str]]] = []
    current: Block | None = None
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if line.startswith("# ") or line == "#" or not line.strip():
                continue
            if line.startswith("$ "):
                who, *args = shlex.split(line[2:])
                current = Block(n, who, args)
                items.append(current)
            elif line.startswith("% "):
                current = None
                words = line[2:].split(" ", 2) if line.startswith("% raw ") else shlex.split(line[2:])
                items.append((words[0], words[1:]))
            elif current is None:
                raise ValueError(f"{path}:{n}: output line outside a command block")
            elif m := re.fullmatch(r"\[exit (\d+)\]", line):
                current.code = int(m.group(1))
            elif line.startswith("! ") or line == "!":
                current.err.append(line[2:])
            else:
                current.out.append("" if line == "<blank>" else line)
    return items


def _pattern(expected: str, subst: dict[str, str]) -> re.Pattern[str]:
    parts = re.split(r"(\{[A-Z]+(?::[a-z0-9]+)?\})", expected)
    rx = ""
    for p in parts:
        if p == "{TS}":
            rx += STAMP
        elif p == "{ANY}":
            rx += ".*"
        elif p in subst:
            rx += re.escape(subst[p])
        else:
            rx += re.escape(p)
    return re.compile(rx)


def _compare(kind: str, got: list[str], want: list[str], subst: dict[str, str], where: str) -> None:
    ok = len(got) == len(want) and all(
        _pattern(w, subst).fullmatch(g) for g, w in zip(got, want, strict=False)
    )
    if not ok:
        raise AssertionError(
            f"{where}: {kind} differs\n--- expected\n" + "\n".join(want) + "\n--- got\n" + "\n".join(got)
        )


def case_files() -> list[str]:
    return sorted(f for f in os.listdir(CASES) if f.endswith(".t"))


@pytest.mark.transcripts
@pytest.mark.parametrize("case", case_files())
def test_transcript(case: str, tmp_path: object) -> None:
    comm = Comm(str(tmp_path))
    items = parse(os.path.join(CASES, case))
    for item in items:
        if isinstance(item, tuple):
            STEPS[item[0]](comm, *item[1])
            continue
        s = comm.session(item.who)
        subst = {"{HOME}": comm.home, "{BIN}": comm.layout.bin_dir}
        for name, other in comm.sessions.items():
            subst[f"{{ROOT:{name}}}"] = other.root
        r = s.run(*item.args)
        where = f"{case}:{item.lineno} ($ {item.who} {' '.join(item.args)})"
        _compare("stdout", r.out_lines, item.out, subst, where)
        _compare("stderr", r.err_lines, item.err, subst, where)
        assert r.code == item.code, f"{where}: exit {r.code}, expected {item.code}\n{r}"
