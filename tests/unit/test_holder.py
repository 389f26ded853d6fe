"""Behaviour 6.1: the holder record, its proof fields, the judge, mount_for and the vouch."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sotd import sysprobe
from sotd.errors import FormatError
from sotd.formats import holder
from sotd.formats.holder import ALIVE, DEAD, UNPROVABLE, Holder

pytestmark = pytest.mark.unit

MID = "0123456789abcdef0123456789abcdef"
BOOT = "b00tb00t-0000-4000-8000-000000000001"
NS = "4026531836"


class FakeBox:
    """A fake /proc and /etc/machine-id under tmp_path."""

    def __init__(self, root: str) -> None:
        self.proc = os.path.join(root, "proc")
        self.etc = os.path.join(root, "etc")
        os.makedirs(os.path.join(self.proc, "sys", "kernel", "random"))
        os.makedirs(self.etc)
        self.machine_path = os.path.join(self.etc, "machine-id")

    def machine(self, text: str | None) -> None:
        if text is None:
            if os.path.exists(self.machine_path):
                os.unlink(self.machine_path)
            return
        with open(self.machine_path, "w") as f:
            f.write(text)

    def boot(self, text: str) -> None:
        with open(os.path.join(self.proc, "sys", "kernel", "random", "boot_id"), "w") as f:
            f.write(text)

    def process(
        self, pid: int, start: str | None, ns: str | None = NS, comm: str = "python3", state: str = "S"
    ) -> None:
        d = os.path.join(self.proc, str(pid))
        os.makedirs(os.path.join(d, "ns"), exist_ok=True)
        if start is not None:
            rest = [state, "1", str(pid), str(pid), "0", "-1", "4194560"] + ["0"] * 12 + [start, "1000", "50"]
            with open(os.path.join(d, "stat"), "w") as f:
                f.write(f"{pid} ({comm}) " + " ".join(rest) + "\n")
        if ns is not None:
            os.symlink(f"pid:[{ns}]" if ns.isdigit() else ns, os.path.join(d, "ns", "pid"))

    def self_is(self, pid: int) -> None:
        os.symlink(str(pid), os.path.join(self.proc, "self"))

    def mountinfo(self, text: str) -> None:
        d = os.path.join(self.proc, "self")
        if not os.path.exists(d):
            os.makedirs(d)
        with open(os.path.join(d, "mountinfo"), "w") as f:
            f.write(text)


@pytest.fixture
def box(tmp_path, monkeypatch) -> FakeBox:
    fb = FakeBox(str(tmp_path))
    monkeypatch.setattr(sysprobe, "PROC", fb.proc)
    monkeypatch.setattr(sysprobe, "MACHINE_ID_PATH", fb.machine_path)
    return fb


# ---------------------------------------------------------------------------------------------- fields


@pytest.mark.parametrize(
    ("content", "want"),
    [
        (MID + "\n", MID),
        ("  " + MID + "  \nsecond line\n", MID),
        ("", "-"),
        ("\n", "-"),
        ("uninitialized\n", "-"),  # machine-id(5): first boot; testing-notes 0.11
        ("has:colon\n", "-"),
        ("has space\n", "-"),
        (None, "-"),  # unreadable
    ],
)
def test_6_1_machine_id_first_line_trimmed_else_dash(box, content, want):
    box.machine(content)
    assert holder.machine_field() == want


def test_6_1_boot_id_read_from_proc_else_dash(box):
    assert holder.boot_field() == "-"
    box.boot(BOOT + "\n")
    assert holder.boot_field() == BOOT


@pytest.mark.parametrize(
    ("link", "want"),
    [
        ("4026532178", "4026532178"),
        ("pid:[12x]", "-"),
        ("pid:123", "-"),
        ("net:[4026531840]", "-"),
        (None, "-"),
    ],
)
def test_6_1_pidns_is_inode_of_ns_link(box, link, want):
    box.process(4242, "100", ns=link)
    assert holder.pidns_field(4242) == want


@pytest.mark.parametrize(
    "comm",
    ["python3", "my prog", "a) b (c", "x)) 1 2 3 (", ")"],
)
def test_6_1_start_tick_is_field_22_counted_after_last_paren(box, comm):
    box.process(77, "987654", comm=comm)
    assert holder.start_field(77) == "987654"


def test_6_1_start_tick_unreadable_is_dash(box):
    assert holder.start_field(78) == "-"
    os.makedirs(os.path.join(box.proc, "79"))
    with open(os.path.join(box.proc, "79", "stat"), "w") as f:
        f.write("79 (short) S 1 2\n")
    assert holder.start_field(79) == "-"


def test_6_1_start_tick_real_process_matches_proc():
    with open(f"/proc/{os.getpid()}/stat") as f:
        want = f.read().rsplit(")", 1)[1].split()[19]
    assert holder.start_field(os.getpid()) == want


# ---------------------------------------------------------------------------------------------- own


def _proven_box(box: FakeBox) -> None:
    box.machine(MID + "\n")
    box.boot(BOOT + "\n")
    box.process(os.getpid(), "555", ns=NS)
    box.self_is(os.getpid())


def test_6_1_own_record_has_proof_fields_of_this_process(box):
    _proven_box(box)
    me = holder.own("laptop")
    assert me.record() == f"laptop:{MID}:{BOOT}:{NS}:{os.getpid()}:555"


@pytest.mark.parametrize(
    ("host", "name"),
    [
        ("laptop", "laptop"),
        ("my host", "my_host"),
        ("a:b/c", "a_b_c"),
        ("café", "caf__"),  # each UTF-8 byte outside the set is one '_'
        ("", "-"),
        ("ok-1.2_x", "ok-1.2_x"),
    ],
)
def test_6_1_own_name_is_declared_host_made_safe(box, host, name):
    _proven_box(box)
    assert holder.own(host).name == name


def test_6_1_own_without_proof_has_four_dashes(box):
    _proven_box(box)
    me = holder.own("h", proven=False)
    assert me.record() == f"h:-:-:-:{os.getpid()}:-"


def test_6_1_own_proof_only_when_proc_self_stat_confirms_pid(box):
    box.machine(MID + "\n")
    box.boot(BOOT + "\n")
    other = os.getpid() + 1
    box.process(other, "555", ns=NS)
    box.self_is(other)  # /proc/self names another pid: this /proc is not ours
    assert holder.own("h").record() == f"h:-:-:-:{os.getpid()}:-"


def test_6_1_own_any_unreadable_field_is_dash(box):
    box.machine("uninitialized\n")
    box.process(os.getpid(), "555", ns=None)
    box.self_is(os.getpid())
    assert holder.own("h").record() == f"h:-:-:-:{os.getpid()}:555"


def test_6_1_own_on_this_linux_box_is_proven():
    me = holder.own("x")
    assert me.pid == os.getpid()
    assert me.boot != "-" and me.pidns != "-" and me.start != "-"


# ---------------------------------------------------------------------------------------------- record


def test_6_1_record_and_holder_id():
    h = Holder("box", MID, BOOT, NS, 123, "456")
    assert h.record() == f"box:{MID}:{BOOT}:{NS}:123:456"
    assert h.holder_id() == f"box.{MID}.{BOOT}.{NS}.123.456"
    assert Holder.parse(h.record() + "\n") == h
    assert Holder.parse(h.record()) == h
    assert hash(Holder.parse(h.record())) == hash(h)
    assert h != Holder("box", MID, BOOT, NS, 124, "456")
    assert h != h.record()


@pytest.mark.parametrize(
    "line",
    [
        "",
        "\n",
        "a:b:c:d:e",  # five fields
        "a:b:c:d:1:f:g",  # seven fields
        "a:b:c:d:x1:f",  # pid not numeric
        "a:b:c:d:-:f",  # pid unknown is not a record
        "a:b:c:d::f",  # empty pid
        ":b:c:d:1:f",  # empty field
        "a:b:c:d:1:f\r",
        "a:b:c:d:1:f\n\n",
        "a:b:c:d:１２:f",  # non-ASCII digits
        "a:b:c:d:" + "9" * 5000 + ":f",  # would overflow int() parsing limits
        "a:b:c:d: 1:f",
    ],
)
def test_6_1_parse_rejects_non_records_with_format_error(line):
    with pytest.raises(FormatError):
        Holder.parse(line)


_field = st.text(
    alphabet=st.characters(blacklist_characters=":\n\r", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=40,
)


@given(_field, _field, _field, _field, st.integers(min_value=0, max_value=2**63), _field)
def test_6_1_parse_round_trip(name, machine, boot, ns, pid, start):
    h = Holder(name, machine, boot, ns, pid, start)
    assert Holder.parse(h.record()) == h
    assert Holder.parse(h.record() + "\n") == h


@given(st.text(max_size=200))
def test_6_1_any_text_parses_or_raises_format_error(text):
    try:
        h = Holder.parse(text)
    except FormatError:
        return
    assert isinstance(h, Holder)
    assert h.record() == text.removesuffix("\n")


# ---------------------------------------------------------------------------------------------- judge

ME = Holder("box", MID, BOOT, NS, 1000, "500")
H_PID = 2000


def _h(**kw: object) -> Holder:
    base: dict[str, object] = {
        "name": "box",
        "machine": MID,
        "boot": BOOT,
        "pidns": NS,
        "pid": H_PID,
        "start": "700",
    }
    base.update(kw)
    return Holder(**base)  # type: ignore[arg-type]


# (rule, holder, me, /proc state of H_PID: None = absent, "dir" = present but unreadable, else start tick,
#  verdict, reason)
JUDGE_TABLE = [
    ("no_own_proof", _h(), Holder("box", "-", "-", "-", 1000, "-"), "700", UNPROVABLE, holder.WHY_NO_OWN_PROOF),
    ("same_boot_pid_reused", _h(), ME, "701", DEAD, holder.WHY_PID_REUSED),
    ("same_boot_pid_running", _h(), ME, "700", ALIVE, holder.WHY_RUNNING),
    ("same_boot_pid_stopped_is_alive", _h(), ME, "700T", ALIVE, holder.WHY_RUNNING),
    ("same_boot_pid_gone_is_dead", _h(), ME, None, DEAD, holder.WHY_EXITED),
    ("same_boot_proc_unreadable", _h(), ME, "dir", UNPROVABLE, holder.WHY_PROC_UNREADABLE),
    ("same_boot_record_start_unknown", _h(start="-"), ME, "700", UNPROVABLE, holder.WHY_PROC_UNREADABLE),
    ("same_boot_record_start_unknown_pid_gone", _h(start="-"), ME, None, DEAD, holder.WHY_EXITED),
    ("same_boot_other_name_still_judged_by_pid", _h(name="other"), ME, None, DEAD, holder.WHY_EXITED),
    ("same_machine_same_host_other_boot_rebooted", _h(boot="oldboot"), ME, "700", DEAD, holder.WHY_REBOOTED),
    ("rebooted_even_if_pid_running_now", _h(boot="oldboot", pidns="1"), ME, "700", DEAD, holder.WHY_REBOOTED),
    ("other_boot_other_host", _h(boot="oldboot", name="other"), ME, None, UNPROVABLE, holder.WHY_OTHER_MACHINE),
    ("other_machine", _h(machine="f" * 32, boot="b2"), ME, None, UNPROVABLE, holder.WHY_OTHER_MACHINE),
    ("holder_machine_dash", _h(machine="-", boot="b2"), ME, None, UNPROVABLE, holder.WHY_OTHER_MACHINE),
    (
        "dash_never_equals_dash_machine",
        _h(machine="-", boot="b2"),
        Holder("box", "-", BOOT, NS, 1000, "500"),
        None,
        UNPROVABLE,
        holder.WHY_OTHER_MACHINE,
    ),
    (
        "dash_never_equals_dash_boot",
        _h(boot="-"),
        Holder("box", MID, "-", NS, 1000, "500"),
        None,
        UNPROVABLE,
        holder.WHY_OTHER_PIDNS,
    ),
    ("holder_without_proof", _h(machine="-", boot="-", pidns="-", start="-"), ME, None, UNPROVABLE,
     holder.WHY_OTHER_MACHINE),
    ("other_pidns_same_boot", _h(pidns="4026532178"), ME, None, UNPROVABLE, holder.WHY_OTHER_PIDNS),
    ("pidns_dash_same_boot", _h(pidns="-"), ME, None, UNPROVABLE, holder.WHY_OTHER_PIDNS),
    ("unknown_boot_same_machine_not_a_reboot", _h(boot="-"), ME, None, UNPROVABLE, holder.WHY_OTHER_PIDNS),
]  # fmt: skip


@pytest.mark.parametrize(
    ("rule", "h", "me", "proc", "verdict", "why"), JUDGE_TABLE, ids=[r[0] for r in JUDGE_TABLE]
)
def test_6_1_judge_rule(box, rule, h, me, proc, verdict, why):
    if proc == "dir":
        os.makedirs(os.path.join(box.proc, str(H_PID)))
    elif proc is not None:
        state = "T" if proc.endswith("T") else "S"
        box.process(H_PID, proc.rstrip("T"), state=state)
    assert holder.judge(h, me) == (verdict, why)


def test_6_1_judge_no_timeout_proves_death(box):
    """An old record of a running holder stays ALIVE: the judge has no notion of age at all."""
    box.process(H_PID, "700")
    for _ in range(3):
        assert holder.judge(_h(), ME) == (ALIVE, holder.WHY_RUNNING)


def test_6_1_judge_real_process_self_alive_and_reused():
    me = holder.own("box")
    assert holder.judge(me, me) == (ALIVE, holder.WHY_RUNNING)
    reused = Holder("box", me.machine, me.boot, me.pidns, me.pid, str(int(me.start) + 1))
    assert holder.judge(reused, me) == (DEAD, holder.WHY_PID_REUSED)


def test_6_1_reason_strings_are_protocol():
    assert [
        holder.WHY_NO_OWN_PROOF,
        holder.WHY_PID_REUSED,
        holder.WHY_RUNNING,
        holder.WHY_EXITED,
        holder.WHY_PROC_UNREADABLE,
        holder.WHY_REBOOTED,
        holder.WHY_OTHER_MACHINE,
        holder.WHY_OTHER_PIDNS,
    ] == [
        "this box cannot prove a death",
        "its pid now names another process",
        "it is running",
        "it has exited",
        "its /proc entry cannot be read",
        "its machine has rebooted since",
        "it is on another machine",
        "it is in another pid namespace",
    ]


# ---------------------------------------------------------------------------------------------- mounts

MI_BASE = (
    "22 27 0:21 / /proc rw,relatime - proc proc rw\n"
    "27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard\n"
)


@pytest.mark.parametrize(
    ("extra", "path", "want"),
    [
        ("", "/home/u/.sot-comm", ("ext4", "/dev/vda", "rw,relatime", "rw,discard")),
        ("", "/", ("ext4", "/dev/vda", "rw,relatime", "rw,discard")),
        ("", "/proc/self", ("proc", "proc", "rw,relatime", "rw")),
        # whole components only: /mnt/ab is not under /mnt/a
        (
            "40 27 0:50 / /mnt/a rw - tmpfs t rw\n",
            "/mnt/ab/x",
            ("ext4", "/dev/vda", "rw,relatime", "rw,discard"),
        ),
        ("40 27 0:50 / /mnt/a rw - tmpfs t rw\n", "/mnt/a", ("tmpfs", "t", "rw", "rw")),
        ("40 27 0:50 / /mnt/a rw - tmpfs t rw\n", "/mnt/a/b/c", ("tmpfs", "t", "rw", "rw")),
        # longest prefix wins, whatever the order
        (
            "41 40 0:51 / /mnt/a/b rw - nfs4 srv:/x rw,nocto\n40 27 0:50 / /mnt/a rw - tmpfs t rw\n",
            "/mnt/a/b/c",
            ("nfs4", "srv:/x", "rw", "rw,nocto"),
        ),
        # ties: the later entry (mounted on top) wins
        (
            "40 27 0:50 / /mnt/a rw - tmpfs t rw\n41 40 0:51 / /mnt/a rw,nocto - nfs srv:/e rw\n",
            "/mnt/a/x",
            ("nfs", "srv:/e", "rw,nocto", "rw"),
        ),
        # octal escapes: \040 is a space, \134 a backslash
        (
            "42 27 0:52 / /mnt/my\\040comm rw - xfs /dev/sd\\040b rw\n",
            "/mnt/my comm/sub",
            ("xfs", "/dev/sd b", "rw", "rw"),
        ),
        ("42 27 0:52 / /mnt/my\\040comm rw - xfs /dev/sdb rw\n", "/mnt/my\\040comm", None),
        ("43 27 0:53 / /mnt/b\\134s rw - btrfs /dev/x rw\n", "/mnt/b\\s", ("btrfs", "/dev/x", "rw", "rw")),
        # optional fields before the separator; malformed lines are skipped
        (
            "44 27 0:54 / /m rw shared:3 master:2 - f2fs /dev/y rw\ngarbage line\n\n",
            "/m",
            ("f2fs", "/dev/y", "rw", "rw"),
        ),
    ],
)
def test_6_1_mount_for(extra, path, want):
    text = MI_BASE + extra
    got = holder.mount_for(text, path)
    if want is None:
        assert got is None or got[0] == "ext4"
    else:
        assert got == want


def test_6_1_mount_for_nothing_matches():
    assert holder.mount_for("", "/x") is None
    assert holder.mount_for("40 27 0:50 / /mnt/a rw - tmpfs t rw\n", "/home") is None


def _mi(fstype: str, mount_opts: str = "rw,relatime", super_opts: str = "rw") -> str:
    return MI_BASE + f"50 27 0:60 / /srv/comm {mount_opts} - {fstype} src {super_opts}\n"


@pytest.mark.parametrize(
    ("fstype", "mount_opts", "super_opts", "want"),
    [
        ("ext4", "rw", "rw", None),
        ("ext2", "rw", "rw", None),
        ("ext3", "rw", "rw", None),
        ("xfs", "rw", "rw", None),
        ("btrfs", "rw", "rw", None),
        ("zfs", "rw", "rw", None),
        ("f2fs", "rw", "rw", None),
        ("tmpfs", "rw", "rw", None),
        ("nfs", "rw", "rw,vers=3", None),
        ("nfs4", "rw", "rw,vers=4.2", None),
        (
            "nfs4",
            "rw",
            "rw,vers=4.2,nocto",
            "the comm home is mounted nocto, so no read of it is proved fresh",
        ),
        ("nfs", "rw,nocto", "rw", "the comm home is mounted nocto, so no read of it is proved fresh"),
        ("fuse.sshfs", "rw", "rw", "the comm home's filesystem (fuse.sshfs) does not prove a fresh read"),
        ("overlay", "rw", "rw", "the comm home's filesystem (overlay) does not prove a fresh read"),
        ("cifs", "rw", "rw", "the comm home's filesystem (cifs) does not prove a fresh read"),
    ],
)
def test_6_1_vouch(box, fstype, mount_opts, super_opts, want):
    box.mountinfo(_mi(fstype, mount_opts, super_opts))
    assert holder.vouch("/srv/comm/home") == want


def test_6_1_vouch_unknown_when_mountinfo_unreadable(box):
    assert holder.vouch("/srv/comm") == "the comm home's filesystem (unknown) does not prove a fresh read"


def test_6_1_vouch_resolves_symlinks(box, tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    box.mountinfo(
        MI_BASE
        + f"50 27 0:60 / {os.path.realpath(real)} rw - fuse.x s rw\n"
        + f"51 27 0:61 / {link} rw - ext4 s rw\n"
    )
    assert holder.vouch(str(link)) == "the comm home's filesystem (fuse.x) does not prove a fresh read"


def test_6_1_vouch_real_tmp_path(tmp_path):
    with open("/proc/self/mountinfo") as f:
        fs = holder.mount_for(f.read(), os.path.realpath(tmp_path))
    assert fs is not None
    assert (holder.vouch(str(tmp_path)) is None) == (fs[0] in holder.FRESH_FS)
