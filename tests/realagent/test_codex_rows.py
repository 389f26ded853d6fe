"""Real Codex rows (issue 12 parts 3 and 6): the pinned Codex TUI in a sotd row, the stand-in Responses
API its only stand-in. A spawned row joins by itself (Codex's SessionStart hook, installed in its
hooks.json by ``sotd comm install --agent-settings`` and trusted the way Codex records trust), is woken at
its idle composer, polls and answers through the wrappers with no approval prompt (the rules file), and
its Stop hook holds a turn that ends with unread mail."""

from __future__ import annotations

import json

from tests.conftest import wait_for
from tests.realagent import codex_kit
from tests.realagent.codex_standin import CodexStandIn, bash, text

APPROVAL = "Would you like to run the following command?"


def _ready_row(box: codex_kit.CodexBox, home: codex_kit.CodexHome, name: str) -> str:
    """Install (hooks.json + rules), trust the hooks as Codex records it, start the daemon, spawn ``name``;
    the row's pane once its handle is declared and its composer idle."""
    box.install("--agent-settings")
    assert home.trust_hooks(box.project(name)), "Codex listed none of sotd's hooks"
    box.start()
    row = box.spawn(name)
    pane = str(row["pane"])
    wait_for(lambda: (box.row(name) or {}).get("handle") == name, timeout=40, what=f"row.json naming @{name}")
    box.wait_idle(pane)
    return pane


def test_a_spawned_codex_row_joins_by_itself_is_woken_and_answers_with_no_approval(
    codex_box: codex_kit.CodexBox, codex_home: codex_kit.CodexHome, codex_model: CodexStandIn
) -> None:
    assert codex_box.sotd("join", "--name", "you").returncode == 0
    pane = _ready_row(codex_box, codex_home, "r1")
    listed = codex_box.sotd("list").stdout
    assert any(ln.strip().startswith("@r1 ") and " live " in ln for ln in listed.splitlines()), listed
    codex_model.add(
        bash("comm-poll.sh", when="you have mail"),
        bash('comm-send.sh @you "pong from r1"', when="ping from you"),
        text("SITREP: answered @you"),
    )
    assert codex_box.sotd("send", "@r1", "ping from you").stdout == "  filed -> @r1\n"
    codex_box.wait_screen(pane, lambda t: "SITREP: answered @you" in t, "the woken turn's end", timeout=60)
    woke = [ln for ln in codex_box.wake_lines() if "comm wake: woke @r1" in ln]
    assert woke, codex_box.wake_lines()
    results = codex_model.tool_results()
    assert any("ping from you" in r for r in results), results
    assert any("filed -> @you" in r for r in results), results
    assert APPROVAL not in codex_box.text(pane)
    assert "pong from r1" in codex_box.sotd("poll").stdout
    first = codex_model.main_requests()[0]
    assert "sot-comm: this session is @r1" in json.dumps(first.body)
