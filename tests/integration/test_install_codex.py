"""``sotd comm install --agent-settings`` for Codex (issue 12 part 2): sotd's hooks merged into
``$CODEX_HOME/hooks.json`` (or ``~/.codex``) and the rules file for the mail wrappers; merge keeps the
user's hooks, is idempotent, writes through a symlink keeping the mode, and uninstall takes out exactly
what it added (byte for byte when nobody changed the file since)."""

from __future__ import annotations

import json
import os
import stat
import subprocess

import pytest

from sotd.cli.install import codex_functions, scripts, settings
from tests.conftest import SOTD, Comm, Result, clean_env

pytestmark = pytest.mark.integration

MINE = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "/opt/mine/on-stop.sh"}]}]}, "x": 1}


@pytest.fixture
def fresh(tmp_path: object) -> Comm:
    return Comm(str(tmp_path), install=False)


def run(comm: Comm, verb: str, *args: str, codex_home: str | None = None) -> Result:
    env = clean_env()
    env.update(SOT_COMM_HOME=comm.home, HOME=comm.work)
    env.pop("CODEX_HOME", None)
    if codex_home:
        env["CODEX_HOME"] = codex_home
    p = subprocess.run([SOTD, "comm", verb, *args], check=False, cwd=comm.work, env=env, capture_output=True,
                       text=True, timeout=60)  # fmt: skip
    return Result(p)


def q(path: str) -> str:
    return "'" + path.replace("'", "'\\''") + "'"


def commands(doc: dict, event: str) -> list[str]:
    return [h["command"] for g in doc["hooks"].get(event, []) for h in g["hooks"]]


def test_codex_hooks_merge_through_a_symlink_keep_mode_are_idempotent_and_uninstall_restores(
    fresh: Comm,
) -> None:
    target = os.path.join(fresh.work, "dotfiles", "codex-hooks.json")
    os.makedirs(os.path.dirname(target))
    before = (json.dumps(MINE, indent=4) + "\n").encode()
    with open(target, "wb") as f:
        f.write(before)
    os.chmod(target, 0o644)
    link = os.path.join(fresh.work, ".codex", "hooks.json")
    os.makedirs(os.path.dirname(link))
    os.symlink(target, link)
    r = run(fresh, "install", "--agent-settings")
    assert r.code == 0, r
    assert f"Registered the hooks in {link} (Codex)" in r.out_lines
    assert settings.CODEX_TRUST_NOTE in r.out_lines
    assert os.path.islink(link) and stat.S_IMODE(os.stat(target).st_mode) == 0o644
    with open(target, "rb") as f:
        after = f.read()
    doc = json.loads(after)
    bin_dir = fresh.layout.bin_dir
    assert doc["x"] == 1
    assert commands(doc, "Stop") == ["/opt/mine/on-stop.sh", q(os.path.join(bin_dir, "comm-status-idle.sh"))]
    assert commands(doc, "SessionStart") == [q(os.path.join(bin_dir, "comm-session-start.sh"))]
    assert set(doc["hooks"]) == {"SessionStart", "Stop", "UserPromptSubmit", "PermissionRequest"}
    rules = os.path.join(fresh.work, ".codex", "rules", "sot-comm.rules")
    with open(rules) as f:
        text = f.read()
    assert 'prefix_rule(pattern = ["comm-poll.sh"], decision = "allow")' in text
    assert f'prefix_rule(pattern = ["{bin_dir}/comm-send.sh"], decision = "allow")' in text
    assert "comm-spawn.sh" not in text and "comm-despawn.sh" not in text  # a person approves those
    r = run(fresh, "install", "--agent-settings")  # idempotent: nothing rewritten
    assert f"The hooks were already registered in {link} (Codex)" in r.out_lines
    with open(target, "rb") as f:
        assert f.read() == after
    r = run(fresh, "uninstall")
    assert r.code == 0, r
    assert f"Restored {link} to its bytes before the install" in r.out_lines
    assert f"Removed {rules}" in r.out_lines
    assert os.path.islink(link) and stat.S_IMODE(os.stat(target).st_mode) == 0o644
    with open(target, "rb") as f:
        assert f.read() == before
    assert not os.path.exists(rules)


