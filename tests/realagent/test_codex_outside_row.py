"""A Codex session a person starts themselves, outside any sotd row (issue 12): after
``sotd comm install --agent-settings`` its model runs ``comm-poll.sh`` and ``comm-send.sh`` by their bare
names, though the session's ``PATH`` does not name sotd's ``bin/`` and Codex rebuilds the shell's
environment from a login shell (which resets ``PATH``). What makes it work is the bash functions install
adds under ``[shell_environment_policy.set]`` in ``config.toml`` (sotd.cli.install.codex_config).

The real Codex TUI at the pin, its real hooks and sandbox, real tmux and sotd; the model is the stand-in
Responses API (the only stand-in). Without the functions (the code before this test) the first tool
result is ``/bin/bash: line 1: comm-poll.sh: command not found`` (seen).
"""

from __future__ import annotations

import json
import os
from typing import Any

from tests.conftest import wait_for
from tests.realagent import codex_kit, kit
from tests.realagent.codex_standin import CodexStandIn, bash, text


def test_a_codex_session_outside_a_row_runs_the_comm_scripts_by_name(
    codex_panes: kit.Panes, codex_home: codex_kit.CodexHome, codex_model: CodexStandIn, tmp_path: Any
) -> None:
    ground = codex_kit.OutsideRow(codex_home, str(tmp_path))
    comm, project, sotd, again = ground.comm, ground.project, ground.sotd, ground.reinstalled
    config = os.path.join(codex_home.codex_home, "config.toml")
    assert f"Put the comm scripts on Codex's shell by name (bash functions under [shell_environment_policy.set]): {config}" in again.stdout  # fmt: skip
    you_dir = os.path.join(str(tmp_path), "you")  # not through the kit's trust(): that rewrites config.toml
    os.makedirs(you_dir)
    you = {"SOT_COMM_SELF_FILE": os.path.join(comm, "self", "you-session.txt"), "PWD": you_dir}
    assert sotd("join", "--name", "you", cwd=you_dir, **you).returncode == 0

    pane = codex_panes.start(project, ground.session_env(), [codex_kit.codex_exe()], "alpha")
    codex_kit.wait_idle(lambda: codex_panes.raw(pane))
    codex_model.add(
        text("Hello.", when="hello"),
        bash("comm-poll.sh", when="read your mail"),
        bash('comm-send.sh @you "pong from alpha"', when="ping from you"),
        text("SITREP: answered @you"),
    )
    codex_panes.type(pane, "hello")
    wait_for(lambda: "hello" in codex_panes.text(pane), timeout=10, what="the prompt in the composer")
    codex_panes.enter(pane)
    codex_panes.wait(pane, lambda t: "Hello." in t, "the first turn's answer", timeout=60)
    codex_kit.wait_idle(lambda: codex_panes.raw(pane))
    mains = codex_model.main_requests()
    assert "sot-comm: this session is @alpha-testhost" in json.dumps(mains[0].body)  # joined at that turn
    assert sotd("send", "@alpha-testhost", "ping from you", cwd=you_dir, **you).stdout == (
        "  filed -> @alpha-testhost\n"
    )
    codex_panes.type(pane, "read your mail")
    wait_for(
        lambda: "read your mail" in codex_panes.text(pane), timeout=10, what="the prompt in the composer"
    )
    codex_panes.enter(pane)
    codex_panes.wait(pane, lambda t: "SITREP: answered @you" in t, "the second turn's end", timeout=60)
    results = codex_model.tool_results()
    assert len(results) == 2, results
    assert "command not found" not in results[0] and "ping from you" in results[0], results
    assert "filed -> @you" in results[1], results
    assert "pong from alpha" in sotd("poll", cwd=you_dir, **you).stdout
