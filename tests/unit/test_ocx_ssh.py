"""The ssh side of the OCX carrier without a network: URL reading, the ssh command, HTTP replies."""

from __future__ import annotations

import json
import shlex

import pytest

from sotd.ocx import fossil as fx
from sotd.ocx.errors import OcxError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("url", "destination", "port", "path", "program"),
    [
        ("ssh://root@10.0.0.1//srv/ocx/proj.fossil", "root@10.0.0.1", None, "/srv/ocx/proj.fossil", "fossil"),
        ("ssh://hub:2222/proj.fossil", "hub", 2222, "proj.fossil", "fossil"),
        ("ssh://u@hub//a%20b/p.fossil?fossil=/opt/f/fossil", "u@hub", None, "/a b/p.fossil", "/opt/f/fossil"),
    ],
)
def test_ssh_remote_reads_urls_as_fossil_does(
    url: str, destination: str, port: int | None, path: str, program: str
) -> None:
    r = fx.SshRemote(url)
    assert (r.destination, r.port, r.path, r.program) == (destination, port, path, program)


@pytest.mark.parametrize("url", ["ssh://hub", "http://hub/x", "ssh://hub/"])
def test_ssh_remote_refuses(url: str) -> None:
    with pytest.raises(OcxError):
        fx.SshRemote(url)


def test_ssh_command_is_batch_mode_and_quoted_for_sh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOT_SSH_CONFIG", raising=False)
    assert fx.ssh_base()[:3] == ["ssh", "-o", "BatchMode=yes"]
    assert "ConnectTimeout=10" in fx.ssh_base()
    monkeypatch.setenv("SOT_SSH_CONFIG", "/tmp/a b/ssh config")
    cmd = fx.ssh_command()
    assert shlex.split(cmd)[:3] == ["ssh", "-F", "/tmp/a b/ssh config"]
    assert shlex.split(cmd) == fx.ssh_base()


def test_is_ssh() -> None:
    assert fx.is_ssh("ssh://h//x") and not fx.is_ssh("http://h/") and not fx.is_ssh(None)


LISTING = [{"name": "ocx/m/" + "a" * 64 + ".json", "mtime": 1, "hash": "a" * 64, "size": 3, "user": "admin"}]


def _reply(body: bytes, status: str = "200 OK", crlf: bool = True) -> bytes:
    nl = b"\r\n" if crlf else b"\n"
    head = [
        f"HTTP/1.0 {status}".encode(),
        b"Content-Type: application/json",
        b"Content-Length: %d" % len(body),
    ]
    return nl.join(head) + nl + nl + body


def test_http_reply_plain_and_after_a_banner() -> None:
    body = json.dumps(LISTING).encode()
    assert fx.http_reply(_reply(body)) == (200, body)
    banner = b"Welcome to the hub! HTTP/1.0 is not at a line start here\n\n{not json\n"
    assert fx.http_reply(banner + _reply(body, crlf=False) + b"trailing noise") == (200, body)
    assert fx.http_reply(_reply(b"nope", "404 Not Found"))[0] == 404


@pytest.mark.parametrize(
    "raw", [b"", b"server did not reply\n", b"HTTP/1.0 OK\r\n\r\n", b"HTTP/1.0 200 OK\r\n"]
)
def test_http_reply_none(raw: bytes) -> None:
    assert fx.http_reply(raw) == (None, b"")


def test_listing_reads_name_hash_user() -> None:
    body = json.dumps([*LISTING, {"name": 3}, {"name": "x", "hash": "b" * 40, "user": None}]).encode()
    assert fx._listing(body, "here") == {LISTING[0]["name"]: ("a" * 64, "admin"), "x": ("b" * 40, None)}
    with pytest.raises(OcxError, match="here did not answer with JSON"):
        fx._listing(b"<html>", "here")
