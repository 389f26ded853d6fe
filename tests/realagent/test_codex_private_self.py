"""A Codex session outside a row gets a private self file, so the shell it was started from keeps its own
handle (issue 27 item 7).

Before: Codex gives its hooks no env file to pin a file in, so the session joined through the box's shared
``nopane`` slot, the slot the person's shell had joined through: the shell's next send went out as the
Codex session's handle. Now the SessionStart hook pins ``self/session-<thread id>.txt`` (the thread id is
the hook's ``session_id``) and the model's commands find the same file from ``CODEX_THREAD_ID``, which
Codex sets in the environment of every command it runs.

The real Codex TUI at the pin, its real hooks, real tmux and sotd; the model is the stand-in Responses API
(the only stand-in).
"""

from __future__ import annotations

import json
import os
from typing import Any

from tests.conftest import wait_for
from tests.realagent import codex_kit, kit
from tests.realagent.codex_standin import CodexStandIn, bash, text


def test_a_codex_session_outside_a_row_leaves_the_shells_shared_slot_alone(
    codex_panes: kit.Panes, codex_home: codex_kit.CodexHome, codex_model: CodexStandIn, tmp_path: Any
) -> None:
    ground = codex_kit.OutsideRow(codex_home, str(tmp_path))
    comm, project, sotd = ground.comm, ground.project, ground.sotd
    shell_dir = os.path.join(str(tmp_path), "shell")
    os.makedirs(shell_dir)
    # the person's plain shell: the box's shared slot (no pinned self file)
    joined = sotd("join", "--name", "you", cwd=shell_dir, PWD=shell_dir)
    assert joined.returncode == 0, joined
    shared = os.path.join(comm, "self", "testhost__nopane.txt")
    assert os.path.isfile(shared)
    with open(shared, encoding="utf-8") as f:
        before = f.read()

    pane = codex_panes.start(project, ground.session_env(), [codex_kit.codex_exe()], "alpha")
    codex_kit.wait_idle(lambda: codex_panes.raw(pane))
    codex_model.add(
        text("Hello.", when="hello"),
        bash('env | grep ^CODEX_ ; comm-send.sh @you "pong from alpha"', when="answer you"),
        text("SITREP: answered @you"),
    )
    codex_panes.type(pane, "hello")
    wait_for(lambda: "hello" in codex_panes.text(pane), timeout=10, what="the prompt in the composer")
    codex_panes.enter(pane)
    codex_panes.wait(pane, lambda t: "Hello." in t, "the first turn's answer", timeout=60)
    codex_kit.wait_idle(lambda: codex_panes.raw(pane))
    mains = codex_model.main_requests()
    assert "sot-comm: this session is @alpha-testhost" in json.dumps(mains[0].body)
    # the shell's slot still names the shell's handle, and its send still goes out as @you
    with open(shared, encoding="utf-8") as f:
        assert f.read() == before
    private = [n for n in os.listdir(os.path.join(comm, "self")) if n.startswith("session-")]
    assert len(private) == 1, private  # the session's own: self/session-<thread id>.txt
    thread_id = private[0][len("session-") : -len(".txt")]
    with open(os.path.join(comm, "self", private[0]), encoding="utf-8") as f:
        assert f.read().splitlines()[0] == "alpha-testhost"
    sent = sotd("send", "@alpha-testhost", "ping from you", cwd=shell_dir, PWD=shell_dir)
    assert sent.returncode == 0 and sent.stdout == "  filed -> @alpha-testhost\n", sent
    codex_panes.type(pane, "answer you")
    wait_for(lambda: "answer you" in codex_panes.text(pane), timeout=10, what="the prompt in the composer")
    codex_panes.enter(pane)
    codex_panes.wait(pane, lambda t: "SITREP: answered @you" in t, "the second turn's end", timeout=60)
    results = codex_model.tool_results()
    assert len(results) == 1, results
    assert f"CODEX_THREAD_ID={thread_id}" in results[0], results  # what the command finds its file by
    assert "filed -> @you" in results[0], results
    got = sotd("poll", cwd=shell_dir, PWD=shell_dir)
    assert "[alpha-testhost:alpha] pong from alpha" in got.stdout, got
