"""Issue 24 item 6: a login the node does not take runs from (carol) cannot front-run alice's requests.

carol pushes, with plain Fossil, the exact bytes alice is about to send (as ``runkit.post`` writes them:
``json.dumps``) before alice does. The same bytes would be the same message, first received from carol
(O2, O3); but ``sotd ocx post`` gives alice's post bytes of her own (``envelope.with_nonce``), so carol's
copy is hers alone: her run ends ``refused … 'carol'`` and her stop is ignored, while alice's run is
taken and her stop ends it. ``sotd ocx answers`` on A shows who actually posted each. Against a real node
(``sotd ocx node``), real bubblewrap and a real ``fossil server`` on 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.ocx import runkit as rk

pytestmark = [
    pytest.mark.integration,
    pytest.mark.serial,
    pytest.mark.root,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("bwrap") is None, reason="needs root and bubblewrap"
    ),
    pytest.mark.timeout(300),
]


@pytest.fixture
def lab() -> Iterator[rk.Lab]:
    with rk.served_lab("sotd-frontrun") as lab:
        rk.add_poster(lab, "c", "carol")
        yield lab


def carol_first(lab: rk.Lab, doc: dict[str, Any]) -> str:
    """carol pushes ``doc`` as the bytes ``runkit.post`` would write for alice, with plain fossil; its hash."""
    data = json.dumps(doc).encode()
    h = hashlib.sha3_256(data).hexdigest()
    path = os.path.join(lab.top, f"carol-{h[:12]}.json")
    with open(path, "wb") as f:
        f.write(data)
    env = rk.base_env(lab.top)
    rk.fossil("uv", "add", path, "--as", f"ocx/m/{h}.json", "-R", lab.clones["c"], env=env)
    rk.fossil("uv", "sync", "-R", lab.clones["c"], env=env)
    return h


def test_a_run_copied_in_advance_is_carols_and_alices_is_taken(lab: rk.Lab) -> None:
    body = rk.run_body(lab.server_code("b"), ["true"])
    stolen = carol_first(lab, {"ocx": 2, "to": "lab-user", "run": body})
    h = rk.post_run(lab, "a", body)  # the same document, through sotd ocx post
    assert h != stolen
    rk.node_once(lab, "b")
    assert [(k, b, s) for k, b, s in rk.answers(lab, "c", stolen)] == [
        ("ended", {"outcome": "refused", "why": "this node does not take runs on the clone 'proj' from the login"
                   " 'carol'"}, "lab-user")
    ]  # fmt: skip
    got = rk.answers(lab, "a", h)
    assert [(k, s) for k, _, s in got] == [("started", "lab-user"), ("ended", "lab-user")]
    assert got[1][1]["outcome"] == "passed"
    rows = {r["hash"]: r for r in json.loads(rk.sotd("ocx", "list", "--json", env=lab.envs["a"]).out)}
    assert (rows[stolen]["sender_login"], rows[h]["sender_login"]) == ("carol", "alice")


def test_a_stop_copied_in_advance_is_ignored_and_alices_ends_the_run(lab: rk.Lab) -> None:
    h = rk.post_run(
        lab, "a", rk.run_body(lab.server_code("b"), ["sh", "-c", "sleep 120"], limits={"wall": "5m"})
    )
    node = rk.start_node(lab, "b", interval=0.3)
    try:
        rk.wait_answer(lab, "a", h, "started")
        stolen = carol_first(lab, {"ocx": 2, "re": h, "stop": {}})  # alice's stop, byte for byte, first
        deadline = time.monotonic() + 30
        while "neither the run's sender" not in rk.node_log(lab, "b"):
            assert time.monotonic() < deadline, rk.node_log(lab, "b")
            time.sleep(0.2)
        assert [(k, s) for k, _, s in rk.answers(lab, "a", h)] == [("started", "lab-user"), ("stop", "carol")]
        mine = rk.post_stop(lab, "a", h)  # the same document, through sotd ocx post
        assert mine != stolen
        ended = rk.wait_answer(lab, "a", h, "ended")
        assert (ended["outcome"], ended["exit"]) == ("stopped", 128 + signal.SIGKILL), (
            ended,
            rk.node_log(lab, "b"),
        )
        got = [(k, s) for k, _, s in rk.answers(lab, "a", h)]
        assert got == [("started", "lab-user"), ("stop", "carol"), ("stop", "alice"), ("ended", "lab-user")]
        shown = {r["hash"]: r["sender_login"] for r in json.loads(rk.sotd("ocx", "answers", h, "--json",
                                                                          env=lab.envs["a"]).out)}  # fmt: skip
        assert (shown[stolen], shown[mine]) == ("carol", "alice")
    finally:
        rk.stop_node(node)
