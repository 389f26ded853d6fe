"""Behaviour 1.2: the slot is claimed for another project *while* a join runs.

The join's slot guard runs before anything is written and again just before the self file is renamed
into place. The test seam ``SOT_COMM_TEST_JOIN_PAUSE`` holds a real ``comm-join.sh`` between its registry
write and its self-file write; the test claims the slot in that gap, as another session would.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from tests.conftest import Comm, Result, Session

pytestmark = pytest.mark.integration

OTHER = b"other-testhost\nrepo=other\nroot=/srv/elsewhere/other\n"


def registry(comm: Comm) -> dict:
    with open(comm.layout.registry) as f:
        return json.load(f)


def put_registry(comm: Comm, doc: dict) -> None:
    with open(comm.layout.registry, "w") as f:
        f.write(json.dumps(doc, indent=2) + "\n")


def slot_bytes(s: Session) -> bytes | None:
    try:
        with open(s.self_file, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def join_paused(s: Session, during, *args: str) -> Result:  # type: ignore[no-untyped-def]
    """Run ``comm-join.sh args`` through its wrapper; at the pause, call ``during()``, then let it go on."""
    pause = os.path.join(s.comm.work, "join.pause")
    env = dict(s.env, SOT_COMM_TEST_JOIN_PAUSE=pause)
    script = os.path.join(s.comm.layout.bin_dir, "comm-join.sh")
    p = subprocess.Popen(
        [script, *args],
        cwd=s.root,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(pause) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert os.path.exists(pause), "the join never reached its pause"
        during()
        os.unlink(pause)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return Result(subprocess.CompletedProcess(p.args, p.returncode, out, err))


def claimed_lines(s: Session, how: str) -> list[str]:
    return [
        f"the identity slot '{s.self_file}' already names @other-testhost, claimed for root='/srv/elsewhere/other'",
        f"REFUSING to write a 'alpha' identity (root='{s.root}') over it: the slot belongs to that project's "
        "session; re-run with --repin if it really is this project's now",
        f"comm-join.sh: REFUSING to put a 'alpha' identity in the slot '{s.self_file}' — it was claimed for "
        f"another project while this join ran (reason above). {how} Nothing was written to the slot; run "
        "comm-join.sh from the session that owns it, or re-run with --repin if this row really is 'alpha' now.",
    ]


def claim(s: Session, data: bytes = OTHER):  # type: ignore[no-untyped-def]
    def during() -> None:
        assert "alpha" in registry(s.comm)["agents"]  # the registry write came first
        with open(s.self_file, "wb") as f:
            f.write(data)

    return during


def test_a_first_join_refuses_and_removes_its_row(comm: Comm) -> None:
    a = comm.session("alpha")
    r = join_paused(a, claim(a), "--name", "alpha")
    assert r.code == 3, r
    assert r.out == ""
    assert r.err_lines == claimed_lines(a, "The registry entry this join wrote for @alpha was removed again.")
    assert slot_bytes(a) == OTHER  # the claim stands
    assert "alpha" not in registry(comm)["agents"]
    assert not os.path.exists(comm.layout.inbox("alpha"))  # the join stopped before touching an inbox
    assert [n for n in os.listdir(os.path.dirname(a.self_file)) if ".tmp." in n] == []
    # the session is not joined: its commands say so
    assert a.run("poll").err_lines == ["Not joined — run comm-join.sh first."]


def test_a_rejoin_puts_the_previous_entry_back(comm: Comm) -> None:
    a = comm.session("alpha")
    assert a.run("join", "--name", "alpha").code == 0
    assert a.run("status", "working", "fixing the parser").code == 0
    before = registry(comm)["agents"]["alpha"]
    r = join_paused(a, claim(a), "--name", "alpha")
    assert r.code == 3, r
    assert r.err_lines == claimed_lines(
        a, "The registry entry for @alpha was put back as it was before this join."
    )
    assert registry(comm)["agents"]["alpha"] == before  # facts and all
    assert slot_bytes(a) == OTHER


def test_an_entry_changed_since_the_join_wrote_it_is_left_alone(comm: Comm) -> None:
    a = comm.session("alpha")

    def during() -> None:
        claim(a)()
        doc = registry(comm)
        doc["agents"]["alpha"]["root"] = "/srv/another/alpha"  # someone re-joined @alpha elsewhere meanwhile
        put_registry(comm, doc)

    r = join_paused(a, during, "--name", "alpha")
    assert r.code == 3, r
    assert r.err_lines == claimed_lines(
        a, "The registry entry for @alpha changed after this join wrote it, so it was left as it is."
    )
    assert registry(comm)["agents"]["alpha"]["root"] == "/srv/another/alpha"


def test_a_claim_for_the_same_project_is_overwritten(comm: Comm) -> None:
    a = comm.session("alpha")
    r = join_paused(a, claim(a, f"alpha-2\nrepo=alpha\nroot={a.root}\n".encode()), "--name", "alpha")
    assert r.code == 0, r
    assert r.out_lines[0] == "Joined sot-comm as @alpha  (alpha on testhost)."
    assert slot_bytes(a) == f"alpha\nrepo=alpha\nroot={a.root}\n".encode()


def test_repin_overwrites_a_claim_made_during_the_join(comm: Comm) -> None:
    a = comm.session("alpha")
    r = join_paused(a, claim(a), "--name", "alpha", "--repin")
    assert r.code == 0, r
    assert slot_bytes(a) == f"alpha\nrepo=alpha\nroot={a.root}\n".encode()
    assert "alpha" in registry(comm)["agents"]
