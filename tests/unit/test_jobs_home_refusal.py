"""``sotd.jobs.steps.home_refusal`` (issue 24): a home entry is copied only into a name nothing holds yet,
so a link (or anything else) a check-in put at ``home/<name>`` is refused, never written through."""

from __future__ import annotations

import pytest

from sotd.jobs.steps import home_refusal

pytestmark = pytest.mark.unit

AT = "/srv/ocx/build-user/projects/proj/abc/home/.claude"


@pytest.mark.parametrize(
    ("kind", "seen", "want"),
    [
        (None, False, None),
        ("a symlink", False, f"the home entry /root/.claude cannot be copied into the workspace: {AT} is already"
                             " there (a symlink, put there by a workspace step): refused"),
        ("a folder", False, f"the home entry /root/.claude cannot be copied into the workspace: {AT} is already"
                            " there (a folder, put there by a workspace step): refused"),
        ("a file", False, f"the home entry /root/.claude cannot be copied into the workspace: {AT} is already"
                          " there (a file, put there by a workspace step): refused"),
        (None, True, "the home entry /root/.claude has the same name as another home entry of this run: refused"),
    ],
)  # fmt: skip
def test_a_home_goes_only_where_nothing_is(kind: str | None, seen: bool, want: str | None) -> None:
    assert home_refusal("/root/.claude", AT, kind, seen) == want
