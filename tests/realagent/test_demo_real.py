"""The README's main job with the real Claude Code: ``scripts/demo`` runs both rows as the pinned TUI (its
model the scripted stand-in ``sotd.demo.scripted_model``), says so, and the wake, the polls and the replies go
through as with the scripted agent (issue 11 "Done when")."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

import pytest

from tests.realagent import kit


def test_scripts_demo_runs_real_claude_code_rows_and_says_so(claude_exe: str) -> None:
    before = set(glob.glob("/tmp/sotd-demo-*"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(kit.DROP)}
    p = subprocess.run([os.path.join(kit.TOP, "scripts", "demo")], cwd=kit.TOP, env=env, capture_output=True,
                       text=True, timeout=150, check=False)  # fmt: skip
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:]
    for want in (
        f"# agent: the real Claude Code {kit.pin()} TUI ({claude_exe}) in each row",
        f"Claude Code v{kit.pin()}",
        "comm wake: woke @alpha",
        "comm wake: woke @beta",
        "● Bash(comm-poll.sh)",
        "beta here: reran the flaky test 20 times",
        "  alpha: 1 line(s) submitted at its prompt",
        "  beta: 1 line(s) submitted at its prompt",
        "Removed @beta from sot-comm registry",
        "the daemon, its tmux server and the folder are gone",
    ):
        assert want in out, (want, out[-3000:])
    assert "requires approval" not in out
    assert set(glob.glob("/tmp/sotd-demo-*")) - before == set()


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("fossil") is None or shutil.which("bwrap") is None,
    reason="needs root, fossil and bubblewrap",
)
def test_scripts_demo_ocx_runs_the_session_as_real_claude_code_and_says_so(claude_exe: str) -> None:
    """``scripts/demo --ocx``: the session run's agent is the pinned Claude Code in B's sandbox (issue 32)."""
    before = set(glob.glob("/tmp/sotd-demo-ocx-*"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(kit.DROP)}
    p = subprocess.run([os.path.join(kit.TOP, "scripts", "demo"), "--ocx"], cwd=kit.TOP, env=env,
                       capture_output=True, text=True, timeout=240, check=False)  # fmt: skip
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:]
    for want in (
        f"# agent: the real Claude Code {kit.pin()} TUI ({claude_exe}) in the session's sandbox",
        'the session\'s answer, posted by B as lab-user: {"text": "read: the parser drops a token"}',
        "times; it ran: ['cat ",
        "the fossil server and the folder are gone",
    ):
        assert want in out, (want, out[-3000:])
    assert "scripted_agent" not in out
    assert set(glob.glob("/tmp/sotd-demo-ocx-*")) - before == set()
