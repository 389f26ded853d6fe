"""Faults at the syscall boundary: a full file system (a 64 KiB tmpfs), a file-size limit (RLIMIT_FSIZE, a
real partial write by the kernel), fsync EIO (strace ``-e inject``), and a short write followed by ENOSPC
(an LD_PRELOAD shim the test builds with the C compiler; also against the cursor's temp).

Each failed append must leave the inbox byte-identical and answer with the spec's sentence.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys

import pytest

from sotd.errors import AppendFailed
from sotd.formats import inbox
from sotd.formats.layout import Layout

pytestmark = [pytest.mark.reliability, pytest.mark.serial, pytest.mark.root]

H = "a"
SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "src"))
STRACE = shutil.which("strace") or "/usr/bin/strace"
PY = os.path.realpath(sys.executable)  # the real interpreter, so strace sees only its syscalls

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
needs_strace = pytest.mark.skipif(not os.path.exists(STRACE), reason="no strace")

# One append in a child; prints "ok" or the error's message; exit 0 / 3.
APPEND_ONE = r"""
import sys
sys.path.insert(0, sys.argv[1])
from sotd.errors import AppendFailed
from sotd.formats import inbox
from sotd.formats.layout import Layout
pre = sys.argv[4] if len(sys.argv) > 4 else ""
if pre == "fsize":
    import os, resource, signal
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    limit = os.stat(Layout(sys.argv[2]).inbox("a")).st_size + 10
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
try:
    inbox.append(Layout(sys.argv[2]), "a", sys.argv[3].encode() + b"\n", nfs=False, bound=2)
except AppendFailed as e:
    sys.stdout.write(e.message + "\n")
    sys.exit(3)
