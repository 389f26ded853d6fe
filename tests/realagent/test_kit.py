"""The kit itself, on the real Claude Code: it reaches a free prompt with no first-run dialog, the
stand-in's scripted text and Bash call come back through the real TUI, and side requests never eat a step."""

from __future__ import annotations

from collections.abc import Callable

from tests.realagent import kit, standin
from tests.realagent.standin import StandIn


def test_the_real_tui_reaches_a_free_prompt_and_runs_a_scripted_turn(
    start_claude: Callable[..., kit.Claude], model: StandIn, claude_home: kit.ClaudeHome
) -> None:
    claude_home.allow("Bash(echo:*)")
    model.add(standin.bash("echo kit-marker-$((40+2))"), standin.text("All done here."))
    c = start_claude()
    raw = c.wait_idle()
    assert f"Claude Code v{kit.pin()}" in kit.plain(raw)
    c.submit("say something")
    c.wait(lambda t: "All done here." in t, "the scripted reply")
    assert model.answered() == [standin.bash("echo kit-marker-$((40+2))"), standin.text("All done here.")]
    assert any("kit-marker-42" in r for r in model.tool_results())
    mains = model.main_requests()
    assert "say something" in mains[0].newest_user_text
    assert all(r.body.get("tools") for r in mains)


def test_a_spawned_claude_row_runs_the_real_tui(box: kit.Box) -> None:
    box.install()
    box.start()
    row = box.spawn("r1")
    raw = box.wait_idle(row["pane"])
    assert f"Claude Code v{kit.pin()}" in kit.plain(raw)
    from tests.conftest import wait_for

    wait_for(lambda: (box.row("r1") or {}).get("phase") == "ready", what="row r1 ready")
