"""``sotd comm install --agent-settings`` registers ``sotd mcp`` (issue 26 item 2): with Claude Code in
``~/.claude.json`` (user scope, ``mcpServers``) and its allow rules in ``settings.json``, with Codex as
``[mcp_servers.sotd]`` in ``config.toml``; everything else kept, idempotent, and ``uninstall`` gives the
exact bytes back (or, after Claude Code rewrote its file, takes out only our entry)."""

from __future__ import annotations

import json
import os

import pytest

from sotd.cli.install import mcp as install_mcp
from tests.conftest import SOTD, Comm
from tests.integration.test_install_codex import run

pytestmark = pytest.mark.integration

CLAUDE_JSON = {
    "numStartups": 3,
    "mcpServers": {"other": {"type": "stdio", "command": "/opt/other"}},
    "x": [1],
}
# what Codex passes to the server of the session's environment (it filters the rest out)
ENV_VARS = (
    '"SOT_COMM_HOME", "SOT_COMM_SELF_FILE", "SOT_COMM_NAME", "SOT_WORKSPACE_ID", "SOT_WORKSPACE", '
    '"SOT_SOCKET", "SOT_SELF_HOST", "SOT_COMM_TEST_HOST", "SOT_HOSTS_TOML", "SOT_BACKEND_LABEL", '
    '"SOTD_STATE_DIR"'
)
TOOLS = [f"mcp__sotd__{t}" for t in ("join", "send", "poll", "unread", "list", "status")]


@pytest.fixture
def fresh(tmp_path: object) -> Comm:
    return Comm(str(tmp_path), install=False)


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def test_registered_with_both_agents_idempotent_and_uninstall_gives_the_bytes_back(fresh: Comm) -> None:
    cj = os.path.join(fresh.work, ".claude.json")
    toml = os.path.join(fresh.work, ".codex", "config.toml")
    settings = os.path.join(fresh.work, ".claude", "settings.json")
    before_cj = (json.dumps(CLAUDE_JSON, indent=2) + "\n").encode()
    before_toml = b'model = "gpt-5"\n'
    before_settings = b'{"permissions": {"allow": ["Bash(ls:*)"]}}\n'
    write(cj, before_cj)
    write(toml, before_toml)
    write(settings, before_settings)
    r = run(fresh, "install", "--agent-settings")
    assert r.code == 0, r
    assert f"Registered the MCP server 'sotd' (sotd mcp) with Claude Code in {cj}" in r.out_lines
    doc = json.loads(read(cj))
    assert doc["mcpServers"]["sotd"] == {"type": "stdio", "command": SOTD, "args": ["mcp"], "env": {}}
    assert doc["mcpServers"]["other"] == CLAUDE_JSON["mcpServers"]["other"] and doc["numStartups"] == 3
    allow = json.loads(read(settings))["permissions"]["allow"]
    assert allow[0] == "Bash(ls:*)" and set(TOOLS) <= set(allow)
    toml_text = read(toml).decode()
    assert toml_text.startswith(before_toml.decode())
    assert toml_text.endswith(
        f'\n[mcp_servers.sotd]\ncommand = "{SOTD}"\nargs = ["mcp"]\nenv_vars = [{ENV_VARS}]\n'
        'default_tools_approval_mode = "approve"\n'
    )
    once = (read(cj), read(toml), read(settings))
    r = run(fresh, "install", "--agent-settings")
    assert r.code == 0, r
    assert f"The MCP server 'sotd' was already registered in {cj}" in r.out_lines
    assert (read(cj), read(toml), read(settings)) == once
    r = run(fresh, "uninstall")
    assert r.code == 0, r
    assert f"Restored {cj} to its bytes before the install" in r.out_lines
    assert (read(cj), read(toml), read(settings)) == (before_cj, before_toml, before_settings)


def test_after_claude_code_rewrote_its_file_only_our_entry_comes_out(fresh: Comm) -> None:
    cj = os.path.join(fresh.work, ".claude.json")
    write(cj, (json.dumps(CLAUDE_JSON, indent=2) + "\n").encode())
    assert run(fresh, "install", "--agent-settings").code == 0
    doc = json.loads(read(cj))
    doc["numStartups"] = 4  # Claude Code keeps its state here
    write(cj, json.dumps(doc).encode())
    r = run(fresh, "uninstall")
    assert (
        f"Took the MCP server 'sotd' out of {cj} (it had changed since the install, so only that)"
        in r.out_lines
    )
    assert json.loads(read(cj)) == {**CLAUDE_JSON, "numStartups": 4}


