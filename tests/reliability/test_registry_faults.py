"""Behaviour 6.2/6.3 under real faults: a full file system, syscalls failed by strace, RLIMIT_FSIZE.

After any failed writer: the exact sentence, registry.json byte-identical with the same inode, no temp left.
"""

from __future__ import annotations

import errno
import os
import resource
import shutil
import subprocess
import sys

import pytest

from sotd.errors import RegistryWriteFailed
from sotd.formats import registry
from sotd.formats.layout import Layout
from sotd.formats.reglock import RegistryLock

pytestmark = [pytest.mark.reliability, pytest.mark.serial, pytest.mark.root]

STRACE = shutil.which("strace") or "/usr/bin/strace"
# The real interpreter, never a shim script whose own syscalls would get the faults (testing notes 2.3).
PY = os.path.realpath(sys.executable)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mount, strace)")
needs_strace = pytest.mark.skipif(not os.path.exists(STRACE), reason="strace missing")

CHILD = r"""
import sys
from sotd.errors import SotdError
from sotd.formats import registry
from sotd.formats.layout import Layout
lay = Layout(sys.argv[1])
def change(doc):
    registry.put(doc, "new-entry", {"root": "/r/" + "x" * 400, "host": "h"})
    return True, None
try:
    if sys.argv[2] == "ensure":
        registry.ensure(lay)
    else:
        registry.update_locked(lay, change)
except SotdError as e:
    sys.stdout.write(e.message)
    sys.exit(1)
"""


def snapshot(lay: Layout) -> tuple[bytes, int]:
    with open(lay.registry, "rb") as f:
        return f.read(), os.stat(lay.registry).st_ino


def temps(lay: Layout) -> list[str]:
    return sorted(n for n in os.listdir(lay.home) if n.startswith("registry.json") and n != "registry.json")


def seeded(home: str) -> Layout:
    lay = Layout(home)
    os.makedirs(home, exist_ok=True)
    registry.ensure(lay)

    def change(doc: dict[str, object]) -> tuple[bool, None]:
        registry.put(doc, "old", {"root": "/old"})
        return True, None

    registry.update_locked(lay, change)
    return lay


def run_child(
    lay: Layout, what: str, *, strace: list[str] | None = None, fsize: int | None = None
) -> tuple[int, str]:
    cmd = [PY, "-c", CHILD, lay.home, what]
    if strace is not None:
        cmd = [STRACE, "-f", "-qq", "-o", os.devnull, *strace, *cmd]

    def limit() -> None:
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    src = os.path.join(os.path.dirname(__file__), "..", "..", "src")
    env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
    p = subprocess.run(cmd, check=False, capture_output=True, timeout=30, preexec_fn=limit, env=env)
    return p.returncode, p.stdout.decode()


@pytest.fixture
def tiny_fs(tmp_path: object) -> object:
    mnt = os.path.join(str(tmp_path), "mnt")
    os.mkdir(mnt)
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", mnt], check=False, capture_output=True
    )
    if r.returncode:
        pytest.skip(f"cannot mount tmpfs: {r.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", mnt], check=False)


@needs_root
def test_6_2_full_file_system_writes_nothing(tiny_fs: str) -> None:
    lay = seeded(os.path.join(tiny_fs, "comm"))
    before = snapshot(lay)
    filler = os.path.join(tiny_fs, "filler")

    def change(doc: dict[str, object]) -> tuple[bool, None]:
        registry.put(doc, "new", {"root": "/r/" + "x" * 5000})
        return True, None

    with RegistryLock(lay, "testhost", 1, settle=0):
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            for _ in range(1000):
                os.write(fd, b"\0" * 4096)
        except OSError as e:
            assert e.errno == errno.ENOSPC
        finally:
            os.close(fd)
        with pytest.raises(RegistryWriteFailed) as ei:
            registry.update_locked(lay, change)
        # tmpfs takes pages at write(2) and its fsync cannot fail: the write step is the one that fails
        assert ei.value.message == "FAILED: the registry could not be read or updated, so nothing was written"
        assert snapshot(lay) == before
        assert temps(lay) == []
        os.unlink(filler)
        registry.update_locked(lay, change)  # the next writer copes
    doc = registry.read(lay)
    assert doc is not None and set(registry.agents_of(doc)) == {"old", "new"}


@needs_root
@needs_strace
@pytest.mark.parametrize(
    ("calls", "want"),
    [
        (
            "fsync",
            "FAILED: the registry update could not be flushed (Input/output error), so nothing was written",
        ),
        (
            "rename,renameat,renameat2",
            "FAILED: the registry update could not be renamed into place (Input/output error), "
            "so nothing was written",
        ),
    ],
)
def test_6_2_injected_fault_writes_nothing(tmp_path: object, calls: str, want: str) -> None:
    lay = seeded(os.path.join(str(tmp_path), "comm"))
    before = snapshot(lay)
    # strace injects only into traced calls; the output goes to /dev/null
    rc, out = run_child(lay, "update", strace=["-e", f"trace={calls}", "-e", f"inject={calls}:error=EIO"])
    assert (rc, out) == (1, want)
    assert snapshot(lay) == before
    assert temps(lay) == []


@needs_root
def test_6_2_rlimit_fsize_writes_nothing(tmp_path: object) -> None:
    lay = seeded(os.path.join(str(tmp_path), "comm"))
    before = snapshot(lay)
    rc, out = run_child(lay, "update", fsize=len(before[0]) + 10)
    assert (rc, out) == (1, "FAILED: the registry could not be read or updated, so nothing was written")
    assert snapshot(lay) == before
    assert temps(lay) == []


@needs_root
@needs_strace
def test_6_3_skeleton_whose_fsync_fails_publishes_nothing(tmp_path: object) -> None:
    home = os.path.join(str(tmp_path), "comm")
    os.makedirs(home)
    lay = Layout(home)
    rc, out = run_child(lay, "ensure", strace=["-e", "trace=fsync", "-e", "inject=fsync:error=EIO"])
    assert rc == 1
    assert out == "FAILED: the registry could not be created (Input/output error), so nothing was written"
    assert os.listdir(home) == []
