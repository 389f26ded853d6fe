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
