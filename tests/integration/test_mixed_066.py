"""One folder, one hub, either version (issue 28 item 1; issue 27 item 5): a 0.6.6 client finds sotd's daemon.

A 0.6.6 box that cannot take the inbox lock itself (behaviour 6.4: no flock or perl, or the record names
another lock manager) hands each line to this box's daemon as ``comm.file``. With no ``SOT_SOCKET`` it finds
that daemon by running ``sotd session-socket-path ${SOT_BACKEND_LABEL:-sot}`` (behaviour 2.2), which must
name a live socket. Before: sotd answered ``unknown command``, so the client said ``FAILED -> @beta: this
box cannot take the inbox lock itself, and no daemon is reachable to file it`` with sotd's daemon running.
The client here is ``reference_066.file_through_daemon``, written from behaviour 2.1, 2.2, 6.4 and 1.4; the
daemon is a real ``sotd daemon start`` at its default socket, which follows the comm folder: a second
folder has its own default socket and daemon, and a command never takes another folder's daemon for its own.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator

import pytest

from tests.conftest import SOTD, Comm, clean_env
from tests.integration import reference_066
from tests.newcomer.daemons import daemon, status_pid, stop_daemon

pytestmark = pytest.mark.integration

STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


@pytest.fixture
def runtime_dir() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="r", dir="/tmp")  # 0700 and short (AF_UNIX paths are bounded)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _box_env(home: str, runtime_dir: str, comm_home: str | None) -> dict[str, str]:
    """A shell on this box with no ``SOT_SOCKET``: the default socket (behaviour 2.2)."""
    env = clean_env()
    env.update(
        HOME=home, XDG_RUNTIME_DIR=runtime_dir, SOT_SELF_HOST="testhost", SOT_COMM_TEST_HOST="testhost"
    )
    if comm_home is not None:
        env["SOT_COMM_HOME"] = comm_home
    return env


def _folder(work: str, name: str) -> Comm:
    """A comm folder with ``alpha`` and ``beta`` joined (by sotd) and no lock record yet: the hub daemon
    writes it at its start."""
    comm = Comm(os.path.join(work, name), record=False, install=False)
    for h in ("alpha", "beta"):
        r = comm.session(h).run("join", "--name", h)
        assert r.code == 0, r
    return comm


def _expected_socket(runtime_dir: str, comm_home: str, default: bool) -> str:
    """The default socket written from the rule (docs/daemon.md): the default comm folder keeps
    ``sotd-sot``; any other adds the first 8 hex of the SHA-256 of its real path."""
    leaf = (
        "sotd-sot"
        if default
        else "sotd-sot-" + hashlib.sha256(os.path.realpath(comm_home).encode()).hexdigest()[:8]
    )
    return os.path.join(runtime_dir, leaf, "sotd.sock")


@pytest.mark.parametrize("which", ["default folder", "second folder"])
def test_a_066_client_with_no_sot_socket_finds_the_daemon_and_its_mail_is_filed(
    tmp_path: object, runtime_dir: str, which: str
) -> None:
    work = str(tmp_path)
    comm = _folder(work, "comm")
    home = os.path.join(work, "home")
    os.makedirs(home)
    if which == "default folder":  # $HOME/.sot-comm is this folder (through a link: its real path counts)
        os.symlink(comm.home, os.path.join(home, ".sot-comm"))
        env = _box_env(home, runtime_dir, None)
    else:
        env = _box_env(home, runtime_dir, comm.home)
    sock = _expected_socket(runtime_dir, comm.home, which == "default folder")
    try:
        r = daemon(env, "start")
        assert (r.returncode, r.stdout) == (0, sock + "\n"), r
        p = subprocess.run(
            [SOTD, "session-socket-path", "sot"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert (p.returncode, p.stdout, p.stderr) == (0, sock + "\n", "")
        said = reference_066.file_through_daemon(
            SOTD, env, host="testhost", frm="alpha", to="beta", text="hello from 0.6.6"
        )
        assert said == "filed -> @beta"  # unindented: a daemon filed it (behaviour 1.4)
        line = comm.inbox_bytes("beta")
        assert re.fullmatch(
            rb'\{"from":"alpha","to":"beta","repo":"daemon","msg":"hello from 0\.6\.6","ts":"'
            + STAMP.encode()
            + rb'"\}\n',
            line,
        ), line
        shown = comm.session("beta").run("poll")
        assert (shown.code, shown.err) == (0, ""), shown
        assert re.fullmatch(rf"\[{STAMP}\] \[alpha:daemon\] hello from 0\.6\.6\n", shown.out), shown
    finally:
        stop_daemon(env, sock)
    # no daemon at that socket any more: the client's own sentence, and nothing is filed
    said = reference_066.file_through_daemon(SOTD, env, host="testhost", frm="alpha", to="beta", text="late")
    assert said == f"FAILED -> @beta: {reference_066.NO_DAEMON}"
    assert comm.inbox_bytes("beta") == line


def test_two_comm_folders_get_two_daemons_and_a_shared_socket_is_refused(
    tmp_path: object, runtime_dir: str
) -> None:
    """Issue 27 item 5. Before: with a second ``SOT_COMM_HOME``, ``sotd daemon start`` said "already
    running" (the first folder's daemon), and a send to a handle of the second folder failed "no box knows
    that handle". Now each folder's default socket is its own: two daemons, each filing its own folder's
    mail, each found by a 0.6.6 client of its folder; a ``SOT_SOCKET`` shared by the two folders is
    refused by name instead of being taken for the other folder's daemon."""
    work = str(tmp_path)
    first, second = _folder(work, "one"), _folder(work, "two")
    home = os.path.join(work, "home")
    os.makedirs(home)
    env_one = _box_env(home, runtime_dir, first.home)
    env_two = _box_env(home, runtime_dir, second.home)
    sock_one = _expected_socket(runtime_dir, first.home, False)
    sock_two = _expected_socket(runtime_dir, second.home, False)
    assert sock_one != sock_two
    try:
        r1 = daemon(env_one, "start")
        assert (r1.returncode, r1.stdout) == (0, sock_one + "\n"), r1
        r2 = daemon(env_two, "start")
        assert (r2.returncode, r2.stdout) == (0, sock_two + "\n"), r2
        assert r2.stderr.startswith("sotd daemon: started pid "), r2  # not "already running"
        for env, comm, text in ((env_one, first, "to one"), (env_two, second, "to two")):
            said = reference_066.file_through_daemon(
                SOTD, env, host="testhost", frm="alpha", to="beta", text=text
            )
            assert said == "filed -> @beta"
            assert b'"msg":"' + text.encode() + b'"' in comm.inbox_bytes("beta")
        assert b"to two" not in first.inbox_bytes("beta") and b"to one" not in second.inbox_bytes("beta")
        # one SOT_SOCKET for both folders: the second folder's commands name the first folder's daemon
        shared = {**env_two, "SOT_SOCKET": sock_one}
        pid_one = status_pid(sock_one)
        want = (
            f"sotd daemon: the daemon at {sock_one} (pid {pid_one}) serves the comm folder "
            f"{os.path.realpath(first.home)}, not {os.path.realpath(second.home)}\n"
            "unset SOT_SOCKET (the default socket follows the comm folder), or set another one for this folder\n"
        )
        for verb in ("start", "status"):
            r = daemon(shared, verb)
            assert (r.returncode, r.stdout, r.stderr) == (1, "", want), (verb, r)
    finally:
        stop_daemon(env_one, sock_one)
        stop_daemon(env_two, sock_two)
