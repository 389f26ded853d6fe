"""``sotd stdio-bridge`` against the fake daemon (behaviour 2.2): private folder only, both ways, ends cleanly."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time

import pytest

from tests.conftest import SOTD, clean_env
from tests.fakes.fake_daemon import FakeDaemon

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

HELLO = {"v": 1, "id": 1, "kind": "req", "op": "hello", "payload": {"host": "boxb", "os_user": "uid:0"}}
REQ = {"v": 1, "id": 2, "kind": "req", "op": "comm.file", "payload": {"from": "a", "to": "b", "text": "hi"}}
WIRE = (json.dumps(HELLO) + "\n" + json.dumps(REQ) + "\n").encode()


@pytest.fixture
def private_dir():
    with tempfile.TemporaryDirectory(prefix="sotd-br-") as d:  # 0700, short (AF_UNIX paths are bounded)
        yield d


@pytest.fixture
def daemon(private_dir):
    fd = FakeDaemon(os.path.join(private_dir, "sotd.sock"))
    fd.event_first = False
    yield fd
    fd.close()


def run(argv: list[str], **kw) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, check=False, **kw)


def bridge(*args: str, env: dict[str, str] | None = None, **kw) -> subprocess.Popen[bytes]:
    e = clean_env()
    e.update(env or {})
    return subprocess.Popen(
        [SOTD, "stdio-bridge", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=e,
        **kw,
    )


def read_lines(p: subprocess.Popen[bytes], want: int, bound: float = 10.0) -> list[dict]:
    """Read ``want`` JSON lines from the bridge's stdout, bounded in time."""
    assert p.stdout is not None
    fd = p.stdout.fileno()
    buf = b""
    deadline = time.monotonic() + bound
    while buf.count(b"\n") < want and time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not r:
            break
        data = os.read(fd, 65536)
        if not data:
            break
        buf += data
    return [json.loads(line) for line in buf.splitlines()]


def test_round_trip_then_stdin_eof_ends_it(daemon):
    with bridge(env={"SOT_SOCKET": daemon.path}) as p:  # leaving it closes the pipes
        assert p.stdin is not None
        p.stdin.write(WIRE)
        p.stdin.flush()
        lines = read_lines(p, 2)
        assert [(x["op"], x["kind"], x["payload"]) for x in lines] == [
            ("hello", "res", {"ok": True, "revision": 0}),
            ("comm.file", "res", {"ok": True}),
        ]
        t0 = time.monotonic()
        p.stdin.close()
        assert p.wait(5) == 0
        assert time.monotonic() - t0 < 3
        assert p.stderr is not None and p.stderr.read() == b""
    assert [m["op"] for m in daemon.received] == ["hello", "comm.file"]


def test_stdin_ending_first_still_delivers_the_answer(daemon):
    """Half-close: the request goes, stdin ends, and the daemon's answer still comes out before the exit."""
    daemon.delay_s = 0.3
    e = clean_env()
    e["SOT_SOCKET"] = daemon.path
    r = run([SOTD, "stdio-bridge"], input=WIRE, capture_output=True, env=e, timeout=20)
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["op"] for x in r.stdout.splitlines()] == ["hello", "comm.file"]


def test_daemon_closing_ends_it(daemon):
    daemon.mode = "close"
    with bridge(env={"SOT_SOCKET": daemon.path}) as p:  # leaving it closes the pipes
        assert p.stdin is not None
        p.stdin.write(WIRE)
        p.stdin.flush()
        assert p.wait(10) == 0  # stdin is still open: the daemon's close alone ended it
        assert p.stdout is not None
        assert [json.loads(x)["op"] for x in p.stdout.read().splitlines()] == ["hello"]
        p.stdin.close()


def test_endpoint_flag_wins_over_sot_socket(daemon, private_dir):
    e = {"SOT_SOCKET": os.path.join(private_dir, "nothing-here.sock")}
    r = run(
        [SOTD, "stdio-bridge", "--endpoint", "unix:" + daemon.path, "--host", "boxb"],
        input=WIRE,
        capture_output=True,
        env={**clean_env(), **e},
        timeout=20,
    )
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 2


def test_default_socket_comes_from_the_runtime_rule(private_dir):
    from sotd import runtime

    env = {"XDG_RUNTIME_DIR": private_dir, "SOT_BACKEND_LABEL": "t"}
    path = runtime.default_socket(env)
    os.makedirs(os.path.dirname(path), mode=0o700)
    with FakeDaemon(path) as d:
        d.event_first = False
        r = run(
            [SOTD, "stdio-bridge"], input=WIRE, capture_output=True, env={**clean_env(), **env}, timeout=20
        )
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 2


def test_refuses_a_folder_others_can_enter(daemon, private_dir):
    os.chmod(private_dir, 0o755)
    r = run(
        [SOTD, "stdio-bridge", "--host", "boxb"],
        input=WIRE,
        capture_output=True,
        env={**clean_env(), "SOT_SOCKET": daemon.path},
        timeout=20,
    )
    assert r.returncode == 1 and r.stdout == b""
    assert r.stderr.decode() == (
        f"sotd stdio-bridge (for boxb): refusing {daemon.path}: its folder {private_dir} is not private to "
        f"this account (mode 0755, owner uid {os.geteuid()}; want 0700, uid {os.geteuid()})\n"
    )
    assert daemon.connections == 0


