"""The inbox lock manager (behaviour 6.4): identity from mountinfo, the record, the hub's decision, the route."""

from __future__ import annotations

import os
import stat
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sotd.errors import SotdError
from sotd.formats import lockmanager as lm
from sotd.formats.layout import Layout

pytestmark = pytest.mark.unit

MID = "0123456789abcdef0123456789abcdef"

MOUNTINFO = "\n".join(
    [
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,errors=remount-ro",
        "30 22 0:30 / /tmp rw,nosuid shared:5 - tmpfs tmpfs rw,size=64k",
        "31 22 0:31 / /srv/nfs4 rw,relatime shared:6 - nfs4 srv:/export "
        "rw,vers=4.2,rsize=1048576,hard,proto=tcp,local_lock=none,addr=10.0.0.1",
        "32 22 0:32 / /srv/nfs4local rw - nfs4 srv:/export2 rw,vers=4.1,local_lock=all",
        "33 22 0:33 / /srv/nfs3 rw - nfs srv:/e3 rw,vers=3,local_lock=none",
        "34 22 0:34 / /srv/nfs4nosrc rw - nfs4  rw,vers=4.2,local_lock=none",
        "35 22 0:35 / /srv/my\\040disk rw - xfs /dev/sdb1 rw",
        "36 22 0:36 / /home/u/fuse rw - fuse.sshfs u@h:/ rw,user_id=0",
        "37 22 0:37 / /data rw - btrfs /dev/sdc rw",
        "38 37 0:38 / /data rw - tmpfs tmpfs rw",  # stacked on top: the later entry wins
        "39 22 0:39 / /srv/nfs4v4 rw - nfs4 srv:/e4 rw,vers=4,local_lock=none",
        "40 22 0:40 / /z rw - zfs pool/z rw",
        "41 22 0:41 / /f rw - f2fs /dev/f rw",
        "42 22 0:42 / /e2 rw - ext2 /dev/e2 rw",
        "43 22 0:43 / /e3 rw - ext3 /dev/e3 rw",
        "44 22 0:44 / /opt\\011tab rw - ext4 /dev/t rw",
        "45 22 0:45 / /srv/nfs4v5 rw - nfs4 srv:/e5 rw,vers=40,local_lock=none",
    ]
)

IDENTITY_CASES = [
    ("local ext4 at the root", "/home/u/.sot-comm/inbox", MID, f"local {MID}"),
    ("tmpfs is none@", "/tmp/x/inbox", MID, f"none@{MID}"),
    ("tmpfs without a machine id is bare none", "/tmp/x/inbox", None, "none"),
    ("ext4 without a machine id is bare none", "/home/u/inbox", "", "none"),
    ("ext4 with '-' machine id is bare none", "/home/u/inbox", "-", "none"),
    ("nfs4 vers=4.2 local_lock=none", "/srv/nfs4/comm/inbox", MID, "nfs4 srv:/export"),
    ("nfs4 needs no machine id", "/srv/nfs4/comm/inbox", None, "nfs4 srv:/export"),
    ("nfs4 vers=4 local_lock=none", "/srv/nfs4v4/inbox", MID, "nfs4 srv:/e4"),
    ("nfs4 with local locks is none@", "/srv/nfs4local/inbox", MID, f"none@{MID}"),
    ("nfs v3 is none@", "/srv/nfs3/inbox", MID, f"none@{MID}"),
    ("nfs4 with an empty source is none@", "/srv/nfs4nosrc/inbox", MID, f"none@{MID}"),
    ("nfs4 vers=40 is not 4.x", "/srv/nfs4v5/inbox", MID, f"none@{MID}"),
    ("\\040 escape decoded", "/srv/my disk/inbox", MID, f"local {MID}"),
    ("\\011 escape decoded", "/opt\ttab/inbox", MID, f"local {MID}"),
    ("escaped name does not match the raw text", "/srv/my\\040disk/inbox", MID, f"local {MID}"),
    ("fuse is none@", "/home/u/fuse/inbox", MID, f"none@{MID}"),
    ("stack: later tmpfs over btrfs wins", "/data/inbox", MID, f"none@{MID}"),
    ("whole components only: /datax is the root's", "/datax/inbox", MID, f"local {MID}"),
    ("the mount point itself", "/srv/nfs4", MID, "nfs4 srv:/export"),
    ("zfs", "/z/i", MID, f"local {MID}"),
    ("f2fs", "/f/i", MID, f"local {MID}"),
    ("ext2", "/e2/i", MID, f"local {MID}"),
    ("ext3", "/e3/i", MID, f"local {MID}"),
    ("uninitialized machine id is none", "/tmp/i", "uninitialized", "none"),
]


