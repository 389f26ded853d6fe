"""Behaviour 6.0: the comm folder is private. After every ``sotd comm`` command each entry under it is 0700
(a folder) or 0600 (a file), ``bin/`` and ``VERSION`` excepted (they are meant to be run and read); and a
second local account (uid 65534, a forked child with ``setresuid``) can read no inbox, registry, cursor or
self file and cannot connect to the daemon's socket.

Injector: the commands run with the test's umask opened to 000 (the worst a user's shell could hand them),
so every mode seen is one sotd chose. The other account is a real process of another uid; the comm folder
sits under a world-searchable folder so that only sotd's own modes stand in its way.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Callable, Iterator

import pytest

from tests.conftest import Comm

# not serial (issue 31): its own folders, its own daemon and a child of another uid; no mount, no namespace
pytestmark = [pytest.mark.reliability, pytest.mark.timeout(120)]

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")
EXEMPT_TOP = ("bin", "VERSION")


def _bad_modes(home: str) -> list[str]:
    """Entries under ``home`` (itself included) whose mode is not 0700 (folder) / 0600 (file)."""
    bad: list[str] = []

    def check(path: str) -> None:
        st = os.lstat(path)
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISDIR(st.st_mode):
            want = 0o700
        elif stat.S_ISLNK(st.st_mode):
            return
        else:
            want = 0o600
        if mode != want:
            bad.append(f"{os.path.relpath(path, home)} {mode:o} (want {want:o})")

    check(home)
    for dirpath, dirnames, filenames in os.walk(home):
        if dirpath == home:
            dirnames[:] = [d for d in dirnames if d not in EXEMPT_TOP]
        names = [f for f in filenames if dirpath != home or f not in EXEMPT_TOP]
        for n in dirnames + names:
            check(os.path.join(dirpath, n))
    return sorted(bad)


@pytest.fixture
def open_work() -> Iterator[str]:
    """A work folder outside pytest's private tmp tree, searchable by every account (like /tmp itself)."""
    d = tempfile.mkdtemp(prefix="sotd-perm-", dir=tempfile.gettempdir())
    os.chmod(d, 0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def wide_umask() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_every_entry_is_private_after_every_command(open_work: str, wide_umask: None) -> None:
    comm = Comm(open_work)
    a, b = comm.session("alpha"), comm.session("beta")
    steps: list[tuple[str, Callable[[], object]]] = [
        ("join alpha", lambda: a.run("join", "alpha")),
        ("join beta", lambda: b.run("join", "beta")),
        ("send", lambda: b.run("send", "@alpha", "hello")),
        ("send --broadcast", lambda: b.run("send", "--broadcast", "all")),
        ("unread", lambda: a.run("unread", "alpha")),
        ("poll", lambda: a.run("poll")),
        ("list", lambda: a.run("list")),
        ("status", lambda: a.run("status", "working", "checking modes")),
        ("leave", lambda: b.run("leave")),
        ("install", lambda: a.run("install", wrapper=False)),
        ("poll after install", lambda: a.run("poll")),
        ("context", lambda: a.run("context")),
        ("hook prompt", lambda: a.run("status-prompt", stdin=_hook("UserPromptSubmit", prompt="fix it"))),
        ("hook post-tool", lambda: a.run("status-posttool", stdin=_hook("PostToolUse", tool_name="Bash"))),
        ("hook pre-tool", lambda: a.run("status-pretool", stdin=_hook("PreToolUse", tool_name="AskUserQuestion",
                                                                      tool_input={"question": "q?"},
                                                                      tool_use_id="toolu_p"))),
        ("send to alpha again", lambda: b.run("join", "beta") and b.run("send", "@alpha", "more")),
        ("hook stop (mail gate)", lambda: a.run("status-idle", stdin=_hook("Stop", stop_hook_active=False))),
        ("hook stop (marker)", lambda: a.run("status-idle", stdin=_hook("Stop", last_assistant_message="SITREP: ok"))),
    ]  # fmt: skip
    problems: dict[str, list[str]] = {}
    for name, step in steps:
        r = step()
        assert getattr(r, "code", None) == 0, (name, r)
        bad = _bad_modes(comm.home)
        if bad:
            problems[name] = bad
    assert problems == {}, problems
    assert os.path.exists(comm.layout.cursor("alpha")) and os.path.exists(comm.layout.inbox("alpha"))


def _hook(event: str, **fields: object) -> str:
    import json

    return json.dumps({"session_id": "perm-session", "hook_event_name": event, **fields})


@needs_root
def test_every_entry_is_private_after_daemon_rows_spawn_and_despawn(wide_umask: None) -> None:
    """The daemon's writers too: a spawned row (registry row, self file, inbox, the wake's reads), mail filed
    by the daemon, the row's despawn; and the daemon's own socket and state folders are private."""
    import shlex

    from tests.integration.test_rows import Box, wait_for, wakes

    box = Box({"SOTD_TEST_HEARTBEAT_SECS": "2"})
    try:
        log = os.path.join(box.work, "alpha.agent.log")
        root = box.project("alpha")
        steps: list[tuple[str, Callable[[], object]]] = [
            ("spawner join", lambda: box.spawner("join", "--name", "boss")),
            ("spawn", lambda: box.spawner("spawn", root, "--name", "alpha", "--task", "look",
                                          "--command", shlex.join(box.agent_argv(log)))),
            ("daemon files", lambda: box.file("alpha", "from the daemon")),
            ("the wake", lambda: wait_for(lambda: wakes(log) >= 1, 60, "the row's wake")),
            ("despawn", lambda: box.spawner("despawn", "alpha")),
        ]  # fmt: skip
        problems: dict[str, list[str]] = {}
        for name, step in steps:
            r = step()
            rc = getattr(r, "returncode", 0)
            assert rc == 0, (name, r)
            bad = _bad_modes(box.home)
            if bad:
                problems[name] = bad
        assert problems == {}, problems
        for folder in (os.path.dirname(box.sock), box.state):
            assert stat.S_IMODE(os.stat(folder).st_mode) & 0o077 == 0, folder
    finally:
        box.close()


# ----------------------------------------------------------------------------------- another account


def _as_nobody(paths: list[str], sock: str | None) -> list[tuple[str, int]]:
    """In a forked child of uid/gid 65534: open each path for reading (and connect to ``sock``); the errno
    of each attempt, 0 for a success."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child never returns into pytest
        code = 1
        try:
            os.close(r)
            os.setgroups([])
            os.setresgid(65534, 65534, 65534)
            os.setresuid(65534, 65534, 65534)
            out = []
            for p in paths:
                try:
                    os.close(os.open(p, os.O_RDONLY))
                    out.append(f"{p}\t0")
                except OSError as e:
                    out.append(f"{p}\t{e.errno}")
            if sock is not None:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(5)
                try:
                    s.connect(sock)
                    out.append(f"{sock}\t0")
                except OSError as e:
                    out.append(f"{sock}\t{e.errno}")
                finally:
                    s.close()
            os.write(w, "\n".join(out).encode())
            code = 0
        except BaseException as e:
            os.write(w, f"ERROR {e!r}".encode())
        finally:
            os._exit(code)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, data
    return [(p, int(e)) for p, e in (ln.split("\t") for ln in data.decode().splitlines())]


@needs_root
def test_another_account_reads_nothing_and_cannot_reach_the_daemon(open_work: str) -> None:
    from tests.integration.test_daemon import Daemon

    comm = Comm(open_work)
    a, b = comm.session("alpha"), comm.session("beta")
    assert a.run("join", "alpha").code == 0
    assert b.run("join", "beta").code == 0
    assert b.run("send", "@alpha", "secret").code == 0
    assert a.run("poll").code == 0
    lay = comm.layout
    private = [lay.inbox("alpha"), lay.registry, lay.cursor("alpha"), a.self_file]
    for p in private:
        assert os.path.isfile(p), p
    d = Daemon(open_work, "perm", comm.home, "boxa")
    try:
        assert stat.S_IMODE(os.stat(os.path.dirname(d.sock)).st_mode) & 0o077 == 0
        got = _as_nobody(private, d.sock)
        assert got == [(p, errno.EACCES) for p in [*private, d.sock]], got
        # the files' and the socket's own modes refuse too: open every folder on the way for searching only
        # (a test-only widening, put back below) and try again
        folders = sorted({os.path.dirname(p) for p in [*private, d.sock]} | {comm.home}, key=len)
        saved = {f: stat.S_IMODE(os.stat(f).st_mode) for f in folders}
        try:
            for f in folders:
                os.chmod(f, saved[f] | 0o011)
            got = _as_nobody(private, None)
            assert got == [(p, errno.EACCES) for p in private], got
            mode = stat.S_IMODE(os.stat(d.sock).st_mode)
            if mode & 0o002 == 0:
                assert _as_nobody([], d.sock) == [(d.sock, errno.EACCES)]
        finally:
            for f in reversed(folders):
                os.chmod(f, saved[f])
        assert d.request("version.query", {})["daemon"]["pid"] == d.proc.pid
    finally:
        d.stop()
