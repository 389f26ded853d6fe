"""Real processes and real flock on one inbox: every line exactly once, writer order kept, no partial reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from sotd.errors import AppendFailed
from sotd.formats import inbox
from sotd.formats.layout import Layout

pytestmark = pytest.mark.integration

H = "a"
SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")

WRITER = r"""
import os, sys
sys.path.insert(0, sys.argv[1])
from sotd.formats import inbox
from sotd.formats.layout import Layout
lay, wid, n, nfs, split = Layout(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1", sys.argv[6] == "1"
if split:  # two write calls per line: an unlocked reader could see half a line
    real = inbox._write
    def two_halves(fd, data):
        data = bytes(data)
        if len(data) < 2:
            return real(fd, data)
        return real(fd, data[: len(data) // 2])
    inbox._write = two_halves
for seq in range(n):
    line = inbox.encode_line(wid, "a", "r", f"{wid} {seq} " + "x" * (seq % 50), "2026-01-01T00:00:00Z")
    inbox.append(lay, "a", line, nfs=nfs, bound=30)
    sys.stdout.write(f"{seq}\n")
sys.stdout.flush()
"""

READER = r"""
import os, sys
sys.path.insert(0, sys.argv[1])
from sotd.formats import inbox
from sotd.formats.layout import Layout
lay, stop, nfs = Layout(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
reads = partial = 0
while not os.path.exists(stop) and reads < 100000:
    with inbox.ReadLock(lay, "a", nfs=nfs, bound=30, warn=lambda s: print(s, file=sys.stderr)):
        data = inbox.read_all(lay, "a") or b""
    reads += 1
    if data and not data.endswith(b"\n"):
        partial += 1
print(reads, partial)
"""

HOLDER = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_SH if sys.argv[2] == "sh" else fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def lay(tmp_path: os.PathLike[str]) -> Layout:
    lay = Layout(str(tmp_path / "comm"))  # type: ignore[operator]
    os.makedirs(lay.inbox_dir)
    return lay


def _run_writers(lay: Layout, writers: int, per: int, *, nfs: bool, reader: bool) -> None:
    stop = os.path.join(lay.home, "stop")
    rproc = None
    if reader:
        rproc = subprocess.Popen(
            [sys.executable, "-c", READER, SRC, lay.home, stop, "1" if nfs else "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, SRC, lay.home, f"w{i}", str(per), "1" if nfs else "0", str(i % 2)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(writers)
    ]
    try:
        for p in procs:
            out, err = p.communicate(timeout=50)
            assert p.returncode == 0, err
            assert out.split() == [str(s) for s in range(per)]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        open(stop, "w").close()
    if rproc is not None:
        out, err = rproc.communicate(timeout=30)
        assert rproc.returncode == 0, err
        assert err == ""
        reads, partial = map(int, out.split())
        assert reads > 0
        assert partial == 0, (
            f"a reader under the shared lock saw a partial line {partial} times in {reads} reads"
        )

    data = inbox.read_all(lay, H) or b""
    assert data.endswith(b"\n")
    lines = inbox.complete_lines(data)
    assert len(lines) == writers * per
    by_writer: dict[str, list[int]] = {}
    for raw in lines:
        obj = json.loads(raw)
        wid, seq = obj["msg"].split(" ")[:2]
        assert obj["from"] == wid
        by_writer.setdefault(wid, []).append(int(seq))
    assert sorted(by_writer) == sorted(f"w{i}" for i in range(writers))
    for seqs in by_writer.values():
        assert seqs == list(range(per))  # each exactly once, in the writer's order


def test_sixteen_writers_and_a_locked_reader(lay: Layout) -> None:
    _run_writers(lay, 16, 200, nfs=False, reader=True)


def test_nfs_polling_writers_and_reader(lay: Layout) -> None:
    _run_writers(lay, 6, 60, nfs=True, reader=True)


def _hold(lay: Layout, mode: str) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [sys.executable, "-c", HOLDER, lay.inbox_lock(H), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None
    assert p.stdout.readline() == "held\n"
    return p


def _release(p: subprocess.Popen[str]) -> None:
    assert p.stdin is not None and p.stdout is not None
    p.stdin.close()
    p.wait(10)
    p.stdout.close()


@pytest.mark.parametrize("nfs", [False, True], ids=["blocking", "nfs-poll"])
def test_busy_bound_nothing_appended(lay: Layout, nfs: bool) -> None:
    inbox.append(lay, H, b'{"n":1}\n', nfs=nfs, bound=2)
    holder = _hold(lay, "ex")
    try:
        t0 = time.monotonic()
        with pytest.raises(AppendFailed) as ei:
            inbox.append(lay, H, b'{"n":2}\n', nfs=nfs, bound=2)
        took = time.monotonic() - t0
    finally:
        _release(holder)
    assert ei.value.message == "the inbox lock for @a was held for 2s — nothing was appended"
    assert 1.9 <= took < 4.0
    assert inbox.read_all(lay, H) == b'{"n":1}\n'
    inbox.append(lay, H, b'{"n":3}\n', nfs=nfs, bound=2)  # the lock is free again
    assert inbox.read_all(lay, H) == b'{"n":1}\n{"n":3}\n'


def test_a_reader_holds_off_a_writer_and_readers_share(lay: Layout) -> None:
    holder = _hold(lay, "sh")
    try:
        with inbox.ReadLock(lay, H, nfs=False, bound=1, warn=lambda _s: None) as rl:
            assert rl.locked
        with pytest.raises(AppendFailed, match="was held for 1s"):
            inbox.append(lay, H, b'{"n":1}\n', nfs=False, bound=1)
    finally:
        _release(holder)


def test_writer_blocked_on_another_process_gets_the_lock_when_freed(
    lay: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    started = threading.Event()
    real = inbox._Waiter

    class Spy(real):  # type: ignore[misc,valid-type]
        def __init__(self, fd: int, op: int) -> None:
            super().__init__(fd, op)
            started.set()

    monkeypatch.setattr(inbox, "_Waiter", Spy)
    holder = _hold(lay, "ex")
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            inbox.append(lay, H, b'{"n":1}\n', nfs=False, bound=20)
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=writer)
    try:
        t.start()
        assert started.wait(10)  # blocked in flock on the child's lock
        t0 = time.monotonic()
        _release(holder)
        t.join(10)
    finally:
        if holder.poll() is None:
            holder.kill()
    assert errors == []
    assert time.monotonic() - t0 < 5
    assert inbox.read_all(lay, H) == b'{"n":1}\n'
