"""``sotd mcp``: the command table's entry for the MCP server (``sotd.mcp.server``, issue 26).

The server lives in its own package (``sotd/mcp/``: protocol, tools, loop); this module only hands it the
command line, so the console script's table names CLI modules alone.
"""

from __future__ import annotations


def run(argv: list[str]) -> int:
    from sotd.mcp import server

    return server.run(argv)