def test_a_missing_file_is_created_and_removed_again(fresh: Comm) -> None:
    cj = os.path.join(fresh.work, ".claude.json")
    assert run(fresh, "install", "--agent-settings").code == 0
    assert json.loads(read(cj)) == {"mcpServers": {"sotd": install_mcp.claude_entry(SOTD)}}
    assert os.stat(cj).st_mode & 0o777 == 0o600
    r = run(fresh, "uninstall")
    assert f"Removed {cj} (install had created it)" in r.out_lines
    assert not os.path.exists(cj)


def test_a_server_of_that_name_that_is_not_ours_is_left_alone(fresh: Comm) -> None:
    cj = os.path.join(fresh.work, ".claude.json")
    theirs = {"mcpServers": {"sotd": {"type": "stdio", "command": "/somewhere/else"}}}
    write(cj, json.dumps(theirs).encode())
    r = run(fresh, "install", "--agent-settings")
    assert r.code == 0, r
    assert f"{cj} already names an MCP server 'sotd' that is not this install's; left as it is" in r.out_lines
    assert json.loads(read(cj)) == theirs
    run(fresh, "uninstall")
    assert json.loads(read(cj)) == theirs


@pytest.mark.parametrize("data", [b"[1, 2]\n", b"{not json", b'{"mcpServers": []}\n'])
def test_a_claude_json_it_cannot_merge_into_is_refused_before_anything_is_written(
    fresh: Comm, data: bytes
) -> None:
    cj = os.path.join(fresh.work, ".claude.json")
    write(cj, data)
    r = run(fresh, "install", "--agent-settings")
    assert r.code == 1, r
    assert "nothing was changed" in r.err
    assert read(cj) == data
    assert not os.path.exists(os.path.join(fresh.work, ".claude", "settings.json"))
    assert not os.path.exists(fresh.layout.bin_dir) or not os.listdir(fresh.layout.bin_dir)


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("", "added"),
        ('model = "x"', "added"),
        ('[mcp_servers.sotd]\ncommand = "/x"\n', "foreign"),
    ],
)
def test_merge_codex_toml(text: str, verdict: str) -> None:
    new, got = install_mcp.merge_codex_toml(text, "/v/sotd")
    assert got == verdict
    if verdict == "added":
        assert new.startswith(text) and new.endswith(install_mcp.codex_table("/v/sotd"))
        assert install_mcp.unmerge_codex_toml(new, new[len(text) :]) == text
        assert install_mcp.merge_codex_toml(new, "/v/sotd") == (new, "kept")


def test_the_stop_reason_names_the_tools_once_registered(comm: Comm) -> None:
    """The spec's sentence stays first and whole; the tools follow it only where install registered them."""
    from tests.integration.test_stop_hook import reason, stop

    a, b = comm.session("alpha"), comm.session("beta")
    assert a.run("join", "--name", "alpha").code == 0
    assert b.run("join", "--name", "beta").code == 0
    assert b.run("send", "@alpha", "one").code == 0
    assert json.loads(stop(a).out)["reason"] == reason("alpha")  # not registered: byte for byte as before
    from sotd import mcp

    with open(os.path.join(comm.layout.bin_dir, mcp.RECORD_FILE), "w") as f:
        json.dump({"mcp": {"/x/.claude.json": {"added": {}}}}, f)
    assert b.run("send", "@alpha", "two").code == 0
    assert json.loads(stop(a).out)["reason"] == reason("alpha") + mcp.STOP_NOTE


def test_the_record_file_is_the_installs() -> None:
    from sotd import mcp
    from sotd.cli.install import record as install

    assert mcp.RECORD_FILE == install.SETTINGS_RECORD


@pytest.mark.parametrize("tools", [False, True])
def test_the_start_text_names_the_tools_once_registered(tools: bool) -> None:
    from sotd import mcp
    from sotd.cli.comm.sessionstart import start_text

    text = start_text("alpha", cmd_dir="", skill=False, tools=tools)
    assert (mcp.START_LINE in text.splitlines()) is tools
    assert (
        text.splitlines()[0]
        == "sot-comm: this session is @alpha — other agent sessions reach it by that handle."
    )
    failed = start_text(None, cmd_dir="", skill=False, problem=["x"], tools=tools)
    assert failed.endswith(
        "join by hand with comm-join.sh --name NAME (or the sotd MCP server's join tool)."
        if tools
        else "join by hand with comm-join.sh --name NAME."
    )
