"""The Claude Code hooks through their installed wrappers (behaviour 3.4, 4.3; decisions D3, D9).

Every test feeds the JSON Claude Code really sends on stdin to ``comm-status-*.sh`` as a subprocess and
reads stdout (a block is ``{"decision":"block","reason":...}``), the exit status (always 0) and the registry.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time

import pytest

from tests.conftest import Comm, Result, Session
from tests.integration.test_cli_identity import Tree, snapshot

pytestmark = pytest.mark.integration

SID = "5c2f1e0a-7d3b-4f7e-9a51-0c1d2e3f4a5b"


def reason(name: str) -> str:
    return f"New sot-comm mail for @{name} — run comm-poll.sh now, act on it, then end the turn."


def stop_json(
    s: Session, *, active: bool = False, last: str | None = None, transcript: str | None = None
) -> str:
    doc: dict[str, object] = {
        "session_id": SID,
        "transcript_path": transcript or os.path.join(s.comm.work, f"{SID}.jsonl"),
        "cwd": s.root,
        "permission_mode": "default",
        "hook_event_name": "Stop",
        "stop_hook_active": active,
    }
    if last is not None:
        doc["last_assistant_message"] = last
    return json.dumps(doc)


def stop(s: Session, **kw: object) -> Result:
    env = kw.pop("env", None)
    r = s.run("status-idle", stdin=stop_json(s, **kw), env=env)  # type: ignore[arg-type]
    assert r.code == 0, r
    return r


def blocked(r: Result, name: str = "alpha") -> bool:
    if not r.out.strip():
        return False
    assert json.loads(r.out) == {"decision": "block", "reason": reason(name)}, r
    return True


def row(comm: Comm, name: str = "alpha") -> dict:
    with open(comm.layout.registry) as f:
        return json.load(f)["agents"].get(name)


def raw(comm: Comm, handle: str, data: bytes) -> None:
    with open(comm.layout.inbox(handle), "ab") as f:
        f.write(data)


def line(frm: object, to: object, msg: str = "m", ts: str = "2026-01-01T00:00:01Z") -> bytes:
    return (
        json.dumps({"from": frm, "to": to, "repo": "r", "msg": msg, "ts": ts}, separators=(",", ":")).encode()
        + b"\n"
    )


@pytest.fixture
def ab(comm: Comm) -> tuple[Comm, Session, Session]:
    a, b = comm.session("alpha"), comm.session("beta")
    assert a.run("join", "--name", "alpha").code == 0
    assert b.run("join", "--name", "beta").code == 0
    return comm, a, b


# ------------------------------------------------------------------------------------------ the mail gate


def test_blocks_once_per_batch_then_again_for_new_mail(ab) -> None:
    comm, a, b = ab
    assert b.run("send", "@alpha", "first").code == 0
    r = stop(a)
    assert blocked(r) and r.err == ""
    assert r.out == json.dumps({"decision": "block", "reason": reason("alpha")}, ensure_ascii=False) + "\n"
    with open(comm.layout.state(f"mail-{SID}.tick")) as f:
        assert f.read().strip() == "1"
    assert not blocked(stop(a, active=True))  # the continuation: same total, no second block
    assert not blocked(stop(a))
    assert b.run("send", "@alpha", "second").code == 0
    assert blocked(stop(a))
    assert not blocked(stop(a))
    # reading the mail ends it for good
    assert a.run("poll").code == 0
    assert not blocked(stop(a))


def test_block_reason_is_recorded(ab) -> None:
    comm, a, b = ab
    b.run("send", "@alpha", "x")
    assert blocked(stop(a))
    with open(comm.layout.state(f"stop-feedback-{SID}.jsonl")) as f:
        recs = [json.loads(x) for x in f]
    assert [r["reason"] for r in recs] == [reason("alpha")]


@pytest.mark.parametrize(
    "setup",
    [
        "broadcast",
        "self-echo",
        "other-handle",
        "numeric-to",
        "no-to",
        "not-json",
        "cursor-count",
        "cursor-legacy",
    ],
)
def test_never_blocks(ab, setup: str) -> None:
    comm, a, b = ab
    if setup == "broadcast":
        assert b.run("send", "--broadcast", "all hands").code == 0
        assert comm.inbox_bytes("alpha")
    elif setup == "self-echo":
        assert a.run("send", "@alpha", "note to self").code == 0
        assert comm.inbox_bytes("alpha")
    elif setup == "other-handle":
        raw(comm, "alpha", line("beta", "gamma"))
    elif setup == "numeric-to":
        raw(comm, "alpha", line("beta", 5))
    elif setup == "no-to":
        raw(comm, "alpha", b'{"from":"beta","msg":"m","ts":"2026-01-01T00:00:01Z"}\n')
    elif setup == "not-json":
        raw(comm, "alpha", b"to alpha: not json at all\n[1,2]\n")
    elif setup == "cursor-count":
        b.run("send", "@alpha", "one")
        b.run("send", "@alpha", "two")
        assert a.run("poll").code == 0
        with open(comm.layout.cursor("alpha")) as f:
            assert f.read().startswith("2 ")
    elif setup == "cursor-legacy":
        raw(comm, "alpha", line("beta", "alpha", ts="2026-01-01T00:00:01Z"))
        raw(comm, "alpha", line("beta", "alpha", ts="2026-01-01T00:00:02Z"))
        with open(comm.layout.cursor("alpha"), "w") as f:
            f.write("2026-01-01T00:00:02Z")
    r = stop(a)
    assert (r.out, r.err) == ("", ""), r
    assert not os.path.exists(comm.layout.state(f"mail-{SID}.tick"))


def test_blocks_for_mail_behind_a_torn_line(ab) -> None:
    comm, a, _ = ab
    raw(comm, "alpha", b'{"from":"beta","to":"alph\n')  # a writer died mid-line; a later writer terminated it
    raw(comm, "alpha", line("beta", "alpha"))
    assert blocked(stop(a))


def test_blocks_for_complete_mail_before_an_unterminated_tail(ab) -> None:
    comm, a, _ = ab
    raw(comm, "alpha", line("beta", "alpha") + b'{"from":"beta","to":"alpha","msg":"half')
    assert blocked(stop(a))
    with open(comm.layout.state(f"mail-{SID}.tick")) as f:
        assert f.read().strip() == "1"  # the unterminated tail is not counted


def test_only_an_unterminated_tail_does_not_block(ab) -> None:
    comm, a, _ = ab
    raw(comm, "alpha", b'{"from":"beta","to":"alpha","msg":"half')
    assert not blocked(stop(a))


def test_blocks_for_a_cursor_past_the_end(ab) -> None:
    comm, a, _ = ab
    raw(comm, "alpha", line("beta", "alpha"))
    with open(comm.layout.cursor("alpha"), "w") as f:
        f.write("7 1220704766-1")
    assert blocked(stop(a))


def test_blocks_for_a_frame_stamped_in_the_second_already_read(ab) -> None:
    comm, a, _ = ab
    raw(comm, "alpha", line("beta", "alpha", "one", ts="2026-01-01T00:00:05Z"))
    assert a.run("poll").code == 0
    raw(comm, "alpha", line("beta", "alpha", "two", ts="2026-01-01T00:00:05Z"))
    assert blocked(stop(a))


# ------------------------------------------------------------------------------------------ failing open


def test_fails_open_when_the_tick_cannot_be_written(ab) -> None:
    comm, a, b = ab
    b.run("send", "@alpha", "x")
    os.mkdir(comm.layout.state(f"mail-{SID}.tick"))  # root cannot rename a file over a folder either
    for _ in range(2):
        r = stop(a)
        assert r.out == "", r


def test_fails_open_when_state_is_not_a_folder(ab) -> None:
    comm, a, b = ab
    b.run("send", "@alpha", "x")
    shutil.rmtree(comm.layout.state_dir)
    with open(comm.layout.state_dir, "w") as f:
        f.write("not a folder\n")
    r = stop(a)
    assert r.out == "", r


def test_hooks_off_stands_down(ab) -> None:
    comm, a, b = ab
    b.run("send", "@alpha", "x")
    before = snapshot(comm.home)
    r = stop(a, env={"SOT_COMM_HOOKS": "off"})
    assert (r.out, r.err) == ("", "")
    assert snapshot(comm.home) == before
    for script, doc in (
        ("status-prompt", {"hook_event_name": "UserPromptSubmit", "prompt": "hi"}),
        (
            "status-pretool",
            {"hook_event_name": "PreToolUse", "tool_name": "AskUserQuestion", "tool_use_id": "t1"},
        ),
        ("status-posttool", {"hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_use_id": "t2"}),
        (
            "status-permission",
            {"hook_event_name": "PermissionRequest", "tool_name": "Bash", "tool_input": {"command": "ls"}},
        ),
    ):
        r = a.run(script, stdin=json.dumps({"session_id": SID, **doc}), env={"SOT_COMM_HOOKS": "off"})
        assert (r.code, r.out, r.err) == (0, "", "")
    assert snapshot(comm.home) == before


def test_garbage_on_stdin_still_exits_0(ab) -> None:
    _, a, b = ab
    b.run("send", "@alpha", "x")
    for data in ("", "not json", "[1,2]", "{"):
        r = a.run("status-idle", stdin=data)
        assert r.code == 0, r


# ------------------------------------------------------------------------------------------ stop_at


def test_a_hook_that_does_not_hold_the_turn_writes_no_mark(ab) -> None:
    """Issue 17: the hook decides first and writes the registry once; the mark (which the ``stop`` event
    removes) is written only where the hook holds the turn, so none is seen while it waits in its gate."""
    comm, a, _ = ab
    assert "stop_at" not in row(comm)
    # Hold the inbox's write lock so the hook waits in its mail gate; no mark appears meanwhile.
    fd = os.open(comm.layout.inbox_lock("alpha"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        env = dict(a.env, SOT_INBOX_READ_WAIT_SECS="3")
        script = os.path.join(comm.layout.bin_dir, "comm-status-idle.sh")
        stdin_path = os.path.join(comm.work, "stop.json")
        with open(stdin_path, "w") as f:
            f.write(stop_json(a))
        with open(stdin_path) as stdin:
            p = subprocess.Popen(
                [script],
                cwd=a.root,
                env=env,
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        seen = None
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline and seen is None and p.poll() is None:
            seen = row(comm).get("stop_at")
            time.sleep(0.05)
        out, errs = p.communicate(timeout=30)
    finally:
        os.close(fd)
    assert seen is None
    assert p.returncode == 0
    assert out == ""
    assert errs.splitlines() == [
        "comm-status-idle: the inbox for @alpha is being written; it will be checked again at the next turn end"
    ]
    assert "stop_at" not in row(comm)
    assert row(comm)["state"] == "idle"


def test_a_blocking_stop_keeps_the_mark_until_the_turn_really_ends(ab) -> None:
    comm, a, b = ab
    b.run("send", "@alpha", "x")
    assert blocked(stop(a))
    assert "stop_at" in row(comm)
    assert a.run("poll").code == 0
    assert not blocked(stop(a, active=True))
    assert "stop_at" not in row(comm)


# ------------------------------------------------------------------------------------------ markers


@pytest.mark.parametrize(
    ("text", "state", "summary", "facts"),
    [
        ("All green.\n\nSITREP: fixed the flaky test", "done", "fixed the flaky test", {"done": True}),
        ("**SITREP:** shipped", "done", "shipped", {"done": True}),
        ("## SITREP-QUESTION: which branch should I use?", "blocked", "which branch should I use?", {}),
        (
            "Waiting now.\nSITREP-WAITING:\n\n  CI on main  \n",
            "waiting",
            "CI on main",
            {"waiting": "CI on main"},
        ),
        ("**SITREP-WAITING:** the review from @beta", "waiting", "the review from @beta", {}),
        ("no marker here", "idle", "", {}),
    ],
)
def test_markers_from_the_last_assistant_message(ab, text, state, summary, facts) -> None:
    comm, a, _ = ab
    r = stop(a, last=text)
    assert (r.out, r.err) == ("", "")
    got = row(comm)
    assert (got["state"], got["summary"]) == (state, summary)
    for k, v in facts.items():
        assert got[k] == v
    assert "floor" not in got and "stop_at" not in got


def _transcript(path: str, texts: list[str]) -> None:
    with open(path, "w") as f:
        f.write(json.dumps({"type": "user", "message": {"role": "user", "content": "do it"}}) + "\n")
        for t in texts:
            msg = {"role": "assistant", "content": [{"type": "text", "text": t}]}
            f.write(json.dumps({"type": "assistant", "message": msg, "sessionId": SID}) + "\n")
        f.write(
            json.dumps(
                {
                    "type": "assistant",
                    "message": {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}],
                    },
                }
            )
            + "\n"
        )


def test_markers_from_the_transcript(ab) -> None:
    comm, a, _ = ab
    tpath = os.path.join(comm.work, "t.jsonl")
    _transcript(tpath, ["SITREP: old news", "Done.\nSITREP-QUESTION: ship it now?"])
    stop(a, transcript=tpath)
    got = row(comm)
    assert (got["state"], got["summary"], got["question"]) == ("blocked", "ship it now?", "ship it now?")
    _transcript(tpath, ["SITREP: merged"])
    stop(a, transcript=tpath)
    got = row(comm)
    assert (got["state"], got["summary"], got.get("done")) == ("done", "merged", True)
    assert "question" not in got


def test_a_blocked_turn_does_not_read_markers(ab) -> None:
    comm, a, b = ab
    b.run("send", "@alpha", "x")
    assert blocked(stop(a, last="SITREP: finished"))
    assert row(comm).get("done") is None


# ------------------------------------------------------------------------------------------ not joined / refused


def test_not_joined_runs_only_the_stop_event(comm: Comm) -> None:
    a = comm.session("alpha")
    raw(comm, "alpha", line("beta", "alpha"))
    before = snapshot(comm.home)
    r = stop(a, last="SITREP: done")
    assert (r.out, r.err) == ("", "")
    assert snapshot(comm.home) == before


def test_self_file_without_a_row_runs_only_the_stop_event(ab) -> None:
    comm, a, b = ab
    assert b.run("leave", "--name", "alpha").code == 0
    b.run("send", "@alpha", "x")  # refused: no live session; put a line there by hand
    raw(comm, "alpha", line("beta", "alpha"))
    r = stop(a)
    assert (r.out, r.err) == ("", "")
    assert not os.path.exists(comm.layout.state(f"mail-{SID}.tick"))
    assert row(comm) is None


def test_a_child_agent_is_silent_and_changes_nothing(ab, tmp_path) -> None:
    comm, a, b = ab
    b.run("send", "@alpha", "x")
    tree = Tree(os.path.join(str(tmp_path), "tree"))
    before = snapshot(comm.home)
    script = os.path.join(comm.layout.bin_dir, "comm-status-idle.sh")
    r = tree.run(a, [script], stdin=stop_json(a, last="SITREP: done"))
    assert (r.code, r.out, r.err) == (0, "", ""), r
    assert snapshot(comm.home) == before


def test_an_unreadable_ancestry_is_a_system_message(ab, tmp_path) -> None:
    comm, a, b = ab
    b.run("send", "@alpha", "x")
    tree = Tree(os.path.join(str(tmp_path), "tree"))
    script = os.path.join(comm.layout.bin_dir, "comm-status-idle.sh")
    r = tree.run(
        a,
        [script],
        layers=(),
        env={"SOT_WORKSPACE_ID": "ws-gone"},
        drop=("SOT_COMM_SELF_FILE",),
        stdin=stop_json(a),
    )
    assert r.code == 0
    doc = json.loads(r.out)
    assert list(doc) == ["systemMessage"]
    assert doc["systemMessage"].startswith("sot-comm: this process names row ws-gone but is not shown")


# ------------------------------------------------------------------------------------------ prompt / tools


def prompt(s: Session, text: str, **extra: object) -> Result:
    doc = {
        "session_id": SID,
        "transcript_path": os.path.join(s.comm.work, f"{SID}.jsonl"),
        "cwd": s.root,
        "permission_mode": "default",
        "hook_event_name": "UserPromptSubmit",
        "prompt": text,
        **extra,
    }
    r = s.run("status-prompt", stdin=json.dumps(doc))
    assert (r.code, r.out) == (0, ""), r
    return r


@pytest.mark.parametrize(
    ("text", "origin"),
    [
        ("please fix the build", "user"),
        ("[sot-comm] you have mail: run comm-poll.sh", "machine"),
        ("[SYSTEM NOTIFICATION] x", "machine"),
        ("[relay] from @beta: hi", "machine"),
        ("Another Claude session sent a message", "machine"),
        ("Stop hook feedback:\nNew sot-comm mail", "machine"),
        ("[beta:repo] hello", "machine"),
        ("look: <task-notification>done</task-notification>", "machine"),
        ("x <teammate-message from=a>", "machine"),
        ("[a b] not a tag", "user"),
        ("[sot-comm]without space", "user"),
    ],
)
def test_prompt_origin(ab, text: str, origin: str) -> None:
    comm, a, _ = ab
    prompt(a, text)
    got = row(comm)
    assert (got["floor"], got["state"]) == (origin, "working")
    assert got["floor_prompt"]
    with open(comm.layout.state("transcript-alpha.path")) as f:
        assert f.read().strip() == os.path.join(comm.work, f"{SID}.jsonl")


def test_user_turn_ends_done_machine_turn_ends_idle(ab) -> None:
    comm, a, _ = ab
    prompt(a, "please fix the build")
    assert nudged(stop(a)) is None  # outside a row a person's turn is never held (nudges are rows' work)
    assert (row(comm)["state"], row(comm).get("done")) == ("done", True)
    prompt(a, "[sot-comm] you have mail: run comm-poll.sh")
    assert row(comm)["state"] == "working" and row(comm).get("done") is True
    stop(a)
    # a machine turn does not mark done, and does not clear the previous user turn's done
    assert row(comm)["state"] == "done"
    prompt(a, "next task")
    assert "done" not in row(comm)


def _ask(s: Session, phase: str, tool_id: str = "toolu_01ABC") -> Result:
    doc: dict[str, object] = {
        "session_id": SID,
        "transcript_path": os.path.join(s.comm.work, f"{SID}.jsonl"),
        "cwd": s.root,
        "hook_event_name": "PreToolUse" if phase == "pre" else "PostToolUse",
        "tool_name": "AskUserQuestion",
        "tool_input": {
            "questions": [
                {
                    "question": "Which database should I use?",
                    "header": "DB",
                    "options": [{"label": "sqlite", "description": "x"}, {"label": "pg", "description": "y"}],
                    "multiSelect": False,
                }
            ]
        },
        "tool_use_id": tool_id,
    }
    if phase == "post":
        doc["tool_response"] = {"answers": {"Which database should I use?": "sqlite"}}
    r = s.run("status-pretool" if phase == "pre" else "status-posttool", stdin=json.dumps(doc))
    assert (r.code, r.out) == (0, ""), r
    return r


def test_ask_user_question_blocks_then_its_answer_is_a_user_prompt(ab) -> None:
    comm, a, _ = ab
    prompt(a, "[sot-comm] you have mail: run comm-poll.sh")
    _ask(a, "pre")
    got = row(comm)
    q = "Which database should I use?"
    assert (got["state"], got["summary"], got["question"]) == ("blocked", q, q)
    assert "floor" not in got
    marker = comm.layout.state("askq-toolu_01ABC.marker")
    assert os.path.exists(marker)
    _ask(a, "post")
    got = row(comm)
    assert (got["state"], got["floor"]) == ("working", "user")
    assert "question" not in got
    assert not os.path.exists(marker)


def test_post_tool_without_its_marker_is_not_a_prompt(ab) -> None:
    comm, a, _ = ab
    _ask(a, "post", tool_id="toolu_never_asked")
    assert "floor" not in row(comm)


def test_other_tool_refreshes_a_working_turn_at_most_once_a_minute(ab) -> None:
    comm, a, _ = ab
    prompt(a, "go")
    with open(comm.layout.registry) as f:
        doc = json.load(f)
    doc["agents"]["alpha"]["status_at"] = "2020-01-01T00:00:00Z"
    with open(comm.layout.registry, "w") as f:
        f.write(json.dumps(doc, indent=2) + "\n")
    post = json.dumps(
        {
            "session_id": SID,
            "hook_event_name": "PostToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": "ls"},
            "tool_response": {},
            "tool_use_id": "toolu_2",
        }
    )
    r = a.run("status-posttool", stdin=post)
    assert (r.code, r.out) == (0, "")
    assert row(comm)["status_at"] != "2020-01-01T00:00:00Z"
    assert os.path.exists(comm.layout.state(f"hb-{SID}.tick"))


def test_an_unreadable_registry_still_goes_through_the_mail_gate(ab) -> None:
    comm, a, b = ab
    b.run("send", "@alpha", "x")
    with open(comm.layout.registry, "w") as f:
        f.write('{"agents": 5}\n')
    assert blocked(stop(a))
    assert not blocked(stop(a))


@pytest.mark.parametrize(
    "script", ["status-prompt", "status-pretool", "status-posttool", "status-permission"]
)
def test_status_hooks_of_a_child_agent_change_nothing(ab, tmp_path, script: str) -> None:
    comm, a, _ = ab
    tree = Tree(os.path.join(str(tmp_path), "tree"))
    doc = {
        "session_id": SID,
        "hook_event_name": "x",
        "prompt": "fix it",
        "tool_name": "AskUserQuestion" if script != "status-posttool" else "Bash",
        "tool_input": {"questions": [{"question": "q?"}]},
        "tool_use_id": "toolu_9",
    }
    with open(comm.layout.state(f"calls-{SID}.count"), "w") as f:
        f.write("...")  # neither emptied by a refused prompt nor grown by a refused tool call
    before = snapshot(comm.home)
    r = tree.run(a, [os.path.join(comm.layout.bin_dir, f"comm-{script}.sh")], stdin=json.dumps(doc))
    assert (r.code, r.out, r.err) == (0, "", ""), r
    assert snapshot(comm.home) == before


# ------------------------------------------------------------------------------------------ nudges

HUMAN_NUDGE = (
    "This turn answered a person and ended without a closing line. End it with one line the dashboard can"
    " show: `SITREP: <what is done>`, `SITREP-QUESTION: <what you need from them>` or `SITREP-WAITING:"
    " <what you wait for>`."
)


def nudged(r: Result) -> str | None:
    """The reason of a nudge block (not the mail gate's), or None when the turn was let go."""
    if not r.out.strip():
        return None
    got = json.loads(r.out)
    assert got["decision"] == "block" and "sot-comm mail" not in got["reason"], got
    return str(got["reason"])


def post_tool(s: Session, n: int) -> None:
    doc = json.dumps({"session_id": SID, "hook_event_name": "PostToolUse", "tool_name": "Bash",
                      "tool_input": {"command": "ls"}, "tool_response": {}, "tool_use_id": "toolu_x"})  # fmt: skip
    for _ in range(n):
        r = s.run("status-posttool", stdin=doc)
        assert (r.code, r.out) == (0, ""), r


def nudges_on(comm: Comm, value: str = "on") -> None:
    """Switch the nudges on outside rows (the sessions here run outside any row) in hooks.conf."""
    with open(os.path.join(comm.home, "hooks.conf"), "w") as f:
        f.write(f"# sotd hooks\nnudges = {value}\n")


def test_outside_a_row_nudges_are_off_unless_the_config_file_says_on(ab) -> None:
    comm, a, _ = ab
    prompt(a, "please fix the build")
    assert nudged(stop(a, last="Fixed it.")) is None
    assert row(comm)["state"] == "done"
    for value in ("rows", "bogus", "off"):
        nudges_on(comm, value)
        prompt(a, "again")
        assert nudged(stop(a, last="Fixed it.")) is None, value
    nudges_on(comm)
    prompt(a, "and once more")
    assert nudged(stop(a, last="Fixed it.")) == HUMAN_NUDGE


def test_a_nudge_never_holds_a_stop_hook_continuation(ab) -> None:
    comm, a, _ = ab
    nudges_on(comm)
    prompt(a, "please fix the build")
    assert nudged(stop(a, active=True, last="Fixed it.")) is None  # its first end, but already held once
    assert row(comm)["state"] == "done"


def test_a_human_turn_without_a_marker_is_held_once_per_turn(ab) -> None:
    comm, a, _ = ab
    nudges_on(comm)
    prompt(a, "please fix the build")
    assert nudged(stop(a, last="Fixed it.")) == HUMAN_NUDGE
    assert row(comm)["state"] == "working"  # held: the turn goes on
    assert nudged(stop(a, last="Fixed it.")) is None  # once per turn (by its tick, not the continuation)
    assert row(comm)["state"] == "done"
    with open(comm.layout.state(f"stop-feedback-{SID}.jsonl")) as f:
        assert [json.loads(x)["reason"] for x in f] == [HUMAN_NUDGE]
    prompt(a, "and the docs too")  # a new turn: held again
    assert nudged(stop(a, last="Done.")) == HUMAN_NUDGE
    prompt(a, "one more")
    assert nudged(stop(a, last="SITREP: docs updated")) is None  # a marker needs no nudge
    assert (row(comm)["state"], row(comm)["summary"]) == ("done", "docs updated")
    prompt(a, "a question")
    assert nudged(stop(a, last="SITREP-QUESTION: which branch?")) is None
    assert row(comm)["state"] == "blocked"


def test_a_machine_turn_is_nudged_softly_only_after_real_effort(ab) -> None:
    comm, a, _ = ab
    nudges_on(comm)
    prompt(a, "[sot-comm] you have mail: run comm-poll.sh")
    post_tool(a, 7)
    assert nudged(stop(a, last="ok")) is None  # 7 calls, seconds old: not effort
    prompt(a, "[sot-comm] you have mail: run comm-poll.sh")  # a new turn empties the count
    assert not os.path.exists(comm.layout.state(f"calls-{SID}.count"))
    post_tool(a, 8)
    reason = nudged(stop(a, last="ok"))
    assert reason == (
        "This turn did real work (8 tool calls, 0 min) and ended without a closing line. If it finished"
        " something, end with `SITREP: <headline>` so the others can see it; if not, just end the turn again."
    )
    assert nudged(stop(a, last="ok")) is None and row(comm)["state"] == "idle"
    # a long turn with few calls: the turn id's stamp says it began 6 minutes ago
    prompt(a, "[sot-comm] you have mail: run comm-poll.sh")
    with open(comm.layout.registry) as f:
        doc = json.load(f)
    doc["agents"]["alpha"]["floor_prompt"] = "p1:" + time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 360)
    )
    with open(comm.layout.registry, "w") as f:
        f.write(json.dumps(doc, indent=2) + "\n")
    got = nudged(stop(a, last="ok"))
    assert got is not None and "(0 tool calls, 6 min)" in got


