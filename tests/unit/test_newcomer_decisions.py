"""The pure parts of issue 13: when a command may start this box's daemon, what the started daemon
inherits, and the hints under the protocol's sentences (each names a command the user can type)."""

from __future__ import annotations

import pytest

from sotd import topology
from sotd.cli.comm import autostart, hints

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("value", "wanted"),
    [
        (None, True),
        ("", True),
        ("on", True),
        ("1", True),
        ("off", False),
        ("OFF", False),
        ("0", False),
        ("no", False),
        ("false", False),
        (" off ", False),
    ],
)
def test_autostart_wanted(value: str | None, wanted: bool) -> None:
    env = {} if value is None else {"SOT_DAEMON_AUTOSTART": value}
    assert autostart.wanted(env) is wanted


def test_the_started_daemon_does_not_inherit_the_session_identity() -> None:
    env = {
        "SOT_COMM_HOME": "/c",
        "SOT_COMM_SELF_FILE": "/s",
        "SOT_WORKSPACE": "w",
        "TMUX": "t",
        "CLAUDECODE": "1",
        "PATH": "/b",
    }
    assert autostart.daemon_environ(env) == {"SOT_COMM_HOME": "/c", "PATH": "/b"}


@pytest.mark.parametrize(
    ("text", "command"),
    [
        (hints.no_daemon("/run/s.sock"), "sotd daemon start"),
        (hints.no_daemon("/run/s.sock", "it exited at start"), "sotd daemon start"),
        (hints.daemon_silent(), "sotd daemon status"),
        (hints.not_registered("gamma", "/c/registry.json", topology.NO_HUB), "sotd comm list"),
        (
            hints.not_registered("gamma", "/c/registry.json", "the hub's daemon is not there"),
            "sotd comm list",
        ),
    ],
)
def test_each_hint_names_a_command(text: str, command: str) -> None:
    assert text.endswith(command) or f"{command} " in text or f"{command};" in text


def test_not_registered_says_so_and_whether_a_hub_is_configured() -> None:
    assert hints.not_registered("g", "/c/registry.json", topology.NO_HUB) == (
        "@g is not registered here (/c/registry.json) and no hub is configured; see who is: sotd comm list"
    )
    assert hints.not_registered("g", "/c/registry.json", "x") == (
        "@g is not registered here (/c/registry.json) and the hub cannot be asked (x); see who is: sotd comm list"
    )
