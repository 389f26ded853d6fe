"""The hooks' stdin: size and depth limits, and the text rule (issue 19 part 2; docs/agents.md)."""

from __future__ import annotations

import pytest

from sotd.cli.comm.hooks import shared

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("data", "depth"),
    [
        (b"", 0),
        (b"{}", 1),
        (b'{"a": [1, {"b": []}]}', 4),
        (b'{"a": "[[[[{{{{"}', 1),  # brackets inside a string do not nest
        (b'{"a": "\\"[[[", "b": [[]]}', 3),  # an escaped quote does not end the string
        (b"[" * 1000 + b"]" * 1000, 1000),
    ],
)
def test_json_depth(data: bytes, depth: int) -> None:
    assert shared.json_depth(data) == depth


LIMIT = shared.HOOK_DEPTH_MAX


@pytest.mark.parametrize(
    ("data", "whole", "want", "why"),
    [
        (b"", True, {}, None),
        (b"  \n", True, {}, None),
        (b'{"session_id": "s"}', True, {"session_id": "s"}, None),
        (b'{"session_id": "\\ud800"}', True, {"session_id": "\ufffd"}, None),
        (b'{"m": "caf\xe9"}', True, {"m": "caf\ufffd"}, None),
        (b'{"x": ' + b"[" * LIMIT + b"]" * LIMIT + b"}", True, None, f"deeper than {LIMIT} levels"),
        (b'{"x": ' + b"[" * (LIMIT - 1) + b"]" * (LIMIT - 1) + b"}", True, "ok", None),
        (b"[1, 2]", True, {}, "the hook input is not a JSON object"),
        (b"{nope", True, {}, "the hook input is not JSON (JSONDecodeError)"),
        (b'{"a": 1}', False, {}, f"larger than {shared.HOOK_INPUT_MAX} bytes"),
    ],
)
def test_parse_hook_input(data: bytes, whole: bool, want: object, why: str | None) -> None:
    obj, reason = shared.parse_hook_input(data, whole=whole)
    if why is None:
        assert reason is None
        if want != "ok":
            assert obj == want
    else:
        assert reason is not None and why in reason
        assert obj == {}
