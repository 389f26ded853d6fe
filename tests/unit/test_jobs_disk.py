"""The disk decisions (issue 24, item 5) as table tests: which finished workspaces the retention removes,
whether a new run fits the node-wide bounds (and which bound refuses it), when a node cannot give a run a
file system of its own, and the ``[jobs.policy.workspaces]`` keys with their defaults and validation."""

from __future__ import annotations

import pytest

from sotd.jobs import disk, nodepolicy
from sotd.jobs.disk import Admission, Held
from sotd.jobs.errors import PolicyError

pytestmark = pytest.mark.unit

M = 1 << 20


def done(h: str, ended: float, size: int, ws: str = "") -> Held:
    return Held(run_hash=h, workspace=ws or f"/r/{h}", cap=8 * M, bytes=size, ended=ended)


def live(h: str, cap: int = 8 * M, size: int = 0, ws: str = "") -> Held:
    return Held(run_hash=h, workspace=ws or f"/r/{h}", cap=cap, bytes=size)


@pytest.mark.parametrize(
    ("finished", "lives", "keep", "keep_bytes", "removed"),
    [
        ([], [], 3, 8 * M, []),
        ([done("a", 1, M), done("b", 2, M), done("c", 3, M)], [], 3, 8 * M, []),
        ([done("a", 1, M), done("b", 2, M), done("c", 3, M)], [], 2, 8 * M, ["a"]),  # the oldest goes
        ([done("c", 3, M), done("a", 1, M), done("b", 2, M)], [], 1, 8 * M, ["b", "a"]),  # order by end
        ([done("a", 1, M), done("b", 2, M)], [], 0, 8 * M, ["b", "a"]),  # keep 0: none kept
        ([done("a", 1, 2 * M), done("b", 2, 2 * M)], [], 5, 3 * M, ["a"]),  # bytes bound
        ([done("a", 1, M), done("b", 2, 5 * M), done("c", 3, M)], [], 5, 4 * M, ["b", "a"]),  # a prefix
        ([done("a", 1, 9 * M)], [], 5, 8 * M, ["a"]),  # one alone over the bytes bound
        # a live run's workspace, or one nested with it, is never named
        ([done("a", 1, M, "/r/x"), done("b", 2, M)], [live("l", ws="/r/x")], 0, 8 * M, ["b"]),
        ([done("a", 1, M, "/r/x/in"), done("b", 2, M)], [live("l", ws="/r/x")], 0, 8 * M, ["b"]),
        ([done("a", 1, M, "/r"), done("b", 2, M, "/s")], [live("l", ws="/r/x")], 0, 8 * M, ["b"]),
    ],
)
def test_retention(
    finished: list[Held], lives: list[Held], keep: int, keep_bytes: int, removed: list[str]
) -> None:
    assert disk.retention(finished, lives, keep, keep_bytes) == removed


TOTAL = (
    "this node's bound on what all runs' workspaces may hold, jobs.policy.workspaces.total (24M), would be"
    " passed: the {n} live runs' disk caps take {took} and this run's disk cap is {cap}"
)
FREE = (
    "the file system holding this node's workspaces (/s/.disks) has {free} free: less than the live runs"
    " may still write ({grow}) plus this run's disk cap ({cap})"
)


@pytest.mark.parametrize(
    ("cap", "lives", "kept", "free", "want"),
    [
        (8 * M, [], [], 100 * M, Admission()),
        (8 * M, [live("a"), live("b")], [], 100 * M, Admission()),  # 24M exactly fits
        (8 * M, [live("a"), live("b"), live("c")], [], 100 * M,
         Admission(refusal=TOTAL.format(n=3, took="24M", cap="8M"))),
        (16 * M, [live("a", 12 * M)], [], 100 * M, Admission(refusal=TOTAL.format(n=1, took="12M", cap="16M"))),
        # finished workspaces yield, oldest first, only as far as needed
        (8 * M, [live("a")], [done("k1", 1, 4 * M), done("k2", 2, 4 * M), done("k3", 3, 4 * M)], 100 * M,
         Admission(remove=("k1",))),
        (8 * M, [live("a")], [done("k1", 1, 9 * M), done("k2", 2, M)], 100 * M, Admission(remove=("k1",))),
        # the images are sparse: a live run may still write to its cap; free space is a bound of its own
        (8 * M, [live("a", size=2 * M)], [], 13 * M, Admission(refusal=FREE.format(free="13M", grow="6M", cap="8M"))),
        (8 * M, [live("a", size=2 * M)], [], 14 * M, Admission()),
        (8 * M, [live("a", size=2 * M)], [done("k", 1, M)], 13 * M, Admission(remove=("k",))),  # k frees 1M
        (8 * M, [], [done("k", 1, 2 * M)], 4 * M, Admission(refusal=FREE.format(free="6M", grow="0", cap="8M"))),
    ],
)  # fmt: skip
def test_admit(cap: int, lives: list[Held], kept: list[Held], free: int, want: Admission) -> None:
    assert disk.admit(cap, lives, kept, total=24 * M, total_text="24M", free=free, where="/s/.disks") == want


SWITCH = 'set jobs.policy.workspaces.cap = "measured" to accept a disk cap measured every 2 s instead'
OWN = "this node cannot hold run.limits.disk with a file system of the workspace's own"