def test_codex_home_is_honoured_and_a_file_install_made_is_removed_whole(fresh: Comm) -> None:
    home = os.path.join(fresh.work, "elsewhere")
    r = run(fresh, "install", "--agent-settings", codex_home=home)
    assert r.code == 0, r
    path = os.path.join(home, "hooks.json")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert not os.path.exists(os.path.join(fresh.work, ".codex"))
    config = os.path.join(home, "config.toml")
    assert stat.S_IMODE(os.stat(config).st_mode) == 0o600
    r = run(fresh, "uninstall", codex_home=home)
    assert f"Removed {path} (install had created it)" in r.out_lines
    assert f"Removed {config} (install had created it)" in r.out_lines
    assert not os.path.exists(path) and not os.path.exists(config)


def test_uninstall_after_the_user_edited_codex_hooks_takes_out_only_ours(fresh: Comm) -> None:
    path = os.path.join(fresh.work, ".codex", "hooks.json")
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as f:
        json.dump(MINE, f)
    assert run(fresh, "install", "--agent-settings").code == 0
    with open(path) as f:
        doc = json.load(f)
    doc["hooks"]["Stop"].append({"hooks": [{"type": "command", "command": "/opt/mine/later.sh"}]})
    with open(path, "w") as f:
        json.dump(doc, f)
    assert run(fresh, "uninstall").code == 0
    with open(path) as f:
        left = json.load(f)
    assert left == {"hooks": {"Stop": [MINE["hooks"]["Stop"][0], doc["hooks"]["Stop"][-1]]}, "x": 1}


def test_a_rules_file_that_is_not_ours_is_left_alone(fresh: Comm) -> None:
    rules = os.path.join(fresh.work, ".codex", "rules", "sot-comm.rules")
    os.makedirs(os.path.dirname(rules))
    with open(rules, "w") as f:
        f.write("# mine\n")
    r = run(fresh, "install", "--agent-settings")
    assert r.code == 0, r
    assert any(ln.startswith(f"{rules} exists and is not sotd's: left as it is") for ln in r.out_lines), r
    assert run(fresh, "uninstall").code == 0
    with open(rules) as f:
        assert f.read() == "# mine\n"


def test_a_codex_hooks_file_that_is_not_json_is_refused_before_anything_is_written(fresh: Comm) -> None:
    path = os.path.join(fresh.work, ".codex", "hooks.json")
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        f.write(b"{not json")
    r = run(fresh, "install", "--agent-settings")
    assert r.code == 1, r
    assert (
        r.err_lines[-1].startswith(f"{path} is not valid JSON") and "nothing was changed" in r.err_lines[-1]
    )
    with open(path, "rb") as f:
        assert f.read() == b"{not json"
    assert not os.path.exists(os.path.join(fresh.work, ".claude"))


CONFIG = 'model = "gpt-5.5"\n\n[shell_environment_policy]\ninherit = "all"\n'


def _config(comm: Comm) -> str:
    return os.path.join(comm.work, ".codex", "config.toml")