sys.stdout.write("ok\n")
"""

BEFORE = b'{"from":"b","to":"a","repo":"r","msg":"one","ts":"2026-01-01T00:00:00Z"}\n'
LINE = '{"from":"b","to":"a","repo":"r","msg":"two","ts":"2026-01-01T00:00:01Z"}'


def _prepare(home: str, content: bytes = BEFORE) -> Layout:
    lay = Layout(home)
    os.makedirs(lay.inbox_dir, exist_ok=True)
    with open(lay.inbox(H), "wb") as f:
        f.write(content)
    os.close(os.open(lay.inbox_lock(H), os.O_RDWR | os.O_CREAT, 0o600))
    return lay


def _read(lay: Layout) -> bytes:
    with open(lay.inbox(H), "rb") as f:
        return f.read()


def _strace(injects: list[str]) -> list[str]:
    """strace injecting ``injects`` (each ``inject=<call>:…``); a fault is injected only into traced calls."""
    calls = sorted({i.split("=", 1)[1].split(":", 1)[0] for i in injects})
    args = [STRACE, "-f", "-qq", "-o", os.devnull, "-e", "trace=" + ",".join(calls)]
    for i in injects:
        args += ["-e", i]
    return args


def _child(lay: Layout, *pre: str, strace: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [PY, "-c", APPEND_ONE, SRC, lay.home, LINE, *pre]
    if strace is not None:
        cmd = [*_strace(strace), *cmd]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=30)


# ---------------------------------------------------------------------------------------- full file system


@pytest.fixture
def small_fs(tmp_path: os.PathLike[str]):  # type: ignore[no-untyped-def]
    mnt = os.path.join(str(tmp_path), "small")
    os.makedirs(mnt)
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", mnt], check=False, capture_output=True
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", mnt], check=False)


@needs_root
def test_full_file_system(small_fs: str) -> None:
    # An inbox of exactly one page: the next line needs a new block, and there is none left.
    pad = b'{"msg":"' + b"x" * (4096 - 11) + b'"}'
    assert len(pad) == 4096 - 1
    lay = _prepare(os.path.join(small_fs, "comm"), pad + b"\n")
    with open(os.path.join(small_fs, "filler"), "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as e:
            assert e.errno == errno.ENOSPC
    with pytest.raises(AppendFailed) as ei:
        inbox.append(lay, H, LINE.encode() + b"\n", nfs=False, bound=2)
    assert ei.value.message == "the append failed: No space left on device"
    assert _read(lay) == pad + b"\n"
    # the same fault in a real child process
    r = _child(lay)
    assert (r.returncode, r.stdout) == (3, "the append failed: No space left on device\n"), r.stderr
    assert _read(lay) == pad + b"\n"
    os.unlink(os.path.join(small_fs, "filler"))
    inbox.append(lay, H, LINE.encode() + b"\n", nfs=False, bound=2)
    assert _read(lay) == pad + b"\n" + LINE.encode() + b"\n"


# ---------------------------------------------------------------------------------------- file-size limit


def test_file_size_limit_rolls_back_a_partial_write(tmp_path: os.PathLike[str]) -> None:
    lay = _prepare(str(tmp_path))
    r = _child(lay, "fsize")  # the kernel writes 10 bytes, then refuses with EFBIG
    assert (r.returncode, r.stdout) == (3, "the append failed: File too large\n"), r.stderr
    assert _read(lay) == BEFORE


# ----------------------------------------------------------------------------------- strace fault injection


@needs_strace
def test_fsync_eio_injected(tmp_path: os.PathLike[str]) -> None:
    lay = _prepare(str(tmp_path))
    r = _child(lay, strace=["inject=fsync:error=EIO:when=1"])
    assert (r.returncode, r.stdout) == (3, "the append failed: Input/output error\n"), r.stderr
    assert _read(lay) == BEFORE


@needs_strace
def test_write_enospc_injected(tmp_path: os.PathLike[str]) -> None:
    lay = _prepare(str(tmp_path))
    r = _child(lay, strace=["inject=write:error=ENOSPC:when=1"])
    assert (r.returncode, r.stdout) == (3, "the append failed: No space left on device\n"), r.stderr
    assert _read(lay) == BEFORE


@needs_strace
def test_fsync_and_rollback_both_fail(tmp_path: os.PathLike[str]) -> None:
    lay = _prepare(str(tmp_path))
    r = _child(lay, strace=["inject=fsync:error=EIO:when=1", "inject=ftruncate:error=EIO:when=1"])
    assert r.returncode == 3, r.stderr
    assert r.stdout == (
        "the append failed: Input/output error; the rollback failed too (Input/output error), "
        "so the line may still be in @a's inbox\n"
    )
    assert _read(lay) == BEFORE + LINE.encode() + b"\n"  # what the message warns about


@needs_strace
def test_fsync_eio_after_a_tail_cut_rolls_back_to_the_cut(tmp_path: os.PathLike[str]) -> None:
    lay = _prepare(str(tmp_path), BEFORE + b'{"from":"dead')
    r = _child(lay, strace=["inject=fsync:error=EIO:when=1"])
    assert (r.returncode, r.stdout) == (3, "the append failed: Input/output error\n"), r.stderr
    assert _read(lay) == BEFORE


@needs_strace
def test_flock_fault_on_the_reader_warns_and_reads(tmp_path: os.PathLike[str]) -> None:
    lay = _prepare(str(tmp_path))
    code = (
        f"import sys; sys.path.insert(0, {SRC!r})\n"
        "from sotd.formats import inbox\nfrom sotd.formats.layout import Layout\n"
        f"lay = Layout({lay.home!r})\n"
        "with inbox.ReadLock(lay, 'a', nfs=False, bound=1, warn=print) as rl:\n"
        "    print(rl.locked, len(inbox.read_all(lay, 'a')))\n"
    )
    r = subprocess.run(
        [*_strace(["inject=flock:error=ENOLCK"]), PY, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == (
        f"WARNING: the inbox lock for @a failed ({errno.ENOLCK}: No locks available) — reading without it; "
        f"a line may show twice, none is lost\nFalse {len(BEFORE)}\n"
    )


# ------------------------------------------------------------------------------------- in-process seam


def test_short_write_then_enospc_in_process(
    tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lay = _prepare(str(tmp_path))
    state = {"n": 0}

    def write(fd: int, data: bytes) -> int:
        state["n"] += 1
        if state["n"] == 1:
            return os.write(fd, bytes(data[:5]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(inbox, "_write", write)
    with pytest.raises(AppendFailed, match=r"^the append failed: No space left on device$"):
        inbox.append(lay, H, LINE.encode(), nfs=False, bound=2)
    assert _read(lay) == BEFORE


# ---------------------------------------------------------------------------------- short write, for real

# An LD_PRELOAD shim built by the test: on the first write(2) to a file whose path contains $SHIM_MATCH it
# writes only half the bytes for real and returns that short count; every later write to such a file fails
# ENOSPC. Every other write passes through. So the process sees what a filling disk does to it.
SHIM_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static int calls;

static int targeted(int fd) {
    const char *match = getenv("SHIM_MATCH");
    char link[64], path[4096];
    if (!match || !*match) return 0;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = 0;
    return strstr(path, match) != NULL;
}

ssize_t write(int fd, const void *buf, size_t count) {
    if (count > 1 && targeted(fd)) {
        if (calls++ == 0) return syscall(SYS_write, fd, buf, count / 2);
        errno = ENOSPC;
        return -1;
    }
    return syscall(SYS_write, fd, buf, count);
}
"""