@pytest.mark.parametrize(
    ("mode", "euid", "loop", "mkfs", "cap", "why"),
    [
        ("filesystem", 0, True, True, 8 * M, None),
        ("measured", 1000, False, False, 8 * M, None),
        ("filesystem", 0, True, True, None, None),
        ("filesystem", 1000, True, True, 8 * M, f"{OWN}: it is not root; {SWITCH}"),
        ("filesystem", 0, False, True, 8 * M, f"{OWN}: it has no loop devices (/dev/loop-control); {SWITCH}"),
        ("filesystem", 0, True, False, 8 * M, f"{OWN}: /usr/sbin/mkfs.ext4 is missing (apt install e2fsprogs); {SWITCH}"),
        ("filesystem", 0, True, True, 512 << 10,
         "run.limits.disk must be at least 1M on this node: the workspace is a file system of that size"),
        ("filesystem", 0, True, True, M + 4095, None),  # rounded down to 1M: still a file system
    ],
)  # fmt: skip
def test_fs_refusal(mode: str, euid: int, loop: bool, mkfs: bool, cap: int | None, why: str | None) -> None:
    assert disk.fs_refusal(mode, euid, loop, mkfs, cap) == why


@pytest.mark.parametrize(
    ("cap", "size"), [(8 * M, 8 * M), (8 * M + 4095, 8 * M), (4096, 4096), (4095, 0), (10**9, 999997440)]
)
def test_fs_size_is_never_above_the_cap(cap: int, size: int) -> None:
    assert disk.fs_size(cap) == size and size <= cap


@pytest.mark.parametrize(
    ("avail", "inodes", "full"),
    [(0, 10, True), (2048, 10, True), (64 << 10, 10, False), (M, 0, True), (M, 1, False)],
)
def test_fs_full(avail: int, inodes: int, full: bool) -> None:
    assert disk.fs_full(avail, inodes) is full


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (8 * M, "8M"),
        (24 * M, "24M"),
        (1 << 30, "1G"),
        (3 << 40, "3T"),
        (1536, "1536"),
        (2048, "2K"),
        (0, "0"),
    ],
)
def test_size_text(n: int, text: str) -> None:
    assert disk.size_text(n) == text


MOUNTINFO = """\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
90 22 7:0 / /tmp/n/root/u/p/ws\\040one rw,nosuid,nodev,relatime shared:50 - ext4 /dev/loop0 rw
91 22 7:1 / /tmp/n/root/u/p/ws2 rw,nosuid,nodev,relatime shared:51 - ext4 /dev/loop1 rw
92 91 7:2 / /tmp/n/root/u/p/ws2/deeper rw,relatime shared:52 - ext4 /dev/loop2 rw
93 22 7:3 / /tmp/nother rw,relatime shared:53 - ext4 /dev/loop3 rw
"""


def test_mounts_are_read_from_mountinfo() -> None:
    assert disk.mounted_at(MOUNTINFO, "/tmp/n/root/u/p/ws one")
    assert disk.mounted_at(MOUNTINFO, "/tmp/n/root/u/p/ws2/")
    assert not disk.mounted_at(MOUNTINFO, "/tmp/n/root/u/p")
    assert disk.mounts_below(MOUNTINFO, "/tmp/n") == [
        "/tmp/n/root/u/p/ws2/deeper", "/tmp/n/root/u/p/ws one", "/tmp/n/root/u/p/ws2",
    ]  # fmt: skip


def test_workspace_policy_defaults() -> None:
    pol = nodepolicy.parse_policy({})
    w = pol.workspaces
    assert (w.cap, w.total, w.keep, w.keep_bytes) == ("filesystem", 64 << 30, 3, 8 << 30)
    assert nodepolicy.WorkspacePolicy() == w
    got = nodepolicy.parse_policy({"workspaces": {"cap": "measured", "total": "24M", "keep": 0, "keep_bytes": 1024},
                                   "limits": {"disk": "8M"}}).workspaces  # fmt: skip
    assert (got.cap, got.total, got.keep, got.keep_bytes, got.text) == (
        "measured",
        24 * M,
        0,
        1024,
        {"total": "24M", "keep_bytes": "1024"},
    )


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"workspaces": []}, "jobs.policy.workspaces must be a table"),
        ({"workspaces": {"keep_last": 2}}, "jobs.policy.workspaces has an unknown key 'keep_last'"),
        ({"workspaces": {"cap": "quota"}}, 'jobs.policy.workspaces.cap must be "filesystem" or "measured", not \'quota\''),
        ({"workspaces": {"keep": -1}}, "jobs.policy.workspaces.keep must be an integer from 0 to 1000, not -1"),
        ({"workspaces": {"keep": True}}, "jobs.policy.workspaces.keep must be an integer from 0 to 1000, not True"),
        ({"workspaces": {"total": "lots"}},
         "jobs.policy.workspaces.total must be a positive number of bytes or a count with K/M/G/T, not 'lots'"),
        ({"workspaces": {"keep_bytes": 0}}, "jobs.policy.workspaces.keep_bytes must be positive, not 0"),
        ({"workspaces": {"total": "4G"}},
         "jobs.policy.workspaces.total (4G) is below jobs.policy.limits.disk (8G): no run could start"),
    ],
)  # fmt: skip
def test_workspace_policy_is_validated(table: dict[str, object], message: str) -> None:
    with pytest.raises(PolicyError) as e:
        nodepolicy.parse_policy(table)
    assert e.value.message == message
