"""The daemon's OCX node: when an OCX configuration exists, one thread runs the node's poll loop with the
``run`` and ``stop`` readers of layer 3 (``sotd.ocxrun``).

``start(environ)`` returns ``None`` when there is no configuration file (``sotd.ocx.config.config_path``)
and logs why when there is one that cannot be used; the daemon serves on either way. The thread first
looks again at runs a previous daemon left unfinished (adopted, or ended ``lost``), then syncs every
``interval`` seconds. ``stop(svc)`` asks the loop to end and waits for it (bounded); runs in progress are
left as they are, to be adopted or ended ``lost`` by the next start.
"""

from __future__ import annotations

import logging
import os
import threading

from sotd.errors import SotdError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from sotd.ocx.node import Node
    from sotd.ocxrun import Runs

log = logging.getLogger("sotd")

STOP_WAIT_S = 15.0


class OcxNode:
    """The node, its readers, and the thread that runs them."""

    def __init__(self, node: Node, runs: Runs) -> None:
        self.node = node
        self.runs = runs
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._main, name="ocx-node", daemon=True)

    def _main(self) -> None:
        try:
            again = self.runs.recover()
            if again:
                log.info("ocx: %d unfinished run(s) looked at again", len(again))
            self.node.poll_loop(self.stopping)
        except Exception:  # the daemon goes on without OCX; the log says why
            log.exception("ocx: the node's poll loop failed")

    def close(self, timeout: float = STOP_WAIT_S) -> None:
        self.stopping.set()
        self.thread.join(timeout)
        if self.thread.is_alive():
            log.warning("ocx: the node's poll loop did not stop within %gs", timeout)
            return
        self.node.close()


def start(environ: Mapping[str, str]) -> OcxNode | None:
    """The running node when ``environ`` names an OCX configuration that exists, else ``None``."""
    from sotd.ocx.config import config_path, load_config

    path = config_path(environ)
    if not os.path.exists(path):
        return None
    try:
        from sotd.ocx.node import Node
        from sotd.ocxrun import Runs, load_settings

        config = load_config(environ)
        settings = load_settings(config, environ)
        node = Node(config)
        svc = OcxNode(node, Runs(node, settings).attach())
    except (SotdError, OSError) as e:
        log.error("ocx: not serving the clones of %s: %s", path, getattr(e, "message", e))
        return None
    svc.thread.start()
    log.info(
        "ocx: serving %d clone(s) of %s; node policy %s",
        len(config.clones),
        path,
        settings.path or "none (this node runs nothing)",
    )
    return svc


def stop(svc: OcxNode | None) -> None:
    """Stop the node started by ``start`` (nothing when it returned ``None``)."""
    if svc is not None:
        svc.close()
