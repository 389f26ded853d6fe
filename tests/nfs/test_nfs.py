"""One comm folder on real NFS across two hosts (v4.2 and v3): each point of issue 15 as its own test.

The facts come from one QEMU guest boot (``conftest.guest``; the recipe of testing-notes §2.7): a kernel
nfsd, host A in the guest's root namespaces, host B in its own network, UTS, mount and pid namespaces with
its own machine id and boot id, both mounting the same server address. ``guest/points.py`` runs this
checkout's sotd there and records what it saw; the assertions live here, so a failure says which rule broke.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.nfs.conftest import BUDGET_SECS, Guest

pytestmark = [pytest.mark.nfs, pytest.mark.serial, pytest.mark.root, pytest.mark.timeout(BUDGET_SECS + 90)]


def lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in text.splitlines()]


def test_record_v4_hub_writes_nfs4_manager_and_host_b_appends_itself(guest: Guest) -> None:
    f = guest.point("record_v4")
    assert f["hub_up"], f["hub_log"]
    mid_a = f["machine_id_a"]
    # the hub's record: the server-side lock manager, and the machine that wrote it
    assert f["record"] == f"nfs4 10.99.9.9:/\n{mid_a}\n"
    b = f["identity_b"]
    assert (b["hostname"], b["machine_id"] != mid_a) == ("hostb", True), "host B must be another machine"
    # host B computes the same manager from its own mount, so it takes the inbox lock itself
    assert b["identity"] == "nfs4 10.99.9.9:/"
    assert b["own_lock"] == "nfs4 10.99.9.9:/"
    assert f["join_b"]["code"] == 0, f["join_b"]
    assert (f["send_b"]["code"], f["send_b"]["out"]) == (0, "  filed -> @alpha\n"), f["send_b"]
    assert (f["send_a"]["code"], f["send_a"]["out"]) == (0, "  filed -> @beta\n"), f["send_a"]
    got = lines(f["inbox_alpha"])
    assert [(x["from"], x["msg"]) for x in got] == [("beta", "from B over v4")]
    assert got[0]["repo"] != "daemon", "host B appended itself, not through a daemon"


def test_record_v3_host_b_hands_the_line_to_its_daemon_and_the_hub_files_it(guest: Guest) -> None:
    f = guest.point("record_v3")
    assert f["hub_up"], f["hub_log"]
    mid_a = f["machine_id_a"]
    # v3 has no shared lock manager: the hub records its own machine's
    assert f["record"] == f"none@{mid_a}\n{mid_a}\n"
    b = f["identity_b"]
    assert b["identity"] == f"none@{b['machine_id']}" and b["machine_id"] != mid_a
    assert b["own_lock"] is None, "host B must not take the inbox lock on v3"
    assert f["guest_up"] and f["guest_linked"], f.get("guest_log")
    # B's send goes to B's daemon, up its link; the hub files it (unindented `filed`, repo "daemon")
    assert (f["send_b"]["code"], f["send_b"]["out"], f["send_b"]["err"]) == (0, "filed -> @alpha\n", "")
    got = lines(f["inbox_alpha"])
    assert [(x["from"], x["msg"], x["repo"]) for x in got] == [("beta", "from B over v3", "daemon")]
    # the hub's own machine appends itself
    assert (f["send_a"]["code"], f["send_a"]["out"]) == (0, "  filed -> @beta\n"), f["send_a"]


def test_appends_v4_two_hosts_500_each_through_sotd_are_1000_whole_lines(guest: Guest) -> None:
    f = guest.point("appends_sotd_v4")
    for who, w in f["writers"].items():
        assert w.get("own_lock") == "nfs4 10.99.9.9:/", f"host {who} must take the inbox lock itself: {w}"
        assert (w["n"], w["failed"]) == (500, 0), f"host {who}: {w['failures']}"
    c = f["census"]
    assert c == {
        "lines": 1000,
        "torn": 0,
        "unterminated_tail": False,
        "missing": {"A": 0, "B": 0},
        "repeated": {"A": 0, "B": 0},
    }


@pytest.mark.parametrize("ver", ["v4", "v3"])
def test_appends_plain_o_append_without_the_lock_loses_lines(guest: Guest, ver: str) -> None:
    """The same two writers with O_APPEND and no lock: NFS clients each compute "the end" from their own
    cached size, so lines overwrite each other. This is why sotd appends only under the inbox lock."""
    f = guest.point(f"appends_plain_{ver}")
    c = f["census"]
    lost = c["missing"]["A"] + c["missing"]["B"]
    assert lost + c["torn"] > 0, f"O_APPEND across two NFS clients lost nothing this run: {c}"
    assert c["lines"] < 1000


def test_killed_v4_inbox_lock_holder_on_host_b_frees_the_lock_at_once(guest: Guest) -> None:
    f = guest.point("killed_v4")
    assert f["inbox_held"] and f["kill_rc"] == 0
    assert f["size_before_kill"] > 0, "B had written half its line before it was killed"
    # host A's next append (bound 2 s) gets the lock, cuts the dead writer's half line, and appends whole
    assert f["a_append"] == "filed"
    assert f["lock_free_after_secs"] < 2.0
    assert f["notes"] == [
        f"note: cut {f['size_before_kill']} bytes of an unterminated line a dead writer left in @sink's inbox"
    ]
    assert [x["msg"] for x in lines(f["inbox"])] == ["A 00000 after the kill"]


@pytest.mark.parametrize("ver", ["v4", "v3"])
def test_killed_registry_lock_holder_on_host_b_is_never_forced_from_host_a(guest: Guest, ver: str) -> None:
    f = guest.point(f"killed_{ver}")
    assert f["reglock_held"]
    rec = f["b_record"]
    name, _machine, _boot, _pidns, pid, start = rec.split(":")
    assert name == "hostb"
    a = f["a_take"]
    path = f"/mnt/a{ver[1]}/kill-{ver}/.registry.lock"
    assert not a["taken"]
    assert a["message"].startswith(f"registry lock {path} is held by hostb pid {pid} start {start} (")
    assert a["message"].endswith(
        "old): it is on another machine. If it is dead, run any comm command on hostb."
    )
    assert f["lock_file_after_a"] == rec + "\n", "host A must leave B's lock in place"
    # on host B itself the death is provable: a take there reclaims it; then A takes it at once
    assert f["b_take"]["taken"], f["b_take"]
    assert f["a_take_after_b"]["taken"], f["a_take_after_b"]


@pytest.mark.parametrize("ver", ["v4", "v3"])
def test_registry_writes_from_both_hosts_lose_nothing_and_always_parse(guest: Guest, ver: str) -> None:
    f = guest.point(f"registry_{ver}")
    n = f["n"]
    agents = f["final"]["agents"]
    kept: list[str] = []
    for host, w in f["writers"].items():
        assert (w["n"], w["failed"]) == (n, 0), f"{host}: {w['failures']}"
        r = w["reader"]
        assert r["reads"] > 0 and r["unparseable"] == 0 and r["unreadable"] == [], f"{host}'s reader: {r}"
        kept += w["kept"]
    # every write of both hosts is there: the shared counter saw each, and the rows are exactly the kept ones
    assert agents["counter"]["n"] == 2 * n, agents["counter"]
    assert sorted(k for k in agents if k != "counter") == sorted(kept)


def test_registry_stale_handle_retry_fires_on_v3_and_the_retried_read_is_the_new_file(guest: Guest) -> None:
    """Host A opens the registry, host B renames a new one over it, then A reads (the window held open on
    purpose, ``point_stale_read``): on v3 that read gets ESTALE from the kernel and ``registry.read_bytes``'s
    retry (folder listed first) returns the new file, rows and all. On v4.2 the open state keeps the old
    file alive on the server, so the first read succeeds with the old rows and nothing is retried."""
    for k, r in enumerate(guest.point("stale_read_v3")["rounds"]):
        assert r.get("after", {}).get("put") == f"after-{k}", r
        assert (r.get("first_read"), r.get("tries")) == ("ESTALE", 2), r
        assert r.get("rows") == sorted(
            [*(f"before-{i}" for i in range(k + 1)), *(f"after-{i}" for i in range(k + 1))]
        ), r
    for k, r in enumerate(guest.point("stale_read_v4")["rounds"]):
        assert (r.get("first_read"), r.get("tries")) == ("read", 1), r
        assert f"before-{k}" in r.get("rows", []) and f"after-{k}" not in r["rows"], r


def test_registry_reads_beside_churn_never_come_back_unreadable(guest: Guest) -> None:
    """The churn of both hosts at once: whatever errors the readers' tries met (recorded), every read
    ended in a parsed document."""
    for ver in ("v3", "v4"):
        for host, w in guest.point(f"registry_{ver}")["writers"].items():
            assert w["reader"]["unreadable"] == [], (ver, host, w["retry_errors"])


@pytest.mark.parametrize("ver", ["v4", "v3"])
def test_nocto_mount_writes_the_proof_fields_as_dashes(guest: Guest, ver: str) -> None:
    f = guest.point(f"nocto_{ver}")
    nocto, cto = f["nocto"], f["cto"]
    assert (
        nocto["taken"]
        and nocto["vouch"] == "the comm home is mounted nocto, so no read of it is proved fresh"
    )
    assert nocto["held_record"] == f"hostb:-:-:-:{nocto['pid']}:-\n"
    # the same host on a mount with close-to-open: every proof field is there
    fields = cto["held_record"].strip().split(":")
    assert cto["vouch"] is None and "-" not in fields, cto


@pytest.mark.parametrize("ver", ["v4", "v3"])
def test_poll_and_unread_on_host_b_after_host_a_appends_never_lose_or_repeat(guest: Guest, ver: str) -> None:
    f = guest.point(f"poll_{ver}")
    assert f["join_b"]["code"] == 0, f["join_b"]
    assert f["registry_renames"] > 0, "host A rewrote the registry all along"
    sent: list[str] = f["sent"]
    per_round = len(sent) // len(f["rounds"])
    shown: list[str] = []
    for r, rnd in enumerate(f["rounds"]):
        assert (rnd["unread"]["code"], rnd["unread"]["out"]) == (0, f"{per_round}\n"), (r, rnd["unread"])
        assert rnd["poll"]["code"] == 0, rnd["poll"]
        got = [line.split("] ", 2)[2] for line in rnd["poll"]["out"].splitlines()]
        assert got == sent[r * per_round : (r + 1) * per_round], f"round {r}"
        shown += got
    assert shown == sent


def test_partition_v4_cut_off_holder_past_the_lease_writes_nothing_and_says_failed(guest: Guest) -> None:
    """Host B holds the inbox lock and hangs (as an RPC does) past the 10 s lease while cut off; host A gets
    the lock and appends; the link heals and B goes on. B's kernel re-takes the expired lock by itself once
    A has released it, so only sotd's stall rule stops B's late write: FAILED, nothing written or cut."""
    f = guest.point("partition_v4")
    assert f["b_holds"]
    assert f["a_before_cut"] == "the inbox lock for @sink was held for 1s — nothing was appended"
    assert "a_got_lock_after_secs" in f, f"host A never got the lock: {f['a_tries']}"
    assert 5 <= f["a_got_lock_after_secs"] < 40
    b = f["b"]
    assert b["paused"] and b["paused"][0] > 10, "B stalled past the lease"
    assert b["filed"] is False, f"the cut-off writer must not report filed: {b}"
    assert b["message"] == (
        "the append failed: the inbox lock for @sink may have been lost while the append stalled before its "
        "write; nothing was appended"
    )
    assert b["writes"] == [], "no write was started after the stall"
    # the inbox is whole and holds exactly A's lines, as both hosts read it
    for text in (f["inbox"], f["inbox_from_b"]):
        assert [x["msg"] for x in lines(text)] == ["A 00000 before", "A 00001 during the partition"]
    assert f["notes"] == []


def test_sends_from_host_a_to_host_b_over_v4_are_each_filed_once(guest: Guest) -> None:
    """The sends the p50/p99 figure of docs/benchmarks.md is taken from: every one filed by A itself."""
    f = guest.point("send_v4")
    n = len(f["codes"])
    assert f["codes"] == [0] * n and f["outs"] == ["  filed -> @beta\n"], f
    assert f["inbox_lines"] == n


def test_appends_v3_host_a_itself_and_host_b_through_the_hub_are_1000_whole_lines(guest: Guest) -> None:
    """v3: A appends 500 itself (its own `none@<id>` manager, NLM locks) while B hands 500 to its daemon,
    which forwards each up its link to the hub on A: one inbox, every line whole, none lost or repeated."""
    f = guest.point("appends_hub_v3")
    assert f["hub_up"] and f["guest_up"] and f["guest_linked"], f["guest_log"]
    a, b = f["writers"]["A"], f["writers"]["B"]
    assert a["own_lock"].startswith("none@") and a["failed"] == 0, a
    c = f["census"]
    assert (c["torn"], c["unterminated_tail"], c["repeated"]) == (0, False, {"A": 0, "B": 0}), c
    assert c["missing"]["A"] == 0
    # a line B was told FAILED for may be missing; every other one is there
    assert c["missing"]["B"] <= b["failed"], (c, b["failures"])


def test_appends_v3_no_line_reported_failed_was_filed(guest: Guest) -> None:
    """The finding of issue 15: B was told FAILED for lines the hub filed all the same. The guest now
    forwards with its sender's deadline and the hub's whole filing honours it (a sync that ends past it
    is taken back out: docs/contract.md "A filing's deadline"), so a FAILED line is never in the inbox
    unless a daemon logged that its ok went out past the sender's deadline (a stall past the margin)."""
    f = guest.point("appends_hub_v3")
    assert len(f["failed_but_filed"]) <= len(f["late_oks"]), (
        f["failed_but_filed"],
        f["writers"]["B"]["failures"],
        f["late_oks"],
    )


def test_deadline_v3_tight_senders_through_the_hub_are_filed_iff_told_ok(guest: Guest) -> None:
    """B's senders wait only 0.45-1.1 s, so the hub's deadline (the sender's, less two answer margins) falls
    before, during or after its lock wait, write and sync on v3: whatever B was told, the inbox agrees —
    every line told ok is there once, none told FAILED is (a sync past the deadline is taken back out), but
    for a line whose ok a daemon logged as sent after the sender's deadline (a stall past the margin)."""
    f = guest.point("deadline_hub_v3")
    assert f["hub_up"] and f["guest_up"] and f["guest_linked"], f["guest_log"]
    a, b = f["writers"]["A"], f["writers"]["B"]
    assert a["failed"] == 0, a
    kinds = {"ok", "expired", "busy", "before the write", "taken back", "no reply", "sender gave up"}
    assert set(b["kinds"]) <= kinds, b["others"]
    # a line told FAILED is in the inbox only when a daemon logged that its ok went out after the sender's
    # deadline (a box stalled past the answer margin after its last check: no deadline can close that)
    assert len(f["failed_but_filed"]) <= len(f["late_oks"]), (
        f["failed_but_filed"],
        b["failures"],
        f["late_oks"],
    )
    c = f["census"]
    assert (c["torn"], c["unterminated_tail"], c["repeated"]) == (0, False, {"A": 0, "B": 0}), c
    told_failed_and_missing = b["failed"] - len(f["failed_but_filed"])
    assert (c["missing"]["A"], c["missing"]["B"]) == (0, told_failed_and_missing), (c, b["kinds"])
