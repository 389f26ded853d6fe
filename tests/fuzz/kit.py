"""What the fuzz tests share: a comm folder with two joined sessions, the real CLI run in process (for
volume) or as a subprocess (for the real argv, stdout and exit), the strategies for nasty text, and the
contract's oracles (docs/contract.md, "Bad input: the contract the fuzz tier checks").
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from typing import Any

from hypothesis import strategies as st

from sotd import _clock
from sotd.formats import registry
from sotd.formats.layout import Layout
from tests.conftest import SOTD, Comm

# Exit codes a `sotd comm` verb may give (docs/commands.md): ok, failed, usage, the join guard, busy.
VERB_CODES = {0, 1, 2, 3, 75}
HOOK_CODES = {0}  # a hook never fails its agent


class Ran:
    """One command's outcome: exit code (None when it raised), stdout and stderr bytes, any traceback."""

    def __init__(self, code: int | None, out: bytes, err: bytes, tb: str | None) -> None:
        self.code = code
        self.out = out
        self.err = err
        self.tb = tb

    def __repr__(self) -> str:
        return f"Ran(code={self.code}, out={self.out[:400]!r}, err={self.err[:400]!r}, tb={self.tb})"

    @property
    def text(self) -> str:
        return self.out.decode("utf-8")  # strict: what sotd prints is always UTF-8


def run_inproc(argv: list[str], env: dict[str, str], cwd: str, stdin: bytes = b"") -> Ran:
    """``sotd <argv>`` in this process: stdout a strict UTF-8 stream (what the issue's poll met), stderr
    with backslash escapes (Python's own default for it); any exception is a traceback, as it would be."""
    from sotd.cli import main as cli_main

    saved_env = dict(os.environ)
    saved = (sys.stdin, sys.stdout, sys.stderr)
    saved_cwd = os.getcwd()
    saved_umask = os.umask(0o022)  # the CLI sets 077 for itself: give this worker's later tests theirs back
    os.umask(saved_umask)
    out, err = io.BytesIO(), io.BytesIO()
    wrappers = (
        io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"),
        io.TextIOWrapper(out, encoding="utf-8", errors="strict", write_through=True),
        io.TextIOWrapper(err, encoding="utf-8", errors="backslashreplace", write_through=True),
    )
    sys.stdin, sys.stdout, sys.stderr = wrappers
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    tb: str | None = None
    code: int | None
    try:
        code = cli_main.main(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        tb = traceback.format_exc()
        code = None
    finally:
        for w in wrappers:
            try:
                w.flush()
                w.detach()  # the byte buffers stay open for getvalue
            except Exception:
                pass
        sys.stdin, sys.stdout, sys.stderr = saved
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        os.umask(saved_umask)
    return Ran(code, out.getvalue(), err.getvalue(), tb)


def run_proc(argv: list[bytes], env: dict[str, str], cwd: str, stdin: bytes = b"") -> Ran:
    """The real ``sotd`` as a subprocess with byte argv, stdout strict UTF-8 (``PYTHONIOENCODING``)."""
    e = dict(env, PYTHONIOENCODING="utf-8")
    p = subprocess.run(
        [SOTD.encode(), *argv], env=e, cwd=cwd, input=stdin, capture_output=True, timeout=60, check=False
    )
    tb = p.stderr.decode("utf-8", "replace") if b"Traceback (most recent call last)" in p.stderr else None
    return Ran(p.returncode, p.stdout, p.stderr, tb)


def holds_to_contract(r: Ran, codes: set[int]) -> None:
    """The contract for any command: no traceback, an exit code from the documented set, UTF-8 stdout."""
    assert r.tb is None, r
    assert b"Traceback (most recent call last)" not in r.err, r
    assert r.code in codes, r
    r.out.decode("utf-8")


class Box:
    """One comm folder (no wrappers installed: the verbs are run directly) with ``alpha`` and ``beta``."""

    def __init__(self, work: str) -> None:
        self.work = work
        self.comm = Comm(work, install=False)
        self.layout: Layout = self.comm.layout
        self.alpha = self.comm.session("alpha")
        self.beta = self.comm.session("beta")
        for s in (self.alpha, self.beta):
            r = run_inproc(["comm", "join", "--name", s.name], s.env, s.root)
            assert r.code == 0, r
        with open(self.layout.registry, "rb") as f:
            self.registry = f.read()
        self.self_files: dict[str, bytes] = {}
        for s in (self.alpha, self.beta):
            with open(s.self_file, "rb") as f:
                self.self_files[s.self_file] = f.read()

    def env(self, who: str, **extra: str) -> dict[str, str]:
        s = self.alpha if who == "alpha" else self.beta
        return dict(s.env, **extra)

    def root(self, who: str) -> str:
        return self.alpha.root if who == "alpha" else self.beta.root

    def cli(self, who: str, *argv: str, stdin: bytes = b"", **extra: str) -> Ran:
        return run_inproc(["comm", *argv], self.env(who, **extra), self.root(who), stdin)

    def reset(self) -> None:
        """Back to just after the two joins: no inbox, cursor, read hint or hook state; the registry and the
        self files as the joins wrote them; nothing else in the comm folder's inbox and read folders."""
        lay = self.layout
        for folder in (lay.inbox_dir, lay.read_dir):
            for name in os.listdir(folder):
                if not name.endswith(".lock"):
                    os.unlink(os.path.join(folder, name))
        shutil.rmtree(lay.state_dir, ignore_errors=True)
        doc = json.loads(self.registry)
        for row in doc["agents"].values():
            row["last_seen"] = _clock.stamp()  # live, however long the run (a long budget passes 600 s)
        for path, data in [(lay.registry, registry.encode(doc)), *self.self_files.items()]:
            if os.path.isdir(path):
                shutil.rmtree(path)
            with open(path, "wb") as f:
                f.write(data)

    def inbox(self, who: str) -> bytes:
        return self.comm.inbox_bytes(who)

    def put_inbox(self, who: str, data: bytes) -> None:
        with open(self.layout.inbox(who), "wb") as f:
            f.write(data)


def scratch_dir() -> tempfile.TemporaryDirectory[str]:
    """A private folder for one test's comm folder: on tmpfs where there is one (every case fsyncs a
    cursor and a registry; on a shared disk that, not sotd, would be the fuzz tier's cost)."""
    shm = "/dev/shm"
    return tempfile.TemporaryDirectory(dir=shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None)


# ------------------------------------------------------------------------------------------ strategies

# Code points anywhere, surrogates included (a str holding one is what a ``\ud800`` escape decodes to).
any_char = st.integers(0, 0x10FFFF).map(chr)
nasty_text = st.one_of(
    st.text(max_size=12),
    st.lists(any_char, max_size=8).map("".join),
    st.sampled_from(["\ud800", "\udfff", "a\udcffb", "\x7f", "\x00", "\u2028", "\ufeff", "é" * 3, "@alpha"]),
)
json_scalar = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), nasty_text)
json_value = st.recursive(
    json_scalar,
    lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(nasty_text, kids, max_size=3)),
    max_leaves=6,
)


def carried(obj: Any) -> bool:
    """Whether every string in a parsed JSON value (keys too) can be written as UTF-8."""
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def as_json(obj: Any, ascii_escapes: bool = True) -> bytes:
    """JSON bytes for ``obj``; surrogates become ``\\udxxx`` escapes (legal JSON, no UTF-8 for them)."""
    text = json.dumps(obj, ensure_ascii=ascii_escapes, separators=(",", ":"))
    return text.encode("utf-8", "surrogatepass") if not ascii_escapes else text.encode("ascii")


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth
