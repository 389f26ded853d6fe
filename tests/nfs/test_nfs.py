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
