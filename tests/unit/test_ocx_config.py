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
        'logins = ["a", "b"]\nurl = "https://a@h/x"\npassword_file = "pw"\n'
    )
    cfg = parse_config(text, "/c/ocx.toml")
    (c,) = cfg.clones
    assert (c.logins, c.url, c.password_file, cfg.index, cfg.interval) == (
        ("a", "b"),
        "https://a@h/x",
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


@pytest.mark.parametrize(
    "url",
    ["ssh://a@h//srv/x.fossil", "ssh://h:2222/rel.fossil", "ssh://h//x.fossil?fossil=/usr/bin/fossil"],
)
def test_ssh_urls(url: str) -> None:
    (c,) = parse_config(f'[[clone]]\nrepository = "r"\nlogin = "a"\nurl = "{url}"\n', "/c/ocx.toml").clones
    assert c.url == url and c.password_file is None


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("ssh://h", "is not ssh://[user@]host[:port]/PATH"),
        ("ssh://h/", "is not ssh://[user@]host[:port]/PATH"),
        ("ssh:///x.fossil", "is not ssh://[user@]host[:port]/PATH"),
        ("ssh://h:port//x.fossil", "is not ssh://[user@]host[:port]/PATH"),
        ("ssh://u:pw@h//x.fossil", "is not ssh://[user@]host[:port]/PATH"),
        ("ssh://h//x.fossil?other=1", "knows only 'fossil'"),
    ],
)
def test_ssh_url_refusals(url: str, fragment: str) -> None:
    with pytest.raises(OcxConfigError) as e:
        parse_config(f'[[clone]]\nrepository = "r"\nlogin = "a"\nurl = "{url}"\n', "/c/ocx.toml")
    assert fragment in e.value.message


def test_ssh_url_takes_no_password_file() -> None:
    text = '[[clone]]\nrepository = "r"\nlogin = "a"\nurl = "ssh://h//x.fossil"\npassword_file = "pw"\n'
    with pytest.raises(OcxConfigError, match="'password_file' does not apply to an ssh:// url"):
        parse_config(text, "/c/ocx.toml")


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
