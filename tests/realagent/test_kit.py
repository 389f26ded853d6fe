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


def test_a_missing_install_fails_the_tier_with_the_install_error(
    tmp_path: object, monkeypatch: object
) -> None:
    import os

    import pytest

    err = os.path.join(str(tmp_path), "claude-code.error")
    with open(err, "w") as f:
        f.write("npm error code ETARGET\nnpm error notarget No matching version found\n")
    mp: pytest.MonkeyPatch = monkeypatch  # type: ignore[assignment]
    mp.setattr(kit, "PREFIX", os.path.join(str(tmp_path), "claude-code"))
    mp.setattr(kit, "ERROR_FILE", err)
    with pytest.raises(kit.NotInstalled) as e:
        kit.claude_exe()
    assert str(e.value).startswith(f"Claude Code {kit.pin()} is not installed in ")
    assert "the install failed:\nnpm error code ETARGET\nnpm error notarget No matching version found" in str(
        e.value
    )
    os.unlink(err)
    with pytest.raises(kit.NotInstalled, match=r"run scripts/setup$"):
        kit.claude_exe()
