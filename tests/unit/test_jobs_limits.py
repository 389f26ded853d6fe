"""Limits: host facts -> plan (v2, v1, hybrid, none), rlimits, outcome classification."""

from __future__ import annotations

import resource
import signal
import struct

import pytest

from sotd.jobs import limits as lim
from sotd.jobs import seccomp
from sotd.jobs.errors import Refused
from sotd.jobs.outcome import classify, limits_hit
from sotd.jobs.spec import Limits
from sotd.jobs.statefolder import read_exit

pytestmark = pytest.mark.unit

THIS_HOST_MOUNTS = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0
cgroup /sys/fs/cgroup/freezer cgroup rw,relatime,freezer 0 0
cgroup /sys/fs/cgroup/pids cgroup rw,relatime,pids 0 0
cgroup /sys/fs/cgroup/systemd cgroup rw,relatime,name=systemd 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""
THIS_HOST_CGROUP = "9:name=systemd:/\n8:pids:/\n6:freezer:/\n4:memory:/x/y\n2:cpuacct:/\n1:cpu:/\n0::/\n"
PURE_V2_MOUNTS = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n"
PURE_V2_CGROUP = "0::/system.slice/sotd.service\n"
COMBINED_V1 = "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0\n"
ALL = Limits(wall=10, cpu=5, processes=20, file_size=1 << 20)


def test_facts_of_this_hosts_shape() -> None:
    f = lim.facts_from(THIS_HOST_MOUNTS, THIS_HOST_CGROUP, "", True)
    assert f.v2 == "/sys/fs/cgroup/unified" and f.v2_controllers == frozenset() and f.v2_kill
    assert dict(f.v1) == {
        "cpuacct": "/sys/fs/cgroup/cpuacct",
        "freezer": "/sys/fs/cgroup/freezer",
        "pids": "/sys/fs/cgroup/pids",
    }


def test_facts_of_a_pure_v2_host_under_a_service() -> None:
    f = lim.facts_from(PURE_V2_MOUNTS, PURE_V2_CGROUP, "cpu memory pids\n", True)
    assert f.v2 == "/sys/fs/cgroup/system.slice/sotd.service" and f.v2_controllers == {
        "cpu",
        "memory",
        "pids",
    }
    assert dict(f.v1) == {}


def test_combined_v1_mount() -> None:
    f = lim.facts_from(COMBINED_V1, "3:cpu,cpuacct:/a\n", "", False)
    assert dict(f.v1) == {"cpuacct": "/sys/fs/cgroup/cpu,cpuacct/a"}


@pytest.mark.parametrize(
    ("facts", "uid", "pids", "cpu", "kill", "how"),
    [
        (  # this machine: v2 without controllers (cpu.stat, cgroup.kill) + v1 pids
            lim.facts_from(THIS_HOST_MOUNTS, THIS_HOST_CGROUP, "", True), 1000, "v1", "v2", "v2",
            {"wall": "timer, then cgroup.kill", "cpu": "cgroup v2 cpu.stat budget + RLIMIT_CPU per process",
             "processes": "cgroup v1 pids.max", "file_size": "RLIMIT_FSIZE"},
        ),
        (
            lim.CgroupFacts(v2="/c", v2_controllers=frozenset({"pids"}), v2_kill=True), 0, "v2", "v2", "v2",
            {"wall": "timer, then cgroup.kill", "cpu": "cgroup v2 cpu.stat budget + RLIMIT_CPU per process",
             "processes": "cgroup v2 pids.max", "file_size": "RLIMIT_FSIZE"},
        ),
        (
            lim.CgroupFacts(v1={"pids": "/p", "cpuacct": "/a", "freezer": "/f"}), 0, "v1", "v1", "v1",
            {"wall": "timer, then freezer + SIGKILL of each task", "cpu": "cgroup v1 cpuacct budget + RLIMIT_CPU per process",
             "processes": "cgroup v1 pids.max", "file_size": "RLIMIT_FSIZE"},
        ),
        (
            lim.CgroupFacts(), 1000, None, None, None,
            {"wall": "timer, then SIGKILL of the process tree", "cpu": "RLIMIT_CPU per process only (no cgroup)",
             "processes": "RLIMIT_NPROC for the sandbox uid", "file_size": "RLIMIT_FSIZE"},
        ),
    ],
)  # fmt: skip
def test_plan(
    facts: lim.CgroupFacts, uid: int, pids: str | None, cpu: str | None, kill: str | None, how: dict[str, str]
) -> None:
    p = lim.plan(ALL, facts, uid)
    assert (p.pids, p.cpu, p.kill) == (pids, cpu, kill)
    assert dict(p.how) == how


def test_plan_reports_only_asked_limits() -> None:
    assert dict(lim.plan(Limits(wall=5), lim.CgroupFacts(), 0).how) == {
        "wall": "timer, then SIGKILL of the process tree"
    }


def test_processes_for_root_without_pids_cgroup_is_refused() -> None:
    with pytest.raises(Refused, match="cannot limit processes for uid 0"):
        lim.plan(ALL, lim.CgroupFacts(v2="/c", v2_kill=True), 0)


def test_rlimits() -> None:
    with_pids = lim.plan(ALL, lim.CgroupFacts(v1={"pids": "/p"}), 0)
    assert lim.rlimits_for(ALL, with_pids) == [
        (resource.RLIMIT_CPU, 5, 6),
        (resource.RLIMIT_FSIZE, 1 << 20, 1 << 20),
    ]
    without = lim.plan(ALL, lim.CgroupFacts(), 1000)
    assert (resource.RLIMIT_NPROC, 20, 20) in lim.rlimits_for(ALL, without)
    assert lim.rlimits_for(Limits(wall=3), without) == []


