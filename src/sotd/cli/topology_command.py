"""``sotd topology relay-endpoint``: the hub's endpoint from this box's ``hosts.toml`` (behaviour 1.4, 2.2).

Prints the endpoint on its first line, exit 0: on a guest the hub's endpoint, on the hub its own daemon's
socket (``unix:<path>``; D4's offer happens there). None (no file, an unreadable one, or the hub's daemon
socket is not there): the reason on stderr, exit 1.
"""

from __future__ import annotations

import os
import sys

from sotd import cmdtable
from sotd.errors import EXIT_OK, NoRelayEndpoint, UsageError

USAGE = cmdtable.usage("topology")  # made from the command table


def run(argv: list[str]) -> int:
    from sotd import runtime, topology

    if argv == ["path"]:
        sys.stdout.write(topology.path(os.environ) + "\n")
        return EXIT_OK
    if argv != ["relay-endpoint"]:
        raise UsageError(USAGE)
    own = os.environ.get("SOT_SOCKET") or runtime.default_socket(os.environ)
    ep, why = topology.relay_endpoint_or_reason(os.environ, runtime.self_host(os.environ), own)
    if ep is None:
        raise NoRelayEndpoint(why)
    sys.stdout.write(ep + "\n")
    return EXIT_OK
