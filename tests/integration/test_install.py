"""``sotd comm install``: the wrappers, hooks, relay stub, VERSION, the record, retired scripts, settings.

Behaviour 1.12, 1.4 (``comm-relay.sh bridge``), 6.0 (bin/ and VERSION keep their modes), seed 000 "Upgrading
to 0.7.0", decision D2 (a wrapper and its subcommand differ only in the command name inside messages).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import time

import pytest

from tests.conftest import SOTD, Comm, Result, clean_env

pytestmark = pytest.mark.integration

WRAPPERS = [
    f"comm-{v}.sh" for v in ("send", "poll", "join", "leave", "list", "status", "context", "spawn", "despawn")
]
HOOKS = [
    "comm-status-idle.sh",
    "comm-status-prompt.sh",
    "comm-status-pretool.sh",
    "comm-status-posttool.sh",
    "comm-status-permission.sh",
    "comm-session-start.sh",
]
SCRIPTS = [*WRAPPERS, *HOOKS, "comm-relay.sh"]
SHIPPED = [*SCRIPTS, "claude-settings.json"]
BRIDGE = "comm-relay: bridge retired in 0.6.6; this leftover loop now sleeps (a reboot clears it)"


@pytest.fixture
def fresh(tmp_path: object) -> Comm:
    return Comm(str(tmp_path), install=False)


def install(comm: Comm, *args: str) -> Result:
    env = clean_env()
    env.update(SOT_COMM_HOME=comm.home, HOME=comm.work)
    p = subprocess.run(
        [SOTD, "comm", "install", *args],
        check=False,
        cwd=comm.work,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return Result(p)


def bin_path(comm: Comm, name: str) -> str:
    return os.path.join(comm.layout.bin_dir, name)


def q(path: str) -> str:
    """A hook command as install writes it: the path in single quotes."""
    return "'" + path.replace("'", "'\\''") + "'"


def mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_writes_every_script_version_and_record(fresh: Comm) -> None:
    r = install(fresh)
    assert r.code == 0, r
    assert r.out_lines[0] == f"Installed sot-comm 0.7.0 into {fresh.layout.bin_dir}: {', '.join(SHIPPED)}"
    top = os.path.dirname(os.path.dirname(os.path.dirname(SOTD)))  # this checkout's .venv/bin/sotd
    assert r.err == (
        f"note: the scripts run {SOTD}, inside the source checkout {top}; if that checkout moves or its .venv"
        " is rebuilt they stop (and say so). For a sotd that stays put: pipx install <checkout>, then run"
        " sotd comm install --sotd=$(command -v sotd)\n"
    )
    for name in SCRIPTS:
        p = bin_path(fresh, name)
        assert os.path.isfile(p)
        assert mode(p) == 0o755, name
        with open(p) as f:
            text = f.read()
        assert text.startswith("#!/bin/sh\n")
        assert f"SOT_COMM_PROG={name} exec " in text
    with open(fresh.layout.version_file) as f:
        assert f.read().startswith("0.7.0 ")
    assert mode(fresh.layout.version_file) == 0o644
    with open(bin_path(fresh, ".installed")) as f:
        assert f.read().splitlines() == SHIPPED
    # without --agent-settings it prints the settings block for Claude Code, then the one for Codex
    claude, codex = printed_blocks(r)
    hooks = claude["hooks"]
    assert set(hooks) == {
        "SessionStart",
        "Stop",
        "UserPromptSubmit",
        "PreToolUse",
        "PostToolUse",
        "PermissionRequest",
    }
    assert hooks["Stop"][0]["hooks"][0]["command"] == q(bin_path(fresh, "comm-status-idle.sh"))
    assert hooks["PermissionRequest"] == [
        {
            "matcher": "*",
            "hooks": [{"type": "command", "command": q(bin_path(fresh, "comm-status-permission.sh"))}],
        }
    ]
    assert "Bash(comm-poll.sh:*)" in claude["permissions"]["allow"]
    assert codex == {
        "hooks": {
            "SessionStart": [
                {"hooks": [{"type": "command", "command": q(bin_path(fresh, "comm-session-start.sh"))}]}
            ],
            "Stop": [{"hooks": [{"type": "command", "command": q(bin_path(fresh, "comm-status-idle.sh"))}]}],
            "UserPromptSubmit": [
                {"hooks": [{"type": "command", "command": q(bin_path(fresh, "comm-status-prompt.sh"))}]}
            ],
            "PermissionRequest": [
                {
                    "matcher": "*",
                    "hooks": [
                        {"type": "command", "command": q(bin_path(fresh, "comm-status-permission.sh"))}
                    ],
                }
            ],
        }
    }
    assert "Codex has no Stop hook" not in r.out
    assert not os.path.exists(os.path.join(fresh.work, ".claude"))  # a plain install leaves Claude Code alone
    assert (
        r.out_lines[-1]
        == "The sot-session-start skill for Claude Code: re-run with --agent-settings or --skill."
    )
    assert f"('run {fresh.layout.bin_dir}/comm-poll.sh after each task')." in r.out_lines
    r = install(fresh, "--skill")
    assert r.code == 0, r
    skill = os.path.join(fresh.work, ".claude", "skills", "sot-session-start", "SKILL.md")
    assert r.out_lines[1] == f"Installed the Claude Code skill sot-session-start: {skill}"
    assert os.listdir(os.path.join(fresh.work, ".claude")) == ["skills"]


def printed_blocks(r: Result) -> list[dict]:
    """The JSON blocks ``install`` prints (each indented two spaces, from a ``  {`` line to a ``  }`` line)."""
    blocks, cur = [], None
    for ln in r.out_lines:
        if ln == "  {":
            cur = [ln]
        elif cur is not None:
            cur.append(ln)
            if ln == "  }":
                blocks.append(json.loads("\n".join(cur)))
                cur = None
    return blocks


def test_wrappers_run_sotd(fresh: Comm) -> None:
    assert install(fresh).code == 0
    env = clean_env()
    env.update(SOT_COMM_HOME=fresh.home, SOT_SELF_HOST="testhost", PWD=fresh.work)
    p = subprocess.run(
        [bin_path(fresh, "comm-context.sh")],
        check=False,
        cwd=fresh.work,
        env=env,
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    assert f"COMM_HOME={fresh.home}" in p.stdout.splitlines()


def test_bin_and_version_are_never_tightened(fresh: Comm) -> None:
    assert install(fresh).code == 0
    os.chmod(fresh.layout.bin_dir, 0o755)
    os.chmod(fresh.layout.version_file, 0o644)
    os.chmod(fresh.home, 0o755)  # an open comm folder: the next writer tightens it
    a = fresh.session("alpha")
    assert a.run("join", "--name", "alpha").code == 0
    assert mode(fresh.home) == 0o700
    assert mode(fresh.layout.inbox_dir) == 0o700
    assert mode(fresh.layout.bin_dir) == 0o755
    assert mode(fresh.layout.version_file) == 0o644
    assert all(mode(bin_path(fresh, n)) == 0o755 for n in SCRIPTS)
    # and a second install leaves them as they are
    assert install(fresh).code == 0
    assert (mode(fresh.layout.bin_dir), mode(fresh.layout.version_file)) == (0o755, 0o644)


def test_removes_retired_and_unshipped_recorded_names_only(fresh: Comm) -> None:
    os.makedirs(fresh.layout.bin_dir)
    for name in (
        "comm-listen.sh",
        "comm-self-audit.sh",
        "comm-registry-lock-clear.sh",
        "comm-old-helper.sh",
        "my-own-tool.sh",
        "comm-send.sh",
    ):
        with open(bin_path(fresh, name), "w") as f:
            f.write("#!/bin/sh\necho old\n")
    with open(os.path.join(fresh.home, "keep.txt"), "w") as f:
        f.write("x")
    with open(bin_path(fresh, ".installed"), "w") as f:
        f.write("comm-send.sh\ncomm-old-helper.sh\ncomm-never-existed.sh\n../keep.txt\n")
    r = install(fresh)
    assert r.code == 0, r
    assert r.out_lines[1] == (
        "Removed retired scripts: comm-listen.sh, comm-old-helper.sh, comm-registry-lock-clear.sh, "
        "comm-self-audit.sh"
    )
    left = sorted(os.listdir(fresh.layout.bin_dir))
    assert left == sorted([*SHIPPED, ".installed", ".installed-settings.json", "my-own-tool.sh"])
    assert os.path.exists(os.path.join(fresh.home, "keep.txt"))
    with open(bin_path(fresh, "comm-send.sh")) as f:
        assert "echo old" not in f.read()
    # a second install removes nothing more
    r = install(fresh)
    assert r.code == 0 and not any(x.startswith("Removed") for x in r.out_lines), r
    assert sorted(os.listdir(fresh.layout.bin_dir)) == left


def test_relay_bridge_is_a_sleeping_stub(comm: Comm) -> None:
    errpath = os.path.join(comm.work, "bridge.err")
    with open(errpath, "w") as errf:
        p = subprocess.Popen(
            [bin_path(comm, "comm-relay.sh"), "bridge"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errf,
            start_new_session=True,
        )
    try:
        time.sleep(1.0)
        assert p.poll() is None, "the bridge stub must keep sleeping"
    finally:
        os.killpg(p.pid, signal.SIGKILL)  # the stub's own group: its sh and its sleep
        p.wait(timeout=10)
    with open(errpath) as f:
        assert f.read() == BRIDGE + "\n"


def test_relay_send_is_comm_send(comm: Comm) -> None:
    a, b = comm.session("alpha"), comm.session("beta")
    assert a.run("join", "--name", "alpha").code == 0
    assert b.run("join", "--name", "beta").code == 0
    p = subprocess.run(
        [bin_path(comm, "comm-relay.sh"), "send", "@beta", "via relay"],
        check=False,
        cwd=a.root,
        env=a.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (p.returncode, p.stdout) == (0, "  filed -> @beta\n"), p.stderr
    assert b.run("poll").out_lines[-1].endswith("[alpha:alpha] via relay")


# ------------------------------------------------------------------------------------------ settings


EXISTING = {
    "model": "opus",
    "permissions": {"allow": ["Bash(ls:*)"]},
    "hooks": {
        "Stop": [{"hooks": [{"type": "command", "command": "/opt/other/on-stop.sh"}]}],
        "Notification": [{"matcher": "", "hooks": [{"type": "command", "command": "/opt/other/notify.sh"}]}],
    },
}
EVENTS = {"SessionStart", "Stop", "UserPromptSubmit", "PreToolUse", "PostToolUse", "PermissionRequest"}


def _commands(groups: list) -> list[str]:
    return [h["command"] for g in groups for h in g["hooks"]]


def test_agent_settings_merge_keeps_everything_and_is_idempotent(comm: Comm) -> None:
    path = os.path.join(comm.work, "claude", "settings.json")
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as f:
        json.dump(EXISTING, f, indent=2)
    r = install(comm, f"--agent-settings={path}")
    assert r.code == 0, r
    assert r.out_lines[-1] == f"Registered the hooks and allow rules in {path}"
    with open(path, "rb") as f:
        first = f.read()
    doc = json.loads(first)
    assert doc["model"] == "opus"
    allow = doc["permissions"]["allow"]
    assert allow[0] == "Bash(ls:*)"
    assert {
        "Bash(comm-poll.sh:*)",
        "Bash(comm-send.sh:*)",
        f"Bash({bin_path(comm, 'comm-poll.sh')}:*)",
    } <= set(allow)
    assert not any("spawn" in a or "relay" in a for a in allow)  # sotd's mail wrappers only
    hooks = doc["hooks"]
    assert hooks["Notification"] == EXISTING["hooks"]["Notification"]
    assert _commands(hooks["Stop"]) == ["/opt/other/on-stop.sh", q(bin_path(comm, "comm-status-idle.sh"))]
    assert _commands(hooks["SessionStart"]) == [q(bin_path(comm, "comm-session-start.sh"))]
    assert _commands(hooks["UserPromptSubmit"]) == [q(bin_path(comm, "comm-status-prompt.sh"))]
    assert hooks["PreToolUse"] == [
        {
            "matcher": "AskUserQuestion",
            "hooks": [{"type": "command", "command": q(bin_path(comm, "comm-status-pretool.sh"))}],
        }
    ]
    assert _commands(hooks["PostToolUse"]) == [q(bin_path(comm, "comm-status-posttool.sh"))]
    assert _commands(hooks["PermissionRequest"]) == [q(bin_path(comm, "comm-status-permission.sh"))]
    r = install(comm, f"--agent-settings={path}")
    assert r.code == 0, r
    assert r.out_lines[-1] == f"The hooks were already registered in {path}"
    with open(path, "rb") as f:
        assert f.read() == first


def test_agent_settings_creates_a_missing_file(comm: Comm) -> None:
    path = os.path.join(comm.work, "new", "settings.json")
    assert install(comm, f"--agent-settings={path}").code == 0
    with open(path) as f:
        assert set(json.load(f)["hooks"]) == EVENTS
    assert mode(path) == 0o600
    # the skill goes beside the settings file it was asked to register in
    assert os.path.isfile(os.path.join(comm.work, "new", "skills", "sot-session-start", "SKILL.md"))


def test_agent_settings_default_path_is_under_home(comm: Comm) -> None:
    r = install(comm, "--agent-settings")
    assert r.code == 0, r
    assert os.path.exists(os.path.join(comm.work, ".claude", "settings.json"))
    skill = os.path.join(comm.work, ".claude", "skills", "sot-session-start", "SKILL.md")
    assert f"Installed the Claude Code skill sot-session-start: {skill}" in r.out_lines


@pytest.mark.parametrize(
    "data",
    [
        b"{not json",
        b'[{"hooks": {}}]',
        b'"a string"\n',
        b'{"hooks": []}\n',
        b'{"hooks": {"Stop": {}}}\n',
        b'{"permissions": []}\n',
        b'{"permissions": {"allow": "Bash"}}\n',
    ],
    ids=[
        "malformed",
        "array",
        "string",
        "hooks-not-object",
        "event-not-list",
        "perms-not-object",
        "allow-not-list",
    ],
)
def test_agent_settings_refuses_what_it_cannot_merge(comm: Comm, data: bytes) -> None:
    path = os.path.join(comm.work, "settings.json")
    with open(path, "wb") as f:
        f.write(data)
    r = install(comm, f"--agent-settings={path}")
    assert r.code == 1, r
    assert r.err_lines and "nothing was changed" in r.err_lines[-1]
    with open(path, "rb") as f:
        assert f.read() == data
    assert sorted(os.listdir(comm.work)) == sorted(["comm", "settings.json"])


def uninstall(comm: Comm) -> Result:
    env = clean_env()
    env.update(SOT_COMM_HOME=comm.home, HOME=comm.work)
    p = subprocess.run(
        [SOTD, "comm", "uninstall"],
        check=False,
        cwd=comm.work,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return Result(p)


def dotfiles_home(comm: Comm) -> tuple[str, str, bytes]:
    """A HOME whose ~/.claude/settings.json is a symlink into a dotfiles folder, mode 0644, holding the
    user's own hooks and permissions in the user's own formatting: (link, target, its bytes)."""
    target = os.path.join(comm.work, "dotfiles", "claude", "settings.json")
    os.makedirs(os.path.dirname(target))
    data = (json.dumps(EXISTING, indent=4, sort_keys=True) + "\n").encode()  # not our formatting
    with open(target, "wb") as f:
        f.write(data)
    os.chmod(target, 0o644)
    link = os.path.join(comm.work, ".claude", "settings.json")
    os.makedirs(os.path.dirname(link))
    os.symlink(os.path.relpath(target, os.path.dirname(link)), link)
    return link, target, data


def test_install_writes_through_a_dotfiles_symlink_and_uninstall_restores_it_byte_for_byte(
    fresh: Comm,
) -> None:
    link, target, before = dotfiles_home(fresh)
    r = install(fresh, "--agent-settings")
    assert r.code == 0, r
    assert os.path.islink(link) and os.path.realpath(link) == target  # still the user's link
    assert mode(target) == 0o644  # the file keeps its mode
    with open(target, "rb") as f:
        after = f.read()
    doc = json.loads(after)
    assert _commands(doc["hooks"]["Stop"]) == [
        "/opt/other/on-stop.sh",
        q(bin_path(fresh, "comm-status-idle.sh")),
    ]
    assert "Bash(ls:*)" in doc["permissions"]["allow"]
    assert install(fresh, "--agent-settings").code == 0  # idempotent: the same bytes again
    with open(target, "rb") as f:
        assert f.read() == after
    a = fresh.session("alpha")
    assert a.run("join", "--name", "alpha").code == 0
    a.run("send", "@alpha", "kept")
    mail = fresh.inbox_bytes("alpha")
    r = uninstall(fresh)
    assert r.code == 0, r
    assert r.out_lines[0] == f"Restored {link} to its bytes before the install"
    assert os.path.islink(link) and mode(target) == 0o644
    with open(target, "rb") as f:
        assert f.read() == before
    skill = os.path.join(fresh.work, ".claude", "skills", "sot-session-start")
    assert f"Removed the skill {skill}/SKILL.md" in r.out_lines
    assert not os.path.exists(skill)
    # the skills folder the install made goes with the skill (issue 27); the user's settings file stays
    assert sorted(os.listdir(os.path.join(fresh.work, ".claude"))) == ["settings.json"]
    assert not os.path.exists(fresh.layout.bin_dir)  # every script it recorded, and nothing else was there
    assert fresh.inbox_bytes("alpha") == mail  # mail stays
    assert r.out_lines[-1] == "The comm folder's mail, registry and self files were left as they are."


def test_uninstall_after_the_user_edited_takes_out_only_sotds_entries(fresh: Comm) -> None:
    link, target, _before = dotfiles_home(fresh)
    assert install(fresh, "--agent-settings").code == 0
    with open(target) as f:
        doc = json.load(f)
    doc["permissions"]["allow"].append("Bash(make:*)")
    doc["hooks"]["Stop"].append({"hooks": [{"type": "command", "command": "/opt/mine/later.sh"}]})
    with open(target, "w") as f:
        json.dump(doc, f)
    r = uninstall(fresh)
    assert r.code == 0, r
    assert r.out_lines[0].startswith(f"Took sotd's hooks and allow rules out of {link} (it had changed")
    with open(target) as f:
        left = json.load(f)
    assert left == {
        "model": "opus",
        "permissions": {"allow": ["Bash(ls:*)", "Bash(make:*)"]},
        "hooks": {
            "Stop": [
                {"hooks": [{"type": "command", "command": "/opt/other/on-stop.sh"}]},
                {"hooks": [{"type": "command", "command": "/opt/mine/later.sh"}]},
            ],
            "Notification": EXISTING["hooks"]["Notification"],
        },
    }
    assert os.path.islink(link) and mode(target) == 0o644


def test_uninstall_removes_a_settings_file_install_created(fresh: Comm) -> None:
    path = os.path.join(fresh.work, "proj", ".claude", "settings.json")
    assert install(fresh, f"--agent-settings={path}").code == 0
    r = uninstall(fresh)
    assert r.code == 0, r
    assert r.out_lines[0] == f"Removed {path} (install had created it)"
    assert sorted(os.listdir(os.path.dirname(path))) == []  # the skills folder it made is gone too (issue 27)


def test_an_older_unquoted_entry_is_quoted_not_doubled(fresh: Comm) -> None:
    path = os.path.join(fresh.work, "settings.json")
    old = {
        "hooks": {
            "Stop": [{"hooks": [{"type": "command", "command": bin_path(fresh, "comm-status-idle.sh")}]}]
        }
    }
    with open(path, "w") as f:
        json.dump(old, f)
    assert install(fresh, f"--agent-settings={path}").code == 0
    with open(path) as f:
        assert _commands(json.load(f)["hooks"]["Stop"]) == [q(bin_path(fresh, "comm-status-idle.sh"))]


def test_hook_commands_run_from_a_comm_folder_with_spaces_and_quotes(tmp_path: object) -> None:
    comm = Comm(os.path.join(str(tmp_path), "my dir's"), install=False)
    path = os.path.join(comm.work, "settings.json")
    assert install(comm, f"--agent-settings={path}").code == 0
    with open(path) as f:
        doc = json.load(f)
    a = comm.session("alpha")
    assert a.run("join", "--name", "alpha").code == 0
    for event in EVENTS:
        for command in _commands(doc["hooks"][event]):
            # Claude Code runs a hook's command through a shell, as here
            p = subprocess.run(
                ["/bin/sh", "-c", command],
                check=False,
                cwd=a.root,
                env=a.env,
                input=json.dumps({"session_id": "s", "cwd": a.root, "hook_event_name": event}),
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert p.returncode == 0 and "not found" not in p.stderr, (event, command, p.stderr)


def test_wrappers_and_hooks_say_so_when_the_recorded_sotd_is_gone(fresh: Comm) -> None:
    fake = os.path.join(fresh.work, "venv", "bin", "sotd")
    os.makedirs(os.path.dirname(fake))
    with open(fake, "w") as f:
        f.write(f'#!/bin/sh\nexec {SOTD} "$@"\n')
    os.chmod(fake, 0o755)
    r = install(fresh, f"--sotd={fake}")
    assert (r.code, r.err) == (0, "")  # a sotd outside any source checkout: no note
    a = fresh.session("alpha")
    assert a.run("join", "--name", "alpha").code == 0  # the recorded sotd runs
    os.unlink(fake)
    gone = (
        f"sot-comm: the sotd these scripts were installed with ({fake}) is gone, so sot-comm is off here; "
        "install sotd again and run: sotd comm install"
    )
    r = a.run("poll")
    assert (r.code, r.out, r.err) == (1, "", f"comm-poll.sh: {gone}\n")
    r = a.run("status-idle", stdin="{}")
    assert (r.code, r.err) == (0, "")
    assert json.loads(r.out) == {"systemMessage": gone}


def test_a_skill_the_user_wrote_is_left_alone(fresh: Comm) -> None:
    mine = os.path.join(fresh.work, ".claude", "skills", "sot-session-start", "SKILL.md")
    os.makedirs(os.path.dirname(mine))
    with open(mine, "w") as f:
        f.write("my own notes\n")
    r = install(fresh, "--skill")
    assert r.code == 0, r
    assert (
        f"WARNING: {mine} is not one sotd wrote; it was left as it is, and the skill was not installed"
        in r.err
    )
    with open(mine) as f:
        assert f.read() == "my own notes\n"
    assert uninstall(fresh).code == 0
    with open(mine) as f:
        assert f.read() == "my own notes\n"


def test_unknown_argument(fresh: Comm) -> None:
    r = install(fresh, "--bogus")
    assert (r.code, r.out, r.err) == (
        2,
        "",
        "sotd comm install: unknown option '--bogus' (see: sotd comm install --help)\n"
        "usage: sotd comm install [--agent-settings[=PATH]] [--skill] [--sotd PATH]\n",
    )
    assert not os.path.exists(fresh.layout.bin_dir)


# ------------------------------------------------------------------------------------------ D2


def _both(comm: Comm, verb: str, *args: str) -> tuple[Result, Result]:
    s = comm.session("alpha")
    return s.run(verb, *args), s.run(verb, *args, wrapper=False)


SAME_NAME_CASES = [
    ("join", ("--bogus",), "comm-join.sh"),
    ("status", (), "comm-status.sh"),
    ("status", ("sleeping",), "comm-status.sh"),
    ("status", ("working",), "comm-status.sh"),
]


@pytest.mark.parametrize(("verb", "args", "wrapper"), SAME_NAME_CASES)
def test_wrapper_and_subcommand_differ_only_in_the_name(
    comm: Comm, verb: str, args: tuple, wrapper: str
) -> None:
    w, d = _both(comm, verb, *args)
    assert w.code == d.code != 0
    assert wrapper in w.err
    assert w.err.replace(wrapper, f"sotd comm {verb}") == d.err
    assert w.out == d.out


@pytest.mark.parametrize(
    ("verb", "args", "wrapper"),
    [("leave", ("--bogus",), "comm-leave.sh"), ("send", (), "comm-send.sh")],
)
def test_usage_names_the_command_typed(comm: Comm, verb: str, args: tuple, wrapper: str) -> None:
    w, d = _both(comm, verb, *args)
    assert w.code == d.code != 0
    assert wrapper in w.err
    assert w.err.replace(wrapper, f"sotd comm {verb}") == d.err


def test_wrapper_and_subcommand_agree_when_no_name_is_printed(comm: Comm) -> None:
    a, b = comm.session("alpha"), comm.session("beta")
    w, d = _both(comm, "poll")
    assert (
        (w.code, w.out, w.err) == (d.code, d.out, d.err) == (1, "", "Not joined — run comm-join.sh first.\n")
    )
    assert b.run("join", "--name", "beta").code == 0
    assert a.run("join", "--name", "alpha").code == 0
    msg = 'it\'s a "quoted" $HOME `x` \\ message'
    w = a.run("send", "@beta", msg)
    d = a.run("send", "@beta", msg, wrapper=False)
    assert (w.code, w.out, w.err) == (d.code, d.out, d.err) == (0, "  filed -> @beta\n", "")
    shown = b.run("poll").out_lines
    assert [x.split("] ", 2)[2] for x in shown] == [msg, msg]
    w, d = _both(comm, "list")
    assert (w.code, w.out, w.err) == (d.code, d.out, d.err)


def test_uninstall_with_nothing_recorded_removes_nothing(fresh: Comm) -> None:
    os.makedirs(fresh.layout.bin_dir)
    mine = bin_path(fresh, "my-own-tool.sh")
    with open(mine, "w") as f:
        f.write("#!/bin/sh\n")
    r = uninstall(fresh)
    assert (r.code, r.out, r.err) == (
        0,
        f"Nothing recorded by sotd comm install in {fresh.layout.bin_dir}; nothing was removed\n",
        "",
    )
    assert os.listdir(fresh.layout.bin_dir) == ["my-own-tool.sh"]


def test_install_refuses_a_sotd_that_is_not_an_executable(fresh: Comm) -> None:
    bogus = os.path.join(fresh.work, "nope")
    r = install(fresh, f"--sotd={bogus}")
    assert (r.code, r.out, r.err) == (2, "", f"sotd comm install: --sotd={bogus} is not an executable file\n")
    assert not os.path.exists(fresh.layout.bin_dir)
