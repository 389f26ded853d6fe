"""Behaviour 6.6/6.7 under real faults: the read cursor and the self file written by real processes while the
file system is full (a small tmpfs), fsync or rename fail (strace ``-e inject``), or the file-size limit
bites (RLIMIT_FSIZE in the child).

After any failed write: the exact sentence the code gives, the target byte-identical with the same inode, no
temp left behind; and a ``sotd comm poll`` that shows a batch but cannot move its cursor shows the same batch
again next time (nothing lost), then moves on.
"""

from __future__ import annotations

import errno
import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest

from sotd.errors import SelfFileError
from sotd.formats import cursor, selffile
from sotd.formats.layout import Layout
from tests.conftest import SOTD, Comm

pytestmark = [pytest.mark.reliability, pytest.mark.serial, pytest.mark.root]

H = "a"
SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "src"))
STRACE = shutil.which("strace") or "/usr/bin/strace"
PY = os.path.realpath(sys.executable)  # the real interpreter: strace's faults reach only its syscalls
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mount)")
needs_strace = pytest.mark.skipif(not os.path.exists(STRACE), reason="strace missing")

OLD_LINE = b'{"from":"b","to":"a","repo":"r","msg":"one","ts":"2026-01-01T00:00:00Z"}'
NEW_LINE = b'{"from":"b","to":"a","repo":"r","msg":"two","ts":"2026-01-01T00:00:01Z"}'

# One cursor.write in a child: "ok", or the error's message and exit 3.
WRITE_CURSOR = r"""
import sys
from sotd.errors import SotdError
from sotd.formats import cursor
from sotd.formats.layout import Layout
try:
    cursor.write(Layout(sys.argv[1]), "a", 2, sys.argv[2].encode())
except SotdError as e:
    sys.stdout.write(e.message + "\n")
    sys.exit(3)
sys.stdout.write("ok\n")
"""


def _strace(calls: str, err: str = "EIO", when: str = "") -> list[str]:
    """strace failing ``calls`` with ``err`` (every one, or those ``when`` picks); only traced calls get the
    fault, and the trace goes nowhere."""
    inject = f"inject={calls}:error={err}" + (f":when={when}" if when else "")
    return [STRACE, "-f", "-qq", "-o", os.devnull, "-e", f"trace={calls}", "-e", inject]


def _limit(fsize: int | None):  # type: ignore[no-untyped-def]
    def pre() -> None:
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return pre


def _child(home: str, *, strace: list[str] | None = None, fsize: int | None = None) -> tuple[int, str]:
    cmd = [PY, "-c", WRITE_CURSOR, home, NEW_LINE.decode()]
    if strace is not None:
        cmd = [*strace, *cmd]
    env = {**os.environ, "PYTHONPATH": SRC}
    p = subprocess.run(
        cmd, check=False, capture_output=True, text=True, timeout=30, preexec_fn=_limit(fsize), env=env
    )
    return p.returncode, p.stdout + p.stderr


def _seeded(home: str) -> Layout:
    lay = Layout(home)
    os.makedirs(lay.read_dir, mode=0o700, exist_ok=True)
    cursor.write(lay, H, 1, OLD_LINE)
    return lay


def _snapshot(path: str) -> tuple[bytes, int]:
    with open(path, "rb") as f:
        return f.read(), os.stat(path).st_ino


def _leftovers(folder: str, keep: set[str]) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n not in keep)


def _failed(lay: Layout, why: str) -> str:
    return f"the read cursor {lay.cursor(H)} could not be written: {why}\n"


@pytest.fixture
def tiny_fs(tmp_path: object) -> Iterator[str]:
    mnt = os.path.join(str(tmp_path), "mnt")
    os.mkdir(mnt)
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", mnt], check=False, capture_output=True
    )
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", mnt], check=False)


def _fill(mnt: str) -> str:
    filler = os.path.join(mnt, "filler")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for _ in range(1000):  # 64 KiB of tmpfs is 16 pages; bounded anyway
            os.write(fd, b"\0" * 4096)
    except OSError as e:
        assert e.errno == errno.ENOSPC
    else:
        raise AssertionError("the tmpfs never filled")
    finally:
        os.close(fd)
    return filler


# ------------------------------------------------------------------------------------------ the cursor


@needs_root
def test_cursor_full_file_system_keeps_the_cursor(tiny_fs: str) -> None:
    """Injector: a 64 KiB tmpfs filled to ENOSPC; the write happens in a real child process."""
    lay = _seeded(os.path.join(tiny_fs, "comm"))
    before = _snapshot(lay.cursor(H))
    filler = _fill(tiny_fs)
    rc, out = _child(lay.home)
    assert (rc, out) == (3, _failed(lay, "No space left on device"))
    assert _snapshot(lay.cursor(H)) == before
    assert _leftovers(lay.read_dir, {f"{H}.cursor"}) == []
    os.unlink(filler)  # room again: the next write goes through
    assert _child(lay.home) == (0, "ok\n")
    assert cursor.read(lay, H) == cursor.encode(2, NEW_LINE)


