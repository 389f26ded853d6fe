"""OCX layer 3 on a node: the ``run`` and ``stop`` readers between ``sotd.ocx`` and ``sotd.jobs``.

- ``settings``: the node policy file (``ocx-policy.toml``, ``load_settings``, ``[runs.senders]``);
- ``runs``: ``Runs``, the two readers, the answers and their record, ``recover()`` after a restart;
- ``sessions``: ``session: true`` runs as one terminal row of the daemon (O11, ``SessionHost``);
- ``records``: the JSON files written whole (answers record, session record, launch spec).

Each module's classes talk to the others' through public methods only. The names below are the
package's API for its importers (``sotd ocx node`` in the CLI, ``sotd.daemon.ocxnode``, the tests).
This package imports ``sotd.ocx``, ``sotd.jobs``, ``sotd.errors``, ``sotd._clock`` and the standard
library (import-linter holds it); only the CLI and the daemon import it. What would break it: a reader
name (``READER_RUN``, ``READER_STOP``) that changes, as the index keys each hand-off by it.
"""

from __future__ import annotations

from sotd.ocxrun.records import read_json, write_json
from sotd.ocxrun.runs import (
    ADMIN_CAPS,
    PHASES,
    READER_RUN,
    READER_STOP,
    Active,
    Runs,
    has_login,
    log_name,
    node_logins,
)
from sotd.ocxrun.sessions import (
    LAUNCH_SPEC,
    NODE_KINDS,
    SESSION_INBOX,
    SESSION_OUTBOX,
    SESSION_POLL_S,
    SESSION_RECORD,
    RowLauncher,
    Session,
    SessionHost,
    session_handle,
)
from sotd.ocxrun.settings import (
    POLICY_NAME,
    RunSettings,
    load_settings,
    parse_senders,
    parse_settings,
    policy_path,
    sender_refusal,
)

__all__ = [
    "ADMIN_CAPS",
    "LAUNCH_SPEC",
    "NODE_KINDS",
    "PHASES",
    "POLICY_NAME",
    "READER_RUN",
    "READER_STOP",
    "SESSION_INBOX",
    "SESSION_OUTBOX",
    "SESSION_POLL_S",
    "SESSION_RECORD",
    "Active",
    "RowLauncher",
    "RunSettings",
    "Runs",
    "Session",
    "SessionHost",
    "has_login",
    "load_settings",
    "log_name",
    "node_logins",
    "parse_senders",
    "parse_settings",
    "policy_path",
    "read_json",
    "sender_refusal",
    "session_handle",
    "write_json",
]