@pytest.mark.parametrize(("rule", "path", "mid", "want"), IDENTITY_CASES, ids=[c[0] for c in IDENTITY_CASES])
def test_identity_from_mountinfo(rule: str, path: str, mid: str | None, want: str) -> None:
    assert lm.manager_from_mountinfo(MOUNTINFO, path, mid) == want, rule


def test_identity_with_no_mount_table() -> None:
    assert lm.manager_from_mountinfo("", "/x", MID) == f"none@{MID}"
    assert lm.manager_from_mountinfo("garbage\n", "/x", None) == "none"


def test_identity_of_this_machine_is_well_formed(tmp_path: os.PathLike[str]) -> None:
    ident = lm.lock_manager_of(str(tmp_path))
    assert ident == "none" or ident.startswith(("local ", "none@", "nfs4 "))
    assert lm.is_nfs("nfs4 a:/b")
    assert lm.is_nfs(ident) == ident.startswith("nfs4 ")


# ------------------------------------------------------------------------------------------------ record


def test_encode_and_parse_record() -> None:
    assert lm.encode_record(f"local {MID}", MID) == f"local {MID}\n{MID}\n".encode()
    assert lm.encode_record("nfs4 s:/e", None) == b"nfs4 s:/e\n"
    assert lm.encode_record("nfs4 s:/e", "-") == b"nfs4 s:/e\n"
    assert lm.parse_record(b"a\nb\n") == ("a", "b")
    assert lm.parse_record(b"a\n") == ("a", "")
    assert lm.parse_record(b"a") == ("a", "")
    assert lm.parse_record(b"") == ("", "")
    assert lm.parse_record(b"a\r\nb\r\n") == ("a", "b")


OWN = f"local {MID}"
OTHER_MID = "f" * 32
DECIDE = [
    ("guest keeps", None, OWN, MID, False, lm.GUEST),
    ("guest keeps even with a record", (OWN, MID), OWN, MID, False, lm.GUEST),
    ("own bare none keeps", None, "none", None, True, lm.NO_ID),
    ("no record creates", None, OWN, MID, True, lm.CREATE),
    ("nfs4 hub without machine id creates", None, "nfs4 s:/e", None, True, lm.CREATE),
    ("line 1 equal is current", (OWN, OTHER_MID), OWN, MID, True, lm.CURRENT),
    ("own machine wrote another identity: replace", ("nfs4 s:/e", MID), OWN, MID, True, lm.REPLACE),
    ("another machine's record is foreign", (f"local {OTHER_MID}", OTHER_MID), OWN, MID, True, lm.FOREIGN),
    ("unknown writer is foreign", ("nfs4 s:/e", ""), OWN, MID, True, lm.FOREIGN),
    ("no own mid never replaces an unknown writer", ("nfs4 s:/e", ""), "nfs4 s:/f", None, True, lm.FOREIGN),
]


@pytest.mark.parametrize(("rule", "rec", "own", "mid", "hub", "want"), DECIDE, ids=[d[0] for d in DECIDE])
def test_decide(
    rule: str, rec: tuple[str, str] | None, own: str, mid: str | None, hub: bool, want: str
) -> None:
    assert lm.decide(rec, own, mid, hub) == want, rule


