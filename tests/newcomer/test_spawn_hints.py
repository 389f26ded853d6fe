"""Issue 13, part 2 "errors name the fix", for spawn and despawn (behaviour 1.10, 1.11), as transcripts.

Before: each ERROR or FAILED line below was the whole of stderr, and the user was left to guess the next
step. After: the protocol's sentence is still the first line, byte for byte, and a second line names the
next step as a command the user can type (``sotd daemon start``, ``sotd comm spawn --help``). The
refusals that need a running daemon (a name taken, a destroy refused, a create refused) are in
tests/integration/test_rows.py and tests/multihost/test_remote_spawn.py.
"""

from __future__ import annotations

import os

import pytest

from sotd.cli.comm import hints
from tests.conftest import Comm, Session

pytestmark = pytest.mark.transcripts

NO_DAEMON = "ERROR: could not find the sotd daemon. Set --endpoint unix:/path or ssh:target[/host]."


def _box(tmp_path: object) -> tuple[Comm, Session, dict[str, str]]:
    comm = Comm(str(tmp_path))
    a = comm.session("alpha")
    run_dir = os.path.join(comm.work, "run")
    os.makedirs(run_dir, exist_ok=True)
    return comm, a, {"SOT_SOCKET": "", "XDG_RUNTIME_DIR": run_dir, "SOT_DAEMON_AUTOSTART": "off"}


@pytest.mark.parametrize("verb", ["spawn", "despawn"])
def test_no_daemon_found_names_sotd_daemon_start(tmp_path: object, verb: str) -> None:
    _comm, a, env = _box(tmp_path)
    r = a.run(verb, a.root if verb == "spawn" else "alpha", env=env, wrapper=False)
    assert (r.code, r.out) == (1, ""), r
    assert r.err_lines == [NO_DAEMON, "or start this box's daemon: sotd daemon start"]


def test_a_spawn_whose_daemon_socket_is_missing_names_sotd_daemon_start(tmp_path: object) -> None:
    comm, a, env = _box(tmp_path)
    sock = os.path.join(comm.work, "run", "gone.sock")
    r = a.run("spawn", a.root, env={**env, "SOT_SOCKET": sock}, wrapper=False)
    assert (r.code, r.out) == (1, ""), r
    assert len(r.err_lines) == 2, r
    assert r.err_lines[0].startswith(f"ERROR: the sotd daemon at unix:{sock} did not answer version.query: ")
    assert (
        r.err_lines[1]
        == f"no daemon runs at {sock} (SOT_DAEMON_AUTOSTART is off); start it: sotd daemon start"
    )


def test_a_despawn_that_cannot_list_names_sotd_daemon_start(tmp_path: object) -> None:
    comm, a, env = _box(tmp_path)
    sock = os.path.join(comm.work, "run", "gone.sock")
    r = a.run("despawn", "nobody", env={**env, "SOT_SOCKET": sock}, wrapper=False)
    assert (r.code, r.out) == (1, ""), r
    assert len(r.err_lines) == 2, r
    assert r.err_lines[0].startswith(
        f"FAILED: comm-despawn could not resolve 'nobody' to a workspace via unix:{sock}: "
    )
    assert r.err_lines[0].endswith("; nothing was despawned.")
    assert (
        r.err_lines[1]
        == f"no daemon runs at {sock} (SOT_DAEMON_AUTOSTART is off); start it: sotd daemon start"
    )


def test_a_remote_spawn_with_a_relative_path_names_the_help(tmp_path: object) -> None:
    _comm, a, env = _box(tmp_path)
    r = a.run("spawn", "proj", "--endpoint", "ssh:far", env=env, wrapper=False)
    assert (r.code, r.out) == (1, ""), r
    assert r.err_lines == [
        "ERROR: a spawn on another box (ssh:far) needs the repo's absolute path on that box (got 'proj')",
        "see the options: sotd comm spawn --help",
    ]


@pytest.mark.parametrize(
    ("hint", "expected"),
    [
        (hints.options("despawn"), "see the options: sotd comm despawn --help"),
        (hints.endpoint_silent("ssh:far/b2"), "check the far box's daemon: ssh far sotd daemon status"),
        (
            hints.endpoint_silent("unix:/s"),
            "check it: sotd daemon status (a hung one: sotd daemon stop; sotd daemon start)",
        ),
        (hints.name_taken("boss"), "see who holds it: sotd comm list; free it: sotd comm leave --name boss"),
        (
            hints.task_by_hand("rob", "fix it's build"),
            "the row is running; send the task yourself: sotd comm send @rob 'fix it'\"'\"'s build'",
        ),
        (hints.registry_entry_left("g"), "see why: sotd doctor; then remove it: sotd comm leave --name g"),
    ],
)
def test_the_hint_texts(hint: str, expected: str) -> None:
    assert hint == expected
