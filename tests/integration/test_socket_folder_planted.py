"""The daemon's default socket folder made first by another local account (issue 25, problem 3).

With no ``XDG_RUNTIME_DIR`` the socket is ``/tmp/sotd-<uid>/sotd-<label>/sotd.sock``. Another account may
create that folder first, with links named like the daemon's log and start lock. Here a second uid plants
it (a child that ``setuid``s to it), and the victim is a third, unprivileged uid running the real ``sotd``
(the system Python, the package on ``PYTHONPATH``: stdlib only). The victim's ``sotd daemon start`` and the
autostart of a send refuse with the sentence that names the folder and the alternative, nothing is written
through the links (their targets keep bytes and mtime, a dangling one is never made), and the alternative
named works; with nothing planted the README's "without systemd" default works for a normal user.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator

import pytest

from sotd import runtime

pytestmark = [pytest.mark.integration, pytest.mark.root]

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "src"))
PYTHON = "/usr/bin/python3"  # root's interpreter is under /root (0700): the victim runs the system one
OLD_NS = 1_600_000_000_000_000_000

if os.geteuid() != 0 or not os.access(PYTHON, os.X_OK):
    pytest.skip("needs root (to act as two other accounts) and a system python3", allow_module_level=True)


def _free_uid(start: int) -> int:
    import pwd

    uid = start + os.getpid() % 50000
    while True:
        try:
            pwd.getpwuid(uid)
        except KeyError:
            if not os.path.lexists(f"/tmp/sotd-{uid}"):
                return uid
        uid += 1


class Victim:
    """An unprivileged account with its own home, comm folder and a file worth keeping."""

    def __init__(self, base: str, uid: int) -> None:
        self.uid = uid
        self.home = os.path.join(base, "victim")
        os.mkdir(self.home, 0o700)
        os.chown(self.home, uid, uid)
        self.precious = os.path.join(self.home, "precious")
        with open(self.precious, "wb") as f:
            f.write(b"the victim's own bytes\n")
        os.chown(self.precious, uid, uid)
        os.utime(self.precious, ns=(OLD_NS, OLD_NS))
        self.lock_target = os.path.join(self.home, "made-through-the-lock")
        self.env = {
            "PATH": "/usr/bin:/bin",
            "HOME": self.home,
            "PYTHONPATH": SRC,
            "SOT_COMM_HOME": os.path.join(self.home, ".sot-comm"),
            "SOT_SELF_HOST": "victimbox",
            "SOT_HOSTS_TOML": os.path.join(self.home, "no-hosts.toml"),
        }

    def run(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        e = dict(self.env)
        e.update(env or {})
        return subprocess.run(
            [PYTHON, "-S", "-m", "sotd.cli.main", *args],
            env=e,
            cwd=self.home,
            user=self.uid,
            group=self.uid,
            extra_groups=[],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def assert_untouched(self) -> None:
        with open(self.precious, "rb") as f:
            assert f.read() == b"the victim's own bytes\n"
        assert os.stat(self.precious).st_mtime_ns == OLD_NS
        assert not os.path.lexists(self.lock_target)


PLANT = r"""
import os, sys
folder, log_target, lock_target = sys.argv[1:]
os.mkdir(os.path.dirname(folder), 0o755)
os.mkdir(folder, 0o755)
os.symlink(log_target, os.path.join(folder, "sotd.sock.log"))
os.symlink(lock_target, os.path.join(folder, "sotd.sock.start.lock"))
"""


@pytest.fixture
def victim() -> Iterator[Victim]:
    base = tempfile.mkdtemp(prefix="sotd-planted-", dir="/tmp")
    os.chmod(base, 0o755)
    v = Victim(base, _free_uid(210000))
    try:
        yield v
    finally:
        v.run("daemon", "stop")  # the default socket, as the victim computes it
        v.run("daemon", "stop", "--socket", runtime.fallback_socket(v.env))
        shutil.rmtree(f"/tmp/sotd-{v.uid}", ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)


def plant(v: Victim, attacker: int) -> str:
    """As ``attacker``: make the victim's default socket folder, with the two links in it."""
    folder = f"/tmp/sotd-{v.uid}/sotd-sot"
    done = subprocess.run(
        [PYTHON, "-S", "-c", PLANT, folder, v.precious, v.lock_target],
        user=attacker,
        group=attacker,
        extra_groups=[],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert os.stat(f"/tmp/sotd-{v.uid}").st_uid == attacker
    return folder


def refusal(v: Victim, attacker: int) -> str:
    alt = os.path.join(os.path.realpath(v.home), ".sot-comm", "state", "run-victimbox-sot", "sotd.sock")
    return (
        f"refusing the daemon's socket folder /tmp/sotd-{v.uid}: it belongs to uid {attacker}, not to this "
        f"account (uid {v.uid}), so another account could plant or swap files in it and nothing was written "
        f"there; set SOT_SOCKET={alt} for every sotd command on this box (sotd makes that folder private)"
    )


def test_a_planted_socket_folder_is_refused_with_the_alternative_which_works(victim: Victim) -> None:
    v = victim
    attacker = _free_uid(v.uid + 1)
    folder = plant(v, attacker)
    planted = sorted(os.listdir(folder))

    r = v.run("daemon", "start")
    assert (r.returncode, r.stdout, r.stderr) == (1, "", refusal(v, attacker) + "\n")
    # and `sotd daemon run` itself, started by hand: the same refusal before it writes anything
    r = v.run("daemon", "run")
    assert r.returncode == 1
    assert r.stderr.rstrip("\n").endswith(refusal(v, attacker))
    v.assert_untouched()
    assert sorted(os.listdir(folder)) == planted

    # the alternative the sentence names works, and a send goes through it
    alt = runtime.fallback_socket(v.env)
    r = v.run("daemon", "start", env={"SOT_SOCKET": alt})
    assert (r.returncode, r.stdout) == (0, alt + "\n"), r.stderr
    r = v.run("daemon", "status", env={"SOT_SOCKET": alt})
    assert r.returncode == 0 and r.stdout.startswith(f"sotd daemon at {alt}: pid "), r
    st = os.lstat(os.path.dirname(alt))
    assert (st.st_uid, st.st_mode & 0o777) == (v.uid, 0o700)
    assert v.run("daemon", "stop", "--socket", alt).returncode == 0
    v.assert_untouched()


def test_the_autostart_of_a_send_says_the_refusal_and_its_alternative(victim: Victim) -> None:
    v = victim
    attacker = _free_uid(v.uid + 1)
    plant(v, attacker)
    for name in ("alice", "beta"):
        selfs = {"SOT_COMM_SELF_FILE": os.path.join(v.home, f"{name}.self")}
        r = v.run("comm", "join", "--name", name, env=selfs)
        assert r.returncode == 0, r.stderr
    # a box that cannot take the inbox lock itself hands the line to its daemon, starting it if need be
    env = {
        "SOT_COMM_SELF_FILE": os.path.join(v.home, "alice.self"),
        "SOT_COMM_TEST_LOCK_IDENTITY": "none",
        "SOT_DAEMON_AUTOSTART": "on",
    }
    r = v.run("comm", "send", "@beta", "hi", env=env)
    assert r.returncode == 1
    assert r.stderr.splitlines() == [
        "FAILED -> @beta: this box cannot take the inbox lock itself, and no daemon is reachable to file it",
        f"starting this box's daemon failed: {refusal(v, attacker)}",
    ]
    v.assert_untouched()
    # the alternative, set as the sentence says: a daemon there (started without the test's forced lock
    # identity, which its environment would carry) files the send the CLI hands it
    alt = runtime.fallback_socket(v.env)
    assert v.run("daemon", "start", env={"SOT_SOCKET": alt}).returncode == 0
    r = v.run("comm", "send", "@beta", "hi", env={**env, "SOT_SOCKET": alt})
    assert (r.returncode, r.stdout, r.stderr) == (0, "filed -> @beta\n", "")
    with open(os.path.join(v.env["SOT_COMM_HOME"], "inbox", "beta.jsonl"), "rb") as f:
        assert b'"msg":"hi"' in f.read()
    v.assert_untouched()


def test_without_systemd_the_default_socket_folder_works_for_a_normal_user(victim: Victim) -> None:
    v = victim
    r = v.run("daemon", "start")
    sock = f"/tmp/sotd-{v.uid}/sotd-sot/sotd.sock"
    assert (r.returncode, r.stdout) == (0, sock + "\n"), r.stderr
    for level in (f"/tmp/sotd-{v.uid}", f"/tmp/sotd-{v.uid}/sotd-sot"):
        st = os.lstat(level)
        assert (st.st_uid, st.st_mode & 0o777) == (v.uid, 0o700), level
    assert v.run("daemon", "status").returncode == 0
    assert v.run("daemon", "stop").returncode == 0


def test_a_socket_folder_below_a_folder_others_can_write_is_refused(victim: Victim) -> None:
    """Any level, not only the default's: a folder every account may write in (no sticky bit) lets
    another account swap the level below it, so a socket there is refused before anything is made."""
    v = victim
    shared = os.path.join(v.home, "shared")
    os.mkdir(shared)
    os.chown(shared, v.uid, v.uid)
    os.chmod(shared, 0o777)
    sock = os.path.join(shared, "run", "sotd.sock")
    r = v.run("daemon", "start", "--socket", sock)
    alt = os.path.join(os.path.realpath(v.home), ".sot-comm", "state", "run-victimbox-sot", "sotd.sock")
    assert (r.returncode, r.stderr) == (
        1,
        f"refusing the daemon's socket folder {shared}: other accounts can write in it (mode 0777), so "
        "another account could plant or swap files in it and nothing was written there; set "
        f"SOT_SOCKET={alt} for every sotd command on this box (sotd makes that folder private)\n",
    )
    assert os.listdir(shared) == []
