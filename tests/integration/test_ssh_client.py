"""sotd.client.ssh.request through a stand-in ``ssh`` that runs the remote command locally (no sshd).

The stand-in is first on PATH: it records its argv and then does what the test asks (run the remote command
under ``sh -c`` as sshd would, print a banner first, fail as ssh fails, or hang). The remote command reaches
``sotd stdio-bridge`` through the PATH prepend (``$HOME/.local/bin/sotd``), and the bridge reaches the fake
daemon. Real sshd in network namespaces: tests/multihost/test_ssh_transport.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import pytest

from sotd.client import ssh
from sotd.errors import DaemonUnreachable
from sotd.wire.hello import hello_payload
from sotd.wire.payloads import comm_file_payload
from tests.conftest import SOTD, Comm, Session, clean_env
from tests.fakes.fake_daemon import FakeDaemon

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

HELLO = hello_payload(host="boxb", os_user="uid:0", role="cli", name="alice")
FILE = comm_file_payload("alice", "bob", "hi")

FAKE_SSH = r"""#!/bin/sh
# stand-in for ssh: log argv, then act as $FAKE_SSH_MODE says; the last argument is the remote command
printf '%s\n' "$@" > "$FAKE_SSH_LOG"
echo $$ > "$FAKE_SSH_LOG.pid"
for last; do :; done
case "$FAKE_SSH_MODE" in
  refused) echo "ssh: connect to host boxa port 22: Connection refused" >&2; exit 255 ;;
  hang) echo "debug1: still trying" >&2; exec sleep 30 ;;
  mute) exec sleep 30 ;;
  banner) echo "Welcome to boxa"; echo "Last login: never"; echo "" ;;