P = "/c/inbox-lock-manager"
ROUTE = [
    ("own identity equals line 1: local", (OWN, MID), OWN, MID, True, False, (lm.LOCAL, "")),
    ("guest with equal identity also local", (OWN, OTHER_MID), OWN, MID, False, True, (lm.LOCAL, "")),
    (
        "guest + forwarded refuses",
        (f"local {OTHER_MID}", OTHER_MID),
        f"none@{MID}",
        MID,
        False,
        True,
        (lm.REFUSE, "a forwarded frame reached a daemon that is not its folder's hub (boxb)"),
    ),
    ("guest forwards", (f"local {OTHER_MID}", OTHER_MID), f"none@{MID}", MID, False, False, (lm.FORWARD, "")),
    ("guest with no record forwards", None, OWN, MID, False, False, (lm.FORWARD, "")),
    (
        "bare none never local even if the record says none",
        ("none", ""),
        "none",
        None,
        True,
        False,
        (
            lm.REFUSE,
            f"this hub has no machine id, so it cannot own the inbox lock record at {P}: give this machine a "
            "machine id (/etc/machine-id on Linux), then restart the daemon",
        ),
    ),
    (
        "hub with no record",
        None,
        OWN,
        MID,
        True,
        False,
        (lm.REFUSE, f"no inbox lock record at {P}: restart this daemon to write it"),
    ),
    (
        "remounted",
        ("nfs4 s:/e", MID),
        OWN,
        MID,
        True,
        False,
        (
            lm.REFUSE,
            f"this hub's inbox lock is now {OWN} but its record says nfs4 s:/e: restart this daemon to "
            "re-record it after the remount",
        ),
    ),
    (
        "foreign, known machine",
        (f"local {OTHER_MID}", OTHER_MID),
        OWN,
        MID,
        True,
        False,
        (
            lm.REFUSE,
            f"the inbox lock record names local {OTHER_MID}, written by machine {OTHER_MID}, a different lock "
            f"manager from this hub's {OWN}: stop every daemon on this comm folder, delete {P}, then start the hub",
        ),
    ),
    (
        "foreign, unknown machine",
        ("nfs4 s:/e", ""),
        OWN,
        MID,
        True,
        False,
        (
            lm.REFUSE,
            "the inbox lock record names nfs4 s:/e, written by an unknown machine, a different lock "
            f"manager from this hub's {OWN}: stop every daemon on this comm folder, delete {P}, then start the hub",
        ),
    ),
]


@pytest.mark.parametrize(
    ("rule", "rec", "own", "mid", "hub", "fwd", "want"), ROUTE, ids=[r[0] for r in ROUTE]
)
def test_route(
    rule: str,
    rec: tuple[str, str] | None,
    own: str,
    mid: str | None,
    hub: bool,
    fwd: bool,
    want: tuple[str, str],
) -> None:
    assert lm.route(rec, own, mid, hub, fwd, path=P, self_host="boxb") == want, rule


# ------------------------------------------------------------------------------------------- write_for_hub


@pytest.fixture
def lay(tmp_path: os.PathLike[str]) -> Layout:
    lay = Layout(str(tmp_path))
    os.makedirs(lay.inbox_dir)
    return lay


def _record_bytes(lay: Layout) -> bytes:
    with open(lay.lock_manager, "rb") as f:
        return f.read()


def _leftovers(lay: Layout) -> list[str]:
    return [n for n in os.listdir(lay.home) if n.startswith(".inbox-lock-manager.")]


def test_write_for_hub_create_current_replace_foreign(lay: Layout) -> None:
    assert lm.write_for_hub(lay, OWN, MID) == lm.CREATE
    assert _record_bytes(lay) == f"{OWN}\n{MID}\n".encode()
    assert stat.S_IMODE(os.stat(lay.lock_manager).st_mode) == 0o600
    assert lm.write_for_hub(lay, OWN, MID) == lm.CURRENT
    assert lm.write_for_hub(lay, "nfs4 s:/e", MID) == lm.REPLACE  # remount: same machine
    assert _record_bytes(lay) == f"nfs4 s:/e\n{MID}\n".encode()
    assert lm.write_for_hub(lay, f"local {OTHER_MID}", OTHER_MID) == lm.FOREIGN
    assert _record_bytes(lay) == f"nfs4 s:/e\n{MID}\n".encode()
    assert lm.write_for_hub(lay, "none", None) == lm.NO_ID
    assert _leftovers(lay) == []


def test_write_for_hub_without_machine_id_writes_one_line(lay: Layout) -> None:
    assert lm.write_for_hub(lay, "nfs4 s:/e", None) == lm.CREATE
    assert _record_bytes(lay) == b"nfs4 s:/e\n"


def test_write_for_hub_directory_at_the_path_is_the_link_error(lay: Layout) -> None:
    os.makedirs(lay.lock_manager)
    with pytest.raises(SotdError) as ei:
        lm.write_for_hub(lay, OWN, MID)
    assert ei.value.message == f"the inbox lock record {lay.lock_manager} could not be written: File exists"
    assert _leftovers(lay) == []