def test_a_sitrep_naming_missing_files_is_held_once(ab) -> None:
    comm, a, _ = ab
    nudges_on(comm)
    os.makedirs(os.path.join(a.root, "src"), exist_ok=True)
    with open(os.path.join(a.root, "src", "parser.py"), "w") as f:
        f.write("")
    text = "SITREP: fixed `src/parser.py:12`, wrote `docs/parser.md` and `notes/x.txt` (see `https://x.invalid/a`)"
    prompt(a, "fix the parser")
    assert nudged(stop(a, last=text)) == (
        "The SITREP names files that are not there: `docs/parser.md`, `notes/x.txt`. Create them or correct"
        " the SITREP, then end the turn."
    )
    assert nudged(stop(a, last=text)) is None  # once per turn and text
    prompt(a, "again")
    os.makedirs(os.path.join(a.root, "docs"))
    os.makedirs(os.path.join(a.root, "notes"))
    for p in ("docs/parser.md", "notes/x.txt"):
        with open(os.path.join(a.root, p), "w") as f:
            f.write("")
    assert nudged(stop(a, last=text)) is None  # every named file exists
    assert row(comm)["state"] == "done"


def test_nudges_off_and_fail_open(ab) -> None:
    comm, a, _ = ab
    nudges_on(comm)
    prompt(a, "please fix the build")
    assert nudged(stop(a, last="Fixed.", env={"SOT_COMM_NUDGES": "off"})) is None
    assert row(comm)["state"] == "done"
    prompt(a, "next")
    tick = comm.layout.state(f"nudge-{SID}.tick")
    os.mkdir(tick)  # the tick cannot be written: no hold it could not remember
    assert nudged(stop(a, last="Fixed.")) is None
    assert row(comm)["state"] == "done"


