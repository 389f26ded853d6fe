"""The wake against an agent that is busy, idle, flashing or holding a draft, and identity inside a row
(issue #5; behaviour 3.1-3.3, 5, D16), end to end in real tmux.

The rows run ``sotd.demo.scripted_agent`` (the scripted Claude-like screen) with ``--log-keys``: it logs every key it
receives with the phase it was in (``idle``, ``busy``, ``flash``) and every phase change, so "never typed
into while busy" is read off its own log. ``--alternate IDLE,BUSY`` makes it start work on its own;
``--flash`` hides the spinner for under 1.5 s while busy, so the screen reads as a free, still prompt for a
moment: only the 1.5 s stillness hold tells it from an idle prompt.

The daemon, its tmux server and every row are killed in teardown (``Box.close``); every wait is bounded.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sotd.terminal import attempt
from sotd.terminal.prompt import WAKE_LINE, is_free, screen_from_capture
from sotd.terminal.tmux import Tmux
from tests.integration.test_ancestry_procs import LAUNCH, NOT_IN
from tests.integration.test_rows import Box, events, wait_for, wakes

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

# idle 6 s, busy 6 s; while busy: 0.6 s spinner, 1.2 s flash, ... ending on spinner (three flashes a spell)
BUSY_ARGS = ("--alternate", "6,6", "--flash", "1.2", "--flash-gap", "0.6", "--log-keys", "--times")
SECOND_IN_ROW = (
    "this process runs under claude, started inside claude's session, so it has no comm identity — nothing "
    "was read, sent or stamped; do not retry or join: an agent that needs its own handle is started as its own row"
)
PASS = '"$@"; exit $?'  # sh -c PASS name argv...: the shell forks its child, so the layer stays in the tree
RC = 'f=$1; shift; "$@"; echo $? > "$f"'


@pytest.fixture
def box() -> Iterator[Box]:
    b = Box({"SOTD_TEST_HEARTBEAT_SECS": "2"})
    yield b
    b.close()


def keys(log: str) -> list[dict[str, Any]]:
    return [e for e in events(log) if e["event"] == "key"]


def phase_changes(log: str) -> list[dict[str, Any]]:
    return [e for e in events(log) if e["event"] == "phase"]


def last_phase(log: str) -> str:
    ph = phase_changes(log)
    return ph[-1]["text"] if ph else "idle"


def pane_of(box: Box, wid: str) -> str:
    """The row's pane, once the daemon has recorded it (a row just created may not have one yet)."""
    wait_for(lambda: bool((box.row(wid) or {}).get("pane")), what=f"row {wid}'s pane")
    row = box.row(wid)
    assert row is not None
    return str(row["pane"])


def cursor_row(box: Box, pane: str) -> str:
    s = screen_from_capture(*box.tmux.capture(pane))
    assert s.cursor is not None
    return s.lines[s.cursor[1]]


def wait_phase_starts(log: str, phase: str, timeout: float = 20.0) -> float:
    """Wait for the next change into ``phase`` after now; its wall-clock time."""
    seen = len(phase_changes(log))

    def started() -> float | None:
        new = phase_changes(log)[seen:]
        return next((e["t"] for e in new if e["text"] == phase), None)

    return float(wait_for(started, timeout=timeout, what=f"the agent to turn {phase}"))


def assert_never_typed_while_busy(log: str) -> None:
    busy = [e for e in keys(log) if e["phase"] != "idle"]
    assert busy == [], busy
    assert [e for e in events(log) if e["event"] == "key-while-working"] == []


# ------------------------------------------------------------------------ the hold against a flash


