"""sotd.workstate: facts, events, declarations and the reduction (behaviour 4.3, 1.9; D3)."""

from __future__ import annotations

import pytest

from sotd.workstate import EVENTS, VERBS, apply, classify_origin, reduce, validate

pytestmark = pytest.mark.unit

NOW = "2026-01-02T03:04:05Z"
OLD = "2025-12-31T00:00:00Z"
USAGE = 'usage: comm-status.sh <prompt|stop|interrupted|working|idle|blocked|done|waiting> ["text"]'


def run(entry, verb, text=None, origin="machine", pid="t1"):
    return apply(entry, verb, text=text, origin=origin, prompt_id=pid, now_stamp=NOW)


def facts(e):
    drop = {"state", "summary", "status_at", "last_seen", "host", "repo"}
    return {k: v for k, v in e.items() if k not in drop}


def test_verbs():
    assert VERBS == ("prompt", "stop", "interrupted", "working", "idle", "blocked", "done", "waiting")
    assert EVENTS == ("prompt", "stop", "interrupted")


# ------------------------------------------------------------------------------------------ validate


@pytest.mark.parametrize(
    ("verb", "text", "entry", "want"),
    [
        (None, None, {}, USAGE),
        ("", None, {}, USAGE),
        (
            "busy",
            None,
            {},
            "comm-status.sh: invalid verb 'busy' (want prompt|stop|interrupted|working|idle|blocked|done|waiting)",
        ),
        (
            "dialog",
            "x",
            {},
            "comm-status.sh: invalid verb 'dialog' (want prompt|stop|interrupted|working|idle|blocked|done|waiting)",
        ),
        (
            "Idle",
            None,
            {},
            "comm-status.sh: invalid verb 'Idle' (want prompt|stop|interrupted|working|idle|blocked|done|waiting)",
        ),
        ("blocked", None, {}, "comm-status.sh: blocked needs its text -- stamp discarded"),
        ("blocked", "", {}, "comm-status.sh: blocked needs its text -- stamp discarded"),
        ("blocked", "\n\n", {}, "comm-status.sh: blocked needs its text -- stamp discarded"),
        ("waiting", None, {}, "comm-status.sh: waiting needs its text -- stamp discarded"),
        ("waiting", "\n", {"question": "q"}, "comm-status.sh: waiting needs its text -- stamp discarded"),
        ("blocked", None, {"waiting": "w"}, "comm-status.sh: blocked needs its text -- stamp discarded"),
        ("blocked", None, {"question": "\n"}, "comm-status.sh: blocked needs its text -- stamp discarded"),
        ("blocked", None, None, "comm-status.sh: blocked needs its text -- stamp discarded"),
        ("blocked", None, {"question": "old q"}, None),
        ("waiting", "", {"waiting": "old w"}, None),
        ("blocked", " ", {}, None),
        ("blocked", "q", {}, None),
        ("waiting", "w", {}, None),
        ("working", None, {}, None),
        ("idle", "", {}, None),
        ("done", None, {}, None),
        ("prompt", None, {}, None),
        ("stop", None, {}, None),
        ("interrupted", None, {}, None),
    ],
)
def test_validate(verb, text, entry, want):
    assert validate(verb, text, entry) == want


def test_validate_names_the_typed_command():
    assert validate(None, None, {}, prog="sotd comm status").startswith("usage: sotd comm status <prompt|")
    assert validate("blocked", None, {}, prog="x").startswith("x: blocked needs")


# ------------------------------------------------------------------------------------------- events