# ------------------------------------------------------------------------------------------ lock faults


def lock_open_fault(name: str = "alpha") -> str:
    return (
        f"WARNING: the inbox lock for @{name} failed (cannot open its lock file) — reading without it; a line"
        " may show twice, none is lost"
    )


def block_reason(r: Result) -> str | None:
    if not r.out.strip():
        return None
    got = json.loads(r.out)
    assert got["decision"] == "block", got
    return str(got["reason"])


def test_a_lock_fault_warns_once_per_fault_and_never_in_a_continuation(ab) -> None:
    comm, a, _ = ab
    tick = comm.layout.state(f"lock-fault-{SID}.tick")
    # A real fault that is not "busy": the lock file's name is taken by a folder, so it will not open
    # read-write (root included); the read goes on without the lock.
    os.mkdir(comm.layout.inbox_lock("alpha"))
    raw(comm, "alpha", line("beta", "alpha", "one"))
    # inside a stop_hook_active continuation: the mail gate blocks for the mail, with no warning and no tick
    assert block_reason(stop(a, active=True)) == reason("alpha")
    assert not os.path.exists(tick)
    # the next turn end announces the fault once, on its own (the mail was already announced)
    assert block_reason(stop(a)) == lock_open_fault()
    with open(tick) as f:
        assert f.read().strip() == lock_open_fault()
    assert block_reason(stop(a)) is None
    # the same fault with new mail: the mail block only, the warning is not repeated
    raw(comm, "alpha", line("beta", "alpha", "two"))
    assert block_reason(stop(a)) == reason("alpha")
    assert block_reason(stop(a)) is None
    # a different fault is announced once: the inbox itself cannot be read, so nothing can be counted
    os.rmdir(comm.layout.inbox_lock("alpha"))
    os.unlink(comm.layout.inbox("alpha"))
    os.mkdir(comm.layout.inbox("alpha"))
    first = block_reason(stop(a))
    assert first is not None and first.startswith("WARNING: the unread count for @alpha failed (")
    assert first.endswith("); run comm-poll.sh to check by hand")
    assert block_reason(stop(a)) is None
    assert block_reason(stop(a, active=True)) is None
    with open(comm.layout.state(f"stop-feedback-{SID}.jsonl")) as f:
        assert [json.loads(x)["reason"] for x in f] == [
            reason("alpha"),
            lock_open_fault(),
            reason("alpha"),
            first,
        ]


