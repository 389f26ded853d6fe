"""``sotd web``: the command table's entry for the fleet's page (``sotd.web.server``, issue 30).

The server lives in its own package (``sotd/web/``); this module only hands it the command line, so the
console script's table names CLI modules alone.
"""

from __future__ import annotations


def run(argv: list[str]) -> int:
    from sotd.web import server

    return server.run(argv)
