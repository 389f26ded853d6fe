"""Fuzz: every hook's stdin (Stop, prompt, pre-tool, post-tool, permission), issue 19 part 4.

Oracle: exit 0, no traceback and no exception caught by the hook's last resort, stdout empty or JSON objects
holding only ``decision``/``reason``/``systemMessage``; whatever the stdin held (any bytes, deep nesting,
lone surrogates in ``session_id``), the Stop hook holds the turn exactly when directed unread mail exists
(nudges off, a fresh tick), and every registry it leaves is one document with no lone surrogate in it.
"""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from sotd.formats import inbox
from tests.fuzz.conftest import Cases, fuzz
from tests.fuzz.kit import (
    HOOK_CODES,
    Box,
    Ran,
    as_json,
    carried,
    holds_to_contract,
    json_value,
    nasty_text,
    nested,
    run_proc,
)

HOOKS = ["stop", "prompt", "pre-tool", "post-tool", "permission"]
OUTPUT_KEYS = {"decision", "reason", "systemMessage"}


hook_doc = st.fixed_dictionaries(
    {},
    optional={
        "session_id": nasty_text,
        "hook_event_name": st.one_of(
            st.sampled_from(["Stop", "PermissionRequest", "Notification"]), nasty_text
        ),
        "stop_hook_active": json_value,
        "last_assistant_message": st.one_of(nasty_text, nasty_text.map(lambda t: "SITREP: " + t)),
        "transcript_path": nasty_text,
        "cwd": nasty_text,
        "prompt": nasty_text,
        "prompt_id": json_value,
        "tool_name": st.one_of(st.sampled_from(["AskUserQuestion", "Bash"]), nasty_text),
        "tool_input": st.one_of(
            json_value,
            st.fixed_dictionaries(
                {}, optional={"command": nasty_text, "questions": json_value, "question": nasty_text}
            ),
        ),
        "tool_use_id": json_value,
        "notification_type": st.one_of(st.just("permission_prompt"), nasty_text),
        "message": nasty_text,
    },
)


@st.composite
def hook_stdin(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["doc", "doc", "doc", "deep", "json", "bytes"]))
    if kind == "doc":
        return as_json(draw(hook_doc), ascii_escapes=draw(st.booleans()))
    if kind == "deep":
        inner = nested(draw(st.integers(30, 1500)))
        return b'{"session_id":"s","x":' + inner + b"}"
    if kind == "json":
        return as_json(draw(json_value))
    return draw(st.binary(max_size=80))


@st.composite
def mail(draw: st.DrawFn) -> list[bytes]:
    """Lines for alpha's inbox: directed mail from beta, broadcasts, alpha's own echoes."""
    out = []
    for kind in draw(st.lists(st.sampled_from(["directed", "broadcast", "self"]), max_size=3)):
        frm, to = {"directed": ("beta", "alpha"), "broadcast": ("beta", ""), "self": ("alpha", "alpha")}[kind]
        out.append(inbox.encode_line(frm, to, "r", draw(nasty_text), "2026-01-01T00:00:00Z"))
    return out


def hook_holds_to_contract(r: Ran, kind: str) -> list[dict[str, object]]:
    holds_to_contract(r, HOOK_CODES)
    assert f"sot-comm hook {kind}: ".encode() not in r.err, r  # the last resort caught an exception
    said = [json.loads(x) for x in r.out.splitlines() if x.strip()]
    for obj in said:
        assert isinstance(obj, dict) and set(obj) <= OUTPUT_KEYS, r
    return said


def registry_carried(box: Box) -> None:
    with open(box.layout.registry, "rb") as f:
        assert carried(json.loads(f.read()))


@fuzz(300)
@given(stdin=hook_stdin(), lines=mail())
def test_fuzz_stop_hook_holds_exactly_when_directed_mail_waits(
    box: Box, cases: Cases, stdin: bytes, lines: list[bytes]
) -> None:
    cases.one()
    box.reset()
    box.put_inbox("alpha", b"".join(lines))
    directed = inbox.count_directed(inbox.complete_lines(box.inbox("alpha")), "alpha")
    r = box.cli("alpha", "hook", "stop", stdin=stdin, SOT_COMM_NUDGES="off")
    said = hook_holds_to_contract(r, "stop")
    held = [o for o in said if o.get("decision") == "block"]
    assert len(held) == (1 if directed else 0), (r, directed)
    if held:
        assert "New sot-comm mail for @alpha" in str(held[0]["reason"]), r
    registry_carried(box)


@fuzz(200)
@given(kind=st.sampled_from(HOOKS[1:]), stdin=hook_stdin())
def test_fuzz_every_other_hook_on_any_stdin(box: Box, cases: Cases, kind: str, stdin: bytes) -> None:
    cases.one()
    box.reset()
    r = box.cli("alpha", "hook", kind, stdin=stdin, SOT_COMM_NUDGES="off")
    hook_holds_to_contract(r, kind)
    registry_carried(box)


@fuzz(20)
@given(kind=st.sampled_from(HOOKS), stdin=hook_stdin(), lines=mail())
def test_fuzz_hooks_as_real_processes(
    box: Box, cases: Cases, kind: str, stdin: bytes, lines: list[bytes]
) -> None:
    cases.one()
    box.reset()
    box.put_inbox("alpha", b"".join(lines))
    directed = inbox.count_directed(inbox.complete_lines(box.inbox("alpha")), "alpha")
    env = box.env("alpha", SOT_COMM_NUDGES="off")
    r = run_proc([b"comm", b"hook", kind.encode()], env, box.root("alpha"), stdin=stdin)
    said = hook_holds_to_contract(r, kind)
    if kind == "stop":
        assert len([o for o in said if o.get("decision") == "block"]) == (1 if directed else 0), r


def test_fuzz_oversized_hook_input_still_runs_the_mail_gate(box: Box) -> None:
    """Past the size limit the input is not used (reason logged), and the Stop hook still holds the turn."""
    from sotd.cli.comm.hooks.shared import HOOK_INPUT_MAX

    box.reset()
    box.put_inbox("alpha", inbox.encode_line("beta", "alpha", "r", "m", "2026-01-01T00:00:00Z"))
    big = b'{"session_id":"s","pad":"' + b"x" * (HOOK_INPUT_MAX + 10) + b'"}'
    r = box.cli("alpha", "hook", "stop", stdin=big, SOT_COMM_NUDGES="off")
    said = hook_holds_to_contract(r, "stop")
    assert [o.get("decision") for o in said] == ["block"], r
    assert f"larger than {HOOK_INPUT_MAX} bytes".encode() in r.err, r
