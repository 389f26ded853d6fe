"""A Claude Code row gets sotd's settings and joins by itself (issue 11 part 2 items 1 and 2).

A real daemon, its private tmux and the real capsule; the row's agent is a stand-in named ``claude`` (the
real TUI doing this is tests/realagent/test_hooks_real.py): it records the argv the daemon gave it, then
does what Claude Code does at a session's start with the settings file named by ``--settings`` — runs the
``SessionStart`` hook's command through a shell with the hook JSON on stdin, moves its whole output into
place — and waits.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator

import pytest

from tests.conftest import SOTD, wait_for
from tests.integration.test_rows import Box

pytestmark = pytest.mark.integration

STANDIN = """#!/bin/sh
printf '%s\\n' "$@" > {argv}
settings=""
while [ $# -gt 0 ]; do [ "$1" = --settings ] && settings="$2"; shift; done
cmd=$({py} -c 'import json,sys; print(json.load(open(sys.argv[1]))["hooks"]["SessionStart"][0]["hooks"][0]["command"])' "$settings")
printf '%s' '{{"session_id":"row-sid","hook_event_name":"SessionStart","source":"startup","cwd":"'"$PWD"'"}}' | sh -c "$cmd" > {out}.part 2>&1
mv {out}.part {out}
exec sleep 300
"""


@pytest.fixture
def agent_dir() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="sra-agent-", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def box(agent_dir: str) -> Iterator[Box]:
    """A daemon whose Claude rows run the stand-in (its default agent argv, as the real tier's rows)."""
    fake = os.path.join(agent_dir, "claude")
    with open(fake, "w") as f:
        f.write(STANDIN.format(argv=os.path.join(agent_dir, "argv.txt"), out=os.path.join(agent_dir, "start.out"),
                               py=sys.executable))  # fmt: skip
    os.chmod(fake, 0o755)
    b = Box({"SOTD_TEST_HEARTBEAT_SECS": "2", "SOTD_AGENT_ARGV_CLAUDE": json.dumps([fake, "--x"])})
    yield b
    b.close()


def test_a_claude_row_loads_sotds_settings_and_its_start_hook_joins_it(box: Box, agent_dir: str) -> None:
    argv_log, out = os.path.join(agent_dir, "argv.txt"), os.path.join(agent_dir, "start.out")
    root = box.project("proj")
    answer = box.request(
        "workspace.create", {"label": "proj", "project_root": root, "agent": "claude", "agent_name": "r1"}
    )
    assert answer.get("ok") is True, answer
    wid = answer["workspace_id"]
    settings = os.path.join(box.layout.bin_dir, "claude-settings.json")
    wait_for(lambda: os.path.exists(argv_log) and os.path.getsize(argv_log), what="the agent's argv")
    with open(argv_log) as f:
        assert f.read().splitlines() == ["--x", "--settings", settings]
    with open(settings) as f:
        doc = json.load(f)
    assert "Bash(comm-poll.sh:*)" in doc["permissions"]["allow"]
    assert "Bash(comm-send.sh:*)" in doc["permissions"]["allow"]
    # no person or model action: the start hook joined the row under SOT_COMM_NAME and declared it
    wait_for(lambda: (box.row(wid) or {}).get("handle") == "r1", what="row.json naming @r1")
    # the hook prints its JSON after the join has named the row: the stand-in moves it into place whole
    wait_for(lambda: os.path.exists(out), what="the start hook's output")
    with open(out) as f:
        text = json.loads(f.read())["hookSpecificOutput"]["additionalContext"]
    assert text.startswith("sot-comm: this session is @r1 (proj on testhost)")
    assert "comm-poll.sh" in text and "SITREP:" in text
    listed = subprocess.run(
        [SOTD, "comm", "list"], env=box.env, capture_output=True, text=True, timeout=60, check=False
    ).stdout
    line = next(ln for ln in listed.splitlines() if ln.strip().startswith("@r1 "))
    assert " live " in line, listed
    # an explicit command runs exactly as given: no --settings added to it
    explicit = box.request(
        "workspace.create",
        {"label": "other", "project_root": box.project("other"), "agent": "claude", "agent_name": "r2",
         "command": [os.path.join(agent_dir, "claude"), "--y"]},
    )  # fmt: skip
    assert explicit.get("ok") is True, explicit

    def argv_now() -> list[str]:
        with open(argv_log) as f:
            return f.read().splitlines()

    wait_for(lambda: argv_now() == ["--y"], what="the explicit command's argv")