@pytest.fixture(scope="module")
def short_write_shim(tmp_path_factory: pytest.TempPathFactory) -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the short-write shim (scripts/setup installs gcc)")
    d = str(tmp_path_factory.mktemp("shim"))
    src, so = os.path.join(d, "shim.c"), os.path.join(d, "shortwrite.so")
    with open(src, "w") as f:
        f.write(SHIM_C)
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", so, src, "-ldl"], check=True, capture_output=True)
    return so


def test_short_write_then_enospc_in_a_real_process(tmp_path: os.PathLike[str], short_write_shim: str) -> None:
    """The kernel-facing write returns short (half the line really reached the file), then ENOSPC: the
    append fails with the spec's sentence and the inbox is cut back to its exact bytes."""
    lay = _prepare(str(tmp_path))
    env = {**os.environ, "LD_PRELOAD": short_write_shim, "SHIM_MATCH": lay.inbox(H)}
    r = subprocess.run([PY, "-c", APPEND_ONE, SRC, lay.home, LINE], check=False, capture_output=True,
                       text=True, timeout=30, env=env)  # fmt: skip
    assert (r.returncode, r.stdout) == (3, "the append failed: No space left on device\n"), r
    assert _read(lay) == BEFORE
    # the shim really fires: the same child without it appends
    r = subprocess.run([PY, "-c", APPEND_ONE, SRC, lay.home, LINE], check=False, capture_output=True,
                       text=True, timeout=30)  # fmt: skip
    assert (r.returncode, r.stdout) == (0, "ok\n"), r
    assert _read(lay) == BEFORE + LINE.encode() + b"\n"


CURSOR_ONE = r"""
import sys
sys.path.insert(0, sys.argv[1])
from sotd.errors import SotdError
from sotd.formats import cursor
from sotd.formats.layout import Layout
try:
    cursor.write(Layout(sys.argv[2]), "a", 7, b'{"n":7}')
except SotdError as e:
    print(e.message)
    sys.exit(3)
print("ok")
"""


def test_short_write_to_the_cursor_temp_leaves_the_cursor(
    tmp_path: os.PathLike[str], short_write_shim: str
) -> None:
    """The cursor's temp gets half its bytes, then ENOSPC: the cursor keeps its exact bytes, the temp is
    removed, and the reader is told which file could not be written and why."""
    from sotd.formats import cursor

    lay = _prepare(str(tmp_path))
    os.makedirs(lay.read_dir, exist_ok=True)
    cursor.write(lay, H, 1, BEFORE.rstrip(b"\n"))
    with open(lay.cursor(H), "rb") as f:
        before = f.read()
    temps = lay.cursor_tmp(H, 0, 0).rsplit(".", 2)[0] + "."  # read/a.cursor.tmp.<pid>.<n>: the temps only
    env = {**os.environ, "LD_PRELOAD": short_write_shim, "SHIM_MATCH": temps}
    r = subprocess.run([PY, "-c", CURSOR_ONE, SRC, lay.home], check=False, capture_output=True, text=True,
                       timeout=30, env=env)  # fmt: skip
    assert (r.returncode, r.stdout) == (
        3,
        f"the read cursor {lay.cursor(H)} could not be written: No space left on device\n",
    ), r
    with open(lay.cursor(H), "rb") as f:
        assert f.read() == before
    assert os.listdir(lay.read_dir) == [os.path.basename(lay.cursor(H))]
