"""``sotd mcp``: mail as MCP tools, one stdio server per agent session (issue 26).

``protocol`` is the JSON-RPC 2.0 / MCP side, pure (lines in, answers out, the era and version of the
connection); ``tools`` is the tool table (names, schemas, descriptions written for a model) and each
tool's call into the same plan/act functions the ``sotd comm`` verbs run; ``server`` is the thin loop
over stdin and stdout. ``NAMES`` is here, with nothing imported, so the installer can name the tools
(allow rules, start text) without loading the server.

Nothing of the product imports this package but ``sotd.cli.main``'s lazy command table (by string) and
the installer (``NAMES`` only); it stays standard library only (docs/design.md, "The MCP server").
"""

from __future__ import annotations

# The server's name as agents register it (Claude Code calls its tools ``mcp__sotd__<tool>``).
SERVER_NAME = "sotd"
# Every tool the server offers, in the order tools/list gives them.
NAMES = ("join", "send", "poll", "unread", "list", "status")

# What a session's identity is read from (the comm folder, the row, the self file, the host): an agent
# that starts its MCP servers with a filtered environment (Codex passes only HOME, PATH, USER and a few
# more, plus the names its ``env_vars`` lists) is told to pass these, so the server acts as the session's
# handle, exactly as the session's own commands do (a name that is not set is not passed).
SESSION_ENV = (
    "SOT_COMM_HOME",
    "SOT_COMM_SELF_FILE",
    "SOT_COMM_NAME",
    "SOT_WORKSPACE_ID",
    "SOT_WORKSPACE",
    "SOT_SOCKET",
    "SOT_SELF_HOST",
    "SOT_COMM_TEST_HOST",
    "SOT_HOSTS_TOML",
    "SOT_BACKEND_LABEL",
    "SOTD_STATE_DIR",
)

# The install record (``sotd.cli.install.SETTINGS_RECORD`` in ``bin/``): its ``mcp`` entry says the server
# was registered with the agents, so the start text and the Stop hook name the tools.
RECORD_FILE = ".installed-settings.json"

START_LINE = (
    "- Mail as tools: the sotd MCP server's tools (join, send, poll, unread, list, status) do the same with "
    "no shell: reply with its send tool (the text goes exactly as given, no quoting) and read with its poll tool."
)
STOP_NOTE = " With the sotd MCP tools: call its poll tool, then reply with its send tool."


def registered(bin_dir: str) -> bool:
    """Whether ``sotd comm install --agent-settings`` registered the server (its record's ``mcp`` entry).
    Reads one small file; no ``json`` import (the hooks' start-up rules: ``sotd.fastjson``)."""
    import os

    try:
        with open(os.path.join(bin_dir, RECORD_FILE), "rb") as f:
            data = f.read(1 << 20)
    except OSError:
        return False
    if b'"mcp"' not in data:
        return False
    from sotd import fastjson

    try:
        doc = fastjson.loads(data)
    except (ValueError, RecursionError):
        return False
    return isinstance(doc, dict) and bool(doc.get("mcp"))