def test_hold_refuses_a_prompt_that_flashes_free_while_busy(tmp_path) -> None:
    """One wake attempt (the daemon's own code) started while a busy agent shows a free, still prompt:
    the first frame reads free, the screen stays still for under 1.5 s, and the hold refuses it."""
    short = tempfile.mkdtemp(prefix="sotd-busy-", dir="/tmp")
    tmux = Tmux(os.path.join(short, "s"), session="busy-test", size=(100, 30))
    try:
        log = str(tmp_path / "agent.log")
        argv = [sys.executable, "-m", "sotd.demo.scripted_agent", "--log", log, "--alternate", "0.5,30"]
        argv += ["--flash", "1.2", "--flash-gap", "0.6", "--log-keys", "--times"]
        pane = tmux.new_window("row", str(tmp_path), {}, argv)
        for n in range(2):
            wait_phase_starts(log, "flash")

            def free_now() -> bool:
                return is_free(screen_from_capture(*tmux.capture(pane)), "claude") == (True, None)

            wait_for(free_now, timeout=1.0, what=f"flash {n} to read as a free prompt")
            out = attempt.wake(tmux, pane, "claude")
            assert (out.result, out.reason) == (attempt.REFUSED, attempt.MOVED), out
        assert keys(log) == []
        assert last_phase(log) in ("busy", "flash")
    finally:
        tmux.kill_server()
        shutil.rmtree(short, ignore_errors=True)


# ------------------------------------------------------------------------------- the wake, end to end


@pytest.mark.long
def test_busy_row_is_never_typed_into_and_each_batch_wakes_once(box: Box) -> None:
    wid, log = box.create("busy", *BUSY_ARGS)
    assert wakes(log) == 0

    # batch 1, filed as the agent starts work: held through a busy spell with three flashes, woken once idle
    began = wait_phase_starts(log, "busy")
    box.file("busy", "one")
    wait_for(lambda: wakes(log) == 1, timeout=25, what="the first batch's wake")
    (line,) = [e for e in events(log) if e["event"] == "line"]
    idle_again = next(e["t"] for e in phase_changes(log) if e["t"] > began and e["text"] == "idle")
    assert line["t"] > idle_again
    flashes = [e for e in phase_changes(log) if began < e["t"] < idle_again and e["text"] == "flash"]
    assert len(flashes) >= 2, phase_changes(log)
    assert_never_typed_while_busy(log)

    # batch 2 (two messages), filed during the next busy spell: one more wake, in the idle that follows
    wait_phase_starts(log, "busy", timeout=30)
    box.file("busy", "two")
    box.file("busy", "three")
    wait_for(lambda: wakes(log) == 2, timeout=25, what="the second batch's wake")
    assert_never_typed_while_busy(log)

    # batch 3, filed just as an idle spell begins: woken within it, once
    wait_phase_starts(log, "idle", timeout=30)
    t0 = time.monotonic()
    box.file("busy", "four")
    wait_for(lambda: wakes(log) == 3, timeout=15, what="the idle row's wake")
    assert time.monotonic() - t0 < 6, "the wake should land inside the 6 s idle spell"
    time.sleep(6)  # three ticks and a busy spell: the batch is not typed again
    assert wakes(log) == 3
    assert_never_typed_while_busy(log)
    typed = "".join(e["text"] for e in keys(log))
    assert typed == (WAKE_LINE + "\r") * 3
    assert box.row(wid)["phase"] == "ready"


@pytest.mark.long
def test_a_draft_is_never_overwritten(box: Box) -> None:
    wid, log = box.create("drafty", "--log-keys")
    pane = pane_of(box, wid)
    box.tmux.send_text(pane, "half a thought")
    wait_for(lambda: cursor_row(box, pane) == "❯\u00a0half a thought", what="the draft on screen")
    box.file("drafty", "mail while you type")
    time.sleep(7)  # three ticks and the inotify trigger: every one refused
    assert cursor_row(box, pane) == "❯\u00a0half a thought"
    assert "".join(e["text"] for e in keys(log)) == "half a thought"
    assert wakes(log) == 0

    # the human clears the box: the prompt is free again and the batch is woken, once
    box.tmux.run(["tmux", "-S", box.tmux.socket_path, "send-keys", "-t", pane, *["BSpace"] * 14])
    wait_for(lambda: wakes(log) == 1, timeout=15, what="the wake once the box is empty")
    time.sleep(4)
    assert wakes(log) == 1
    assert "".join(e["text"] for e in keys(log)) == "half a thought" + "\x7f" * 14 + WAKE_LINE + "\r"


