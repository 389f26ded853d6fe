"""``sotd.jobs.runner.env_with_home``: the sandboxed process's environment when a run brings ``homes``
(ocx.md O7 and section 1.4's reading "bring these home entries with the process"; docs/ocx.md)."""

from __future__ import annotations

import pytest

from sotd.jobs.runner import env_with_home

pytestmark = pytest.mark.unit

WS = "/srv/ocx/build-user/projects/proj/abc"


@pytest.mark.parametrize(
    ("env", "homes", "want"),
    [
        # homes and no HOME: the node points HOME at the copies
        ({"PATH": "/usr/bin"}, ("/root/.claude",), {"PATH": "/usr/bin", "HOME": f"{WS}/home"}),
        ({}, ("/root/.claude", "/root/.gitconfig"), {"HOME": f"{WS}/home"}),
        # the run's own HOME wins, wherever it points (even an empty one)
        ({"HOME": WS}, ("/root/.claude",), {"HOME": WS}),
        ({"HOME": ""}, ("/root/.claude",), {"HOME": ""}),
        # no homes: exactly process.env, HOME unset stays unset
        ({"PATH": "/usr/bin"}, (), {"PATH": "/usr/bin"}),
        ({"HOME": "/x"}, (), {"HOME": "/x"}),
    ],
)
def test_home_is_the_workspaces_home_only_with_homes_and_no_home_of_the_runs_own(
    env: dict[str, str], homes: tuple[str, ...], want: dict[str, str]
) -> None:
    before = dict(env)
    assert env_with_home(env, homes, WS) == want
    assert env == before  # the run's own mapping is not changed
