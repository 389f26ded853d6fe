"""Issue 18's pure rules, one table each: folders a sandbox can write, path components, who may ask for
runs, which check-in ``fossil whatis`` names, and which arguments carry a password."""

from __future__ import annotations

import os
import stat

import pytest

from sotd.jobs import paths
from sotd.jobs.steps import checkin_hash
from sotd.ocx import fossil
from sotd.ocx.errors import OcxConfigError
from sotd.ocxrun import parse_senders, sender_refusal

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("mode", "owner", "writable"),
    [
        (0o755, 0, False),
        (0o700, 0, False),
        (0o775, 0, True),
        (0o757, 0, True),
        (0o1777, 0, True),  # /tmp: anyone may add entries
        (0o700, 1000, True),  # another run's workspace
        (0o555, 1000, True),  # its owner can chmod it back
    ],
)
def test_sandbox_writable(mode: int, owner: int, writable: bool) -> None:
    assert paths.sandbox_writable(stat.S_IFDIR | mode, owner) is writable


@pytest.mark.parametrize(
    ("path", "names"), [("/", []), ("/a/b", ["a", "b"]), ("/a//b/", ["a", "b"]), ("/a/./b", ["a", "b"])]
)
def test_components(path: str, names: list[str]) -> None:
    assert paths.components(path) == names


def test_components_refuses_a_relative_path() -> None:
    with pytest.raises(ValueError, match="not an absolute path"):
        paths.components("a/b")


SENDERS = {"proj": frozenset({"alice"}), "empty": frozenset()}


@pytest.mark.parametrize(
    ("clone", "sender", "why"),
    [
        ("proj", "alice", None),
        ("proj", "carol", "this node does not take runs on the clone 'proj' from the login 'carol'"),
        ("empty", "alice", "this node takes runs on the clone 'empty' from no login (its policy lists none in runs.senders)"),
        ("other", "alice", "this node takes runs on the clone 'other' from no login (its policy lists none in runs.senders)"),
    ],
)  # fmt: skip
def test_sender_refusal(clone: str, sender: str, why: str | None) -> None:
    assert sender_refusal(SENDERS, clone, sender) == why


def test_parse_senders() -> None:
    assert parse_senders({"proj": ["alice", "bob"]}, "p.toml") == {"proj": frozenset({"alice", "bob"})}
    for bad in ({"proj": "alice"}, {"proj": ["a b"]}, ["alice"]):
        with pytest.raises(OcxConfigError, match=r"runs\.senders must map clone names to lists of logins"):
            parse_senders(bad, "p.toml")


CHECKIN = "c" * 64
WHATIS = f"name:       trunk\nartifact:   {CHECKIN}\nsize:       163 bytes\ntags:       trunk\ntype:       Check-in by root on 2026-12-01\ncomment:    x\n"  # fmt: skip


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (WHATIS, CHECKIN),
        (WHATIS.replace(CHECKIN, "d" * 40), "d" * 40),
        (WHATIS.replace("type:       Check-in", "type:       File"), None),  # a file's hash, not a check-in
        (WHATIS + f"artifact:   {'e' * 64}\ntype:       Check-in by x\n", None),  # ambiguous
        ("", None),
        (WHATIS.replace(CHECKIN, "not-hex"), None),
    ],
)
def test_checkin_hash(text: str, want: str | None) -> None:
    assert checkin_hash(text) == want


@pytest.mark.parametrize(
    ("arg", "secret"),
    [
        ("http://lab-user:labpw@127.0.0.1:8080/", True),
        ("https://u:p%40ss@host/", True),
        ("http://lab-user@127.0.0.1:8080/", False),
        ("ssh://u@host//srv/r.fossil", False),
        ("-R", False),
        ("user@example.invalid", False),
    ],
)
def test_has_secret(arg: str, secret: bool) -> None:
    assert fossil.has_secret(arg) is secret


def test_secrets_moved_puts_the_url_in_a_private_args_file() -> None:
    url = "http://lab-user:labpw@127.0.0.1:8080/"
    with fossil.secrets_moved(["uv", "sync", url, "-R", "r.fossil"]) as argv:
        assert argv[:3] == ["uv", "sync", "--args"] and argv[4:] == ["-R", "r.fossil"]
        path = argv[3]
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
        with open(path) as f:
            assert f.read() == url + "\n"
    assert not os.path.exists(path)
    with fossil.secrets_moved(["uv", "sync", "-R", "r.fossil"]) as argv:
        assert argv == ["uv", "sync", "-R", "r.fossil"]


@pytest.mark.parametrize(
    ("at", "want"),
    [
        ("/r/u/p/x/nest", ("x", "/r/u/p/x")),
        ("/r/u/p", ("x", "/r/u/p/x")),  # would hold one
        ("/r/u/p/x", ("x", "/r/u/p/x")),
        ("/r/u/p/xy", None),  # a sibling whose name starts alike
        ("/r/u/q/z", None),
    ],
)
def test_nested_in(at: str, want: tuple[str, str] | None) -> None:
    from sotd.jobs.claims import nested_in

    assert nested_in(at, {"x": "/r/u/p/x", "y": "/r/u/q/y"}) == want