# ------------------------------------------------------------------------------------ identity in a row


def read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return b""


def fake_claude(box: Box) -> str:
    """``<work>/fakebin/claude``: /bin/sh under the name the identity check recognises as Claude Code."""
    fakebin = os.path.join(box.work, "fakebin")
    os.makedirs(fakebin, exist_ok=True)
    link = os.path.join(fakebin, "claude")
    if not os.path.lexists(link):
        os.symlink("/bin/sh", link)
    return link


def test_second_agent_inside_a_row_and_a_process_outside_its_capsule_have_no_identity(box: Box) -> None:
    claude = fake_claude(box)
    log = os.path.join(box.work, "inner.agent.log")
    # the row's agent is a "claude" (the screen runs under it); at its start it joins, then starts a
    # second "claude" that tries to send
    inner = f"{claude} -c '\"$@\"; exit $?' claude comm-send.sh @sender 'from the second agent'"
    screen = [
        sys.executable,
        "-m",
        "sotd.demo.scripted_agent",
        "--log",
        log,
        "--at-start",
        f"comm-join.sh; {inner}",
    ]
    answer = box.request(
        "workspace.create",
        {
            "label": "inner",
            "project_root": box.project("inner"),
            "agent": "claude",
            "agent_name": "inner",
            "command": [claude, "-c", PASS, "claude", *screen],
        },
    )
    assert answer.get("ok") is True, answer
    wid = answer["workspace_id"]
    wait_for(lambda: (box.row(wid) or {}).get("handle") == "inner", what="the row's own join")
    at_start = wait_for(lambda: [e["text"] for e in events(log) if e["event"] == "at-start"])[0]
    out = at_start.splitlines()
    assert out[0].startswith("Joined sot-comm as @inner"), at_start
    assert out[-1] == f"FAILED -> @sender: {SECOND_IN_ROW} (exit 1)", at_start
    assert not os.path.exists(box.layout.inbox("sender"))

    # a process outside the row's capsule that names the row (by SOT_WORKSPACE_ID, or by the row's pinned
    # self file) is refused with its own text, and sends nothing
    before = read_bytes(box.layout.inbox("inner"))
    why = NOT_IN.format(row=wid)
    self_file = os.path.join(box.home, "self", f"{box.env['SOT_SELF_HOST']}__{wid}.txt")
    for named in ({"SOT_WORKSPACE_ID": wid}, {"SOT_COMM_SELF_FILE": self_file, "SOT_WORKSPACE_ID": wid}):
        code, err = outside(box, named, [os.path.join(box.layout.bin_dir, "comm-send.sh"), "@inner", "hi"])
        assert (code, err) == (1, f"FAILED -> @inner: {why}\n"), (named, err)
    assert read_bytes(box.layout.inbox("inner")) == before


def outside(box: Box, named: dict[str, str], argv: list[str]) -> tuple[int, str]:
    """Run ``argv`` as the top of its own process tree (double fork, reparented to pid 1, as in
    ``test_ancestry_procs``) with the row named in its environment; (exit status, stderr)."""
    launcher = os.path.join(box.work, "launch.py")
    with open(launcher, "w") as f:
        f.write(LAUNCH)
    report, rcfile = os.path.join(box.work, "top-ppid"), os.path.join(box.work, "rc")
    for p in (report, rcfile):
        if os.path.exists(p):
            os.unlink(p)
    env = dict(box.env)
    env.pop("SOT_COMM_SELF_FILE", None)
    env.update(named)
    cmd = [sys.executable, launcher, report, "/bin/sh", "-c", RC, "sh", rcfile, *argv]
    p = subprocess.run(cmd, env=env, cwd=box.work, capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0, p.stderr
    with open(report) as f:
        top = f.read()
    if top != "1":
        pytest.skip(f"orphans here are adopted by pid {top} (a subreaper), not 1: the walk would not end")
    code = wait_for(lambda: read_bytes(rcfile).strip(), timeout=30, what="the exit code")
    return int(code), p.stderr