def test_a_lock_fault_with_new_mail_prefixes_the_warning(ab) -> None:
    comm, a, _ = ab
    os.mkdir(comm.layout.inbox_lock("alpha"))
    raw(comm, "alpha", line("beta", "alpha"))
    assert block_reason(stop(a)) == lock_open_fault() + "\n" + reason("alpha")
    assert block_reason(stop(a)) is None


# ------------------------------------------------------------------------------------------ the dialog (D3)

CLAUDE_PERMISSION = {
    "session_id": SID,
    "permission_mode": "default",
    "hook_event_name": "PermissionRequest",
    "tool_name": "Bash",
    "tool_input": {"command": "rm -rf build", "description": "Remove the build folder"},
    "permission_suggestions": [
        {
            "type": "addRules",
            "rules": [{"toolName": "Bash", "ruleContent": "rm -rf build"}],
            "behavior": "allow",
        }
    ],
}
CODEX_PERMISSION = {
    "session_id": "019a3c1e-5b2f-7d40-8e11-2f6a7b8c9d0e",
    "turn_id": "7",
    "transcript_path": None,
    "hook_event_name": "PermissionRequest",
    "model": "gpt-5-codex",
    "permission_mode": "default",
    "tool_name": "Bash",
    "tool_input": {"command": "cargo test --workspace", "description": "Run the test suite"},
}