CASES = [
    # (id, entry facts before, verb, text, origin, prompt id, facts after, state, summary)
    (
        "prompt machine",
        {},
        "prompt",
        None,
        "machine",
        "t1",
        {"floor": "machine", "floor_prompt": "t1"},
        "working",
        "",
    ),
    (
        "prompt user clears question and done",
        {"question": "q", "question_prompt": "t0", "done": True, "note": "n"},
        "prompt",
        None,
        "user",
        "t1",
        {"floor": "user", "floor_prompt": "t1", "note": "n"},
        "working",
        "n",
    ),
    (
        "prompt machine keeps question and done",
        {"question": "q", "question_prompt": "t0", "done": True},
        "prompt",
        None,
        "machine",
        "t1",
        {"floor": "machine", "floor_prompt": "t1", "question": "q", "question_prompt": "t0", "done": True},
        "working",
        "",
    ),
    (
        "prompt keeps waiting",
        {"waiting": "w"},
        "prompt",
        None,
        "user",
        "t1",
        {"floor": "user", "floor_prompt": "t1", "waiting": "w"},
        "working",
        "",
    ),
    (
        "stop after a user turn: done",
        {"floor": "user", "floor_prompt": "t1", "stop_at": OLD, "note": "n"},
        "stop",
        None,
        "machine",
        "t1",
        {"done": True, "note": "n"},
        "done",
        "n",
    ),
    (
        "stop after a machine turn: idle",
        {"floor": "machine", "floor_prompt": "t1"},
        "stop",
        None,
        "machine",
        "t1",
        {},
        "idle",
        "",
    ),
    (
        "stop with an open question: not done, question shows",
        {"floor": "user", "floor_prompt": "t1", "question": "q", "question_prompt": "t1"},
        "stop",
        None,
        "machine",
        "t1",
        {"question": "q", "question_prompt": "t1"},
        "blocked",
        "q",
    ),
    (
        "stop while waiting: not done",
        {"floor": "user", "waiting": "w"},
        "stop",
        None,
        "machine",
        "t1",
        {"waiting": "w"},
        "waiting",
        "w",
    ),
    ("stop with no floor", {"stop_at": OLD}, "stop", None, "machine", "t1", {}, "idle", ""),
    (
        "interrupted own turn",
        {"floor": "user", "floor_prompt": "t1"},
        "interrupted",
        None,
        "machine",
        "t1",
        {},
        "idle",
        "",
    ),
    (
        "interrupted another turn keeps the floor",
        {"floor": "user", "floor_prompt": "t2"},
        "interrupted",
        None,
        "machine",
        "t1",
        {"floor": "user", "floor_prompt": "t2"},
        "working",
        "",
    ),
    (
        "interrupted removes its own question only",
        {"question": "q", "question_prompt": "t1", "floor": "user", "floor_prompt": "t2"},
        "interrupted",
        None,
        "machine",
        "t1",
        {"floor": "user", "floor_prompt": "t2"},
        "working",
        "",
    ),
    (
        "interrupted keeps another turn's question",
        {"question": "q", "question_prompt": "t0", "floor": "user", "floor_prompt": "t1"},
        "interrupted",
        None,
        "machine",
        "t1",
        {"question": "q", "question_prompt": "t0"},
        "blocked",
        "q",
    ),
    (
        "blocked sets the question",
        {},
        "blocked",
        "q?",
        "machine",
        "t1",
        {"question": "q?", "question_prompt": "t1"},
        "blocked",
        "q?",
    ),
    (
        "blocked without text keeps the old question",
        {"question": "old", "question_prompt": "t0"},
        "blocked",
        None,
        "machine",
        "t1",
        {"question": "old", "question_prompt": "t1"},
        "blocked",
        "old",
    ),
    (
        "blocked with newline-only text keeps the old question",
        {"question": "old", "question_prompt": "t0"},
        "blocked",
        "\n",
        "machine",
        "t1",
        {"question": "old", "question_prompt": "t1"},
        "blocked",
        "old",
    ),
    (
        "question hidden by the floor",
        {"floor": "user", "floor_prompt": "t1", "note": "n"},
        "blocked",
        "q",
        "machine",
        "t1",
        {"floor": "user", "floor_prompt": "t1", "question": "q", "question_prompt": "t1"},
        "working",
        "",
    ),
    ("waiting sets waiting", {}, "waiting", "CI", "machine", "t1", {"waiting": "CI"}, "waiting", "CI"),
    (
        "waiting keeps old text",
        {"waiting": "CI"},
        "waiting",
        "",
        "machine",
        "t1",
        {"waiting": "CI"},
        "waiting",
        "CI",
    ),
    (
        "waiting clears a question silently",
        {"question": "q", "question_prompt": "t0"},
        "waiting",
        "w",
        "machine",
        "t1",
        {"waiting": "w"},
        "waiting",
        "w",
    ),
    (
        "waiting outranks done",
        {"done": True},
        "waiting",
        "w",
        "machine",
        "t1",
        {"waiting": "w", "done": True},
        "waiting",
        "w",
    ),
    (
        "done with note",
        {"question": "q", "question_prompt": "t0", "waiting": "w"},
        "done",
        "shipped",
        "machine",
        "t1",
        {"done": True, "note": "shipped"},
        "done",
        "shipped",
    ),
    (
        "done keeps the prior note",
        {"note": "n"},
        "done",
        None,
        "machine",
        "t1",
        {"done": True, "note": "n"},
        "done",
        "n",
    ),
    (
        "done with empty text clears the note",
        {"note": "n"},
        "done",
        "",
        "machine",
        "t1",
        {"done": True},
        "done",
        "",
    ),
    (
        "working clears question, waiting, done",
        {"question": "q", "question_prompt": "t0", "waiting": "w", "done": True, "note": "n"},
        "working",
        None,
        "machine",
        "t1",
        {"note": "n"},
        "idle",
        "n",
    ),
    (
        "working with note",
        {},
        "working",
        "refactor",
        "machine",
        "t1",
        {"note": "refactor"},
        "idle",
        "refactor",
    ),
    (
        "working keeps the floor",
        {"floor": "user", "floor_prompt": "t1"},
        "working",
        "x",
        "machine",
        "t1",
        {"floor": "user", "floor_prompt": "t1", "note": "x"},
        "working",
        "x",
    ),
    (
        "idle with empty text clears the note",
        {"note": "n", "done": True},
        "idle",
        "",
        "machine",
        "t1",
        {},
        "idle",
        "",
    ),
    (
        "idle keeps the note when text omitted",
        {"note": "n"},
        "idle",
        None,
        "machine",
        "t1",
        {"note": "n"},
        "idle",
        "n",
    ),
    (
        "a declaration with text supersedes an older note",
        {"note": "old"},
        "blocked",
        "q",
        "machine",
        "t1",
        {"question": "q", "question_prompt": "t1"},
        "blocked",
        "q",
    ),
    (
        "waiting with text supersedes the note",
        {"note": "old"},
        "waiting",
        "w",
        "machine",
        "t1",
        {"waiting": "w"},
        "waiting",
        "w",
    ),
    (
        "legacy keys deleted on every transaction",
        {"turn_origin": "user", "sticky": True, "sticky_at": OLD, "note": "n"},
        "idle",
        None,
        "machine",
        "t1",
        {"note": "n"},
        "idle",
        "n",
    ),
    # D3: the dialog fact
    (
        "dialog blocks a running turn",
        {"floor": "user", "floor_prompt": "t1"},
        "dialog",
        "Allow Bash(rm -rf x)?",
        "machine",
        "t1",
        {"floor": "user", "floor_prompt": "t1", "dialog": "Allow Bash(rm -rf x)?", "dialog_prompt": "t1"},
        "blocked",
        "Allow Bash(rm -rf x)?",
    ),
    (
        "dialog outranks a question",
        {"question": "q", "question_prompt": "t0"},
        "dialog",
        "d",
        "machine",
        "t1",
        {"question": "q", "question_prompt": "t0", "dialog": "d", "dialog_prompt": "t1"},
        "blocked",
        "d",
    ),
    (
        "dialog cleared by prompt",
        {"dialog": "d", "dialog_prompt": "t1"},
        "prompt",
        None,
        "user",
        "t2",
        {"floor": "user", "floor_prompt": "t2"},
        "working",
        "",
    ),
    (
        "dialog cleared by stop",
        {"dialog": "d", "dialog_prompt": "t1", "floor": "machine"},
        "stop",
        None,
        "machine",
        "t1",
        {},
        "idle",
        "",
    ),
    (
        "dialog cleared by interrupted of its turn",
        {"dialog": "d", "dialog_prompt": "t1"},
        "interrupted",
        None,
        "machine",
        "t1",
        {},
        "idle",
        "",
    ),
    (
        "dialog kept by interrupted of another turn",
        {"dialog": "d", "dialog_prompt": "t0"},
        "interrupted",
        None,
        "machine",
        "t1",
        {"dialog": "d", "dialog_prompt": "t0"},
        "blocked",
        "d",
    ),
    (
        "dialog without text clears it",
        {"dialog": "d", "dialog_prompt": "t1"},
        "dialog",
        None,
        "machine",
        "t1",
        {},
        "idle",
        "",
    ),
    (
        "dialog kept by a declaration",
        {"dialog": "d", "dialog_prompt": "t1"},
        "working",
        "n",
        "machine",
        "t1",
        {"dialog": "d", "dialog_prompt": "t1", "note": "n"},
        "blocked",
        "d",
    ),
]


