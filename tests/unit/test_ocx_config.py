"""The node's OCX configuration: parsing, defaults, refusals (table tests, no I/O)."""

from __future__ import annotations

import pytest

from sotd.ocx.config import check_server_codes, config_path, parse_config
from sotd.ocx.errors import DuplicateServerCode, OcxConfigError

pytestmark = pytest.mark.unit


def test_defaults_and_relative_paths() -> None:
    cfg = parse_config('[[clone]]\nrepository = "r/proj.fossil"\nlogin = "lab-user"\n', "/etc/sotd/ocx.toml")
    (c,) = cfg.clones
    assert (c.name, c.repository, c.login, c.logins, c.url, c.password_file) == (
        "proj",
        "/etc/sotd/r/proj.fossil",
        "lab-user",
        ("lab-user",),
        None,
        None,
    )
    assert cfg.index == "/etc/sotd/ocx-index.sqlite" and cfg.interval == 5.0
    assert cfg.clone("proj") is c and cfg.clone("/etc/sotd/r/proj.fossil") is c


def test_full_clone() -> None:
    text = (
        'index = "/var/i.sqlite"\ninterval = 2\n[[clone]]\nname = "p"\nrepository = "/x.fossil"\nlogin = "a"\n'
        'logins = ["a", "b"]\nurl = "ssh://a@h//srv/x.fossil"\npassword_file = "pw"\n'
    )
    cfg = parse_config(text, "/c/ocx.toml")
    (c,) = cfg.clones
    assert (c.logins, c.url, c.password_file, cfg.index, cfg.interval) == (
        ("a", "b"),
        "ssh://a@h//srv/x.fossil",
        "/c/pw",
        "/var/i.sqlite",
        2.0,
    )


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("x = ", "is not valid TOML"),
        ("bogus = 1", "unknown key 'bogus'"),
        ("interval = 0", "'interval' must be a number"),
        ('[[clone]]\nlogin = "a"', "has no 'repository'"),
        ('[[clone]]\nrepository = "r"', "has no 'login'"),
        ('[[clone]]\nrepository = "r"\nlogin = "a b"', "'login' is not a login"),
        ('[[clone]]\nrepository = "r"\nlogin = "a"\nurl = "ftp://h/"', "must be an http(s):// or ssh:// URL"),
        ('[[clone]]\nrepository = "r"\nlogin = "a"\nlogins = []', "'logins' must be a non-empty array"),
        ('[[clone]]\nrepository = "r"\nlogin = "a"\nextra = 1', "unknown key 'extra'"),
        (
            '[[clone]]\nrepository = "r"\nlogin = "a"\n[[clone]]\nrepository = "r"\nlogin = "b"\nname = "o"',
            "listed twice",
        ),
        (
            '[[clone]]\nrepository = "r"\nlogin = "a"\n[[clone]]\nrepository = "s"\nlogin = "b"\nname = "r"',
            "used twice",
        ),
    ],
)
def test_refusals(text: str, fragment: str) -> None:
    with pytest.raises(OcxConfigError) as e:
        parse_config(text, "/c/ocx.toml")
    assert fragment in e.value.message


def test_unknown_clone_names_the_known_ones() -> None:
    cfg = parse_config('[[clone]]\nrepository = "r.fossil"\nlogin = "a"\n', "/c/ocx.toml")
    with pytest.raises(OcxConfigError, match="clones: r"):
        cfg.clone("nope")


def test_config_path() -> None:
    assert config_path({"SOT_OCX_CONFIG": "/a/b.toml", "SOT_COMM_HOME": "/h"}) == "/a/b.toml"
    assert config_path({"SOT_COMM_HOME": "/h"}) == "/h/ocx.toml"
    assert config_path({"HOME": "/home/u"}) == "/home/u/.sot-comm/ocx.toml"


def test_duplicate_server_codes() -> None:
    check_server_codes({"a": "1" * 40, "b": "2" * 40})
    with pytest.raises(DuplicateServerCode) as e:
        check_server_codes({"a": "1" * 40, "b": "1" * 40})
    assert (
        e.value.message
        == f"ocx: the clones 'a' and 'b' share the server-code {'1' * 40}; a node serves each clone once"
    )
    assert e.value.hint is not None and e.value.hint.startswith(
        "give one a fresh server-code: sotd ocx server-code b --new"
    )