def test_refuses_a_group_readable_folder(daemon, private_dir):
    os.chmod(private_dir, 0o710)
    r = run(
        [SOTD, "stdio-bridge"],
        input=WIRE,
        capture_output=True,
        env={**clean_env(), "SOT_SOCKET": daemon.path},
    )
    assert r.returncode == 1 and b"is not private to this account (mode 0710" in r.stderr
    assert daemon.connections == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give files to another uid")
def test_refuses_a_folder_or_socket_of_another_account(daemon, private_dir):
    env = {**clean_env(), "SOT_SOCKET": daemon.path}
    os.chown(daemon.path, 65534, 65534)
    r = run([SOTD, "stdio-bridge"], input=WIRE, capture_output=True, env=env)
    assert r.returncode == 1
    assert r.stderr.decode() == (
        f"sotd stdio-bridge: refusing {daemon.path}: the socket belongs to uid 65534, not this account (0)\n"
    )
    os.chown(daemon.path, 0, 0)
    os.chown(private_dir, 65534, 65534)
    r = run([SOTD, "stdio-bridge"], input=WIRE, capture_output=True, env=env)
    assert r.returncode == 1 and b"owner uid 65534" in r.stderr
    os.chown(private_dir, 0, 0)
    assert daemon.connections == 0


SERVE_AS_NOBODY = r"""
import os, socket, sys, time
path = sys.argv[1]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)          # the file is root's, in root's private folder
os.setgid(65534); os.setuid(65534)
s.listen(1)           # but the listener's credentials are nobody's
print("ready", flush=True)
s.settimeout(10)
try:
    c, _ = s.accept()
    c.recv(10)
except OSError:
    pass
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to serve a socket as another uid")
def test_refuses_a_socket_served_by_another_account(private_dir):
    path = os.path.join(private_dir, "sotd.sock")
    with subprocess.Popen(
        [sys.executable, "-c", SERVE_AS_NOBODY, path], stdout=subprocess.PIPE, text=True
    ) as srv:  # leaving it closes its stdout
        try:
            assert srv.stdout is not None and srv.stdout.readline() == "ready\n"
            r = run(
                [SOTD, "stdio-bridge"],
                input=WIRE,
                capture_output=True,
                env={**clean_env(), "SOT_SOCKET": path},
                timeout=20,
            )
        finally:
            srv.kill()
            srv.wait()
    assert r.returncode == 1
    assert (
        r.stderr.decode()
        == f"sotd stdio-bridge: refusing {path}: it is served by uid 65534, not this account\n"
    )


def test_no_socket_there(private_dir):
    path = os.path.join(private_dir, "sotd.sock")
    r = run([SOTD, "stdio-bridge"], capture_output=True, env={**clean_env(), "SOT_SOCKET": path})
    assert r.returncode == 1
    assert r.stderr.decode().startswith(f"sotd stdio-bridge: no daemon socket at {path} (")


def test_not_a_socket(private_dir):
    path = os.path.join(private_dir, "sotd.sock")
    with open(path, "w"):
        pass
    r = run([SOTD, "stdio-bridge"], capture_output=True, env={**clean_env(), "SOT_SOCKET": path})
    assert (r.returncode, r.stderr.decode()) == (1, f"sotd stdio-bridge: refusing {path}: not a socket\n")


def test_a_stale_socket_nobody_serves(private_dir):
    import socket

    path = os.path.join(private_dir, "sotd.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.close()
    r = run([SOTD, "stdio-bridge"], capture_output=True, env={**clean_env(), "SOT_SOCKET": path})
    assert r.returncode == 1
    assert r.stderr.decode().startswith(f"sotd stdio-bridge: cannot connect to the daemon at {path} (")


@pytest.mark.parametrize(
    ("args", "code", "err"),
    [
        (
            ["--endpoint", "ssh:boxa"],
            1,
            "sotd stdio-bridge: only a unix:<path> endpoint can be bridged (got 'ssh:boxa')\n",
        ),
        (
            ["--endpoint", "pipe:x"],
            1,
            "sotd stdio-bridge: only a unix:<path> endpoint can be bridged (got 'pipe:x')\n",
        ),
        (
            ["--bogus"],
            2,
            "sotd stdio-bridge: unknown option '--bogus' (see: sotd stdio-bridge --help)\n"
            "usage: sotd stdio-bridge [--endpoint unix:<path>] [--host <host>]\n",
        ),
        (
            ["--host"],
            2,
            "sotd stdio-bridge: --host needs a value\nusage: sotd stdio-bridge [--endpoint unix:<path>] [--host <host>]\n",
        ),
    ],
)
def test_usage_and_endpoint_refusals(args, code, err):
    r = run([SOTD, "stdio-bridge", *args], capture_output=True, env=clean_env())
    assert (r.returncode, r.stderr.decode(), r.stdout) == (code, err, b"")


def test_large_frames_both_ways_do_not_deadlock(private_dir):
    """An echo server and 3 MiB written at once: the bridge must read the socket while stdin still has data."""
    import socket
    import threading

    path = os.path.join(private_dir, "echo.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    srv.settimeout(10)

    def echo() -> None:
        c, _ = srv.accept()
        with c:
            c.settimeout(10)
            while True:
                data = c.recv(65536)
                if not data:
                    return
                c.sendall(data)

    t = threading.Thread(target=echo, daemon=True)
    t.start()
    blob = os.urandom(3 << 20)
    try:
        r = run(
            [SOTD, "stdio-bridge"],
            input=blob,
            capture_output=True,
            env={**clean_env(), "SOT_SOCKET": path},
            timeout=30,
        )
    finally:
        t.join(10)
        srv.close()
    assert r.returncode == 0, r.stderr
    assert r.stdout == blob