def permission(s: Session, doc: dict) -> Result:
    r = s.run("status-permission", stdin=json.dumps({"cwd": s.root, **doc}))
    assert (r.code, r.out, r.err) == (0, "", ""), r
    return r


def test_a_permission_dialog_blocks_the_turn_until_the_next_prompt(ab) -> None:
    comm, a, _ = ab
    prompt(a, "please clean up")
    turn = row(comm)["floor_prompt"]
    permission(a, {**CLAUDE_PERMISSION, "transcript_path": os.path.join(comm.work, f"{SID}.jsonl")})
    got = row(comm)
    text = "permission for Bash: rm -rf build"
    assert (got["state"], got["summary"], got["dialog"], got["dialog_prompt"]) == (
        "blocked",
        text,
        text,
        turn,
    )
    assert got["floor"] == "user"  # the turn goes on: the dialog outranks its floor
    prompt(a, "yes, go ahead")
    got = row(comm)
    assert "dialog" not in got and "dialog_prompt" not in got
    assert (got["state"], got["summary"]) == ("working", "")


def test_a_permission_dialog_is_cleared_by_the_turn_end(ab) -> None:
    comm, a, _ = ab
    prompt(a, "[sot-comm] you have mail: run comm-poll.sh")
    permission(a, CLAUDE_PERMISSION)
    assert row(comm)["state"] == "blocked"
    stop(a, last="SITREP: cleaned")
    got = row(comm)
    assert "dialog" not in got and (got["state"], got["summary"]) == ("done", "cleaned")


