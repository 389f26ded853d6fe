"""Which password/clone steps a node refuses before any step runs (ocx.md 1.3, issue 21): a run may never
rotate or receive the password of a login the node itself uses; a login missing from the node's clone and
a clone step with no server of that clone are refused naming the commands that set them up."""

from __future__ import annotations

import pytest

from sotd.jobs.steps import Target, steps_refusal
from sotd.ocx.config import CloneConfig
from sotd.ocxrun import node_logins

pytestmark = pytest.mark.unit

REPO = "/srv/b.fossil"
URL = "http://127.0.0.1:8081/"
SEED = ("directory", "password", "clone", "checkout")  # the seed's agent-session workspace

OWN = (
    "run.process.user 'lab-user' is a login this node itself uses on this node's clone 'proj': a password"
    " step would rotate its password and hand it to the run; ask for another login"
)
MISSING = (
    "the password step sets the password of the login 'agent-user' in this node's clone 'proj', which has"
    " no such login; the node's operator adds it with: fossil user new agent-user agent-user@localhost"
    " unused-password -R /srv/b.fossil && fossil user capabilities agent-user gio -R /srv/b.fossil"
)
NO_SERVER = (
    "the clone step needs a server of this node's clone 'proj' (where the password step sets the"
    " password): start one with: fossil server --localhost --port 8081 /srv/b.fossil and add"
    ' [runs.clone_urls] proj = "http://127.0.0.1:8081/" to /etc/sotd/ocx-policy.toml'
)


def _target(url: str | None = URL) -> Target:
    return Target(REPO, url, name="proj", policy_path="/etc/sotd/ocx-policy.toml",
                  node_logins=frozenset({"lab-user", "peer"}))  # fmt: skip


@pytest.mark.parametrize(
    ("kinds", "user", "url", "has_login", "why"),
    [
        (SEED, "agent-user", URL, True, None),
        (SEED, "lab-user", URL, True, OWN),  # the node's own login, though it is in the table
        (SEED, "peer", URL, True, OWN.replace("'lab-user'", "'peer'")),
        (("directory", "password"), "lab-user", None, True, OWN),
        (SEED, "agent-user", URL, False, MISSING),
        (SEED, "agent-user", None, True, NO_SERVER),
        (SEED, "agent-user", None, False, MISSING),  # the first thing to fix first
        (("directory", "files"), "lab-user", None, None, None),  # no password: the login is only a name
        (("directory", "password", "checkout"), "agent-user", None, True, None),  # no clone: no server
    ],
)
def test_steps_refusal(
    kinds: tuple[str, ...], user: str, url: str | None, has_login: bool | None, why: str | None
) -> None:
    assert steps_refusal(kinds, user, _target(url), has_login) == why


@pytest.mark.parametrize(
    ("login", "logins", "url", "clone_url", "want"),
    [
        ("lab-user", ("lab-user",), None, None, {"lab-user"}),
        ("lab-user", ("lab-user", "agent-clone-user"), "http://lab-user@hub:8080/", None,
         {"lab-user", "agent-clone-user"}),
        ("lab-user", ("lab-user",), "http://sync%2Dme:pw@hub:8080/", "https://served@127.0.0.1:8081/x",
         {"lab-user", "sync-me", "served"}),
        ("lab-user", ("lab-user",), "ssh://ocx@hub//srv/p.fossil", None, {"lab-user"}),  # ssh user: no login
    ],
)  # fmt: skip
def test_node_logins(
    login: str, logins: tuple[str, ...], url: str | None, clone_url: str | None, want: set[str]
) -> None:
    clone = CloneConfig(name="proj", repository=REPO, login=login, logins=logins, url=url, password_file=None)
    assert node_logins(clone, clone_url) == want
