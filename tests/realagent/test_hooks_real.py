"""The hooks, the allow rules, the private self file, the nudges and install/uninstall with the real Claude
Code (issue 11 part 2 items 1, 4, 5, 7 and 8; the model is the stand-in, everything else is real).

- item 1: a spawned row joins by itself (SessionStart), ``comm list`` shows it live, and the model reads its
  handle and the commands in the session's context; its ``comm-poll.sh`` / ``comm-send.sh`` run with no
  permission dialog (the allow rules the row gets through ``--settings``);
- item 4: two sessions outside rows in two folders each join with their own handle through the private
  self file, send to each other, and neither un-joins the other;
- item 5: a person's turn with no marker is never held outside a row; in a row it is held once and the
  ``stop_hook_active`` continuation is let go;
- items 7 and 8: install through a symlinked dotfiles ``settings.json`` (mode 0644, the user's own hook and
  rule) is honoured by the real TUI, the skill reaches the model, and uninstall puts the file back byte for
  byte.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from collections.abc import Callable

from tests.conftest import SOTD, wait_for
from tests.realagent import kit, standin
from tests.realagent.standin import StandIn

DIALOG = "requires approval"


def _registry(comm: str) -> dict:
    with open(os.path.join(comm, "registry.json")) as f:
        return json.load(f)["agents"]


def _mains_with(model: StandIn, text: str) -> list[standin.Request]:
    return [r for r in model.main_requests() if text in json.dumps(r.body)]


def test_a_spawned_row_joins_by_itself_answers_with_no_dialog_and_is_nudged_once(
    box: kit.Box, model: StandIn
) -> None:
    box.install()  # a plain install: the row gets the hooks and allow rules through --settings
    box.start()
    assert box.sotd("join", "--name", "you").returncode == 0
    row = box.spawn("r1")
    pane = row["pane"]
    box.wait_idle(pane)
    # no person or model action: the start hook joined the row and declared it
    wait_for(lambda: (box.row("r1") or {}).get("handle") == "r1", what="row.json naming @r1")
    assert _registry(box.comm)["r1"]["root"] == os.path.realpath(os.path.join(box.work, "r1"))
    listed = box.sotd("list").stdout
    assert any(ln.strip().startswith("@r1 ") and " live " in ln for ln in listed.splitlines()), listed
    assert box.sotd("send", "@r1", "ping from you").stdout == "  filed -> @r1\n"
    model.add(
        standin.bash("comm-poll.sh", when="please read"),
        standin.bash('comm-send.sh @you "pong from r1"'),
        standin.text("SITREP: answered @you"),
    )
    box.tmux.send_text(pane, "please read your mail")
    wait_for(lambda: "please read your mail" in box.text(pane), timeout=10, what="the prompt typed")
    box.tmux.send_enter(pane)
    box.wait_screen(pane, lambda t: "SITREP: answered @you" in t, "the turn's end", timeout=60)
    # the model was told its handle and the commands at the session's start
    first = model.main_requests()[0]
    assert "sot-comm: this session is @r1" in json.dumps(first.body)
    # both wrappers ran by their bare names with no permission dialog
    results = model.tool_results()
    assert any("ping from you" in r for r in results), results
    assert any("filed -> @you" in r for r in results), results
    assert DIALOG not in box.text(pane)
    polled = box.sotd("poll").stdout
    assert "pong from r1" in polled, polled
    # item 5 in a row: a person's turn with no closing marker is held once, its continuation let go
    box.wait_idle(pane)
    model.add(standin.text("Fixed it.", when="please fix"), standin.text("Still no marker."))
    before = len(model.main_requests())
    box.tmux.send_text(pane, "please fix the build")
    wait_for(lambda: "please fix the build" in box.text(pane), timeout=10, what="the prompt typed")
    box.tmux.send_enter(pane)
    box.wait_screen(pane, lambda t: "Still no marker." in t, "the held turn's second end", timeout=60)
    box.wait_idle(pane)
    mains = model.main_requests()[before:]
    assert len(mains) == 2, [m.newest_user_text for m in mains]  # held once, then let go
    assert "ended without a closing line" in mains[1].newest_user_text


def _outside_env(comm: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {"SOT_COMM_HOME": comm, "SOT_SELF_HOST": "testhost", "SOT_COMM_TEST_HOST": "testhost"}
    env.update(extra or {})
    return env


def _install(home: kit.ClaudeHome, comm: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(kit.DROP)}
    env.update(HOME=home.home, SOT_COMM_HOME=comm)
    p = subprocess.run(
        [SOTD, "comm", *args], env=env, cwd=home.home, capture_output=True, text=True, timeout=60, check=False
    )
    assert p.returncode == 0, p
    return p


def test_two_sessions_outside_rows_keep_their_own_handles_and_a_persons_turn_is_never_held(
    start_claude: Callable[..., kit.Claude], model: StandIn, claude_home: kit.ClaudeHome, tmp_path: object
) -> None:
    comm = os.path.join(str(tmp_path), "comm")
    kit.comm_folder(comm)
    _install(claude_home, comm, "install", "--agent-settings")
    a = start_claude("alpha", extra_env=_outside_env(comm))
    a.wait_idle()
    b = start_claude("beta", extra_env=_outside_env(comm))
    b.wait_idle()
    wait_for(lambda: sorted(_registry(comm)) == ["alpha-testhost", "beta-testhost"], what="both joined")
    slots = sorted(n for n in os.listdir(os.path.join(comm, "self")) if n.startswith("session-"))
    assert len(slots) == 2, slots
    assert not os.path.exists(os.path.join(comm, "self", "testhost__nopane.txt"))
    model.add(
        standin.bash('comm-send.sh @beta-testhost "hi from alpha"', when="tell beta"),
        standin.text("SITREP: told beta", when="filed -> @beta-testhost"),
    )
    a.submit("tell beta hello")
    a.wait(lambda t: "SITREP: told beta" in t, "alpha's turn end", timeout=60)
    model.add(
        standin.bash("comm-poll.sh", when="read your mail"),
        standin.bash('comm-send.sh @alpha-testhost "hi from beta"', when="hi from alpha"),
        standin.text("SITREP: answered alpha", when="filed -> @alpha-testhost"),
    )
    b.submit("read your mail")
    b.wait(lambda t: "SITREP: answered alpha" in t, "beta's turn end", timeout=60)
    assert DIALOG not in a.text() and DIALOG not in b.text()
    # neither un-joined the other: both entries, both slots, and alpha's inbox holds beta's answer
    assert sorted(_registry(comm)) == ["alpha-testhost", "beta-testhost"]
    handles = set()
    for n in slots:
        with open(os.path.join(comm, "self", n)) as f:
            handles.add(f.readline().strip())
    assert handles == {"alpha-testhost", "beta-testhost"}
    with open(os.path.join(comm, "inbox", "alpha-testhost.jsonl")) as f:
        assert json.loads(f.readlines()[-1])["msg"] == "hi from beta"
    # item 5 outside a row: a person's turn with no closing marker ends at once (one model call, no hold);
    # beta, whose mail is read (alpha's Stop hook would rightly hold alpha's turn for beta's answer)
    b.wait_idle()
    model.add(standin.text("Fixed it.", when="please fix"))
    before = len(model.main_requests())
    b.submit("please fix the build")
    b.wait(lambda t: "Fixed it." in t, "the answer")
    b.wait_idle()
    assert len(model.main_requests()) == before + 1
    assert "Stop hook error" not in b.text()


def test_install_through_a_dotfiles_symlink_works_for_the_real_tui_and_uninstall_restores_it(
    start_claude: Callable[..., kit.Claude], model: StandIn, claude_home: kit.ClaudeHome, tmp_path: object
) -> None:
    comm = os.path.join(str(tmp_path), "comm")
    dotfiles = os.path.join(str(tmp_path), "dotfiles", "claude-settings.json")
    os.makedirs(os.path.dirname(dotfiles))
    mine = claude_home.read_settings()
    mine.setdefault("permissions", {}).setdefault("allow", []).append("Bash(echo:*)")
    mine["hooks"] = {"UserPromptSubmit": [{"hooks": [{"type": "command", "command": "true"}]}]}
    original = (json.dumps(mine, indent=4) + "\n").encode()
    with open(dotfiles, "wb") as f:
        f.write(original)
    os.chmod(dotfiles, 0o644)
    os.unlink(claude_home.settings_path)
    os.symlink(dotfiles, claude_home.settings_path)
    _install(claude_home, comm, "install", "--agent-settings")
    assert os.path.islink(claude_home.settings_path)
    assert stat.S_IMODE(os.stat(dotfiles).st_mode) == 0o644
    c = start_claude("alpha", extra_env=_outside_env(comm))
    c.wait_idle()
    wait_for(lambda: "alpha-testhost" in _registry(comm), what="joined through the linked settings")
    model.add(
        standin.bash("echo user-rule-$((1+1))", when="check"),
        standin.bash("comm-poll.sh"),
        standin.text("SITREP: checked"),
    )
    c.submit("check things")
    c.wait(lambda t: "SITREP: checked" in t, "the turn's end", timeout=60)
    assert any("user-rule-2" in r for r in model.tool_results())  # the user's own rule still holds
    assert DIALOG not in c.text()
    # the skill reached the model by its name
    assert _mains_with(model, "sot-session-start"), "the sot-session-start skill was not offered"
    c.panes.keys(c.pane, "C-c")
    c.panes.keys(c.pane, "C-c")
    p = _install(claude_home, comm, "uninstall")
    assert p.stdout.splitlines()[0] == f"Restored {claude_home.settings_path} to its bytes before the install"
    assert os.path.islink(claude_home.settings_path)
    with open(dotfiles, "rb") as f:
        assert f.read() == original
    assert stat.S_IMODE(os.stat(dotfiles).st_mode) == 0o644
    assert not os.path.exists(os.path.join(claude_home.home, ".claude", "skills", "sot-session-start"))


def test_hooks_say_so_when_the_recorded_sotd_is_gone(
    start_claude: Callable[..., kit.Claude], model: StandIn, claude_home: kit.ClaudeHome, tmp_path: object
) -> None:
    comm = os.path.join(str(tmp_path), "comm")
    fake = os.path.join(str(tmp_path), "old-venv", "bin", "sotd")
    os.makedirs(os.path.dirname(fake))
    with open(fake, "w") as f:
        f.write(f'#!/bin/sh\nexec {SOTD} "$@"\n')
    os.chmod(fake, 0o755)
    _install(claude_home, comm, "install", "--agent-settings", f"--sotd={fake}")
    os.unlink(fake)  # the checkout (or venv) the scripts were installed from is gone
    c = start_claude("alpha", extra_env=_outside_env(comm))
    c.wait(
        lambda t: "is gone, so sot-comm is off here" in " ".join(t.split()), "the hook's message", timeout=40
    )
    c.wait_idle()
    assert not os.path.exists(os.path.join(comm, "registry.json")) or not _registry(comm)
