"""comm-status.sh against the registry: the facts and their reduction after sequences (behaviour 1.9, 4.3, D3).

Texts and exit codes of every refusal are in ``tests/transcripts/cases/status.t``; these tests read the row.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import Comm, Result, Session

pytestmark = pytest.mark.integration

FACTS = ("floor", "floor_prompt", "question", "question_prompt", "waiting", "done", "note", "stop_at")


def st(
    s: Session, verb: str, *text: str, origin: str | None = None, pid: str | None = None, **env: str
) -> Result:
    e = dict(env)
    if origin is not None:
        e["COMM_STATUS_ORIGIN"] = origin
    if pid is not None:
        e["COMM_STATUS_PROMPT_ID"] = pid
    r = s.run("status", verb, *text, env=e)
    assert r.out == "", r
    return r


def ok(s: Session, verb: str, *text: str, **kw: str) -> None:
    r = st(s, verb, *text, **kw)
    assert (r.code, r.err) == (0, ""), r


def registry_bytes(comm: Comm) -> bytes:
    with open(comm.layout.registry, "rb") as f:
        return f.read()


def row(comm: Comm) -> dict:
    return json.loads(registry_bytes(comm))["agents"]["alpha"]


def view(comm: Comm) -> tuple[str, str, dict]:
    r = row(comm)
    return r["state"], r["summary"], {k: r[k] for k in FACTS if k in r}


@pytest.fixture
def a(comm: Comm) -> Session:
    s = comm.session("alpha")
    assert s.run("join", "--name", "alpha").code == 0
    return s


def test_a_user_turn_with_a_question_then_done(comm: Comm, a: Session) -> None:
    ok(a, "prompt", origin="user", pid="p1")
    assert view(comm) == ("working", "", {"floor": "user", "floor_prompt": "p1"})
    ok(a, "working", "fixing the build")
    assert view(comm) == (
        "working",
        "fixing the build",
        {"floor": "user", "floor_prompt": "p1", "note": "fixing the build"},
    )
    ok(a, "blocked", "which branch?", pid="p1")
    # the floor outranks the question while the turn runs; the question replaced the older note
    assert view(comm) == (
        "working",
        "",
        {"floor": "user", "floor_prompt": "p1", "question": "which branch?", "question_prompt": "p1"},
    )
    ok(a, "stop")
    assert view(comm) == ("blocked", "which branch?", {"question": "which branch?", "question_prompt": "p1"})
    # a machine turn keeps the question; the user's answer clears it
    ok(a, "prompt", origin="machine", pid="p2")
    assert view(comm)[0] == "working" and row(comm)["question"] == "which branch?"
    ok(a, "stop")
    assert view(comm)[:2] == ("blocked", "which branch?")
    ok(a, "prompt", origin="user", pid="p3")
    assert view(comm) == ("working", "", {"floor": "user", "floor_prompt": "p3"})
    ok(a, "stop")
    assert view(comm) == ("done", "", {"done": True})


def test_waiting_outranks_done_and_a_user_stop_with_waiting_is_not_done(comm: Comm, a: Session) -> None:
    ok(a, "prompt", origin="user", pid="p1")
    ok(a, "waiting", "CI on main")
    ok(a, "stop")
    assert view(comm) == ("waiting", "CI on main", {"waiting": "CI on main"})
    ok(a, "waiting")  # the fact holds text: kept
    assert view(comm)[:2] == ("waiting", "CI on main")
    ok(a, "done", "merged")
    assert view(comm) == ("done", "merged", {"done": True, "note": "merged"})
    ok(a, "working")  # text omitted keeps the note
    assert view(comm) == ("idle", "merged", {"note": "merged"})
    ok(a, "idle", "")  # an explicit "" clears it
    assert view(comm) == ("idle", "", {})


def test_waiting_clears_an_open_question_silently(comm: Comm, a: Session) -> None:
    ok(a, "blocked", "q?")
    assert view(comm)[:2] == ("blocked", "q?")
    ok(a, "blocked")
    assert row(comm)["question"] == "q?"
    ok(a, "waiting", "the review")
    assert view(comm) == ("waiting", "the review", {"waiting": "the review"})
    ok(a, "working", "back on it")
    assert view(comm) == ("idle", "back on it", {"note": "back on it"})


def test_origin_defaults_to_machine(comm: Comm, a: Session) -> None:
    ok(a, "prompt", pid="p1")
    assert row(comm)["floor"] == "machine"
    ok(a, "stop")
    assert view(comm) == ("idle", "", {})


def test_interrupted(comm: Comm, a: Session) -> None:
    ok(a, "prompt", origin="user", pid="p1")
    ok(a, "blocked", "q?", pid="p1")
    before = registry_bytes(comm)
    ok(a, "interrupted")  # empty id: a silent no-op that writes nothing
    ok(a, "interrupted", pid="")
    assert registry_bytes(comm) == before
    ok(a, "interrupted", pid="other-turn")
    assert row(comm)["floor_prompt"] == "p1" and row(comm)["question"] == "q?"
    ok(a, "interrupted", pid="p1")
    assert view(comm) == ("idle", "", {})


def test_transcript_is_saved_on_prompt_only(comm: Comm, a: Session) -> None:
    path = comm.layout.state("transcript-alpha.path")
    ok(a, "working", COMM_STATUS_TRANSCRIPT="/t/one.jsonl")
    assert not os.path.exists(path)
    ok(a, "prompt", COMM_STATUS_TRANSCRIPT="/t/two.jsonl")
    with open(path) as f:
        assert f.read().strip() == "/t/two.jsonl"


def test_every_transaction_stamps_and_drops_legacy_keys(comm: Comm, a: Session) -> None:
    doc = json.loads(registry_bytes(comm))
    doc["agents"]["alpha"].update(turn_origin="user", sticky=True, sticky_at="2020-01-01T00:00:00Z")
    with open(comm.layout.registry, "w") as f:
        f.write(json.dumps(doc, indent=2) + "\n")
    ok(a, "idle")
    r = row(comm)
    assert not {"turn_origin", "sticky", "sticky_at"} & set(r)
    assert r["status_at"] == r["last_seen"]
    # D12: pretty JSON, two-space indent, a trailing newline; other keys of the row untouched
    data = registry_bytes(comm)
    assert data == (json.dumps(json.loads(data), indent=2) + "\n").encode()
    assert (r["repo"], r["status"], r["expertise"]) == ("alpha", "idle", [])


@pytest.mark.parametrize("text", ["", "\n", "\n\n"])
@pytest.mark.parametrize("verb", ["blocked", "waiting"])
def test_no_text_is_refused_and_writes_nothing(comm: Comm, a: Session, verb: str, text: str) -> None:
    before = registry_bytes(comm)
    listing = sorted(os.listdir(comm.home))
    r = st(a, verb, text)
    assert (r.code, r.err_lines) == (2, [f"comm-status.sh: {verb} needs its text -- stamp discarded"])
    assert registry_bytes(comm) == before
    assert sorted(os.listdir(comm.home)) == listing


def test_a_declaration_from_another_folder_is_discarded(comm: Comm, a: Session) -> None:
    other = os.path.join(comm.work, "elsewhere")
    os.makedirs(other)
    before = registry_bytes(comm)
    p = subprocess.run(
        [os.path.join(comm.layout.bin_dir, "comm-status.sh"), "working"],
        check=False,
        cwd=other,
        env=dict(a.env, PWD=other),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 1
    assert p.stderr == (
        f"comm-status.sh: no registry row for '<no identity>' from cwd {os.path.realpath(other)} -- stamp "
        "discarded; run it from the session's project root\n"
    )
    assert registry_bytes(comm) == before
