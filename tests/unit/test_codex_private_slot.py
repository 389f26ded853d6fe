"""A Codex session's commands find the private self file its start hook pinned (issue 27 item 7).

``ancestry.nearest_agent`` tells the start hook it runs under Codex (which gives hooks no env file);
``hooks.shared.command_pinned_self_file`` finds the file from ``CODEX_THREAD_ID`` once the hook's note is
there, and never replaces a pinned file or a row's slot. The whole path with the real Codex:
tests/realagent/test_codex_private_self.py.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from sotd import ancestry
from sotd.cli.comm.hooks import shared

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("chain", "want"),
    [
        ([["python3", "-m", "sotd"], ["bash", "-c", "x"], ["/usr/bin/codex"], ["tmux"]], "codex"),
        ([["sotd"], ["node", "/x/node_modules/@openai/codex/bin/codex.js"], ["claude"]], "codex"),
        ([["sotd"], ["claude", "--resume"], ["codex"]], "claude"),  # the nearest one
        ([["sotd"], ["bash"]], None),
        ([], None),
    ],
)
def test_nearest_agent(chain: list[list[str]], want: str | None) -> None:
    assert ancestry.nearest_agent(chain) == want


def test_a_codex_command_finds_its_pinned_file_by_thread_id(tmp_path: Any) -> None:
    comm = str(tmp_path)
    os.makedirs(os.path.join(comm, "state"))
    env = {"SOT_COMM_HOME": comm, "CODEX_THREAD_ID": "01a2-b3"}
    slot = os.path.join(comm, "self", "session-01a2-b3.txt")
    assert shared.command_pinned_self_file(env) is None  # no note yet: the command acts as before
    with open(os.path.join(comm, "state", shared.pin_note(slot)), "w") as f:
        f.write(slot + "\n")
    assert shared.command_pinned_self_file(env) == slot
    assert shared.command_pinned_self_file({**env, "SOT_COMM_SELF_FILE": "/x/mine.txt"}) is None
    assert shared.command_pinned_self_file({**env, "SOT_WORKSPACE_ID": "ws-1"}) is None
    assert shared.command_pinned_self_file({"SOT_COMM_HOME": comm}) is None