esac
cd "$HOME" && exec sh -c "$last"
"""


@pytest.fixture
def world():
    with tempfile.TemporaryDirectory(prefix="sotd-ssh-") as d:
        bindir = os.path.join(d, "bin")
        home = os.path.join(d, "home")
        os.makedirs(bindir)
        os.makedirs(os.path.join(home, ".local", "bin"))
        os.symlink(SOTD, os.path.join(home, ".local", "bin", "sotd"))
        with open(os.path.join(bindir, "ssh"), "w") as f:
            f.write(FAKE_SSH)
        os.chmod(os.path.join(bindir, "ssh"), 0o755)
        run = os.path.join(d, "run")
        os.mkdir(run, 0o700)
        fd = FakeDaemon(os.path.join(run, "sotd.sock"))
        env = clean_env()
        env.update(
            PATH=bindir + ":/usr/bin:/bin",  # no sotd on the plain PATH: only the prepend finds it
            HOME=home,
            XDG_RUNTIME_DIR=run,
            SOT_SOCKET=fd.path,
            FAKE_SSH_LOG=os.path.join(d, "argv"),
            FAKE_SSH_MODE="",
        )
        try:
            yield d, env, fd
        finally:
            fd.close()


def argv_of(d: str) -> list[str]:
    with open(os.path.join(d, "argv")) as f:
        return f.read().splitlines()


def pid_gone(d: str) -> bool:
    with open(os.path.join(d, "argv.pid")) as f:
        pid = int(f.read())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_answer_through_the_bridge(world):
    d, env, fd = world
    t0 = time.monotonic()
    assert ssh.request("boxa", "boxb", "comm.file", FILE, HELLO, environ=env) == {"ok": True}
    assert time.monotonic() - t0 < 5
    assert [m["op"] for m in fd.received] == ["hello", "comm.file"]
    assert fd.received[1]["payload"] == FILE
    assert argv_of(d) == ssh.ssh_argv("boxa", ["sotd", "stdio-bridge", "--host", "boxb"], env)[1:]
    assert pid_gone(d), "the ssh child is always killed and reaped"


def test_refusal_is_returned_verbatim(world):
    _, env, fd = world
    fd.answer = {"error": "no box knows that handle: bob", "code": "not_here"}
    assert ssh.request("boxa", "", "comm.file", FILE, HELLO, environ=env) == fd.answer


def test_banner_before_the_wire_is_skipped(world):
    _, env, _ = world
    env["FAKE_SSH_MODE"] = "banner"
    assert ssh.request("boxa", "boxb", "comm.file", FILE, HELLO, environ=env) == {"ok": True}


def test_hello_refused(world):
    _, env, fd = world
    fd.mode = "refuse"
    fd.refusal = {"error": "another OS user holds host boxb", "code": "forbidden"}
    with pytest.raises(DaemonUnreachable) as ei:
        ssh.request("boxa", "boxb", "comm.file", FILE, HELLO, environ=env)
    assert ei.value.message == "hello refused: another OS user holds host boxb"


def test_ssh_failure_carries_its_last_stderr_line(world):
    _, env, _ = world
    env["FAKE_SSH_MODE"] = "refused"
    t0 = time.monotonic()
    with pytest.raises(DaemonUnreachable) as ei:
        ssh.request("boxa", "boxb", "comm.file", FILE, HELLO, environ=env)
    assert time.monotonic() - t0 < 2, "a dead ssh is a verdict at once, not at the deadline"
    assert ei.value.message == (
        "the daemon did not answer at ssh:boxa/boxb: ssh: connect to host boxa port 22: Connection refused"
    )
    assert ei.value.hint == "ssh ended without an answer"


def test_bridge_refusal_reaches_the_sender(world):
    """The far bridge refuses (no daemon there): its stderr line is the reason."""
    _, env, fd = world
    env["SOT_SOCKET"] = os.path.join(os.path.dirname(fd.path), "none.sock")
    with pytest.raises(DaemonUnreachable) as ei:
        ssh.request("boxa", "boxb", "comm.file", FILE, HELLO, environ=env)
    assert ei.value.message.startswith(
        f"the daemon did not answer at ssh:boxa/boxb: sotd stdio-bridge (for boxb): no daemon socket at {env['SOT_SOCKET']}"
    )


@pytest.mark.parametrize(("mode", "suffix"), [("hang", ": debug1: still trying"), ("mute", "")])
def test_one_deadline_and_the_child_is_killed(world, mode, suffix):
    d, env, _ = world
    env["FAKE_SSH_MODE"] = mode
    t0 = time.monotonic()
    with pytest.raises(DaemonUnreachable) as ei:
        ssh.request("boxa", "", "comm.file", FILE, HELLO, deadline_s=0.6, environ=env)
    elapsed = time.monotonic() - t0
    assert 0.6 <= elapsed < 1.5
    assert ei.value.message == "the daemon did not answer at ssh:boxa" + suffix
    assert ei.value.hint == "timed out after 0.6s"
    assert pid_gone(d)


def test_slow_daemon_counts_against_the_same_deadline(world):
    """D6: the dial and the hello share the bound; a daemon slower than what is left is silence."""
    _, env, fd = world
    fd.delay_s = 1.5
    t0 = time.monotonic()
    with pytest.raises(DaemonUnreachable):
        ssh.request("boxa", "", "comm.file", FILE, HELLO, deadline_s=1.0, environ=env)
    assert time.monotonic() - t0 < 1.6


def test_no_ssh_binary(world):
    _, env, _ = world
    env["PATH"] = "/nonexistent"
    with pytest.raises(DaemonUnreachable) as ei:
        ssh.request("boxa", "", "comm.file", FILE, HELLO, environ=env)
    assert ei.value.message.startswith("the daemon did not answer at ssh:boxa: ")


def test_unix_send_path_does_not_import_subprocess():
    """docs/design.md hot path: only a send that really dials ssh pays for subprocess."""
    code = (
        "import sys\n"
        "import sotd.cli.main, sotd.cli.comm.send, sotd.cli.comm.daemoncall, sotd.client.unix\n"
        "print('subprocess' in sys.modules)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout == "False\n"


# ------------------------------------------------------------------- a whole send over SOT_RELAY_ENDPOINT


def test_send_to_an_unlisted_handle_goes_over_ssh(world, tmp_path):
    _, env, fd = world
    comm = Comm(str(tmp_path))
    a: Session = comm.session("alpha")
    assert a.run("join", "--name", "alpha").code == 0
    extra = {k: env[k] for k in ("PATH", "HOME", "XDG_RUNTIME_DIR", "FAKE_SSH_LOG", "FAKE_SSH_MODE")}
    # The remote side's socket: the stand-in ssh keeps the environment, so SOT_SOCKET reaches the bridge
    # (the session's own SOT_SOCKET points nowhere, as in the other send tests; the relay never uses it).
    r = a.run(
        "send",
        "@remote",
        "over",
        "ssh",
        env={**extra, "SOT_SOCKET": fd.path, "SOT_RELAY_ENDPOINT": "ssh:boxa/boxb"},
    )
    assert (r.code, r.out, r.err) == (0, "filed -> @remote\n", "")
    payload = dict(fd.received[1]["payload"])
    assert 0 < payload.pop("expires") - time.time() <= 5.0  # when the send stops waiting (D6)
    assert payload == {"from": "alpha", "to": "remote", "text": "over ssh", "broadcast": False}
    env["FAKE_SSH_MODE"] = "refused"
    r = a.run(
        "send",
        "@remote",
        "again",
        env={**extra, "FAKE_SSH_MODE": "refused", "SOT_RELAY_ENDPOINT": "ssh:boxa"},
    )
    assert (r.code, r.out) == (1, "")
    assert r.err == (
        "FAILED -> @remote: the daemon did not answer at ssh:boxa: ssh: connect to host boxa port 22: Connection refused\n"
    )


def test_send_without_an_endpoint_uses_the_topology_hub(world, tmp_path):
    """No SOT_RELAY_ENDPOINT: the relay is what ``sotd topology relay-endpoint`` names (behaviour 1.4)."""
    d, env, fd = world
    comm = Comm(str(tmp_path))
    a: Session = comm.session("alpha")
    assert a.run("join", "--name", "alpha").code == 0
    with open(os.path.join(comm.home, "hosts.toml"), "w") as f:
        f.write('hub = "boxa"\n\n[boxes.boxa]\nssh = "hub.lan"\n\n[boxes.testhost]\n')
    extra = {k: env[k] for k in ("PATH", "HOME", "XDG_RUNTIME_DIR", "FAKE_SSH_LOG", "FAKE_SSH_MODE")}
    r = a.run("send", "@remote", "via", "topology", env={**extra, "SOT_SOCKET": fd.path})
    assert (r.code, r.out, r.err) == (0, "filed -> @remote\n", "")
    argv = argv_of(d)
    assert argv[-2:] == ["hub.lan", ssh.remote_command(["sotd", "stdio-bridge", "--host", "boxa"])]
    # on the hub itself the relay is the hub's own daemon (its offer reaches the guests): no ssh is dialled
    os.unlink(os.path.join(d, "argv"))
    r = a.run("send", "@remote", "x", env={**extra, "SOT_SOCKET": fd.path, "SOT_SELF_HOST": "boxa"})
    assert (r.code, r.out, r.err) == (0, "filed -> @remote\n", "")
    assert not os.path.exists(os.path.join(d, "argv"))
    # with no daemon socket there, the hub has no relay endpoint: the send says so and dials nothing
    gone = os.path.join(str(tmp_path), "no-daemon.sock")
    r = a.run("send", "@remote", "x", env={**extra, "SOT_SOCKET": gone, "SOT_SELF_HOST": "boxa"})
    assert r.code == 1
    assert r.err_lines[0] == (
        "FAILED -> @remote: no sotd daemon found; set SOT_RELAY_ENDPOINT=unix:/path, ssh:target[/host], or "
        "(Windows) pipe:name"
    )
    assert r.err_lines[1].startswith("@remote is not registered here (") and r.err_lines[1].endswith(
        f"and the hub cannot be asked (this box (boxa) is the hub named by {os.path.join(comm.home, 'hosts.toml')}, "
        f"and no daemon socket is at {gone} to relay through); see who is: sotd comm list"
    ), r.err_lines
    assert len(r.err_lines) == 2
    assert not os.path.exists(os.path.join(d, "argv"))
