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
]
SHIPPED = [*WRAPPERS, *HOOKS, "comm-relay.sh"]
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


def mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_writes_every_script_version_and_record(fresh: Comm) -> None:
    r = install(fresh)
    assert r.code == 0, r
    assert r.out_lines[0] == f"Installed sot-comm 0.7.0 into {fresh.layout.bin_dir}: {', '.join(SHIPPED)}"
    assert r.err == ""
    for name in SHIPPED:
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
    assert set(hooks) == {"Stop", "UserPromptSubmit", "PreToolUse", "PostToolUse", "PermissionRequest"}
    assert hooks["Stop"][0]["hooks"][0]["command"] == bin_path(fresh, "comm-status-idle.sh")
    assert hooks["PermissionRequest"] == [
        {
            "matcher": "*",
            "hooks": [{"type": "command", "command": bin_path(fresh, "comm-status-permission.sh")}],
        }
    ]
    assert codex == {
        "hooks": {
            "Stop": [{"hooks": [{"type": "command", "command": bin_path(fresh, "comm-status-idle.sh")}]}],
            "UserPromptSubmit": [
                {"hooks": [{"type": "command", "command": bin_path(fresh, "comm-status-prompt.sh")}]}
            ],
            "PermissionRequest": [
                {
                    "matcher": "*",
                    "hooks": [{"type": "command", "command": bin_path(fresh, "comm-status-permission.sh")}],
                }
            ],
        }
    }
    assert "Codex has no Stop hook" not in r.out
    assert f"('run {fresh.layout.bin_dir}/comm-poll.sh after each task')." in r.out_lines


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
    assert all(mode(bin_path(fresh, n)) == 0o755 for n in SHIPPED)
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
    assert left == sorted([*SHIPPED, ".installed", "my-own-tool.sh"])
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


def _commands(groups: list) -> list[str]:
    return [h["command"] for g in groups for h in g["hooks"]]


def test_agent_settings_merge_keeps_everything_and_is_idempotent(comm: Comm) -> None:
    path = os.path.join(comm.work, "claude", "settings.json")
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as f:
        json.dump(EXISTING, f, indent=2)
    r = install(comm, f"--agent-settings={path}")
    assert r.code == 0, r
    assert r.out_lines[-1] == f"Registered the hooks in {path}"
    with open(path, "rb") as f:
        first = f.read()
    doc = json.loads(first)
    assert doc["model"] == "opus" and doc["permissions"] == EXISTING["permissions"]
    hooks = doc["hooks"]
    assert hooks["Notification"] == EXISTING["hooks"]["Notification"]
    assert _commands(hooks["Stop"]) == ["/opt/other/on-stop.sh", bin_path(comm, "comm-status-idle.sh")]
    assert _commands(hooks["UserPromptSubmit"]) == [bin_path(comm, "comm-status-prompt.sh")]
    assert hooks["PreToolUse"] == [
        {
            "matcher": "AskUserQuestion",
            "hooks": [{"type": "command", "command": bin_path(comm, "comm-status-pretool.sh")}],
        }
    ]
    assert _commands(hooks["PostToolUse"]) == [bin_path(comm, "comm-status-posttool.sh")]
    assert _commands(hooks["PermissionRequest"]) == [bin_path(comm, "comm-status-permission.sh")]
    r = install(comm, f"--agent-settings={path}")
    assert r.code == 0, r
    assert r.out_lines[-1] == f"The hooks were already registered in {path}"
    with open(path, "rb") as f:
        assert f.read() == first


def test_agent_settings_creates_a_missing_file(comm: Comm) -> None:
    path = os.path.join(comm.work, "new", "settings.json")
    assert install(comm, f"--agent-settings={path}").code == 0
    with open(path) as f:
        assert set(json.load(f)["hooks"]) == {
            "Stop",
            "UserPromptSubmit",
            "PreToolUse",
            "PostToolUse",
            "PermissionRequest",
        }


def test_agent_settings_default_path_is_under_home(comm: Comm) -> None:
    r = install(comm, "--agent-settings")
    assert r.code == 0, r
    assert os.path.exists(os.path.join(comm.work, ".claude", "settings.json"))


@pytest.mark.parametrize(
    "data",
    [b"{not json", b'[{"hooks": {}}]', b'"a string"\n', b'{"hooks": []}\n', b'{"hooks": {"Stop": {}}}\n'],
    ids=["malformed", "array", "string", "hooks-not-object", "event-not-list"],
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


def test_unknown_argument(fresh: Comm) -> None:
    r = install(fresh, "--bogus")
    assert (r.code, r.out, r.err) == (
        2,
        "",
        "sotd comm install: unknown option '--bogus' (see: sotd comm install --help)\n"
        "usage: sotd comm install [--agent-settings[=PATH]]\n",
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
