"""The SessionStart hook (``comm-session-start.sh``) and the private self file it pins (issue 11, part 2
items 1 and 4; seed 000 "The self file").

Each "Claude Code session" here is what Claude Code gives its hooks and Bash calls, run as real processes:
the hook JSON on stdin (``session_id``, ``cwd``, ``source``), ``CLAUDE_ENV_FILE`` naming a file the start
hook may append ``export`` lines to, later Bash commands run by ``bash -c`` after sourcing that file, and
the other hooks run *without* that environment (as Claude Code runs them). The real TUI doing the same is
in tests/realagent/test_hooks_real.py.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import Comm, Result, clean_env

pytestmark = pytest.mark.integration


class Claude:
    """A Claude Code session outside any row: its project folder, its session id and env file."""

    def __init__(self, comm: Comm, project: str, sid: str, *, env_file: bool = True) -> None:
        self.comm = comm
        self.sid = sid
        self.root = os.path.realpath(os.path.join(comm.work, project))
        os.makedirs(self.root, exist_ok=True)
        self.env_file = os.path.join(comm.work, f"env-{sid}.sh") if env_file else ""
        if self.env_file:
            open(self.env_file, "w").close()  # Claude Code makes it empty before SessionStart
        self.env = clean_env()
        self.env.update(
            SOT_COMM_HOME=comm.home,
            SOT_SELF_HOST=comm.host,
            SOT_COMM_TEST_HOST=comm.host,
            SOT_SOCKET=os.path.join(comm.work, "no-daemon.sock"),
            HOME=comm.work,
            PWD=self.root,
            PATH="/usr/bin:/bin",  # the comm scripts are not on it: the start hook puts them there
        )

    def hook(self, script: str, event: str, **fields: object) -> Result:
        env = dict(self.env)
        if event == "SessionStart" and self.env_file:
            env["CLAUDE_ENV_FILE"] = self.env_file
        doc = {"session_id": self.sid, "cwd": self.root, "hook_event_name": event, **fields}
        p = subprocess.run(
            [os.path.join(self.comm.layout.bin_dir, script)],
            check=False,
            cwd=self.root,
            env=env,
            input=json.dumps(doc),
            capture_output=True,
            text=True,
            timeout=60,
        )
        r = Result(p)
        assert r.code == 0, r
        return r

    def start(self, source: str = "startup") -> str:
        """Run the start hook; the text the model reads."""
        r = self.hook("comm-session-start.sh", "SessionStart", source=source, model="claude-x")
        out = json.loads(r.out)
        assert out["hookSpecificOutput"]["hookEventName"] == "SessionStart"
        return str(out["hookSpecificOutput"]["additionalContext"])

    def bash(self, command: str) -> Result:
        """A later Bash tool call: Claude Code sources the env file first."""
        prefix = f". {self.env_file}; " if self.env_file else ""
        p = subprocess.run(
            ["bash", "-c", prefix + command],
            check=False,
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return Result(p)


def with_skill(comm: Comm) -> None:
    """The skill as ``sotd comm install`` writes it into this HOME's ~/.claude/skills."""
    from sotd.cli.install.skill import install_skill

    assert install_skill(os.path.join(comm.work, ".claude"), comm.layout.bin_dir)[0]


def registry(comm: Comm) -> dict:
    with open(comm.layout.registry) as f:
        return json.load(f)["agents"]


