"""Issue 13, part 3 "any order works" and part 2 "errors name the fix", as transcripts.

- A send that needs this box's daemon (this box cannot take the inbox lock itself: no hub has written
  the inbox-lock-manager record) and finds none. Before: ``FAILED -> @beta: this box cannot take the
  inbox lock itself, and no daemon is reachable to file it`` and exit 1, whatever the user did next.
  After: the daemon is started (one stderr line says so, naming its log and how to turn this off), the
  daemon files the line (``filed -> @beta``, unindented: a daemon filed it), exit 0, and it keeps
  running. With ``SOT_DAEMON_AUTOSTART=off`` the FAILED line stays byte for byte and a second line names
  ``sotd daemon start``.
- A hub daemon started before its comm folder exists. Before: the log said ``no comm folder …: every
  filing answers not_here``, no record was written, and every send then failed with ``no inbox lock
  record at <path>: restart this daemon to write it``. After: the hub makes the folder (0700, as the
  commands make it) and writes its record at start. A record removed or changed later is refused in
  behaviour 6.4's words, as the spec says (issue 28 item 6: rewriting it while the hub runs could leave
  two boxes each believing it manages the folder's locks); a restart writes it again.
- ``sotd daemon start`` says where its log is (before: only the socket path).
- ``sotd comm unread`` outside a joined session. Before: ``usage: sotd comm unread <handle>``, exit 1.
  After: ``Not joined — run comm-join.sh first.`` (poll's sentence), exit 1.
"""

from __future__ import annotations

import os
import shutil

import pytest

from sotd import runtime
from sotd.formats import lockmanager
from sotd.formats.layout import Layout
from tests.conftest import Comm, Session
from tests.newcomer.daemons import daemon, started_pid, stop_daemon

pytestmark = pytest.mark.transcripts


def _no_record_box(tmp_path: object) -> tuple[Comm, Session, Session, str]:
    comm = Comm(str(tmp_path), record=False)
    a, b = comm.session("alpha"), comm.session("beta")
    assert a.run("join", "--name", "alpha").code == 0
    assert b.run("join", "--name", "beta").code == 0
    sock = os.path.join(comm.work, "run", "sotd.sock")
    return comm, a, b, sock


def test_a_send_with_no_daemon_starts_it_and_is_filed(tmp_path: object) -> None:
    comm, a, _b, sock = _no_record_box(tmp_path)
    env = {"SOT_SOCKET": sock, "SOT_DAEMON_AUTOSTART": "on"}
    try:
        r = a.run("send", "@beta", "hello", env=env)
        pid = started_pid(sock)
        assert pid is not None, r
        log = sock + ".log"
        assert (r.code, r.out) == (0, "filed -> @beta\n"), r
        assert r.err_lines == [
            f"sotd: this box had no daemon running, so one was started (started pid {pid} at {sock}; its log "
            f"is {log}); SOT_DAEMON_AUTOSTART=off turns this off"
        ]
        assert b'"msg":"hello"' in comm.inbox_bytes("beta")
        st = daemon({**a.env, "SOT_SOCKET": sock}, "status")
        assert st.returncode == 0 and f"pid {pid}, host testhost" in st.stdout, st
        # the daemon is there now: the next send says nothing about starting one
        r = a.run("send", "@beta", "again", env=env)
        assert (r.code, r.out, r.err) == (0, "  filed -> @beta\n", ""), r  # the hub's record: appended here
    finally:
        stop_daemon(a.env, sock)


def test_with_autostart_off_the_failed_line_names_sotd_daemon_start(tmp_path: object) -> None:
    comm, a, _b, sock = _no_record_box(tmp_path)
    r = a.run("send", "@beta", "hello", env={"SOT_SOCKET": "", "XDG_RUNTIME_DIR": os.path.dirname(sock)})
    default = runtime.default_socket({**a.env, "XDG_RUNTIME_DIR": os.path.dirname(sock)})  # this folder's
    assert r.code == 1
    assert r.err_lines == [
        "FAILED -> @beta: this box cannot take the inbox lock itself, and no daemon is reachable to file it",
        f"no daemon runs at {default} (SOT_DAEMON_AUTOSTART is off); start it: sotd daemon start",
    ]
    assert comm.inbox_bytes("beta") == b"" and not os.path.exists(default)