def test_a_permission_dialog_is_cleared_by_an_interrupt_of_its_turn_only(ab) -> None:
    comm, a, _ = ab
    prompt(a, "go")
    turn = row(comm)["floor_prompt"]
    permission(a, CLAUDE_PERMISSION)
    r = a.run("status", "interrupted", env={"COMM_STATUS_PROMPT_ID": "another turn"})
    assert r.code == 0 and row(comm)["state"] == "blocked"
    r = a.run("status", "interrupted", env={"COMM_STATUS_PROMPT_ID": turn})
    assert r.code == 0
    got = row(comm)
    assert "dialog" not in got and "floor" not in got and got["state"] == "idle"


def test_a_codex_approval_prompt_blocks_then_its_stop_hook_clears_it(ab) -> None:
    comm, a, _ = ab
    codex_prompt = {k: v for k, v in CODEX_PERMISSION.items() if k not in ("tool_name", "tool_input")}
    r = a.run(
        "status-prompt",
        stdin=json.dumps(
            {**codex_prompt, "cwd": a.root, "hook_event_name": "UserPromptSubmit", "prompt": "run the tests"}
        ),
    )
    assert (r.code, r.out) == (0, ""), r
    permission(a, CODEX_PERMISSION)
    got = row(comm)
    assert (got["state"], got["summary"]) == ("blocked", "permission for Bash: cargo test --workspace")
    codex_stop = {
        **codex_prompt,
        "cwd": a.root,
        "hook_event_name": "Stop",
        "stop_hook_active": False,
        "last_assistant_message": "All tests pass.\n\nSITREP: the suite is green",
    }
    r = a.run("status-idle", stdin=json.dumps(codex_stop))
    assert (r.code, r.out) == (0, ""), r
    got = row(comm)
    assert "dialog" not in got and (got["state"], got["summary"]) == ("done", "the suite is green")


