"""The inbox lock's timer-bounded wait on a main thread with SIGALRM unused (the one-shot CLI's case).

Each case runs in a fresh interpreter, as the CLI does: pytest itself keeps a SIGALRM handler and timer
(pytest-timeout), which sends every in-process append of the other tests down the helper-thread path.
Shown here: the bound is kept in full and not overrun, nothing is appended past it, the lock is taken the
moment it is freed, no thread is started and ``threading`` is not imported, SIGALRM is left as it was
found, and an application that uses SIGALRM itself (a handler, or a timer running) gets the helper thread
with its own handler and timer untouched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from sotd.formats import inbox
from sotd.formats.layout import Layout

pytestmark = pytest.mark.integration

H = "a"
SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")

# argv: src home bound setup; prints one JSON object. setup: "none" | "handler" | "blocked" | "timer".
CALLER = r"""
import json, os, signal, sys, time
sys.path.insert(0, sys.argv[1])
from sotd.errors import AppendFailed
from sotd.formats import inbox
from sotd.formats.layout import Layout

lay, bound, setup = Layout(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
fired = []
if setup == "handler":
    mine = lambda s, f: fired.append(s)
    signal.signal(signal.SIGALRM, mine)
elif setup == "blocked":  # a mask inherited across exec: an alarm would stay pending, the wait unbounded
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
elif setup == "timer":
    signal.setitimer(signal.ITIMER_PROF, 0)  # (another timer kind: not ours to mind)
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.setitimer(signal.ITIMER_REAL, 30.0)
threads_before = "threading" in sys.modules
print("ready", flush=True)
sys.stdin.readline()
t0 = time.monotonic()
try:
    inbox.append(lay, "a", b'{"n":2}\n', nfs=False, bound=bound)
    what = "appended"
except AppendFailed as e:
    what = e.message
took = time.monotonic() - t0
handler = signal.getsignal(signal.SIGALRM)
print(json.dumps({
    "what": what,
    "took": took,
    "helpers": inbox._waiters.started,
    "threading_before": threads_before,
    "threading": "threading" in sys.modules,
    "handler": "default" if handler == signal.SIG_DFL else ("mine" if setup == "handler" and handler is mine else repr(handler)),
    "timer_left": signal.getitimer(signal.ITIMER_REAL)[0],
    "fired": fired,
    "blocked": signal.SIGALRM in signal.pthread_sigmask(signal.SIG_BLOCK, ()),
}), flush=True)
"""

HOLDER = r"""
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
hold = float(sys.argv[2])
if hold >= 0:
    sys.stdin.readline()
    time.sleep(hold)
    fcntl.flock(fd, fcntl.LOCK_UN)
    print("released", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def lay(tmp_path: os.PathLike[str]) -> Layout:
    lay = Layout(str(tmp_path / "comm"))  # type: ignore[operator]
    os.makedirs(lay.inbox_dir)
    inbox.append(lay, H, b'{"n":1}\n', nfs=False, bound=2)
    return lay


def _start(argv: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _say(p: subprocess.Popen[str], line: str = "go") -> None:
    assert p.stdin is not None
    p.stdin.write(line + "\n")
    p.stdin.flush()


def _read(p: subprocess.Popen[str]) -> str:
    assert p.stdout is not None
    return p.stdout.readline()


def _end(p: subprocess.Popen[str]) -> None:
    assert p.stdin is not None and p.stdout is not None
    p.stdin.close()
    try:
        p.wait(10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()


def _contended(lay: Layout, *, bound: float, setup: str, release_after: float) -> dict[str, object]:
    """A caller meets the lock held by another process; released after ``release_after`` s (< 0: never)."""
    holder = _start([sys.executable, "-c", HOLDER, lay.inbox_lock(H), str(release_after)])
    caller = _start([sys.executable, "-c", CALLER, SRC, lay.home, str(bound), setup])
    try:
        assert _read(holder) == "held\n"
        assert _read(caller) == "ready\n"
        _say(caller)
        if release_after >= 0:
            _say(holder)
        line = _read(caller)
        assert line, "the caller printed nothing"
        got: dict[str, object] = json.loads(line)
        assert caller.wait(10) == 0
        return got
    finally:
        _end(caller)
        _end(holder)


def test_the_bound_is_kept_in_full_with_no_thread_and_sigalrm_left_as_found(lay: Layout) -> None:
    got = _contended(lay, bound=1, setup="none", release_after=-1)
    assert got["what"] == "the inbox lock for @a was held for 1s — nothing was appended"
    took = got["took"]
    assert isinstance(took, float) and 1.0 <= took < 1.8, took  # not sooner, and not a poll's overrun
    assert got["helpers"] == 0
    assert got["threading_before"] is False and got["threading"] is False
    assert got["handler"] == "default" and got["timer_left"] == 0.0
    assert inbox.read_all(lay, H) == b'{"n":1}\n'  # nothing appended


def test_the_lock_is_taken_as_soon_as_it_is_freed(lay: Layout) -> None:
    t0 = time.monotonic()
    got = _contended(lay, bound=5, setup="none", release_after=0.3)
    assert got["what"] == "appended"
    took = got["took"]
    # it waited for the release (0.3 s after the holder read its go, which it reads after the caller read
    # its own: a caller scheduled late starts its clock a little after the holder's, so 0.299 s was seen
    # under load), and took the lock then, not at a later poll
    assert isinstance(took, float) and 0.25 <= took < 2.0, took
    assert time.monotonic() - t0 < 5
    assert got["helpers"] == 0 and got["threading"] is False
    assert got["handler"] == "default" and got["timer_left"] == 0.0
    assert inbox.read_all(lay, H) == b'{"n":1}\n{"n":2}\n'


def test_an_application_sigalrm_handler_gets_the_helper_and_is_left_alone(lay: Layout) -> None:
    got = _contended(lay, bound=1, setup="handler", release_after=-1)
    assert got["what"] == "the inbox lock for @a was held for 1s — nothing was appended"
    assert got["helpers"] == 1  # the helper thread's wait, not the timer
    assert got["handler"] == "mine" and got["fired"] == []
    assert inbox.read_all(lay, H) == b'{"n":1}\n'


def test_a_blocked_sigalrm_gets_the_helper_and_the_bound_still_holds(lay: Layout) -> None:
    got = _contended(lay, bound=1, setup="blocked", release_after=-1)
    assert got["what"] == "the inbox lock for @a was held for 1s — nothing was appended"
    took = got["took"]
    assert isinstance(took, float) and 1.0 <= took < 1.8, took
    assert got["helpers"] == 1
    assert got["blocked"] is True and got["handler"] == "default"  # the mask left as found
    assert inbox.read_all(lay, H) == b'{"n":1}\n'


def test_a_running_real_timer_gets_the_helper_and_keeps_running(lay: Layout) -> None:
    got = _contended(lay, bound=1, setup="timer", release_after=-1)
    assert got["what"] == "the inbox lock for @a was held for 1s — nothing was appended"
    assert got["helpers"] == 1
    left = got["timer_left"]
    assert isinstance(left, float) and 25.0 < left < 30.0, left  # the application's timer, untouched
    assert inbox.read_all(lay, H) == b'{"n":1}\n'


def test_a_reader_waits_by_the_timer_too(lay: Layout, tmp_path: os.PathLike[str]) -> None:
    """The shared lock of ``poll`` (ReadLock) goes through the same wait: busy past the bound, exit 75's
    sentence; no thread."""
    script = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from sotd.errors import InboxBusy
from sotd.formats import inbox
from sotd.formats.layout import Layout
t0 = time.monotonic()
try:
    with inbox.ReadLock(Layout(sys.argv[2]), "a", nfs=False, bound=1, warn=print):
        what = "read"
except InboxBusy as e:
    what = e.message
print(json.dumps({"what": what, "took": time.monotonic() - t0, "threading": "threading" in sys.modules}))
"""
    holder = _start([sys.executable, "-c", HOLDER, lay.inbox_lock(H), "-1"])
    try:
        assert _read(holder) == "held\n"
        p = subprocess.run(
            [sys.executable, "-c", script, SRC, lay.home],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    finally:
        _end(holder)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got["what"] == "the inbox for @a is being written — nothing was read; run comm-poll.sh again"
    assert 1.0 <= got["took"] < 1.8 and got["threading"] is False