def test_a_hub_started_before_its_folder_makes_it_and_records_it(tmp_path: object) -> None:
    comm = Comm(str(tmp_path), record=False, install=False)
    shutil.rmtree(comm.home)
    a, b = comm.session("alpha"), comm.session("beta")
    sock = os.path.join(comm.work, "run", "sotd.sock")
    env = {**a.env, "SOT_SOCKET": sock}
    try:
        r = daemon(env, "start")
        pid = started_pid(sock)
        assert (r.returncode, r.stdout) == (0, sock + "\n"), r
        assert r.stderr == f"sotd daemon: started pid {pid} at {sock}; its log is {sock}.log\n"
        lay = Layout(comm.home)
        assert oct(os.stat(lay.home).st_mode & 0o777) == "0o700"
        assert lockmanager.read_record(lay) == (
            lockmanager.lock_manager_of(lay.inbox_dir),
            lockmanager.machine_id_or_none() or "",
        )
        assert a.run("join", "--name", "alpha").code == 0
        assert b.run("join", "--name", "beta").code == 0
        r = a.run("send", "@beta", "hi")
        assert (r.code, r.out, r.err) == (0, "  filed -> @beta\n", ""), r
        r = daemon(env, "start")  # already running: the log is named too
        assert r.stderr == f"sotd daemon: already running at {sock} (pid {pid}); its log is {sock}.log\n"
    finally:
        stop_daemon(env, sock)


def test_unread_outside_a_joined_session_says_not_joined(comm: Comm) -> None:
    r = comm.session("alpha").run("unread")
    assert (r.code, r.out, r.err) == (1, "", "Not joined — run comm-join.sh first.\n")


def test_daemon_status_with_no_daemon_names_the_start(tmp_path: object) -> None:
    """Before: only ``sotd daemon: no daemon answered at <socket>: …``. After: a second line to type."""
    comm = Comm(str(tmp_path), install=False)
    a = comm.session("alpha")
    sock = os.path.join(comm.work, "run", "sotd.sock")
    r = daemon({**a.env, "SOT_SOCKET": sock}, "status")
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr.splitlines() == [
        f"sotd daemon: no daemon answered at {sock}: the daemon did not answer at unix:{sock}",
        "start it: sotd daemon start",
    ]


def test_a_record_deleted_while_the_hub_runs_is_refused_until_a_restart(tmp_path: object) -> None:
    """Issue 28 item 6: the record goes away under a running hub (a folder remade under it). A sender that
    cannot take the lock itself hands the line to the hub, which refuses in behaviour 6.4's words and
    writes nothing; the restart the sentence asks for writes the record, and the next send is filed."""
    comm = Comm(str(tmp_path), install=False)
    lay = comm.layout
    a, b = comm.session("alpha"), comm.session("beta")
    assert a.run("join", "--name", "alpha").code == 0
    assert b.run("join", "--name", "beta").code == 0
    sock = os.path.join(comm.work, "run", "sotd.sock")
    env = {**a.env, "SOT_SOCKET": sock}
    try:
        assert daemon(env, "start").returncode == 0
        recorded = lockmanager.read_record(lay)
        assert recorded is not None
        os.unlink(lay.lock_manager)
        r = a.run("send", "@beta", "hi", env={"SOT_SOCKET": sock})
        assert (r.code, r.out, r.err_lines) == (
            1,
            "",
            [f"FAILED -> @beta: no inbox lock record at {lay.lock_manager}: restart this daemon to write it"],
        ), r
        assert not os.path.exists(lay.lock_manager)  # refused, never written at filing time
        assert comm.inbox_bytes("beta") == b""
        stop_daemon(env, sock)
        assert daemon(env, "start").returncode == 0
        assert lockmanager.read_record(lay) == recorded
        r = a.run("send", "@beta", "hi again", env={"SOT_SOCKET": sock})
        assert (r.code, r.out, r.err) == (0, "  filed -> @beta\n", ""), r  # the record is ours again
    finally:
        stop_daemon(env, sock)


@pytest.mark.parametrize("before", ["missing", "remounted"])
def test_a_hub_refuses_a_missing_or_remounted_record_and_leaves_it(tmp_path: object, before: str) -> None:
    """Behaviour 6.4's route, byte for byte: a hub whose record is missing, or was written by this machine
    under another identity (a remount), refuses with the restart sentence and writes nothing; a guest
    forwards. (Before issue 28 item 6 the hub rewrote the record at filing time.)"""
    from sotd.daemon import ops

    mid = lockmanager.machine_id_or_none()
    if mid is None:
        pytest.skip("this machine has no machine id, so a hub here owns no record (behaviour 6.4)")
    comm = Comm(str(tmp_path), record=False, install=False)
    lay = comm.layout
    own = lockmanager.lock_manager_of(lay.inbox_dir)
    old = lockmanager.encode_record("nfs4 old:/export", mid)
    if before == "remounted":
        with open(lay.lock_manager, "wb") as f:
            f.write(old)
    guest = ops.route_now(lay, False, False, "testhost")
    assert guest.where == lockmanager.FORWARD
    route = ops.route_now(lay, True, False, "testhost")
    if before == "missing":
        want = f"no inbox lock record at {lay.lock_manager}: restart this daemon to write it"
        assert not os.path.exists(lay.lock_manager)
    else:
        want = (
            f"this hub's inbox lock is now {own} but its record says nfs4 old:/export: restart this daemon "
            "to re-record it after the remount"
        )
        with open(lay.lock_manager, "rb") as f:
            assert f.read() == old
    assert (route.where, route.text) == (lockmanager.REFUSE, want)


