"""sotd.sysprobe: one home for the /proc probes, the machine id and the declared host (issue 16, point 1)."""

from __future__ import annotations

import os

import pytest

from sotd import sysprobe

pytestmark = pytest.mark.unit

_TAIL = ["S", "1", "7", "7", "0", "-1", "4194560"] + ["0"] * 12 + ["987654", "1000", "50"]


@pytest.mark.parametrize(
    ("data", "want"),
    [
        (b"7 (python3) " + " ".join(_TAIL).encode(), ("7", _TAIL)),
        # the comm may hold ") " itself: split at the LAST ")"
        (b"8 (a) b) " + " ".join(_TAIL).encode(), ("8", _TAIL)),
        (b"9 python3 S 1", None),
        (b"", None),
    ],
)
def test_split_stat_splits_at_the_last_paren(data, want):
    assert sysprobe.split_stat(data) == want


@pytest.mark.parametrize(
    ("fields", "tick", "ppid"),
    [
        (_TAIL, "987654", 1),
        (_TAIL[:19], None, 1),  # too short for field 22
        (["S"], None, None),
        ([], None, None),
        (["S", "x1"] + ["0"] * 17 + ["12a"], None, None),  # not digits
        (["S", "²"] + ["0"] * 17 + ["١٢"], None, None),  # non-ASCII digits are not digits
    ],
)
def test_tick_and_ppid_in_fields(fields, tick, ppid):
    assert sysprobe.tick_in(fields) == tick
    assert sysprobe.ppid_in(fields) == ppid


@pytest.mark.parametrize(
    ("link", "want"),
    [("pid:[4026531836]", "4026531836"), ("pid:[12x]", None), ("pid:123", None), ("net:[4026531840]", None)],
)
def test_pidns_in(link, want):
    assert sysprobe.pidns_in(link) == want


@pytest.mark.parametrize(
    ("line", "want"),
    [("abc123", "abc123"), ("  abc123  ", "abc123"), ("", None), ("   ", None), ("uninitialized", None)],
)
def test_machine_id_in(line, want):
    assert sysprobe.machine_id_in(line) == want


@pytest.mark.parametrize(
    ("nodename", "want"), [("Box.Example.org", "box"), (" boxa ", "boxa"), ("", ""), ("a.b", "a")]
)
def test_host_label(nodename, want):
    assert sysprobe.host_label(nodename) == want


def test_declared_host_override_is_verbatim_else_the_label():
    assert sysprobe.declared_host({"SOT_SELF_HOST": "My.Box"}) == "My.Box"
    assert sysprobe.declared_host({}) == sysprobe.host_label(os.uname().nodename)


def test_probes_of_this_process_read_real_proc():
    got = sysprobe.stat_of(os.getpid())
    assert got is not None and got[0] == str(os.getpid())
    tick = sysprobe.start_tick(os.getpid())
    assert tick is not None and tick.isdigit()
    assert sysprobe.ppid_in(got[1]) == os.getppid()
    assert sysprobe.pidns(os.getpid()) is not None


def test_probes_answer_none_for_what_cannot_be_read(tmp_path, monkeypatch):
    monkeypatch.setattr(sysprobe, "PROC", str(tmp_path))
    monkeypatch.setattr(sysprobe, "MACHINE_ID_PATH", str(tmp_path / "machine-id"))
    assert sysprobe.start_tick(1) is None
    assert sysprobe.stat_of(1) is None
    assert sysprobe.pidns(1) is None
    assert sysprobe.boot_id() is None
    assert sysprobe.machine_id() is None
    (tmp_path / "machine-id").write_text("uninitialized\n")
    assert sysprobe.machine_id() is None
    (tmp_path / "machine-id").write_text(" 0123abcd \nmore\n")
    assert sysprobe.machine_id() == "0123abcd"