@pytest.mark.parametrize(
    ("before", "verb", "text", "origin", "pid", "after", "state", "summary"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_apply(before, verb, text, origin, pid, after, state, summary):
    entry = {
        "host": "box",
        "repo": "r",
        "state": "idle",
        "summary": "",
        "status_at": OLD,
        "last_seen": OLD,
        **before,
    }
    snapshot = dict(entry)
    out = run(entry, verb, text, origin, pid)
    assert entry == snapshot  # the input is never changed
    assert facts(out) == after
    assert (out["state"], out["summary"]) == (state, summary)
    assert out["status_at"] == out["last_seen"] == NOW
    assert out["host"] == "box" and out["repo"] == "r"


def test_interrupted_with_empty_id_is_a_no_op():
    entry = {"floor": "user", "floor_prompt": "", "sticky": True, "status_at": OLD}
    assert run(entry, "interrupted", pid="") == entry


def test_unknown_verb_raises():
    with pytest.raises(ValueError):
        run({}, "bogus")


@pytest.mark.parametrize(
    ("entry", "want"),
    [
        ({}, ("idle", "")),
        ({"note": "n"}, ("idle", "n")),
        ({"question": "q"}, ("blocked", "q")),
        ({"question": "q", "floor": "user", "note": "n"}, ("working", "n")),
        ({"floor": "machine", "waiting": "w", "done": True}, ("working", "")),
        ({"waiting": "w", "done": True, "note": "n"}, ("waiting", "w")),
        ({"done": True, "note": "n"}, ("done", "n")),
        ({"done": False}, ("idle", "")),
        ({"dialog": "d", "floor": "user", "question": "q"}, ("blocked", "d")),
        ({"dialog": "", "floor": "user"}, ("working", "")),
        ({"note": 5}, ("idle", "")),
    ],
)
def test_reduce_priority(entry, want):
    assert reduce(entry) == want


# --------------------------------------------------------------------------------------------- origin


@pytest.mark.parametrize(
    ("prompt", "want"),
    [
        ("[SYSTEM NOTIFICATION] build finished", "machine"),
        ("[relay] from @bob: hi", "machine"),
        ("[sot-comm] you have mail: run comm-poll.sh", "machine"),
        ("Another Claude session sent a message: x", "machine"),
        ("Stop hook feedback: unread mail", "machine"),
        ("[alice:bob] hello", "machine"),
        ("[ws-1:claude] done", "machine"),
        ("please look <task-notification>x</task-notification>", "machine"),
        ("<teammate-message from=x>", "machine"),
        ("hi <agent-message a=b>", "machine"),
        ("<cross-session-message>", "machine"),
        ("fix the build", "user"),
        ("", "user"),
        ("[sot-comm]you have mail", "user"),
        (" [SYSTEM NOTIFICATION]", "user"),
        ("[relay]from x", "user"),
        ("[a:b]hello", "user"),
        ("[:b] hello", "user"),
        ("[a:] hello", "user"),
        ("[ab] hello", "user"),
        ("[a b:c] hello", "user"),
        ("another claude session sent a message", "user"),
        ("stop hook feedback: x", "user"),
        ("<task-notification", "user"),
    ],
)
def test_classify_origin(prompt, want):
    assert classify_origin(prompt) == want
