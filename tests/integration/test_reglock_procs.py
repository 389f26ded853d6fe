"""Behaviour 6.1 with real processes: mutual exclusion, proof of death by /proc, frozen holders never forced."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from sotd.errors import LockFailed
from sotd.formats import holder
from sotd.formats.holder import DEAD, Holder
from sotd.formats.layout import Layout
from sotd.formats.reglock import RegistryLock

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")

# Takes the lock as <host>, prints its record, then holds it until stdin closes (or it is killed).
HOLDER = """
import sys
from sotd.formats.layout import Layout
from sotd.formats.reglock import RegistryLock
lk = RegistryLock(Layout(sys.argv[1]), sys.argv[2], 10)
with lk:
    print(lk.me.record(), flush=True)
    sys.stdin.read()
"""

# Takes the lock <n> times as <host> and increments the counter file inside it each time.
COUNTER = """
import os, sys
from sotd.formats.layout import Layout
from sotd.formats.reglock import RegistryLock
home, host, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
path = os.path.join(home, "counter")
for _ in range(n):
    with RegistryLock(Layout(home), host, 60):
        with open(path) as f:
            v = int(f.read())
        with open(path + ".tmp", "w") as f:
            f.write(str(v + 1))
        os.rename(path + ".tmp", path)
"""


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.abspath(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("SOT_LOCK_WAIT_SECS", None)
    env.update(extra)
    return env


@pytest.fixture
def lay(tmp_path) -> Layout:
    lay = Layout(str(tmp_path / "comm"))
    os.makedirs(lay.home)
    return lay


@pytest.fixture
def procs():
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:
        if p.poll() is None:
            try:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
            except ProcessLookupError:
                pass
        p.wait(10)
        for pipe in (p.stdin, p.stdout):
            if pipe is not None:
                pipe.close()


def start_holder(
    procs: list[subprocess.Popen[str]], lay: Layout, host: str
) -> tuple[subprocess.Popen[str], Holder]:
    p = subprocess.Popen(
        [sys.executable, "-c", HOLDER, lay.home, host],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    procs.append(p)
    assert p.stdout is not None
    line = p.stdout.readline()
    assert line, "the holder process did not take the lock"
    rec = Holder.parse(line)
    assert rec.pid == p.pid
    return p, rec


def content(path: str) -> str:
    with open(path) as f:
        return f.read()


def test_6_1_procs_32_takers_lose_no_increment(lay):
    with open(os.path.join(lay.home, "counter"), "w") as f:
        f.write("0")
    per = 3
    ps = [
        subprocess.Popen(
            [sys.executable, "-c", COUNTER, lay.home, f"p{i}", str(per)],
            env=_env(SOT_COMM_TEST_LOCK_SETTLE="0.2"),
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(32)
    ]
    errs = []
    for p in ps:
        _, err = p.communicate(timeout=80)
        if p.returncode != 0:
            errs.append(err)
    assert errs == []
    assert content(os.path.join(lay.home, "counter")) == str(32 * per)
    assert not os.path.exists(lay.reglock)
    assert [f for f in os.listdir(lay.home) if ".tmp." in f] == []


def test_6_1_procs_sigkilled_holder_is_reclaimed_by_proof(lay, procs):
    p, rec = start_holder(procs, lay, "box")
    p.kill()
    p.wait(10)
    assert Holder.parse(content(lay.reglock)) == rec
    me = holder.own("box")
    assert holder.judge(rec, me) == (DEAD, "it has exited")
    t = time.monotonic()
    with RegistryLock(lay, "box", 5, settle=0.2) as lk:
        assert content(lay.reglock) == lk.me.record() + "\n"
    assert time.monotonic() - t < 3
    assert content(lay.reclaim_marker(rec.holder_id())) == lk.me.record() + "\n"


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def test_6_1_procs_sigstopped_holder_is_named_and_never_forced(lay, procs):
    p, rec = start_holder(procs, lay, "frozenbox")
    os.kill(p.pid, signal.SIGSTOP)
    for _ in range(200):
        if _stopped(p.pid):
            break
        time.sleep(0.01)
    assert _stopped(p.pid)
    for bound in (0, 0.3):
        with pytest.raises(LockFailed) as ei:
            RegistryLock(lay, "me", bound, settle=0.05).acquire()
        msg = ei.value.message
        assert msg.startswith(
            f"registry lock {lay.reglock} is held by frozenbox pid {p.pid} start {rec.start} ("
        )
        assert msg.endswith(" old): it is running. If it is dead, run any comm command on frozenbox.")
        assert rec.start != "-"
    assert content(lay.reglock) == rec.record() + "\n"
    assert [f for f in os.listdir(lay.home) if ".reclaim." in f] == []
    os.kill(p.pid, signal.SIGCONT)
    assert p.stdin is not None
    p.stdin.close()
    assert p.wait(10) == 0
    assert not os.path.exists(lay.reglock)


def test_6_1_procs_bound_0_live_holder_fails_at_once(lay, procs):
    start_holder(procs, lay, "live")
    t = time.monotonic()
    with pytest.raises(LockFailed, match="it is running"):
        RegistryLock(lay, "me", 0).acquire()
    assert time.monotonic() - t < 0.9  # well under the 1 s of a bound-1 wait


def test_6_1_procs_bound_1_live_holder_waits_about_1s(lay, procs):
    start_holder(procs, lay, "live")
    t = time.monotonic()
    with pytest.raises(LockFailed, match="it is running"):
        RegistryLock(lay, "me", 1).acquire()
    took = time.monotonic() - t
    assert 0.95 <= took < 3.0


def test_6_1_procs_bound_1_takes_when_holder_exits_cleanly(lay, procs):
    p, _ = start_holder(procs, lay, "live")
    assert p.stdin is not None
    p.stdin.close()  # the holder releases and exits while we wait
    with RegistryLock(lay, "me", 5, settle=0.05) as lk:
        assert content(lay.reglock) == lk.me.record() + "\n"


def test_6_1_procs_bound_0_dead_holder_one_step_then_retake(lay, procs):
    p, _ = start_holder(procs, lay, "box")
    p.kill()
    p.wait(10)
    with RegistryLock(lay, "me", 0, settle=0.2) as lk:
        assert content(lay.reglock) == lk.me.record() + "\n"


def test_6_1_procs_lock_directory_is_by_hand(lay):
    os.mkdir(lay.reglock)
    with pytest.raises(LockFailed) as ei:
        RegistryLock(lay, "me", 0.2).acquire()
    assert ei.value.message.startswith(f"registry lock {lay.reglock} still held (")
    assert ei.value.message.endswith(
        " old): held by an older version that records no holder. If its holder is dead,"
        f" remove {lay.reglock} by hand and retry."
    )
    assert os.path.isdir(lay.reglock)


def test_6_1_procs_garbage_lock_is_by_hand(lay):
    with open(lay.reglock, "w") as f:
        f.write("pid 4242 was here\n")
    with pytest.raises(LockFailed) as ei:
        RegistryLock(lay, "me", 0.2).acquire()
    assert (
        ": its record names no holder (pid 4242 was here). If its holder is dead, remove" in ei.value.message
    )
    assert content(lay.reglock) == "pid 4242 was here\n"


def test_6_1_procs_cli_style_holder_in_subprocess_sees_our_lock(lay, procs):
    """A lock held here is seen by another process as ours, with our pid and start tick."""
    me = holder.own("here")
    with RegistryLock(lay, "here", 1):
        code = (
            "import sys\nfrom sotd.formats.layout import Layout\nfrom sotd.formats.reglock import RegistryLock\n"
            "from sotd.errors import LockFailed\n"
            "try:\n    RegistryLock(Layout(sys.argv[1]), 'there', 0).acquire()\n"
            "except LockFailed as e:\n    print(e.message)\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code, lay.home],
            check=False,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    assert out.startswith(f"registry lock {lay.reglock} is held by here pid {me.pid} start {me.start} (")
    assert out.rstrip("\n").endswith(": it is running. If it is dead, run any comm command on here.")