def test_a_session_outside_rows_joins_at_its_start_through_a_private_self_file(comm: Comm) -> None:
    with_skill(comm)
    a = Claude(comm, "alpha", "11111111-aaaa-4bbb-8ccc-000000000001")
    text = a.start()
    handle = registry(comm)
    assert list(handle) == ["alpha-testhost"]
    assert text.splitlines()[0] == (
        "sot-comm: this session is @alpha-testhost (alpha on testhost) — other agent sessions reach it by"
        " that handle."
    )
    assert "- Read mail: comm-poll.sh. Send: comm-send.sh @handle" in text
    assert "`SITREP: <what is done>`" in text  # the closing markers are asked for at the start
    assert text.splitlines()[-1].endswith("the sot-session-start skill.")
    assert len(text.splitlines()) <= 6
    slot = os.path.join(comm.layout.self_dir, f"session-{a.sid}.txt")
    with open(a.env_file) as f:
        assert f.read() == (
            f"export SOT_COMM_SELF_FILE='{slot}'\nexport PATH='{comm.layout.bin_dir}':\"$PATH\"\n"
        )
    with open(slot) as f:
        assert f.read() == f"alpha-testhost\nrepo=alpha\nroot={a.root}\n"
    assert not os.path.exists(comm.layout.self_file("testhost", None))  # the shared slot was not used
    # its later Bash calls act as that handle, by the bare names the text gives
    r = a.bash("comm-context.sh")
    assert "NAME=alpha-testhost" in r.out_lines, r
    # the other hooks, without the env file's environment, find the same file from session_id
    b = Claude(comm, "beta", "22222222-aaaa-4bbb-8ccc-000000000002")
    b.start()
    assert b.bash('comm-send.sh @alpha-testhost "hello"').out == "  filed -> @alpha-testhost\n"
    r = a.hook("comm-status-idle.sh", "Stop", stop_hook_active=False, last_assistant_message="SITREP: ok")
    assert json.loads(r.out) == {
        "decision": "block",
        "reason": "New sot-comm mail for @alpha-testhost — run comm-poll.sh now, act on it, then end the turn.",
    }