def test_descendants() -> None:
    table = {2: 1, 3: 2, 4: 3, 5: 2, 6: 1, 7: 6}
    assert sorted(lim.descendants(2, table)) == [3, 4, 5]
    assert lim.descendants(4, table) == []


@pytest.mark.parametrize(
    ("kw", "want"),
    [
        ({"exit_status": 0, "verdict": True}, ("passed", None)),
        ({"exit_status": 2, "verdict": True}, ("failed", None)),
        ({"exit_status": 2, "verdict": False}, ("exited", None)),
        ({"exit_status": 137, "verdict": True, "stopped": True, "timed_out": True}, ("stopped", None)),
        ({"exit_status": 137, "verdict": True, "timed_out": True, "cpu_over": True}, ("timed_out", None)),
        ({"exit_status": 137, "verdict": True, "cpu_over": True}, ("limit", "cpu")),
        ({"exit_status": 128 + signal.SIGXCPU, "verdict": True}, ("limit", "cpu")),
        ({"exit_status": 128 + signal.SIGXFSZ, "verdict": False}, ("limit", "file_size")),
        ({"exit_status": 1, "verdict": True, "pids_refused": 3}, ("limit", "processes")),
        ({"exit_status": 0, "verdict": True, "pids_refused": 3}, ("passed", None)),
        ({"exit_status": 137, "verdict": True, "memory_hit": True}, ("limit", "memory")),
        ({"exit_status": 0, "verdict": True, "memory_hit": True}, ("passed", None)),
        ({"exit_status": 137, "verdict": True, "disk_over": True, "memory_hit": True}, ("limit", "disk")),
        ({"exit_status": 137, "verdict": True, "disk_over": True, "cpu_over": True}, ("limit", "cpu")),
    ],
)
def test_classify(kw: dict[str, object], want: tuple[str, str | None]) -> None:
    args: dict[str, object] = {
        "stopped": False,
        "timed_out": False,
        "cpu_over": False,
        "pids_refused": 0,
        **kw,
    }
    assert classify(**args) == want  # type: ignore[arg-type]


def test_over_budget() -> None:
    assert lim.over_budget(5.0, 5) and not lim.over_budget(4.9, 5)
    assert not lim.over_budget(None, 5) and not lim.over_budget(100.0, None)


def test_read_exit(tmp_path: object) -> None:
    import os

    p = os.path.join(str(tmp_path), "s.json")
    with open(p, "w") as f:
        f.write('{ "child-pid": 12, "pid-namespace": 4 }\n{ "exit-code": 153 }\n')
    assert read_exit(p) == 153
    with open(p, "w") as f:
        f.write('{ "child-pid": 12 }\n{ "exit-')
    assert read_exit(p) is None
    assert read_exit(p + ".absent") is None


NONE_HIT: dict[str, object] = {
    "cpu_over": False, "pids_refused": 0, "memory_hit": False, "disk_over": False, "file_size": None,
    "sizes": [], "killed_by_xfsz": False, "missing": False,
}  # fmt: skip


@pytest.mark.parametrize(
    ("kw", "want"),
    [
        ({}, []),
        ({"pids_refused": 4}, ["processes"]),
        ({"file_size": 1024, "sizes": [10, 1024]}, ["file_size"]),
        ({"file_size": 1024, "sizes": [10, 1023]}, []),
        ({"killed_by_xfsz": True}, ["file_size"]),
        ({"missing": True}, ["outputs"]),
        ({"cpu_over": True, "memory_hit": True, "disk_over": True}, ["cpu", "memory", "disk"]),
    ],
)
def test_limits_hit(kw: dict[str, object], want: list[str]) -> None:
    assert limits_hit(**{**NONE_HIT, **kw}) == want  # type: ignore[arg-type]


def test_memory_plan_prefers_a_cgroup_then_rlimit_as() -> None:
    m = Limits(memory=64 << 20, tmp_size=1 << 20, disk=1 << 30)
    v1 = lim.plan(m, lim.CgroupFacts(v1={"memory": "/sys/fs/cgroup/memory/x"}), 1000)
    assert v1.memory == "v1" and lim.rlimits_for(m, v1) == []
    v2 = lim.plan(m, lim.CgroupFacts(v2="/sys/fs/cgroup", v2_controllers=frozenset({"memory"})), 1000)
    assert v2.memory == "v2"
    none = lim.plan(m, lim.CgroupFacts(), 1000)
    assert none.memory is None and lim.rlimits_for(m, none) == [(resource.RLIMIT_AS, 64 << 20, 64 << 20)]
    assert set(none.how) == {"memory", "tmp_size", "disk"}


def test_seccomp_program_shape() -> None:
    """Whole 8-byte instructions; the arch check first; every jump lands inside; the last two return
    allow and EPERM."""
    prog = seccomp.program()
    assert len(prog) % 8 == 0
    ins = [struct.unpack("=HBBI", prog[i : i + 8]) for i in range(0, len(prog), 8)]
    assert ins[0] == (seccomp.LD_W_ABS, 0, 0, seccomp.ARCH)
    assert ins[1][3] == seccomp.AUDIT_ARCH_X86_64
    assert ins[-2] == (seccomp.RET_K, 0, 0, seccomp.RET_ALLOW)
    assert ins[-1] == (seccomp.RET_K, 0, 0, seccomp.RET_ERRNO | seccomp.EPERM)
    for i, (code, jt, jf, _) in enumerate(ins):
        if code in (seccomp.JEQ_K, seccomp.JGE_K):
            assert i + 1 + jt < len(ins) and i + 1 + jf < len(ins)
    denied = {k for code, jt, _, k in ins if code == seccomp.JEQ_K and jt and k != seccomp.AUDIT_ARCH_X86_64}
    assert set(seccomp.DENIED.values()) | {seccomp.TIOCSTI} <= denied
