"""Decision D3: the text the permission hook puts in the ``dialog`` fact (``hooks.permission.dialog_text``)."""

from __future__ import annotations

import pytest

from sotd.cli.comm.hooks import permission

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("hook", "text"),
    [
        (
            {"hook_event_name": "PermissionRequest", "tool_name": "Bash", "tool_input": {"command": "rm -rf b"}},
            "permission for Bash: rm -rf b",
        ),
        (  # Codex: the command before its justification
            {"hook_event_name": "PermissionRequest", "tool_name": "Bash",
             "tool_input": {"description": "run tests", "command": "cargo test"}},
            "permission for Bash: cargo test",
        ),
        (
            {"hook_event_name": "PermissionRequest", "tool_name": "Write", "tool_input": {"file_path": "/a/b.py"}},
            "permission for Write: /a/b.py",
        ),
        (
            {"hook_event_name": "PermissionRequest", "tool_name": "WebFetch", "tool_input": {"url": "https://x"}},
            "permission for WebFetch: https://x",
        ),
        ({"hook_event_name": "PermissionRequest", "tool_name": "mcp__db__q", "tool_input": {"sql": "x"}},
         "permission for mcp__db__q"),
        ({"hook_event_name": "PermissionRequest", "tool_input": {"command": "ls  -l"}}, "ls -l"),
        ({"hook_event_name": "PermissionRequest"}, "a permission dialog"),
        ({}, "a permission dialog"),
        (
            {"hook_event_name": "Notification", "notification_type": "permission_prompt",
             "message": "Claude needs your permission to use Bash"},
            "Claude needs your permission to use Bash",
        ),
        ({"hook_event_name": "Notification", "notification_type": "elicitation_dialog", "message": ""},
         "a permission dialog"),
        ({"hook_event_name": "Notification", "message": "Claude needs your permission to use Edit"},
         "Claude needs your permission to use Edit"),
        ({"hook_event_name": "Notification", "notification_type": "idle_prompt", "message": "waiting"}, None),
        ({"hook_event_name": "Notification", "message": "Claude is waiting for your input"}, None),
    ],
)  # fmt: skip
def test_dialog_text(hook: dict, text: str | None) -> None:
    assert permission.dialog_text(hook) == text


def test_dialog_text_is_one_line_of_at_most_160_characters() -> None:
    got = permission.dialog_text({"tool_name": "Bash", "tool_input": {"command": "a\n\tb " + "c" * 400}})
    assert got is not None
    assert (
        len(got) == permission.DIALOG_MAX
        and got.startswith("permission for Bash: a b ccc")
        and got.endswith("…")
    )
