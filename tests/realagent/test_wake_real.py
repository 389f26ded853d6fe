"""The wake against the real Claude Code in a spawned row (issue 11 part 2 items 2, 3 and 6; the model is
the stand-in, everything else is real: the daemon, its tmux server, the TUI, its hooks).

- item 2: mail to an idle row is typed as the fixed wake line into the real prompt and submitted; the
  model runs ``comm-poll.sh`` then ``comm-send.sh @you …`` with no permission dialog; ``you`` reads it;
- item 3: mail that arrives while a turn works (4 s of model time, then a 10 s Bash call), with ``prefersReducedMotion`` on and
  off, is never typed: the wake refuses with ``agent is working`` (the footer), the Stop hook holds that
  turn's end once, and the model polls in the held continuation;
- prompt suggestions on: a spawned row is woken and answers (its start hook's text means 2.1.197 shows no
  ``Try "…"`` placeholder there); on a session that does show it, the wake types the line in place of the
  placeholder, and refuses a draft whose cursor was moved to its start;
- item 6: a draft typed in the real prompt, a real permission dialog and a real question box are never
  typed into while mail waits; once the prompt is free again the same mail wakes the row.

The daemon logs a refusal streak after ``SOTD_TEST_STREAK_SECS`` (1 s here), which is how a test sees the
wake looked and refused, and why.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest

from sotd.terminal import attempt
from sotd.terminal.prompt import WAKE_LINE, WORKING
from sotd.terminal.tmux import parse_capture
from tests.conftest import wait_for
from tests.realagent import kit, screens, standin
from tests.realagent.standin import StandIn

DIALOG = "requires approval"
STREAK = "comm wake: a row with unread mail keeps refusing the wake"
LOOK_SECS = 6.0  # three wake ticks (2 s) and a hold: long enough for a wrong wake to have typed


def spawned_idle_row(box: kit.Box) -> str:
    """Install, start the daemon, join ``you`` outside any row and spawn the Claude Code row ``@r1``; its
    pane once the row is idle and declared by its start hook."""
    box.env["SOTD_TEST_STREAK_SECS"] = "1"
    box.install()
    box.start()
    assert box.sotd("join", "--name", "you").returncode == 0
    pane = box.spawn("r1")["pane"]
    box.wait_idle(pane)
    wait_for(lambda: (box.row("r1") or {}).get("handle") == "r1", what="@r1 declared by its start hook")
    return pane


@pytest.fixture
def row(box: kit.Box) -> tuple[kit.Box, str]:
    """A spawned Claude Code row ``@r1`` (joined by its start hook), idle; ``you`` joined outside it."""
    return box, spawned_idle_row(box)


def _type(box: kit.Box, pane: str, text: str, enter: bool = True) -> None:
    box.tmux.send_text(pane, text)
    wait_for(lambda: text in box.text(pane), timeout=10, what=f"{text!r} typed")
    if enter:
        box.tmux.send_enter(pane)


def _woken(box: kit.Box) -> list[str]:
    return [ln for ln in box.wake_lines() if "comm wake: woke @r1" in ln]


def _wake_prompts(model: StandIn) -> list[standin.Request]:
    return [r for r in model.main_requests() if WAKE_LINE in r.newest_user_text]


def test_mail_wakes_the_idle_real_prompt_and_the_model_reads_and_answers_with_no_dialog(
    row: tuple[kit.Box, str], model: StandIn
) -> None:
    box, pane = row
    model.add(
        standin.bash("comm-poll.sh", when=WAKE_LINE),
        standin.bash('comm-send.sh @you "r1 here: the build is green"', when="please check the build"),
        standin.text("SITREP: answered @you", when="filed -> @you"),
    )
    filed = time.monotonic()
    assert box.sotd("send", "@r1", "please check the build").stdout == "  filed -> @r1\n"
    woke = model.wait_main(len(model.main_requests()) + 1, timeout=30)[-1]
    assert woke.newest_user_text.rstrip().endswith(WAKE_LINE)  # the fixed line, submitted as the prompt
    print(f"filed -> the wake line at the model: {woke.at - filed:.1f}s")
    box.wait_screen(pane, lambda t: "SITREP: answered @you" in t, "r1's answer", timeout=60)
    assert len(_woken(box)) == 1, box.wake_lines()
    results = model.tool_results()
    assert any("please check the build" in r for r in results), results  # comm-poll.sh showed the mail
    assert any("filed -> @you" in r for r in results), results  # comm-send.sh filed the answer
    assert DIALOG not in box.text(pane)
    assert "r1 here: the build is green" in box.sotd("poll").stdout
    # one wake per batch: the read mail is not typed again
    time.sleep(LOOK_SECS)
    assert len(_wake_prompts(model)) == 1


def test_a_fresh_row_with_prompt_suggestions_on_is_woken_and_answers(box: kit.Box, model: StandIn) -> None:
    """Suggestions on, in a spawned row: 2.1.197 shows its ``Try "…"`` placeholder only in a session with
    no messages yet, and the row's start hook output (its ``additionalContext``) is one, so the joined
    row's prompt is plain; the wake types and the model answers. Should a release show the placeholder
    here, the first assertion says so (and the next test covers the wake on it)."""
    box.env.update(dict([screens.SUGGEST]))
    pane = spawned_idle_row(box)
    box.wait_screen(pane, lambda t: "\u276f\u00a0" in t.splitlines(), "a plain empty prompt (no placeholder)")
    model.add(
        standin.bash("comm-poll.sh", when=WAKE_LINE),
        standin.bash('comm-send.sh @you "r1 here: on it"', when="a first job for you"),
        standin.text("SITREP: answered @you", when="filed -> @you"),
    )
    assert box.sotd("send", "@r1", "a first job for you").stdout == "  filed -> @r1\n"
    woke = model.wait_main(len(model.main_requests()) + 1, timeout=30)[-1]
    assert woke.newest_user_text.rstrip().endswith(WAKE_LINE)
    box.wait_screen(pane, lambda t: "SITREP: answered @you" in t, "r1's answer", timeout=60)
    assert len(_woken(box)) == 1, box.wake_lines()
    assert any("a first job for you" in r for r in model.tool_results())
    assert DIALOG not in box.text(pane)
    assert "r1 here: on it" in box.sotd("poll").stdout


def test_the_wake_types_into_the_real_try_placeholder_and_never_into_a_draft_moved_home(
    start_claude: Callable[..., kit.Claude], model: StandIn
) -> None:
    """The wake itself (``terminal.attempt.wake``: read, 1.5 s hold, type, confirm, Enter) on a real session
    showing the placeholder (a session with no start hook: nothing has spoken yet). A draft whose cursor
    was moved to its start (Home) is refused and kept; cleared, the placeholder is back and is woken: the
    model gets exactly the wake line (the example text is not sent with it). After a second turn the
    suggested next prompt is woken the same way."""
    c = start_claude(extra_env=dict([screens.SUGGEST]))
    c.wait_idle()
    assert '\u276f\u00a0Try "' in c.text(), c.text()
    draft = "fix the flaky test"
    c.panes.type(c.pane, draft)
    wait_for(lambda: draft in c.text(), timeout=10, what="the draft")
    c.panes.keys(c.pane, "Home")
    c.wait(lambda t: True, "the cursor moved home")
    assert parse_capture(c.raw())[1] == 2  # the cursor on the input's first cell, as with the placeholder
    got = attempt.wake(c.panes.tmux, c.pane, "claude")
    assert got.result == attempt.REFUSED and got.reason == "input not empty", got
    assert f"\u276f\u00a0{draft}" in c.text().splitlines() and WAKE_LINE not in c.text()
    assert model.main_requests() == []
    c.panes.keys(c.pane, "End", "C-u")
    c.wait(lambda t: '\u276f\u00a0Try "' in t, "the placeholder back")
    got = attempt.wake(c.panes.tmux, c.pane, "claude")
    assert got.result == attempt.WOKEN, got
    prompt_text = model.wait_main(1, timeout=30)[-1].newest_user_text  # after the session's date reminder
    assert prompt_text.rstrip().splitlines()[-1] == WAKE_LINE and 'Try "' not in prompt_text, prompt_text
    # a second turn, then Claude Code's suggested next prompt in the placeholder's place: woken the same way
    model.add(
        standin.text("The tests pass.", when="and the tests"),
        standin.text("run the linter", when=screens.SUGGESTION_MODE),
    )
    c.wait_idle()
    c.submit("and the tests?")
    c.wait(lambda t: "\u276f\u00a0run the linter" in t.splitlines(), "the suggested next prompt")
    got = attempt.wake(c.panes.tmux, c.pane, "claude")
    assert got.result == attempt.WOKEN, got
    wait_for(lambda: len(_wake_prompts(model)) == 2, timeout=30, what="the second wake at the model")
    woke = _wake_prompts(model)[-1].newest_user_text
    assert woke.strip() == WAKE_LINE, woke  # not "run the linter" with it


@pytest.mark.parametrize("reduced_motion", [False, True], ids=["motion", "reduced-motion"])
def test_a_busy_turn_is_never_typed_into_and_its_stop_hook_holds_once_for_the_mail(
    box: kit.Box, model: StandIn, claude_home: kit.ClaudeHome, reduced_motion: bool
) -> None:
    claude_home.allow("Bash(sleep:*)")
    if reduced_motion:
        claude_home.update_settings(prefersReducedMotion=True)
    box.env["SOTD_TEST_STREAK_SECS"] = "1"
    box.env["SOTD_TEST_TICK_SECS"] = "0.5"  # the wake looks four times as often as it would
    box.install()
    box.start()
    assert box.sotd("join", "--name", "you").returncode == 0
    pane = box.spawn("r1")["pane"]
    box.wait_idle(pane)
    wait_for(lambda: (box.row("r1") or {}).get("handle") == "r1", what="@r1 declared")
    # a first turn spends Claude Code's one-off "● high · /effort" footer hint (shown for 5 s when the
    # first turn starts; the wake reads it as an agents panel and refuses), so the long turn below is
    # read for what it is
    model.add(standin.text("Warmed up.", when="warm up"))
    _type(box, pane, "warm up")
    box.wait_screen(
        pane, lambda t: "Warmed up." in t and "/effort" not in t, "the first turn's end", timeout=30
    )
    box.wait_idle(pane)
    model.add(
        standin.sleep(10, when="run the long job", delay=4),
        standin.text("The job is done."),
        standin.bash("comm-poll.sh", when="New sot-comm mail for @r1"),
        standin.text("SITREP: job done, mail read", when="mail while you work"),
    )
    _type(box, pane, "run the long job")
    box.wait_screen(pane, lambda t: "esc to interrupt" in t and "❯ run the long job" in t, "the working turn",
                    settle=False)  # fmt: skip
    # at once, while the model "thinks" (4 s) before its 10 s tool call: with reduced motion the screen
    # stands still for the first seconds of that, the moment a wake that only watched for motion typed
    assert box.sotd("send", "@r1", "mail while you work").stdout == "  filed -> @r1\n"
    sent = time.monotonic()
    try:
        box.wait_screen(pane, lambda t: "SITREP: job done, mail read" in t, "the held turn's end", timeout=60)
    except AssertionError:
        print([r.newest_user_text[-300:] for r in model.main_requests()])
        print(box.logtext()[-3000:])
        raise
    assert time.monotonic() - sent >= 10  # the mail came in while the turn still worked
    box.wait_idle(pane)
    time.sleep(LOOK_SECS)
    # the wake looked, refused because the turn worked, and never typed; not even after the turn
    assert _woken(box) == [], box.wake_lines()
    assert _wake_prompts(model) == []
    assert WAKE_LINE not in box.text(pane)
    assert any(STREAK in ln and f"reason: {WORKING}" in ln for ln in box.wake_lines()), box.wake_lines()
    # the Stop hook held that turn's end once, and the model polled in the continuation
    held = [r for r in model.main_requests() if "New sot-comm mail for @r1" in r.newest_user_text]
    assert len(held) == 1, [r.newest_user_text[-200:] for r in model.main_requests()]
    assert any("mail while you work" in r for r in model.tool_results())
    assert model.pending() == 0


def test_drafts_dialogs_and_question_boxes_are_never_typed_into(
    row: tuple[kit.Box, str], model: StandIn
) -> None:
    box, pane = row
    before = len(model.main_requests())
    # a person's half-typed draft, then mail: the draft stays exactly as typed
    draft = "half-typed thought about the parser"
    _type(box, pane, draft, enter=False)
    assert box.sotd("send", "@r1", "first mail").stdout == "  filed -> @r1\n"
    time.sleep(LOOK_SECS)
    assert f"❯\u00a0{draft}" in box.text(pane).splitlines()
    assert WAKE_LINE not in box.text(pane)
    assert len(model.main_requests()) == before and _woken(box) == []
    assert any(STREAK in ln and "reason: input not empty" in ln for ln in box.wake_lines()), box.wake_lines()
    # the person clears the draft: the same mail now wakes the free prompt (the wake was live all along)
    model.add(standin.bash("comm-poll.sh", when=WAKE_LINE), standin.text("SITREP: read", when="first mail"))
    box.tmux.run([*kit_base(box), "send-keys", "-t", pane, "C-u"])
    box.wait_screen(pane, lambda t: "SITREP: read" in t, "the woken turn", timeout=40)
    assert len(_woken(box)) == 1
    box.wait_idle(pane)

    # a real permission dialog, then mail: the dialog is not answered and nothing is typed
    model.add(standin.bash("touch notes.txt", when="make a notes file"))
    _type(box, pane, "make a notes file")
    box.wait_screen(pane, lambda t: "Do you want to proceed?" in t, "the permission dialog")
    asked, seen = len(model.main_requests()), box.text(pane).count(WAKE_LINE)  # the first wake's, above
    woken = len(_woken(box))
    assert box.sotd("send", "@r1", "second mail").stdout == "  filed -> @r1\n"
    time.sleep(LOOK_SECS)
    text = box.text(pane)
    assert "Do you want to proceed?" in text and text.count(WAKE_LINE) == seen
    assert not os.path.exists(os.path.join(box.work, "r1", "notes.txt"))
    assert len(model.main_requests()) == asked and len(_woken(box)) == woken
    box.tmux.run([*kit_base(box), "send-keys", "-t", pane, "Escape"])
    box.wait_screen(pane, lambda t: "Do you want to proceed?" not in t, "the dialog dismissed")
    assert not os.path.exists(os.path.join(box.work, "r1", "notes.txt"))

    # a real question box, then mail: no option is picked and nothing is typed
    model.add(standin.tool("AskUserQuestion", _QUESTION, when="ask me"))
    box.wait_idle(pane, timeout=60)
    _type(box, pane, "ask me which branch")
    box.wait_screen(pane, lambda t: "Chat about this" in t, "the question box")
    asked, seen = len(model.main_requests()), box.text(pane).count(WAKE_LINE)
    woken = len(_woken(box))
    assert box.sotd("send", "@r1", "third mail").stdout == "  filed -> @r1\n"
    time.sleep(LOOK_SECS)
    text = box.text(pane)
    assert "Which branch should I rebase onto?" in text and text.count(WAKE_LINE) == seen
    assert len(model.main_requests()) == asked and len(_woken(box)) == woken
    assert all(WAKE_LINE not in r for r in model.tool_results())


_QUESTION = {
    "questions": [
        {
            "question": "Which branch should I rebase onto?",
            "header": "Branch",
            "multiSelect": False,
            "options": [
                {"label": "main", "description": "the trunk"},
                {"label": "dev", "description": "the work branch"},
            ],
        }
    ]
}


def kit_base(box: kit.Box) -> list[str]:
    return ["tmux", "-S", box.tmux.socket_path]
