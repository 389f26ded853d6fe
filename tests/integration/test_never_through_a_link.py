"""Never through a link (issue 25, problem 2; behaviour 6.0): a comm-folder file or layout folder that is
a symbolic link is refused by every real process that would open it — the CLI's send (its own append, and
through the daemon), the daemon's filing, poll, unread, join — with the one sentence that names the link
and the fix, and the link's target keeps its bytes and its mtime (a dangling link's target is never made).

Each case runs the real ``sotd`` (and ``sotd daemon run``) as subprocesses in a private comm folder.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from sotd.client import unix
from sotd.errors import DaemonUnreachable
from sotd.wire import hello as wire_hello
from tests.conftest import SOTD, Comm, Session, clean_env, wait_for

pytestmark = pytest.mark.integration

FIX = (
    " is a symbolic link, and sotd reads and writes nothing in the comm folder through one: replace it "
    "with a real file or folder (or remove it), then run the command again"
)
PRECIOUS = (
    b'{"from":"x","to":"beta","repo":"r","msg":"old mail, and not sotd\'s","ts":"2026-01-01T00:00:00Z"}\n'
)
OLD_NS = 1_700_000_000_000_000_000  # the target's mtime, set before each attack


def refused(path: str) -> str:
    return path + FIX


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def folder_bytes(path: str) -> dict[str, bytes]:
    return {n: read(os.path.join(path, n)) for n in sorted(os.listdir(path))}


class Target:
    """A file outside the comm folder that a link points at: its bytes and mtime, checked unchanged."""

    def __init__(self, work: str, name: str = "precious", data: bytes | None = PRECIOUS) -> None:
        self.path = os.path.join(work, name)
        self.data = data
        if data is not None:
            with open(self.path, "wb") as f:
                f.write(data)
            os.utime(self.path, ns=(OLD_NS, OLD_NS))

    def link(self, at: str) -> None:
        if os.path.lexists(at):
            os.unlink(at)
        os.symlink(self.path, at)

    def assert_unchanged(self) -> None:
        if self.data is None:
            assert not os.path.lexists(self.path), f"{self.path} was created through the link"
            return
        with open(self.path, "rb") as f:
            assert f.read() == self.data
        assert os.stat(self.path).st_mtime_ns == OLD_NS


@pytest.fixture
def pair(comm: Comm) -> tuple[Comm, Session, Session]:
    alice, beta = comm.session("alice"), comm.session("beta")
    assert alice.run("join", "--name", "alice").code == 0
    assert beta.run("join", "--name", "beta").code == 0
    return comm, alice, beta


def test_cli_send_to_a_linked_inbox_is_a_failed_line_and_the_target_is_untouched(pair) -> None:
    comm, alice, _beta = pair
    t = Target(comm.work)
    t.link(comm.layout.inbox("beta"))
    r = alice.run("send", "@beta", "x")
    assert (r.code, r.out, r.err) == (1, "", f"FAILED -> @beta: {refused(comm.layout.inbox('beta'))}\n")
    t.assert_unchanged()


def test_cli_send_with_a_linked_inbox_lock_creates_nothing_through_it(pair) -> None:
    comm, alice, _beta = pair
    t = Target(comm.work, "lock-target", None)  # a dangling link: O_CREAT through it would make the file
    t.link(comm.layout.inbox_lock("beta"))
    before = comm.inbox_bytes("beta")
    r = alice.run("send", "@beta", "x")
    assert (r.code, r.err) == (1, f"FAILED -> @beta: {refused(comm.layout.inbox_lock('beta'))}\n")
    t.assert_unchanged()
    assert comm.inbox_bytes("beta") == before


def test_poll_and_unread_of_a_linked_inbox_refuse_and_show_nothing_of_the_target(pair) -> None:
    comm, _alice, beta = pair
    t = Target(comm.work)
    t.link(comm.layout.inbox("beta"))
    for verb in (("poll",), ("unread", "beta")):
        r = beta.run(*verb)
        assert (r.code, r.out, r.err) == (1, "", refused(comm.layout.inbox("beta")) + "\n"), verb
    t.assert_unchanged()
    assert not os.path.exists(comm.layout.cursor("beta"))
    # the reader's lock too: a link there is refused, never opened (or made) through
    os.unlink(comm.layout.inbox("beta"))
    lock = Target(comm.work, "read-lock-target", None)
    lock.link(comm.layout.inbox_lock("beta"))
    r = beta.run("poll")
    assert (r.code, r.out, r.err) == (1, "", refused(comm.layout.inbox_lock("beta")) + "\n")
    lock.assert_unchanged()


def test_poll_with_a_linked_cursor_refuses_and_the_cursor_target_is_untouched(pair) -> None:
    comm, alice, beta = pair
    assert alice.run("send", "@beta", "hello").code == 0
    t = Target(comm.work, "cursor-target", b"0")
    t.link(comm.layout.cursor("beta"))
    r = beta.run("poll")
    assert (r.code, r.out, r.err) == (1, "", refused(comm.layout.cursor("beta")) + "\n")
    t.assert_unchanged()
    assert os.path.islink(comm.layout.cursor("beta"))


def test_a_linked_layout_folder_is_refused_by_every_command(pair) -> None:
    comm, alice, _beta = pair
    real = os.path.join(comm.work, "elsewhere")
    os.rename(comm.layout.inbox_dir, real)
    os.symlink(real, comm.layout.inbox_dir)
    before = folder_bytes(real)
    r = alice.run("send", "@beta", "x")
    assert (r.code, r.err) == (1, refused(comm.layout.inbox_dir) + "\n")
    assert folder_bytes(real) == before


def test_a_linked_self_file_is_refused_by_send_and_by_join(pair) -> None:
    comm, alice, _beta = pair
    t = Target(comm.work, "self-target", b"beta\nrepo=beta\nroot=/elsewhere\n")
    t.link(alice.self_file)
    r = alice.run("send", "@beta", "x")
    assert (r.code, r.err) == (1, refused(alice.self_file) + "\n")
    registry_before = read(comm.layout.registry)
    r = alice.run("join", "--name", "alice")
    assert (r.code, r.err) == (1, refused(alice.self_file) + "\n")
    t.assert_unchanged()
    assert read(comm.layout.registry) == registry_before


def test_a_linked_registry_is_refused_by_send_and_join_and_never_written_through(pair) -> None:
    comm, alice, _beta = pair
    t = Target(comm.work, "registry-target", read(comm.layout.registry))
    t.link(comm.layout.registry)
    r = alice.run("send", "@beta", "x")
    assert (r.code, r.err) == (1, f"FAILED -> @beta: {refused(comm.layout.registry)}\n")
    r = alice.run("join", "--name", "alice")
    assert r.code == 1
    assert r.err_lines == [
        "FAILED: the registry could not be read or updated, so nothing was written",
        refused(comm.layout.registry),
    ]
    t.assert_unchanged()
    assert os.path.islink(comm.layout.registry)


def test_a_linked_registry_lock_is_refused_by_join_and_its_target_never_made(pair) -> None:
    comm, alice, _beta = pair
    t = Target(comm.work, "reglock-target", None)
    t.link(comm.layout.reglock)
    registry_before = read(comm.layout.registry)
    r = alice.run("join", "--name", "alice")
    assert r.code == 1
    assert refused(comm.layout.reglock) in r.err_lines
    t.assert_unchanged()
    assert read(comm.layout.registry) == registry_before


# ------------------------------------------------------------------------------------------ the daemon

HELLO = wire_hello.hello_payload(host="testhost", os_user=f"uid:{os.geteuid()}", role="cli")


@pytest.fixture
def daemon(comm: Comm) -> Iterator[str]:
    """``sotd daemon run`` on this comm folder (its hub: the record is the comm fixture's); its socket."""
    sock = os.path.join(comm.work, "run", "sotd.sock")
    env = clean_env()
    env.update(
        SOT_COMM_HOME=comm.home, SOT_SELF_HOST=comm.host, SOT_HOSTS_TOML=os.path.join(comm.work, "none")
    )
    with open(os.path.join(comm.work, "daemon.log"), "ab") as log:
        proc = subprocess.Popen([SOTD, "daemon", "run", "--socket", sock], env=env, stdout=log, stderr=log)

    def answers() -> bool:
        assert proc.poll() is None, f"the daemon exited {proc.returncode}"
        try:
            unix.request(sock, "version.query", {}, HELLO, deadline_s=1.0)
        except DaemonUnreachable:
            return False
        return True

    try:
        wait_for(answers, what="the daemon to answer")
        yield sock
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def file(sock: str, to: str, text: str = "hi") -> dict[str, Any]:
    return unix.request(sock, "comm.file", {"from": "alice", "to": to, "text": text}, HELLO, deadline_s=10.0)


def test_the_daemons_filing_refuses_a_linked_inbox_and_still_serves_the_next(pair, daemon) -> None:
    comm, alice, _beta = pair
    t = Target(comm.work)
    t.link(comm.layout.inbox("beta"))
    answer = file(daemon, "beta")
    assert answer == {"code": "file_failed", "error": refused(comm.layout.inbox("beta"))}
    t.assert_unchanged()
    # the CLI's send handed to the daemon (a box that cannot take the inbox lock itself) says it the same way
    r = alice.run("send", "@beta", "x", env={"SOT_SOCKET": daemon, "SOT_COMM_TEST_LOCK_IDENTITY": "none"})
    assert (r.code, r.err) == (1, f"FAILED -> @beta: {refused(comm.layout.inbox('beta'))}\n")
    t.assert_unchanged()
    # and the daemon goes on filing for everyone else
    assert file(daemon, "alice", "after") == {"ok": True}
    assert b'"msg":"after"' in comm.inbox_bytes("alice")


def test_the_daemons_filing_refuses_a_linked_registry_and_lock_record(pair, daemon) -> None:
    comm, _alice, _beta = pair
    t = Target(comm.work, "registry-target", read(comm.layout.registry))
    t.link(comm.layout.registry)
    assert file(daemon, "beta") == {"code": "file_failed", "error": refused(comm.layout.registry)}
    t.assert_unchanged()
    os.unlink(comm.layout.registry)
    with open(comm.layout.registry, "wb") as f:
        f.write(t.data or b"")
    rec = Target(comm.work, "record-target", read(comm.layout.lock_manager))
    rec.link(comm.layout.lock_manager)
    answer = file(daemon, "beta")
    assert answer == {"code": "file_failed", "error": refused(comm.layout.lock_manager)}
    rec.assert_unchanged()
    assert comm.inbox_bytes("beta") == b""


def test_a_daemon_refuses_to_start_on_a_linked_one_daemon_lock(comm: Comm) -> None:
    t = Target(comm.work, "daemon-lock-target", None)
    lock = os.path.join(comm.layout.state_dir, f"daemon-{comm.host}.lock")
    t.link(lock)
    env = clean_env()
    env.update(
        SOT_COMM_HOME=comm.home, SOT_SELF_HOST=comm.host, SOT_HOSTS_TOML=os.path.join(comm.work, "none")
    )
    sock = os.path.join(comm.work, "run", "sotd.sock")
    r = subprocess.run(
        [SOTD, "daemon", "run", "--socket", sock],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1
    assert r.stderr.splitlines()[-1].endswith(f" ERROR {refused(lock)}")
    t.assert_unchanged()
