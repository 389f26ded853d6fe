"""``sotd comm hook start``: the SessionStart hook joins the session and tells the model its handle.

The work is ``sotd.cli.comm.sessionstart`` (which the other hooks also use, to adopt the self file it pins);
this module is the hook's entry: the input read within bounds, ``SOT_COMM_HOOKS=off`` honoured.
"""

from __future__ import annotations

from sotd.cli.comm.hooks.shared import read_hook_json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping


def run(environ: Mapping[str, str]) -> int:
    """SessionStart: join this session and tell the model its handle (``sotd.cli.comm.sessionstart``)."""
    hook = read_hook_json()
    if environ.get("SOT_COMM_HOOKS") == "off":
        return 0
    from sotd.cli.comm import sessionstart

    return sessionstart.run(environ, hook)
