"""The real Codex reads the MCP server ``sotd comm install --agent-settings`` registers (issue 26 item 2):
``codex mcp get sotd`` shows ``[mcp_servers.sotd]`` enabled, over stdio, running ``sotd mcp``, with its
tools approved (no prompt), and after ``uninstall`` Codex has no such server.

Not yet here: a Codex session calling the tools. Codex 0.171.0 offers MCP tools behind its client-side
``tool_search`` (the model searches, then calls), which the Responses stand-in does not answer yet.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

from tests.conftest import SOTD
from tests.realagent import codex_kit, kit
from tests.realagent.test_hooks_real import _comm_folder


def test_the_real_codex_reads_the_registered_server_and_forgets_it_after_uninstall(
    codex_home: codex_kit.CodexHome, tmp_path: Any
) -> None:
    comm = os.path.join(str(tmp_path), "comm")
    _comm_folder(comm)
    env = {k: v for k, v in os.environ.items() if not k.startswith(kit.DROP)}
    env.update(codex_home.env(), SOT_COMM_HOME=comm)

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), env=env, cwd=codex_home.home, capture_output=True, text=True,
                              timeout=60, check=False)  # fmt: skip

    assert run(SOTD, "comm", "install", "--agent-settings").returncode == 0
    got = run(codex_kit.codex_exe(), "mcp", "get", "sotd")
    assert got.returncode == 0, got
    lines = [ln.strip() for ln in got.stdout.splitlines()]
    for want in ("enabled: true", "transport: stdio", f"command: {SOTD}", "args: mcp",
                 "default_tools_approval_mode: approve"):  # fmt: skip
        assert want in lines, got.stdout
    assert run(SOTD, "comm", "uninstall").returncode == 0
    gone = run(codex_kit.codex_exe(), "mcp", "get", "sotd")
    assert gone.returncode != 0 or "sotd" not in gone.stdout, gone
