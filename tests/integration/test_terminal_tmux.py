"""The terminal layer on a REAL tmux server (D16, behaviour 3.3) with the scripted fake Claude screen.

Every test gets its own server on a socket under its tmp dir, started with ``-f /dev/null`` and an
environment without ``TMUX``/``TMUX_PANE`` (the runner strips them even when the test sets them), so no
test can type into a real session. The server is killed in teardown.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

import pytest

from sotd.terminal.prompt import (
    WAKE_LINE,
    Screen,
    hold_region,
    is_free,
    line_alone_in_box,
    screen_from_capture,
)
from sotd.terminal.tmux import Tmux, TmuxError

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

FAKE = os.path.join(os.path.dirname(__file__), "..", "fakes", "fake_claude.py")


@pytest.fixture
def tmux(tmp_path, monkeypatch) -> Iterator[Tmux]:
    # A real session's variables must not matter: the runner removes them.
    monkeypatch.setenv("TMUX", "/nonexistent/socket,1,0")
    monkeypatch.setenv("TMUX_PANE", "%0")
    sock = str(tmp_path / "tmux.sock")
    short = None
    if len(sock) > 100:  # sun_path holds 108 bytes
        short = tempfile.mkdtemp(prefix="sotd-tmux-", dir="/tmp")
        sock = os.path.join(short, "s")
    t = Tmux(sock, session="sotd-test", size=(100, 30))
    yield t
    t.kill_server()
    if short:
        shutil.rmtree(short, ignore_errors=True)


def wait_for(fn: Callable[[], object], timeout: float = 10.0) -> object:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"condition not met within {timeout}s (last: {last!r})")


def screen(t: Tmux, pane: str) -> Screen:
    return screen_from_capture(*t.capture(pane))


def start(t: Tmux, tmp_path, name: str, *args: str) -> tuple[str, str]:
    log = str(tmp_path / f"{name}.log")
    pane = t.new_window(name, str(tmp_path), {"FAKE_ROW": name}, [sys.executable, FAKE, "--log", log, *args])

    # Wait for the first frame drawn at the pane's final width: a new window may start narrower and be
    # resized a moment later, and the fake agent redraws on SIGWINCH.
    def drawn() -> bool:
        if not os.path.exists(log):
            return False
        lines = screen(t, pane).lines
        rules = [ln for ln in lines if ln and set(ln) == {"─"}]
        return any("❯" in ln for ln in lines) and all(len(r) == 100 for r in rules)

    wait_for(drawn)
    return pane, log


def events(log: str) -> list[dict]:
    with open(log, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def reason_becomes(t: Tmux, pane: str, want: tuple[bool, str | None]) -> None:
    wait_for(lambda: is_free(screen(t, pane), "claude") == want)


def test_idle_prompt_reads_free(tmux, tmp_path) -> None:
    pane, _ = start(tmux, tmp_path, "row-1")
    s = screen(tmux, pane)
    assert is_free(s, "claude") == (True, None), s
    assert is_free(s, "codex") == (False, "no composer at the cursor")  # not a Codex screen


def test_dim_suggestion_named_border_and_panel_read_free(tmux, tmp_path) -> None:
    pane, _ = start(
        tmux, tmp_path, "row-1", "--suggest", 'Try "fix the tests"', "--named", "fix-build", "--panel"
    )
    s = screen(tmux, pane)
    row = s.lines[s.cursor[1]]
    assert row.startswith("❯\u00a0Try")  # the suggestion is on screen, drawn dim
    assert s.dim[s.cursor[1]]
    assert is_free(s, "claude") == (True, None), s


def test_typed_draft_is_not_free(tmux, tmp_path) -> None:
    pane, log = start(tmux, tmp_path, "row-1")
    tmux.send_text(pane, "hello")
    reason_becomes(tmux, pane, (False, "input not empty"))
    for _ in range(5):
        tmux.run([*tmux_base(tmux), "send-keys", "-t", pane, "BSpace"])
    reason_becomes(tmux, pane, (True, None))
    assert [e["event"] for e in events(log)] == ["start"]  # nothing was submitted


def tmux_base(t: Tmux) -> list[str]:
    return ["tmux", "-S", t.socket_path]


@pytest.mark.parametrize(
    ("mode", "reason"),
    [("draft", "input not empty"), ("dialog", "not in an input box"), ("menu", "not in an input box")],
)
def test_modes_that_refuse(tmux, tmp_path, mode: str, reason: str) -> None:
    pane, _ = start(tmux, tmp_path, "row-1", "--mode", mode)
    assert is_free(screen(tmux, pane), "claude") == (False, reason)


def test_wake_line_and_enter_reach_the_agent(tmux, tmp_path) -> None:
    pane, log = start(tmux, tmp_path, "row-1", "--on-wake", "echo polled: 3 messages", "--work", "1.0")
    first = screen(tmux, pane)
    assert is_free(first, "claude") == (True, None)
    tmux.send_text(pane, WAKE_LINE)
    wait_for(lambda: line_alone_in_box(screen(tmux, pane), WAKE_LINE))
    assert hold_region(screen(tmux, pane)) != hold_region(first)  # the typed line is inside the held rows
    tmux.send_enter(pane)

    # while it works, a spinner above the box moves the held rows (the hold would refuse)
    def working() -> Screen | None:
        s = screen(tmux, pane)
        return s if any("Working" in x for x in s.lines) else None

    a = wait_for(working)
    time.sleep(0.3)
    b = screen(tmux, pane)
    assert any("Working" in x for x in b.lines)
    assert hold_region(a) != hold_region(b)
    wait_for(lambda: any(e["event"] == "ran" for e in events(log)))
    lines = [e for e in events(log) if e["event"] == "line"]
    assert lines == [{"event": "line", "text": WAKE_LINE}]
    wait_for(lambda: any("polled: 3 messages" in x for x in screen(tmux, pane).lines))
    reason_becomes(tmux, pane, (True, None))


def test_windows_listing_kill_and_attach_command(tmux, tmp_path) -> None:
    assert tmux.list_windows() == []
    p1, _ = start(tmux, tmp_path, "row-1")
    p2, _ = start(tmux, tmp_path, "row-2")
    wins = tmux.list_windows()
    assert [(w.session, w.name, w.pane_id) for w in wins] == [
        ("sotd-test", "row-1", p1),
        ("sotd-test", "row-2", p2),
    ]
    assert all(w.pane_pid > 1 and not w.dead for w in wins)
    tmux.kill_window(p1)
    assert [w.name for w in tmux.list_windows()] == ["row-2"]
    assert tmux.attach_command() == f"tmux -S {tmux.socket_path} attach-session -t =sotd-test"
    with pytest.raises(TmuxError):
        tmux.capture("%999")


def test_a_server_that_exits_as_a_window_is_added_is_started_again(tmux, tmp_path, monkeypatch) -> None:
    """A row whose agent exits at once takes the server with it (its last window ended) while the next
    row's window is added; CI saw ``tmux failed: server exited unexpectedly``. Here a ``tmux`` first on
    PATH kills the real server just before the first ``new-window`` reaches it: the window is made all the
    same, in a server started again."""
    real = shutil.which("tmux")
    assert real is not None
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mark = tmp_path / "killed"
    wrapper = bin_dir / "tmux"
    wrapper.write_text(
        "#!/bin/sh\n"
        'case " $* " in *" new-window "*)\n'
        f'  if [ ! -e {mark} ]; then : > {mark}; {real} -S "$2" kill-server; fi;;\n'
        "esac\n"
        f'exec {real} "$@"\n'
    )
    wrapper.chmod(0o755)
    first, _ = start(tmux, tmp_path, "row-1")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    pane = tmux.new_window("row-2", str(tmp_path), {}, ["sleep", "300"])
    assert mark.exists(), "the wrapper did not run: the race was not made"
    wins = tmux.list_windows()
    assert [(w.name, w.pane_id) for w in wins] == [("row-2", pane)], (first, wins)


def test_window_gets_cwd_env_and_exact_argv(tmux, tmp_path) -> None:
    out = tmp_path / "out.json"
    code = "import json,os,sys; json.dump([os.getcwd(), os.environ.get('ROW_X'), os.environ.get('TMUX_PANE') is not None, sys.argv[1:]], open(sys.argv[1], 'w'))"
    tmux.new_window(
        "probe",
        str(tmp_path),
        {"ROW_X": "a b;$c"},
        [sys.executable, "-c", code, str(out), "two words", "$HOME"],
    )
    wait_for(out.exists)
    time.sleep(0.1)
    cwd, env, in_pane, argv = json.loads(out.read_text())
    assert cwd == str(tmp_path)
    assert env == "a b;$c"
    assert in_pane  # tmux sets its own TMUX_PANE for the child: the pane of OUR server
    assert argv == [str(out), "two words", "$HOME"]


def test_agent_under_the_capsule_owns_the_pane(tmux, tmp_path) -> None:
    """The row as the daemon starts it: ``sot-capsule supervise <ws> --start -- <agent>`` in a window. The
    agent is the capsule's child, in its own process group holding the terminal's foreground (so it reads
    keys and gets terminal signals once), and the wake reaches it."""
    capsule = shutil.which("sot-capsule", path=os.path.dirname(sys.executable))
    assert capsule
    log = str(tmp_path / "row.log")
    ws = str(tmp_path / "state" / "workspaces" / "ws-1")
    argv = [capsule, "supervise", ws, "--start", "--", sys.executable, FAKE, "--log", log, "--work", "0.2"]
    pane = tmux.new_window("ws-1", str(tmp_path), {}, argv)
    wait_for(lambda: is_free(screen(tmux, pane), "claude") == (True, None))
    (win,) = tmux.list_windows()
    capsule_pid = win.pane_pid
    with open(f"/proc/{capsule_pid}/cmdline", "rb") as f:
        assert f.read().split(b"\0")[1:4] == [capsule.encode(), b"supervise", ws.encode()]
    with open(f"/proc/{capsule_pid}/task/{capsule_pid}/children") as f:
        (child,) = f.read().split()
    with open(f"/proc/{child}/stat") as f:
        stat = f.read().rsplit(")", 1)[1].split()
    pgrp, tpgid = int(stat[2]), int(stat[5])
    assert pgrp == int(child) == tpgid
    tmux.send_text(pane, WAKE_LINE)
    wait_for(lambda: line_alone_in_box(screen(tmux, pane), WAKE_LINE))
    tmux.send_enter(pane)
    wait_for(lambda: [e["text"] for e in events(log) if e["event"] == "line"] == [WAKE_LINE])
    tmux.send_text(pane, "\x03")  # the fake quits on ^C; the capsule exits with it and the window closes
    wait_for(lambda: tmux.list_windows() == [])


# ------------------------------------------------------------------------------- one wake attempt


def test_wake_attempt_on_a_free_prompt_types_and_enters(tmux, tmp_path) -> None:
    from sotd.terminal import attempt

    pane, log = start(tmux, tmp_path, "row-1", "--named", "fix-build", "--work", "0.2")
    out = attempt.wake(tmux, pane, "claude", hold=0.5)
    assert out.result == attempt.WOKEN
    assert out.border is not None and " fix-build " in out.border
    wait_for(lambda: [e["text"] for e in events(log) if e["event"] == "line"] == [WAKE_LINE])


def test_wake_attempt_refuses_a_draft_and_types_nothing(tmux, tmp_path) -> None:
    from sotd.terminal import attempt

    pane, log = start(tmux, tmp_path, "row-1", "--mode", "draft")
    assert attempt.wake(tmux, pane, "claude", hold=0.3) == attempt.Outcome(
        attempt.REFUSED, "input not empty", "─" * 100
    )
    assert attempt.wake(tmux, pane, "codex", hold=0.3).reason == "no composer at the cursor"
    time.sleep(0.3)
    assert [e["event"] for e in events(log)] == ["start"]
    assert screen(tmux, pane).lines[screen(tmux, pane).cursor[1]] == "❯\u00a0hello"


def test_wake_attempt_refuses_while_the_spinner_moves(tmux, tmp_path) -> None:
    from sotd.terminal import attempt

    pane, log = start(tmux, tmp_path, "row-1", "--work", "8")
    tmux.send_text(pane, "do the thing")
    wait_for(lambda: is_free(screen(tmux, pane), "claude") == (False, "input not empty"))
    tmux.send_enter(pane)
    wait_for(lambda: any("Working" in x for x in screen(tmux, pane).lines))
    out = attempt.wake(tmux, pane, "claude", hold=1.0)
    assert (out.result, out.reason) == (attempt.REFUSED, "moved during the hold")
    assert [e for e in events(log) if e["event"] != "start"] == [{"event": "line", "text": "do the thing"}]


def test_typed_but_not_confirmed_sends_no_enter(tmux, tmp_path) -> None:
    from sotd.terminal import attempt

    pane, log = start(tmux, tmp_path, "row-1", "--deaf")
    out = attempt.wake(tmux, pane, "claude", hold=0.2, budget=0.5)
    assert (out.result, out.reason) == (attempt.TYPED_NO_ENTER, "typed text not in main's input box")
    keys = [e for e in events(log) if e["event"] != "start"]
    assert "".join(e["text"] for e in keys) == WAKE_LINE  # typed, and no Enter after it
    assert all(e["event"] == "key-ignored" for e in keys)


def test_owed_enter_is_sent_only_when_the_box_holds_exactly_the_wake_line(tmux, tmp_path) -> None:
    from sotd.terminal import attempt

    pane, log = start(tmux, tmp_path, "row-1", "--work", "0.2")
    assert attempt.complete_enter(tmux, pane, budget=0.3).result == attempt.REFUSED
    tmux.send_text(pane, WAKE_LINE + "x")
    wait_for(lambda: line_alone_in_box(screen(tmux, pane), WAKE_LINE + "x"))
    assert attempt.complete_enter(tmux, pane, budget=0.3) == attempt.Outcome(
        attempt.REFUSED, "typed text not in main's input box", "─" * 100
    )
    tmux.run(["tmux", "-S", tmux.socket_path, "send-keys", "-t", pane, "BSpace"])
    assert attempt.complete_enter(tmux, pane).result == attempt.ENTERED
    wait_for(lambda: [e["text"] for e in events(log) if e["event"] == "line"] == [WAKE_LINE])


def test_wake_attempt_on_a_missing_pane_is_an_error(tmux, tmp_path) -> None:
    from sotd.terminal import attempt

    start(tmux, tmp_path, "row-1")
    assert attempt.wake(tmux, "%999", "claude", hold=0.1).result == attempt.ERROR


def _pane_env(t: Tmux, tmp_path, name: str) -> dict[str, str]:
    """The environment a new window's process gets (its own copy, dumped as JSON)."""
    out = tmp_path / f"{name}.env.json"
    code = "import json,os,sys; json.dump(dict(os.environ), open(sys.argv[1], 'w'))"
    t.new_window(
        name, str(tmp_path), {}, [sys.executable, "-c", code + "; import time; time.sleep(60)", str(out)]
    )
    wait_for(out.exists)
    time.sleep(0.1)
    return json.loads(out.read_text())