def test_a_spawn_with_no_daemon_starts_it(tmp_path: object) -> None:
    """Before: ``ERROR: could not find the sotd daemon. Set --endpoint unix:/path or ssh:target[/host].``
    After: the daemon is started (the notice) and the row is created through it. The row's command exits
    at once (``true``), so the spawn ends, as it should, on that row's terminal phase."""
    import subprocess

    comm = Comm(str(tmp_path))
    a = comm.session("alpha")
    sock = os.path.join(comm.work, "run", "sotd.sock")
    state = os.path.join(comm.work, "state")
    env = {"SOT_SOCKET": sock, "SOTD_STATE_DIR": state, "SOT_DAEMON_AUTOSTART": "on"}
    try:
        r = a.run("spawn", a.root, "--command", "true", env=env)
        pid = started_pid(sock)
        assert pid is not None, r
        assert r.err_lines[0] == (
            f"sotd: this box had no daemon running, so one was started (started pid {pid} at {sock}; its log "
            f"is {sock}.log); SOT_DAEMON_AUTOSTART=off turns this off"
        ), r
        assert r.out_lines[0].startswith("Created workspace 'alpha' (slug=alpha, id=ws-"), r
        assert daemon({**a.env, **env}, "status").returncode == 0
    finally:
        stop_daemon(a.env, sock)
        tmux = os.path.join(state, "tmux", "tmux.sock")
        if os.path.exists(tmux):
            subprocess.run(["tmux", "-S", tmux, "kill-server"], check=False, capture_output=True, timeout=30)


def _daemons_serving(sock: str) -> list[int]:
    """Pids whose command line is ``… daemon run --socket <sock>``."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"run" in argv and sock.encode() in argv and b"daemon" in argv:
            found.append(int(d))
    return found


def test_two_starts_at_once_make_one_daemon(tmp_path: object) -> None:
    """Two commands that each find no daemon start it at the same moment: ``sotd daemon start`` takes a
    lock beside the socket, so the second finds the first's daemon answering."""
    import subprocess

    from tests.conftest import SOTD

    comm = Comm(str(tmp_path), install=False)
    sock = os.path.join(comm.work, "run", "sotd.sock")
    env = {**comm.session("alpha").env, "SOT_SOCKET": sock}
    try:
        procs = [
            subprocess.Popen(
                [SOTD, "daemon", "start"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            for _ in range(2)
        ]
        results = [p.communicate(timeout=60) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], results
        assert [out for out, _err in results] == [sock + "\n", sock + "\n"]
        said = sorted(" ".join(err.split()[:4]) for _out, err in results)
        assert said == ["sotd daemon: already running", "sotd daemon: started pid"], results
        assert _daemons_serving(sock) == [started_pid(sock)]
    finally:
        stop_daemon(env, sock)


def test_a_broadcast_names_the_fix_once(tmp_path: object) -> None:
    """With autostart off and no record, each copy fails; the next step follows the FAILED lines once."""
    comm, a, _b, sock = _no_record_box(tmp_path)
    assert comm.session("gamma").run("join", "--name", "gamma").code == 0
    runtime_dir = os.path.dirname(sock)
    r = a.run("send", "--broadcast", "hi", env={"SOT_SOCKET": "", "XDG_RUNTIME_DIR": runtime_dir})
    default = runtime.default_socket({**a.env, "XDG_RUNTIME_DIR": runtime_dir})
    why = "this box cannot take the inbox lock itself, and no daemon is reachable to file it"
    assert (r.code, r.out) == (1, "Broadcast to 0 of 2 agent(s).\n")
    assert r.err_lines == [
        f"FAILED -> @beta: {why}",
        f"FAILED -> @gamma: {why}",
        f"no daemon runs at {default} (SOT_DAEMON_AUTOSTART is off); start it: sotd daemon start",
    ]