def test_two_hubs_race_exactly_one_creates(lay: Layout) -> None:
    barrier = threading.Barrier(2)
    results: dict[str, str] = {}

    def hub(name: str, ident: str, mid: str) -> None:
        barrier.wait()
        results[name] = lm.write_for_hub(lay, ident, mid)

    threads = [
        threading.Thread(target=hub, args=("a", OWN, MID)),
        threading.Thread(target=hub, args=("b", f"local {OTHER_MID}", OTHER_MID)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(results.values()) == [lm.CREATE, lm.FOREIGN]
    winner = "a" if results["a"] == lm.CREATE else "b"
    want = f"{OWN}\n{MID}\n" if winner == "a" else f"local {OTHER_MID}\n{OTHER_MID}\n"
    assert _record_bytes(lay) == want.encode()
    assert _leftovers(lay) == []


def test_link_lost_race_rereads(lay: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    real_link = os.link

    def link_after_someone_else(src: str, dst: str) -> None:
        with open(dst, "wb") as f:  # another hub (another machine) wins between the read and the link
            f.write(f"local {OTHER_MID}\n{OTHER_MID}\n".encode())
        monkeypatch.setattr(os, "link", real_link)
        real_link(src, dst)

    monkeypatch.setattr(os, "link", link_after_someone_else)
    assert lm.write_for_hub(lay, OWN, MID) == lm.FOREIGN
    assert _leftovers(lay) == []


def test_appends_itself(lay: Layout) -> None:
    own = lm.lock_manager_of(lay.inbox_dir)
    assert lm.appends_itself(lay) is False  # no record
    with open(lay.lock_manager, "w") as f:
        f.write(f"{own}\nx\n")
    assert lm.appends_itself(lay) is (own != "none")
    with open(lay.lock_manager, "w") as f:
        f.write("nfs4 elsewhere:/e\n")
    assert lm.appends_itself(lay) is False
    with open(lay.lock_manager, "w") as f:
        f.write("none\n")
    assert lm.appends_itself(lay) is False
    with open(lay.lock_manager, "w") as f:
        f.write("\n")
    assert lm.appends_itself(lay) is False


def test_appends_itself_bare_none_never(lay: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lm, "lock_manager_of", lambda _f: "none")
    with open(lay.lock_manager, "w") as f:
        f.write("none\n")
    assert lm.appends_itself(lay) is False


def test_appends_itself_unreadable_record(lay: Layout) -> None:
    os.makedirs(lay.lock_manager)
    assert lm.appends_itself(lay) is False


# ------------------------------------------------------------------------------------- record properties

# A record's line holds any text but a line break (a CR at a line's end is read as part of the break).
_line_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=80)
_identities = st.one_of(
    _line_text,
    st.builds(lambda m: f"local {m}", _line_text),
    st.builds(lambda s: f"nfs4 {s}", _line_text),
    st.builds(lambda m: f"none@{m}", _line_text),
    st.just("none"),
)
_machine_ids = st.one_of(st.none(), st.just("-"), st.just("uninitialized"), st.just(""), _line_text)


@given(_identities, _machine_ids)
def test_6_4_record_parse_encode_roundtrip(identity: str, mid: str | None) -> None:
    data = lm.encode_record(identity, mid)
    assert data.endswith(b"\n") and data.count(b"\n") in (1, 2)
    assert lm.parse_record(data) == (identity, lm._mid(mid))


@given(st.binary(max_size=300))
def test_6_4_any_record_bytes_parse_to_two_lines_never_raise(data: bytes) -> None:
    first, second = lm.parse_record(data)
    assert isinstance(first, str) and isinstance(second, str)
    assert "\n" not in first and "\n" not in second
    for verdict in (lm.decide((first, second), OWN, MID, True), lm.decide((first, second), OWN, MID, False)):
        assert verdict in (lm.GUEST, lm.CURRENT, lm.REPLACE, lm.FOREIGN)
    where, text = lm.route((first, second), OWN, MID, True, False, path=P, self_host="box")
    assert where in (lm.LOCAL, lm.REFUSE) and (where == lm.LOCAL) == (text == "")


@settings(deadline=None)
@given(st.binary(max_size=300) | _identities.map(lambda i: lm.encode_record(i, MID)))
def test_6_4_hub_on_any_existing_record_decides_or_fails_clearly(data: bytes) -> None:
    """A hub starting over whatever bytes are at the record path: a verdict, and it writes only its own
    record over one its machine wrote (else the bytes stay); never an exception other than ``SotdError``."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        lay = Layout(d)
        os.makedirs(lay.inbox_dir)
        with open(lay.lock_manager, "wb") as f:
            f.write(data)
        try:
            verdict = lm.write_for_hub(lay, OWN, MID)
        except SotdError as e:
            assert e.code == "lock_record_failed"
            return
        assert verdict in (lm.CURRENT, lm.REPLACE, lm.FOREIGN)
        after = _record_bytes(lay)
        if verdict == lm.REPLACE:
            assert after == lm.encode_record(OWN, MID)
        else:
            assert after == data
        assert _leftovers(lay) == []
        assert (lm.read_record(lay) or ("", ""))[0] == lm.parse_record(after)[0]
