"""Behaviour 6.1 across "machines": holders in namespaces with their own machine id, boot id and pid space.

testing-notes 2.9: a mount + pid namespace with files bound over /etc/machine-id and
/proc/sys/kernel/random/boot_id is another machine as far as the holder record can tell; the same
machine id with another boot id is the clone / reboot case of testing-notes 0.11.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest

from sotd import sysprobe
from sotd.errors import LockFailed
from sotd.formats import holder
from sotd.formats.holder import DEAD, UNPROVABLE, Holder
from sotd.formats.layout import Layout
from sotd.formats.reglock import RegistryLock

pytestmark = [pytest.mark.reliability, pytest.mark.serial, pytest.mark.root, pytest.mark.timeout(90)]

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "src"))
BOOT_ID = "/proc/sys/kernel/random/boot_id"

HOLDER = """
import sys
from sotd.formats.layout import Layout
from sotd.formats.reglock import RegistryLock
lk = RegistryLock(Layout(sys.argv[1]), sys.argv[2], 10)
with lk:
    print(lk.me.record(), flush=True)
    sys.stdin.read()
"""


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root for unshare and bind mounts"
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "needs unshare(1) and mount(8)"
    r = subprocess.run(
        ["unshare", "--mount", "--pid", "--fork", "--mount-proc", "true"],
        check=False,
        capture_output=True,
        timeout=30,
    )
    if r.returncode != 0:
        return f"unshare --mount --pid is not allowed here: {r.stderr.decode(errors='replace').strip()}"
    return None


@pytest.fixture(scope="module")
def can_unshare() -> None:
    why = _why_not()
    if why is not None:
        print(f"SKIP reliability reglock faults: {why}")
        pytest.skip(why)


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
        if p.stdin is not None and not p.stdin.closed:
            try:
                p.stdin.close()
            except OSError:
                pass
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(10)
        if p.stdout is not None:
            p.stdout.close()


def start_in_namespace(
    procs: list[subprocess.Popen[str]],
    lay: Layout,
    host: str,
    tmp_path,
    *,
    machine_id: str | None,
    boot: str | None,
) -> Holder:
    """A holder of the lock inside new mount + pid namespaces, with the ids bound over as asked."""
    binds = []
    if boot is not None:
        p = tmp_path / "fake_boot_id"
        p.write_text(boot + "\n")
        binds.append(f"mount --bind {p} {BOOT_ID}")
    if machine_id is not None:
        p = tmp_path / "fake_machine_id"
        p.write_text(machine_id + "\n")
        binds.append(f"mount --bind {p} {sysprobe.MACHINE_ID_PATH}")
    script = " && ".join([*binds, 'exec "$0" -c "$1" "$2" "$3"'])
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.Popen(
        ["unshare", "--mount", "--pid", "--fork", "--mount-proc", "--kill-child", "sh", "-c", script,
         sys.executable, HOLDER, lay.home, host],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )  # fmt: skip
    procs.append(p)
    assert p.stdout is not None
    line = p.stdout.readline()
    assert line, "the namespaced holder did not take the lock"
    return Holder.parse(line)


def content(path: str) -> str:
    with open(path) as f:
        return f.read()


def test_6_1_fault_other_machine_is_never_forced(can_unshare, lay, procs, tmp_path):
    me = holder.own("box")
    fake_mid = "0123456789abcdef0123456789abcdef"
    assert fake_mid != me.machine
    rec = start_in_namespace(procs, lay, "box", tmp_path, machine_id=fake_mid, boot="fakeboot-0000")
    assert (rec.machine, rec.boot) == (fake_mid, "fakeboot-0000")
    assert rec.pidns != me.pidns
    assert holder.judge(rec, me) == (UNPROVABLE, "it is on another machine")
    for bound in (0, 0.3):
        with pytest.raises(LockFailed) as ei:
            RegistryLock(lay, "box", bound, settle=0.05).acquire()
        assert ei.value.message.startswith(
            f"registry lock {lay.reglock} is held by box pid {rec.pid} start {rec.start} ("
        )
        assert ei.value.message.endswith(
            " old): it is on another machine. If it is dead, run any comm command on box."
        )
    assert content(lay.reglock) == rec.record() + "\n"
    assert [f for f in os.listdir(lay.home) if ".reclaim." in f] == []


def test_6_1_fault_same_machine_other_boot_is_rebooted_and_reclaimed(can_unshare, lay, procs, tmp_path):
    """A clone sharing the machine id (testing-notes 0.11): the rule reads it as a reboot and reclaims."""
    me = holder.own("box")
    rec = start_in_namespace(procs, lay, "box", tmp_path, machine_id=None, boot="fakeboot-1111")
    assert rec.machine == me.machine and rec.boot == "fakeboot-1111"
    assert holder.judge(rec, me) == (DEAD, "its machine has rebooted since")
    with RegistryLock(lay, "box", 2, settle=0.05) as lk:
        assert content(lay.reglock) == lk.me.record() + "\n"
        # the (still running) old holder releases: it must leave our lock alone
        proc = procs[0]
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(10) == 0
        assert content(lay.reglock) == lk.me.record() + "\n"
    assert not os.path.exists(lay.reglock)


def test_6_1_fault_other_host_name_same_machine_other_boot_is_another_machine(
    can_unshare, lay, procs, tmp_path
):
    me = holder.own("box")
    rec = start_in_namespace(procs, lay, "otherbox", tmp_path, machine_id=None, boot="fakeboot-2222")
    assert holder.judge(rec, me) == (UNPROVABLE, "it is on another machine")
    with pytest.raises(LockFailed, match="it is on another machine"):
        RegistryLock(lay, "box", 0, settle=0.05).acquire()
    assert content(lay.reglock) == rec.record() + "\n"


def test_6_1_fault_other_pid_namespace_is_never_forced(can_unshare, lay, procs, tmp_path):
    me = holder.own("box")
    rec = start_in_namespace(procs, lay, "box", tmp_path, machine_id=None, boot=None)
    assert (rec.machine, rec.boot) == (me.machine, me.boot)
    assert rec.pidns != me.pidns
    assert holder.judge(rec, me) == (UNPROVABLE, "it is in another pid namespace")
    with pytest.raises(LockFailed) as ei:
        RegistryLock(lay, "box", 0.2, settle=0.05).acquire()
    assert ei.value.message.endswith(
        " old): it is in another pid namespace. If it is dead, run any comm command on box."
    )
    assert f"is held by box pid {rec.pid} start {rec.start} (" in ei.value.message
    assert content(lay.reglock) == rec.record() + "\n"