def test_two_sessions_on_one_box_each_keep_their_own_handle(comm: Comm) -> None:
    a = Claude(comm, "alpha", "sid-a")
    b = Claude(comm, "beta", "sid-b")
    a.start()
    b.start()  # on 0.6.6's shared nopane slot this second join un-joined the first
    assert sorted(registry(comm)) == ["alpha-testhost", "beta-testhost"]
    assert a.bash('comm-send.sh @beta-testhost "from a"').out == "  filed -> @beta-testhost\n"
    assert b.bash('comm-send.sh @alpha-testhost "from b"').out == "  filed -> @alpha-testhost\n"
    assert b.bash("comm-poll.sh").out_lines[-1].endswith("[alpha-testhost:alpha] from a")
    assert a.bash("comm-poll.sh").out_lines[-1].endswith("[beta-testhost:beta] from b")
    # a plain shell on the same box keeps the shared nopane slot, and un-joins neither session
    shell = clean_env()
    shell.update(a.env)
    shell["PWD"] = os.path.join(comm.work, "gamma")
    os.makedirs(shell["PWD"])
    p = subprocess.run(
        [os.path.join(comm.layout.bin_dir, "comm-join.sh")],
        check=False,
        cwd=shell["PWD"],
        env=shell,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert os.path.isfile(comm.layout.self_file("testhost", None))
    assert sorted(registry(comm)) == ["alpha-testhost", "beta-testhost", "gamma-testhost"]
    assert "NAME=alpha-testhost" in a.bash("comm-context.sh").out_lines
    assert "NAME=beta-testhost" in b.bash("comm-context.sh").out_lines


def test_a_resumed_or_cleared_session_keeps_its_handle(comm: Comm) -> None:
    a = Claude(comm, "alpha", "sid-a")
    first = a.start()
    for source in ("resume", "clear", "compact"):
        assert a.start(source) == first
    assert list(registry(comm)) == ["alpha-testhost"]


def test_a_compaction_mid_turn_keeps_the_entrys_work_state(comm: Comm) -> None:
    a = Claude(comm, "alpha", "sid-a")
    a.start()
    a.hook("comm-status-prompt.sh", "UserPromptSubmit", prompt="please fix the build", prompt_id="p1")
    working = registry(comm)["alpha-testhost"]
    assert working["state"] == "working" and working["floor"] == "user"
    a.start("compact")  # Claude Code compacts in the middle of the turn
    assert registry(comm)["alpha-testhost"] == working
    a.start("clear")  # a /clear starts afresh: joined again
    assert registry(comm)["alpha-testhost"].get("floor") is None


def test_without_an_env_file_the_session_keeps_the_shared_slot(comm: Comm) -> None:
    a = Claude(comm, "alpha", "sid-a", env_file=False)
    text = a.start()
    assert "skill" not in text  # no skill installed under this HOME: nothing points at one
    assert os.path.isfile(comm.layout.self_file("testhost", None))
    assert not os.path.exists(os.path.join(comm.layout.self_dir, "session-sid-a.txt"))
    # the scripts are not on this session's PATH: the text names them by their full path
    assert f"Read mail: {comm.layout.bin_dir}/comm-poll.sh." in text


def test_a_launchers_pinned_self_file_is_kept(comm: Comm) -> None:
    a = Claude(comm, "alpha", "sid-a")
    mine = os.path.join(comm.home, "self", "my-launcher.txt")
    a.env["SOT_COMM_SELF_FILE"] = mine
    a.start()
    with open(mine) as f:
        assert f.readline() == "alpha-testhost\n"
    with open(a.env_file) as f:
        assert "SOT_COMM_SELF_FILE" not in f.read()


def test_sot_comm_name_is_the_handle_taken(comm: Comm) -> None:
    a = Claude(comm, "alpha", "sid-a")
    a.env["SOT_COMM_NAME"] = "r1"
    assert a.start().startswith("sot-comm: this session is @r1 ")
    assert list(registry(comm)) == ["r1"]


def test_a_failed_join_says_why_and_how_to_join_by_hand(comm: Comm) -> None:
    with_skill(comm)
    a = Claude(comm, "alpha", "sid-a")
    a.env["SOT_COMM_NAME"] = "-bad"
    text = a.start()
    lines = text.splitlines()
    assert lines[0] == "sot-comm: this session could not join at its start:"
    assert lines[1].startswith("  ") and "-bad" in lines[1]
    assert lines[-1] == (
        "Mail to it is not read until it joins; join by hand with comm-join.sh --name NAME. More (leaving,"
        " getting a lost handle back, conventions): the sot-session-start skill."
    )
    assert registry(comm) == {}


def test_hooks_off_prints_nothing_and_joins_nobody(comm: Comm) -> None:
    a = Claude(comm, "alpha", "sid-a")
    a.env["SOT_COMM_HOOKS"] = "off"
    r = a.hook("comm-session-start.sh", "SessionStart", source="startup")
    assert (r.out, r.err) == ("", "")
    assert os.path.getsize(a.env_file) == 0
    assert not os.path.exists(os.path.join(comm.layout.self_dir, "session-sid-a.txt"))


def test_after_a_leave_the_hooks_do_not_fall_back_to_the_shared_slot(comm: Comm) -> None:
    a = Claude(comm, "alpha", "sid-a")
    a.start()
    assert a.bash("comm-leave.sh").code == 0
    assert not os.path.exists(os.path.join(comm.layout.self_dir, "session-sid-a.txt"))
    # a plain shell of the same project takes the shared slot and gets mail
    shell = dict(a.env)
    p = subprocess.run(
        [os.path.join(comm.layout.bin_dir, "comm-join.sh"), "--name", "shell"],
        check=False, cwd=a.root, env=shell, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    b = Claude(comm, "beta", "sid-b")
    b.start()
    assert b.bash('comm-send.sh @shell "for the shell"').out == "  filed -> @shell\n"
    # the left session's Stop hook is not the shell's: it announces nothing
    r = a.hook("comm-status-idle.sh", "Stop", stop_hook_active=False, last_assistant_message="ok")
    assert r.out == ""