def test_codex_config_gets_the_script_functions_keeps_the_users_keys_and_uninstall_restores(
    fresh: Comm,
) -> None:
    path = _config(fresh)
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as f:
        f.write(CONFIG)
    os.chmod(path, 0o640)
    r = run(fresh, "install", "--agent-settings")
    assert r.code == 0, r
    assert (
        f"Put the comm scripts on Codex's shell by name (bash functions under [shell_environment_policy.set]): "
        f"{path}" in r.out_lines
    )
    with open(path) as f:
        text = f.read()
    bin_dir = fresh.layout.bin_dir
    funcs = codex_functions.codex_functions(bin_dir)
    from sotd.cli.install import codex_config, mcp

    # then the MCP server's table (issue 26): the mcp part appends it after the functions
    assert text == CONFIG + "\n[shell_environment_policy.set]\n" + codex_config.MARK + "\n" + "".join(
        ln + "\n" for ln in codex_config.function_lines(funcs)
    ) + mcp.codex_table(scripts.sotd_executable())
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert sorted(funcs) == sorted(f"BASH_FUNC_{n}%%" for n in scripts.WRAPPERS)
    # bash imports each one: the bare name runs sotd's script
    env = {"PATH": "/usr/bin:/bin", "SOT_COMM_HOME": fresh.home, "HOME": fresh.work, **funcs}
    p = subprocess.run(["bash", "-c", "type -t comm-list.sh && comm-list.sh --help"], env=env,
                       capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    assert p.stdout.startswith("function\n") and "usage" in p.stdout.lower(), p
    assert (
        f"The comm scripts were already on Codex's shell by name in {path}"
        in run(fresh, "install", "--agent-settings").out_lines
    )
    r = run(fresh, "uninstall")
    assert f"Restored {path} to its bytes before the install" in r.out_lines, r
    with open(path) as f:
        assert f.read() == CONFIG


def test_uninstall_after_codex_recorded_trust_in_its_config_takes_out_only_our_lines(fresh: Comm) -> None:
    path = _config(fresh)
    assert run(fresh, "install", "--agent-settings").code == 0
    trust = '\n[projects."/p"]\ntrust_level = "trusted"\n'
    with open(path, "a") as f:
        f.write(trust)
    r = run(fresh, "uninstall")
    assert (
        f"Took sotd's shell functions out of {path} (it had changed since the install, so only those)"
        in r.out_lines
    ), r
    with open(path) as f:
        assert f.read() == trust  # Codex's bytes, as it appended them


def test_a_codex_config_that_is_not_toml_is_refused_before_anything_is_written(fresh: Comm) -> None:
    path = _config(fresh)
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        f.write(b"model = [1,\n")
    r = run(fresh, "install", "--agent-settings")
    assert r.code == 1, r
    assert r.err_lines[-2:] == [
        f"{path} is not valid TOML (Invalid value (at end of document)); nothing was changed",
        "Fix that line, then run: sotd comm install --agent-settings",
    ]
    with open(path, "rb") as f:
        assert f.read() == b"model = [1,\n"
    assert not os.path.exists(os.path.join(fresh.work, ".codex", "hooks.json"))
    assert not os.path.exists(os.path.join(fresh.work, ".claude"))


def test_plain_install_prints_the_codex_config_lines(fresh: Comm) -> None:
    from sotd.cli.install import codex_config

    r = run(fresh, "install")
    lines = codex_config.function_lines(codex_functions.codex_functions(fresh.layout.bin_dir))
    assert "  [shell_environment_policy.set]" in r.out_lines
    assert ["  " + ln for ln in lines] == [ln for ln in r.out_lines if "BASH_FUNC_" in ln]


def test_a_codex_config_symlink_is_written_through_and_stays_a_link(fresh: Comm) -> None:
    target = os.path.join(fresh.work, "dotfiles", "codex.toml")
    os.makedirs(os.path.dirname(target))
    with open(target, "w") as f:
        f.write(CONFIG)
    os.chmod(target, 0o644)
    link = _config(fresh)
    os.makedirs(os.path.dirname(link))
    os.symlink(target, link)
    assert run(fresh, "install", "--agent-settings").code == 0
    assert os.path.islink(link) and stat.S_IMODE(os.stat(target).st_mode) == 0o644
    with open(target) as f:
        assert f.read().startswith(CONFIG + "\n[shell_environment_policy.set]\n")
    assert f"Restored {link} to its bytes before the install" in run(fresh, "uninstall").out_lines
    assert os.path.islink(link)
    with open(target) as f:
        assert f.read() == CONFIG


def test_a_shell_other_than_bash_is_told_the_functions_are_bashs(fresh: Comm) -> None:
    env = clean_env()
    env.update(SOT_COMM_HOME=fresh.home, HOME=fresh.work, SHELL="/usr/bin/zsh")
    env.pop("CODEX_HOME", None)
    p = subprocess.run([SOTD, "comm", "install", "--agent-settings"], check=False, cwd=fresh.work, env=env,
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert p.returncode == 0, p
    assert (
        "note: your shell is zsh; Codex runs the model's commands in it, and only bash imports these "
        f"functions: name the scripts by full path there ({fresh.layout.bin_dir}/comm-poll.sh)"
    ) in p.stdout.splitlines()


def test_uninstall_removes_the_skills_and_rules_folders_it_made_and_only_those(fresh: Comm) -> None:
    """Issue 27: uninstall left empty ``~/.claude/skills/`` and ``~/.codex/rules/`` behind; a folder that
    was there before the install, or that holds someone else's file, stays."""
    skills = os.path.join(fresh.work, ".claude", "skills")
    rules = os.path.join(fresh.work, ".codex", "rules")
    assert run(fresh, "install", "--agent-settings").code == 0
    assert os.path.isdir(skills) and os.path.isdir(rules)
    r = run(fresh, "uninstall")
    assert r.code == 0, r
    assert not os.path.exists(skills) and not os.path.exists(rules)
    # made by the user before: kept, however empty; holding another file after the install: kept
    os.makedirs(skills)
    assert run(fresh, "install", "--agent-settings").code == 0
    with open(os.path.join(rules, "mine.rules"), "w") as f:
        f.write("# the user's\n")
    assert run(fresh, "uninstall").code == 0
    assert os.listdir(skills) == [] and os.listdir(rules) == ["mine.rules"]