def test_a_permission_notification_is_a_dialog_other_notifications_are_not(ab) -> None:
    comm, a, _ = ab
    prompt(a, "go")
    note = {"session_id": SID, "hook_event_name": "Notification"}
    before = row(comm)
    permission(a, {**note, "message": "Claude is waiting for your input", "notification_type": "idle_prompt"})
    assert row(comm) == before
    permission(
        a,
        {
            **note,
            "message": "Claude needs your permission to use  Bash\n",
            "notification_type": "permission_prompt",
        },
    )
    got = row(comm)
    assert (got["state"], got["summary"]) == ("blocked", "Claude needs your permission to use Bash")


def test_a_dialog_text_is_one_bounded_line(ab) -> None:
    comm, a, _ = ab
    prompt(a, "go")
    long = "echo " + "x" * 300 + "\n  && ls"
    permission(a, {**CLAUDE_PERMISSION, "tool_input": {"command": long}})
    summary = row(comm)["summary"]
    assert len(summary) == 160 and summary.endswith("…") and "\n" not in summary
    permission(a, {**CLAUDE_PERMISSION, "tool_name": "mcp__db__drop", "tool_input": {"table": "users"}})
    assert row(comm)["summary"] == "permission for mcp__db__drop"


def test_a_permission_hook_of_a_session_that_has_not_joined_changes_nothing(comm: Comm) -> None:
    a = comm.session("alpha")
    before = snapshot(comm.home)
    permission(a, CLAUDE_PERMISSION)
    assert snapshot(comm.home) == before


