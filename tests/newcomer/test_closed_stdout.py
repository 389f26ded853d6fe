"""Issue 13, part 1: a closed stdout is never a traceback (``sotd comm list | head``).

Before: ``sotd comm list | head -1`` printed the first line, then on stderr a Python traceback ending in
``BrokenPipeError: [Errno 32] Broken pipe``, exit 1. After: the first line, nothing on stderr, exit 141
(128 + SIGPIPE, what a shell shows for ``cat`` in the same pipeline). A process started with no stdout
at all (``>&-``) keeps its own status.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import SOTD, Comm

pytestmark = pytest.mark.transcripts


def _many_rows(comm: Comm, n: int = 3000) -> None:
    """Enough rows that ``list`` writes far more than a pipe buffer holds (so the reader's close is seen)."""
    agents = {
        f"h{i}": {"host": comm.host, "root": "/", "last_seen": "2020-01-01T00:00:00Z"} for i in range(n)
    }
    with open(comm.layout.registry, "w") as f:
        json.dump({"agents": agents}, f)


def test_list_into_a_closed_pipe_exits_quietly(comm: Comm) -> None:
    _many_rows(comm)
    s = comm.session("alpha")
    with subprocess.Popen(
        [SOTD, "comm", "list"],
        cwd=s.root,
        env=s.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as p:  # leaving it closes stderr too
        assert p.stdout is not None and p.stderr is not None
        first = p.stdout.readline()
        p.stdout.close()  # as head does after its line
        err = p.stderr.read()
        code = p.wait(timeout=60)
    assert first == f"sot-comm agents  ({comm.layout.registry}):\n".encode()
    assert (err, code) == (b"", 141)


def test_list_with_no_stdout_at_all_keeps_its_status(comm: Comm) -> None:
    s = comm.session("alpha")
    r = subprocess.run(
        f"exec {SOTD} comm list >&-",
        check=False,
        shell=True,
        cwd=s.root,
        env=s.env,
        capture_output=True,
        timeout=60,
    )
    assert (r.stderr, r.returncode) == (b"", 0)
    assert os.path.exists(comm.layout.registry)