@needs_root
@needs_strace
@pytest.mark.parametrize(
    ("calls", "err", "when", "why"),
    [
        ("fsync", "EIO", "", "Input/output error"),
        ("rename,renameat,renameat2", "EIO", "", "Input/output error"),
        ("write", "ENOSPC", "1", "No space left on device"),  # the first write is the cursor's (not stdout)
    ],
    ids=["fsync-eio", "rename-eio", "write-enospc"],
)
def test_cursor_injected_fault_keeps_the_cursor(
    tmp_path: object, calls: str, err: str, when: str, why: str
) -> None:
    """Injector: strace ``-e inject=<calls>:error=<err>[:when=1]`` on the child's such calls."""
    lay = _seeded(os.path.join(str(tmp_path), "comm"))
    before = _snapshot(lay.cursor(H))
    rc, out = _child(lay.home, strace=_strace(calls, err, when))
    assert (rc, out) == (3, _failed(lay, why))
    assert _snapshot(lay.cursor(H)) == before
    assert _leftovers(lay.read_dir, {f"{H}.cursor"}) == []


def test_cursor_file_size_limit_keeps_the_cursor(tmp_path: object) -> None:
    """Injector: RLIMIT_FSIZE of 3 bytes in the child (SIGXFSZ ignored, as Python does): a short write, then
    EFBIG."""
    lay = _seeded(os.path.join(str(tmp_path), "comm"))
    before = _snapshot(lay.cursor(H))
    rc, out = _child(lay.home, fsize=3)
    assert (rc, out) == (3, _failed(lay, "File too large"))
    assert _snapshot(lay.cursor(H)) == before
    assert _leftovers(lay.read_dir, {f"{H}.cursor"}) == []


# ------------------------------------------------------------- a real poll that cannot move its cursor


def _poll(sess, *, strace: list[str] | None = None, fsize: int | None = None) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    cmd = [SOTD, "comm", "poll"]
    if strace is not None:
        cmd = [*strace, *cmd]
    p = subprocess.run(
        cmd,
        check=False,
        cwd=sess.root,
        env=sess.env,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_limit(fsize),
    )
    return p.returncode, p.stdout, p.stderr


@pytest.mark.parametrize(
    "fault",
    ["fsync-eio", "rename-eio", "efbig"],
)
def test_poll_that_cannot_write_its_cursor_shows_the_batch_again(tmp_path: object, fault: str) -> None:
    """Injector: strace (fsync / rename EIO) or RLIMIT_FSIZE 4 bytes (EFBIG) on a real ``sotd comm poll``."""
    if fault != "efbig" and (os.geteuid() != 0 or not os.path.exists(STRACE)):
        pytest.skip("needs root and strace")
    comm = Comm(str(tmp_path))
    a, b = comm.session("alpha"), comm.session("beta")
    assert a.run("join", "alpha").code == 0
    assert b.run("join", "beta").code == 0
    assert b.run("send", "@alpha", "one").code == 0
    first = a.run("poll")
    assert first.code == 0 and first.out.endswith("] [beta:beta] one\n"), first
    assert b.run("send", "@alpha", "two").code == 0
    assert b.run("send", "@alpha", "three").code == 0
    path = comm.layout.cursor("alpha")
    before = _snapshot(path)
    kw: dict[str, object] = {
        "fsync-eio": {"strace": _strace("fsync")},
        "rename-eio": {"strace": _strace("rename,renameat,renameat2")},
        "efbig": {"fsize": 4},
    }[fault]  # type: ignore[assignment]
    why = "File too large" if fault == "efbig" else "Input/output error"
    rc, out, err = _poll(a, **kw)  # type: ignore[arg-type]
    assert rc == 1
    shown = out.splitlines()
    assert [s.split("] ", 1)[1] for s in shown] == ["[beta:beta] two", "[beta:beta] three"]
    assert err == f"the read cursor {path} could not be written: {why}\n"
    assert _snapshot(path) == before
    assert not [n for n in os.listdir(comm.layout.read_dir) if ".tmp" in n]
    again = a.run("poll")  # nothing lost: the same batch, then the cursor moves
    assert (again.code, again.out_lines, again.err) == (0, shown, ""), again
    assert a.run("poll").out == "No new messages.\n"


# ------------------------------------------------------------------------------------------ the self file


@needs_root
def test_self_file_full_file_system_keeps_the_file(tiny_fs: str) -> None:
    """Injector: a 64 KiB tmpfs filled to ENOSPC; ``selffile.write`` replaces a pinned self file."""
    path = os.path.join(tiny_fs, "self", "alpha-session.txt")
    os.makedirs(os.path.dirname(path), mode=0o700)
    selffile.write(path, "alpha", "alpha", "/work/alpha")
    before = _snapshot(path)
    filler = _fill(tiny_fs)
    with pytest.raises(SelfFileError) as ei:
        selffile.write(path, "alpha2", "alpha", "/work/alpha")
    assert ei.value.message == f"could not write the self file '{path}': No space left on device"
    assert _snapshot(path) == before
    assert os.listdir(os.path.dirname(path)) == ["alpha-session.txt"]
    assert selffile.read_handle(path, "/work/alpha") == "alpha"
    os.unlink(filler)
    selffile.write(path, "alpha2", "alpha", "/work/alpha")
    assert selffile.read_handle(path, "/work/alpha") == "alpha2"