# ------------------------------------------------------------------------------------ one registry write

STRACE = shutil.which("strace")


def _registry_writes(s: Session, stdin: str) -> tuple[int, str]:
    """(renames onto registry.json, stdout) of one Stop hook run through its installed wrapper, under strace."""
    log = os.path.join(s.comm.work, f"strace-{time.monotonic_ns()}.log")
    script = os.path.join(s.comm.layout.bin_dir, "comm-status-idle.sh")
    p = subprocess.run(
        [str(STRACE), "-f", "-qq", "-e", "trace=rename,renameat,renameat2", "-o", log, script],
        cwd=s.root, env=s.env, input=stdin, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    with open(log) as f:
        renames = [ln for ln in f if "registry.json.tmp" in ln and "= 0" in ln]
    return len(renames), p.stdout


@pytest.mark.skipif(
    STRACE is None, reason="no strace on this machine, so the registry writes cannot be counted"
)
def test_each_path_of_the_stop_hook_writes_the_registry_once(ab) -> None:
    """Issue 17: the mark and the turn-end events are one read-decide-write (they were two or three)."""
    comm, a, b = ab
    assert _registry_writes(a, stop_json(a)) == (1, "")  # no mail: the stop event only
    assert row(comm)["state"] == "idle" and "stop_at" not in row(comm)
    n, out = _registry_writes(a, stop_json(a, last="All set.\nSITREP: shipped the fix"))
    assert (n, out) == (1, "")  # the marker's declaration and the stop event together
    assert (row(comm)["state"], row(comm)["summary"]) == ("done", "shipped the fix")
    assert "stop_at" not in row(comm)
    assert b.run("send", "@alpha", "x").code == 0
    n, out = _registry_writes(a, stop_json(a))
    assert n == 1 and json.loads(out) == {"decision": "block", "reason": reason("alpha")}, (
        out
    )  # the mark only
    assert "stop_at" in row(comm)
