"""sotd.demo.ocx_seed: the shared OCX builders give each caller its own objects, bodies the run parser
accepts, a node policy the policy parser accepts that allows those bodies, and ``ocx.toml`` text the
config parser reads."""

from __future__ import annotations

import json
import tomllib

import pytest

from sotd.demo import ocx_seed as seed
from sotd.jobs import nodepolicy, spec
from sotd.ocx.config import parse_config

pytestmark = pytest.mark.unit

CLONE = "c" * 40
SESSION_ENV = {"PATH": "/usr/bin:/bin", "HOME": "$$workspace$$"}
VALUES = {"workspace": "/r/ws", "tree": "/r/ws/tree", "release": "/rel"}


def test_an_edited_body_leaves_the_next_one_as_the_seed_writes_it() -> None:
    first = seed.build_body(CLONE, seed.BUILD_COMMAND)
    first["workspace"][0]["at"] = "$$root$$/elsewhere"
    first["process"]["command"].append("more")
    again = seed.build_body(CLONE, seed.BUILD_COMMAND)
    assert again["workspace"][0] == {
        "step": "directory", "at": "$$root$$/$$process_user$$/projects/$$repository_name$$/$$run$$"
    }  # fmt: skip
    assert again["process"]["command"] == ["make", "-C", "$$tree$$", "image"] == seed.BUILD_COMMAND
    s1 = seed.session_body(CLONE, ["agent"], SESSION_ENV)
    s1["workspace"][1]["step"] = "files"
    s1["sandbox"]["read_only"].append("/etc")
    s2 = seed.session_body(CLONE, ["agent"], SESSION_ENV)
    assert [s["step"] for s in s2["workspace"]] == ["directory", "password", "clone", "checkout"]
    assert s2["sandbox"]["read_only"] == [
        "/usr",
        "/bin",
        "/lib",
        "/etc/resolv.conf",
        "/etc/ssl/certs",
        "$$release$$",
    ]


def resolved(body: dict[str, object]) -> spec.RunSpec:
    """The body parsed with the sandbox's placeholders as a node fills them in (``VALUES``)."""
    text = json.dumps(body)
    for name, value in VALUES.items():
        text = text.replace(f"$${name}$$", value)
    run = spec.parse_run(json.loads(text))
    assert isinstance(run, spec.RunSpec), run
    return run


def test_the_bodies_parse_and_the_policies_allow_them() -> None:
    build = resolved(seed.build_body(CLONE, seed.BUILD_COMMAND))
    session = resolved(seed.session_body(CLONE, ["agent"], SESSION_ENV, homes=["/root/.claude"]))
    builds = seed.node_policy("/r", "/s", users=["build-user"], read_only=["/usr", "/etc/alternatives"],
                              limits={"wall": "1h", "processes": 512})  # fmt: skip
    sessions = seed.node_policy(
        "/r", "/s", users=["agent-user"], read_only=seed.SESSION_READ_ONLY, limits={"wall": "1h"},
        release="/rel", clone_url="http://127.0.0.1:1/", sessions=True, network=True, homes=["/root/.claude"],
    )  # fmt: skip
    doc = tomllib.loads(sessions)
    assert doc["runs"]["clone_urls"] == {"proj": "http://127.0.0.1:1/"} and doc["runs"]["release"] == "/rel"
    for text, run in ((builds, build), (sessions, session)):
        policy = nodepolicy.parse_policy(tomllib.loads(text)["jobs"]["policy"])
        assert nodepolicy.check(run, policy, VALUES) is None
    refused = nodepolicy.check(
        build, nodepolicy.parse_policy(tomllib.loads(sessions)["jobs"]["policy"]), VALUES
    )
    assert refused == "this node does not run processes as the login 'build-user'"


def test_the_node_config_reads_back() -> None:
    text = seed.node_config("/i.sqlite", [{"name": "proj", "repository": "/b.fossil", "login": "lab-user",
                                           "url": "http://lab-user@127.0.0.1:1/"}])  # fmt: skip
    cfg = parse_config(text, "ocx.toml")
    assert [(c.name, c.repository, c.login) for c in cfg.clones] == [("proj", "/b.fossil", "lab-user")]
