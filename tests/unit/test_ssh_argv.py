"""sotd.client.ssh: the exact ssh command line (behaviour 2.2), its remote command, and the banner filter."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from sotd.client import ssh
from sotd.errors import WireError
from sotd.wire.hello import hello_payload
from sotd.wire.messages import OneShot

pytestmark = pytest.mark.unit

BASE = [
    "ssh",
    "-T",
    "-o",
    "BatchMode=yes",
    "-o",
    "ServerAliveInterval=15",
    "-o",
    "ServerAliveCountMax=3",
]
PREFIX = 'PATH="$HOME/.local/share/sot/bin:$HOME/.cargo/bin:$HOME/.local/bin:$PATH"; export PATH; exec '


def mux(folder: str) -> list[str]:
    return [
        "-o",
        "ControlMaster=auto",
        "-o",
        f"ControlPath={folder}/sot-comm-ssh-%C",
        "-o",
        "ControlPersist=600",
    ]


NO_MUX = ["-o", "ControlMaster=no", "-o", "ControlPath=none"]


@pytest.mark.parametrize(
    ("target", "remote", "environ", "want"),
    [
        (
            "boxa",
            ["sotd", "stdio-bridge"],
            {"XDG_RUNTIME_DIR": "/run/user/1000"},
            [*BASE, *mux("/run/user/1000"), "boxa", PREFIX + "sotd stdio-bridge"],
        ),
        (
            "hub.example.org",
            ["sotd", "stdio-bridge", "--host", "boxb"],
            {"XDG_RUNTIME_DIR": "/run/user/0"},
            [*BASE, *mux("/run/user/0"), "hub.example.org", PREFIX + "sotd stdio-bridge --host boxb"],
        ),
        (
            "boxa",
            ["sotd", "stdio-bridge"],
            {"XDG_RUNTIME_DIR": "/run/user/7", "SOT_SSH_CONFIG": "/etc/sot/ssh config"},
            [
                "ssh",
                "-F",
                "/etc/sot/ssh config",
                *BASE[1:],
                *mux("/run/user/7"),
                "boxa",
                PREFIX + "sotd stdio-bridge",
            ],
        ),
        (
            "10.77.0.1",
            ["sotd", "stdio-bridge", "--endpoint", "unix:/a b/it's.sock"],
            {"XDG_RUNTIME_DIR": "/r"},
            [
                *BASE,
                *mux("/r"),
                "10.77.0.1",
                PREFIX + "sotd stdio-bridge --endpoint 'unix:/a b/it'\"'\"'s.sock'",
            ],
        ),
        (
            "boxa",
            ["sotd", "stdio-bridge"],
            {"XDG_RUNTIME_DIR": "/run/50%"},
            [
                *BASE,
                "-o",
                "ControlMaster=auto",
                "-o",
                "ControlPath=/run/50%%/sot-comm-ssh-%C",
                "-o",
                "ControlPersist=600",
                "boxa",
                PREFIX + "sotd stdio-bridge",
            ],
        ),
        (
            "boxa",
            ["sotd", "stdio-bridge"],
            {"XDG_RUNTIME_DIR": "/run/my dir"},
            [
                *BASE,
                "-o",
                "ControlMaster=auto",
                "-o",
                'ControlPath="/run/my dir/sot-comm-ssh-%C"',
                "-o",
                "ControlPersist=600",
                "boxa",
                PREFIX + "sotd stdio-bridge",
            ],
        ),
        (
            "boxa",
            ["sotd", "stdio-bridge"],
            {"XDG_RUNTIME_DIR": '/run/"q"'},
            [*BASE, *NO_MUX, "boxa", PREFIX + "sotd stdio-bridge"],
        ),
    ],
)
def test_argv_table(target, remote, environ, want):
    assert ssh.ssh_argv(target, remote, environ) == want


def test_bridge_argv():
    assert ssh.bridge_argv() == ["sotd", "stdio-bridge"]
    assert ssh.bridge_argv("boxb") == ["sotd", "stdio-bridge", "--host", "boxb"]


@pytest.mark.parametrize("bad", ["", "-oProxyCommand=x", "Boxa", "box a", "user@box", "box/x", ".box"])
def test_target_must_be_a_plain_host(bad):
    with pytest.raises(ValueError):
        ssh.ssh_argv(bad, ["sotd", "stdio-bridge"], {"XDG_RUNTIME_DIR": "/r"})


def test_empty_remote_argv_is_refused():
    with pytest.raises(ValueError):
        ssh.ssh_argv("boxa", [], {"XDG_RUNTIME_DIR": "/r"})


def test_fallback_folder_is_made_private(tmp_path):
    env = {"TMPDIR": str(tmp_path)}
    folder = os.path.join(str(tmp_path), f"sot-comm-ssh-{os.geteuid()}")
    assert ssh.ssh_argv("boxa", ["true"], env) == [*BASE, *mux(folder), "boxa", PREFIX + "true"]
    st = os.lstat(folder)
    assert st.st_mode & 0o777 == 0o700 and st.st_uid == os.geteuid()


def test_fallback_folder_not_private_turns_multiplexing_off(tmp_path):
    folder = os.path.join(str(tmp_path), f"sot-comm-ssh-{os.geteuid()}")
    os.mkdir(folder)
    os.chmod(folder, 0o755)
    assert ssh.ssh_argv("boxa", ["true"], {"TMPDIR": str(tmp_path)})[8:12] == NO_MUX


def test_fallback_folder_that_is_a_symlink_is_not_used(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    os.symlink(real, os.path.join(str(tmp_path), f"sot-comm-ssh-{os.geteuid()}"))
    assert ssh.ssh_argv("boxa", ["true"], {"TMPDIR": str(tmp_path)})[8:12] == NO_MUX


@pytest.mark.parametrize(
    ("word", "quoted"),
    [
        ("sotd", "sotd"),
        ("unix:/run/user/0/sotd.sock", "unix:/run/user/0/sotd.sock"),
        ("", "''"),
        ("a b", "'a b'"),
        ("$HOME", "'$HOME'"),
        ("it's", "'it'\"'\"'s'"),
        ("a;rm -rf /", "'a;rm -rf /'"),
    ],
)
def test_shell_quote(word, quoted):
    assert ssh.shell_quote(word) == quoted


def test_remote_command_runs_under_sh_with_the_three_folders_first(tmp_path):
    """The command line ssh hands the remote shell: the folders come first on PATH, in order, then $PATH."""
    home = tmp_path / "home"
    for i, sub in enumerate((".local/share/sot/bin", ".cargo/bin", ".local/bin")):
        d = home / sub
        d.mkdir(parents=True)
        if i == 1:  # only ~/.cargo/bin has a sotd: the first folder with one wins
            p = d / "sotd"
            p.write_text('#!/bin/sh\nprintf "%s\\n" "cargo" "$PATH" "$@"\n')
            p.chmod(0o755)
    cmd = ssh.remote_command(["sotd", "stdio-bridge", "--host", "it's b"])
    out = subprocess.run(
        ["sh", "-c", cmd],
        env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert out[0] == "cargo"
    assert out[1] == f"{home}/.local/share/sot/bin:{home}/.cargo/bin:{home}/.local/bin:/usr/bin:/bin"
    assert out[2:] == ["stdio-bridge", "--host", "it's b"]


# ------------------------------------------------------------------------------- banner before the wire

HELLO = hello_payload(host="boxb", os_user="uid:0", role="cli", name="a")


def env_line(id, op, payload, kind="res"):
    return json.dumps({"v": 1, "id": id, "kind": kind, "op": op, "payload": payload}).encode() + b"\n"


def test_banner_lines_before_the_first_envelope_are_skipped():
    shot = OneShot("comm.file", {}, HELLO)
    child = ssh._Child(shot)
    child.out(b"Welcome to boxa!\n\n{not json either\nLast login: ")
    child.out(b"yesterday\n" + env_line(1, "hello", {"ok": True})[:10])
    assert not shot.done and not child.passed
    child.out(env_line(1, "hello", {"ok": True})[10:] + env_line(2, "comm.file", {"ok": True}))
    assert shot.done and shot.response == {"ok": True}


def test_garbage_after_the_first_envelope_is_a_wire_error():
    shot = OneShot("comm.file", {}, HELLO)
    child = ssh._Child(shot)
    child.out(b"motd\n" + env_line(1, "hello", {"ok": True}))
    with pytest.raises(WireError):
        child.out(b"not json\n")


def test_a_banner_without_end_is_bounded():
    child = ssh._Child(OneShot("comm.file", {}, HELLO))
    with pytest.raises(WireError):
        child.out(b"x" * (ssh.PREAMBLE_MAX + 1))


def test_stderr_keeps_the_last_printable_line():
    child = ssh._Child(OneShot("comm.file", {}, HELLO))
    child.err(b"Warning: Permanently added 'boxa'\r\n")
    child.err(b"ssh: connect to host boxa port 22: Connection ")
    assert child.last_err == "Warning: Permanently added 'boxa'"
    child.err(b"refused\x1b[0m\n\n")
    assert child.last_err == "ssh: connect to host boxa port 22: Connection refused [0m"
    child.err(b"tail without newline")
    child.err_done()
    assert child.last_err == "tail without newline"


def test_the_link_dial_adds_a_connect_timeout_after_the_base_options():
    argv = ssh.ssh_argv("boxa", ["sotd", "stdio-bridge"], {"XDG_RUNTIME_DIR": "/r"}, connect_timeout=3)
    assert argv[: len(BASE) + 2] == [*BASE, "-o", "ConnectTimeout=3"]
    assert (
        argv[len(BASE) + 2 :]
        == ssh.ssh_argv("boxa", ["sotd", "stdio-bridge"], {"XDG_RUNTIME_DIR": "/r"})[len(BASE) :]
    )


@pytest.mark.parametrize(
    ("environ", "want"),
    [
        ({"XDG_RUNTIME_DIR": "/r"}, ["ssh", "-o", "ControlPath=/r/sot-comm-ssh-%C", "-O", "exit", "boxa"]),
        (
            {"XDG_RUNTIME_DIR": "/r", "SOT_SSH_CONFIG": "/c"},
            ["ssh", "-F", "/c", "-o", "ControlPath=/r/sot-comm-ssh-%C", "-O", "exit", "boxa"],
        ),
        ({"XDG_RUNTIME_DIR": '/run/"q"'}, None),  # multiplexing off: no master to close
    ],
)
def test_master_exit_argv(environ, want):
    assert ssh.master_exit_argv("boxa", environ) == want
