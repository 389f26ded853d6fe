"""The next step a failed command names, as a line the user can type (issue 13, "errors name the fix").

Spec: behaviour.md's sentences stay byte for byte; a hint is the second line under one (D15: our words).
Guarantee: every failure these functions cover carries a command that, typed as shown, is the next step
(start the daemon, see who is registered), and none replaces the protocol's own sentence.
What would break it: a hint that names a command this package does not have, or one folded into the
protocol sentence (scripts match the first line exactly).

Pure functions: text in, text out; the commands print nothing (only ``sotd.cli.main`` prints).
"""

from __future__ import annotations

START_DAEMON = "sotd daemon start"
LIST = "sotd comm list"


def no_daemon(socket_path: str, start_failed: str = "") -> str:
    """A command that needed this box's daemon and found none at ``socket_path``: autostart was off
    (``start_failed`` empty), or its try failed with those words."""
    if start_failed:
        from sotd.runtime import is_folder_refusal

        if is_folder_refusal(start_failed):  # no log was written: the refusal names what to do
            return f"starting this box's daemon failed: {start_failed}"
        return f"starting this box's daemon failed ({start_failed}); see its log, then: {START_DAEMON}"
    return f"no daemon runs at {socket_path} (SOT_DAEMON_AUTOSTART is off); start it: {START_DAEMON}"


def daemon_silent() -> str:
    """A daemon socket is there but nobody answered on it (a daemon that died, or a hung one)."""
    return f"check it: sotd daemon status (a hung one: sotd daemon stop; {START_DAEMON})"


def registry_unreadable() -> str:
    """A registry that exists but cannot be read: doctor says why and names the way out."""
    return "see why and what to do: sotd doctor"


def not_registered(handle: str, registry_path: str, no_relay_why: str) -> str:
    """A handle this folder's registry does not list, and no relay to ask: ``no_relay_why`` is
    ``topology.relay_endpoint_or_reason``'s reason (``topology.NO_HUB`` on a box with no ``hosts.toml``)."""
    from sotd import topology

    if no_relay_why == topology.NO_HUB:
        return (
            f"@{handle} is not registered here ({registry_path}) and no hub is configured; see who is: {LIST}"
        )
    return (
        f"@{handle} is not registered here ({registry_path}) and the hub cannot be asked ({no_relay_why}); "
        f"see who is: {LIST}"
    )


def options(verb: str) -> str:
    """A command refused for a word it was given (a bad option value, a path that is not there)."""
    return f"see the options: sotd comm {verb} --help"


def endpoint_silent(endpoint: str) -> str:
    """The daemon a spawn or despawn named did not answer: this box's (``unix:``) or a far one (``ssh:``)."""
    if endpoint.startswith("ssh:"):
        target = endpoint[4:].split("/", 1)[0]
        return f"check the far box's daemon: ssh {target} sotd daemon status"
    return daemon_silent()


def rows() -> str:
    """A row the daemon would not make or remove: the rows and their phases are one command away."""
    return "see the rows and their phases: sotd doctor"


def name_taken(handle: str) -> str:
    """A spawn's explicit name that the registry already lists (the sentence says what; this says how)."""
    return f"see who holds it: {LIST}; free it: sotd comm leave --name {handle}"


def task_by_hand(handle: str, task: str) -> str:
    """A row that is up but whose ``--task`` mail could not be queued: send it once the cause is fixed."""
    import shlex

    return f"the row is running; send the task yourself: sotd comm send @{handle} {shlex.quote(task)}"


def registry_entry_left(handle: str) -> str:
    """A despawned row whose registry entry could not be removed (the lock, most often)."""
    return f"see why: sotd doctor; then remove it: sotd comm leave --name {handle}"