def test_a_running_server_takes_a_new_client_s_environment_for_new_windows(tmux, tmp_path) -> None:
    """Issue 27 item 5: the server keeps the environment of the client that started it; a later client
    (a restarted daemon) syncs it, so its new windows get its variables, and lose those it no longer has.
    A window started before keeps its own. Values tmux reads specially (a trailing ``;``, ``\\;``) and a
    session's own copies of the first client's variables (``SSH_AUTH_SOCK``) are carried exactly."""
    first = dict(
        os.environ, SOTD_T_KEEP="k", SOTD_T_CHANGED="one", SOTD_T_GONE="x", SSH_AUTH_SOCK="/old/agent"
    )
    t1 = Tmux(tmux.socket_path, session=tmux.session, size=(100, 30), environ=first)
    assert t1.sync_environment() is False  # no server yet: the first window starts one with this env
    before = _pane_env(t1, tmp_path, "before")
    assert (before["SOTD_T_CHANGED"], before["SOTD_T_GONE"], before["SSH_AUTH_SOCK"]) == (
        "one",
        "x",
        "/old/agent",
    )
    second = {k: v for k, v in first.items() if k != "SOTD_T_GONE"}
    second.update(SOTD_T_CHANGED="two", SOTD_T_NEW="a b;", SOTD_T_ESC="c\\;", SSH_AUTH_SOCK="/new/agent")
    t2 = Tmux(tmux.socket_path, session=tmux.session, size=(100, 30), environ=second)
    assert t2.sync_environment() is True
    after = _pane_env(t2, tmp_path, "after")
    assert {
        k: after.get(k)
        for k in ("SOTD_T_KEEP", "SOTD_T_CHANGED", "SOTD_T_NEW", "SOTD_T_ESC", "SSH_AUTH_SOCK")
    } == {
        "SOTD_T_KEEP": "k",
        "SOTD_T_CHANGED": "two",
        "SOTD_T_NEW": "a b;",
        "SOTD_T_ESC": "c\\;",
        "SSH_AUTH_SOCK": "/new/agent",
    }
    assert "SOTD_T_GONE" not in after
    assert t2.sync_environment() is True  # a second sync has nothing left to change
    again = _pane_env(t2, tmp_path, "again")
    assert {k: again.get(k) for k in after if k.startswith("SOTD_T_")} == {
        k: v for k, v in after.items() if k.startswith("SOTD_T_")
    }
