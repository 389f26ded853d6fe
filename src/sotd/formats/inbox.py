"""The inbox: one JSON line per message, appended under a kernel file lock.

File: ``inbox/<h>.jsonl`` (0600), its lock ``inbox/<h>.lock`` (0600, opened read-write, never written).
Spec: seed 000 "The inbox"; behaviour 6.4 "The append itself", 6.5 (reader's lock), 1.5/1.6 (poll, unread).
Guarantee: after ``append`` returns, the line is whole, synced (before its deadline, when it has one) and
after every line appended before it;
when it raises, the inbox is byte-identical to how the append found it (after the cut of a dead writer's
unterminated tail), except in the one case the error says so (the rollback itself failed). A reader holding
the shared lock never sees a line in flight; an unlocked reader may, and the cursor's hash repairs that.
What would break it: writing without the exclusive lock, O_APPEND across NFS clients without it, a rollback
to any length other than the one measured under the lock, or counting an unterminated tail as a line.
Never through a link (issue 25): ``inbox/`` is opened as a descriptor with ``O_NOFOLLOW`` and the lock and
the inbox are opened at it with ``O_NOFOLLOW`` (``fsprim.open_nofollow``); a link at either, or at the
folder, is ``LinkRefused`` and nothing is read or appended. An open by path without that would follow one.

The bounded blocking wait. The spec asks for a blocking flock bounded by a timeout (15-25 ms non-blocking
tries only under an nfs4 lock manager). The kernel has no flock with a timeout, and polling with LOCK_NB is
unfair: a blocking waiter (the daemon, the 0.6.6 shell's ``flock -w``) is woken by the kernel the moment the
lock is released, so a poller can lose every race until its bound runs out. So the wait is one LOCK_NB try
(the uncontended case), then a blocking flock bounded in one of two ways:

- On the main thread, while SIGALRM is unused (its default disposition, not blocked, and no
  ``ITIMER_REAL`` running: the one-shot CLI, ``_alarm_wait``): a one-shot ``setitimer`` for the bound interrupts the blocking flock. The
  handler raises only while the wait is armed, the timer is disarmed and the default disposition put back
  before the call returns, so an application that uses SIGALRM itself (or a test runner's timeout) never
  sees this path: it gets the helper below. A contended CLI send then starts no thread and imports nothing
  more (``threading`` pulls in a dozen modules, measured in ``bench/contention.py``'s notes).
- Elsewhere (the daemon's worker threads, an application's own SIGALRM): a helper thread blocks in flock
  while the caller waits on a signal with the bound. If the caller gives up first, it hands the descriptor
  to the helper, which releases the lock and closes the descriptor the moment it gets it (the same design
  as the reference daemon). Helpers are kept and reused (``_Waiters``): a process starts one the first time
  a call meets a held lock, and another only while every helper it has is busy with a call, so their
  number is the most calls it ever had contended at one moment (at most the daemon's worker threads), never
  one per call. Starting a thread per contended call cost 0.3x of a flocked floor's rate with 16
  contending processes (docs/benchmarks.md, "Contention").

Either way the bound is the caller's own timed wait, from the moment it finds the lock held; a lock that
comes free as the bound runs out is still taken (one LOCK_NB try after the timer), never waited for longer.

Failure wording decided here (the spec leaves it open):
- the rollback itself failed: ``the append failed: <why>; the rollback failed too (<why>), so the line may
  still be in @<h>'s inbox``;
- the lock was lost (EIO, or the lock no longer held, after a stall of ``STALL_SECS``): ``the append failed:
  the inbox lock for @<h> was lost while the append stalled (<why>)``, after a rollback that is done only when
  the file still ends with our own line (another writer may own the lock by then). After a stalled write the
  re-asserted lock is not proof enough: the file must also be exactly our line longer than it was.
- a stall before the write: ``the append failed: the inbox lock for @<h> may have been lost while the append
  stalled before its write; nothing was appended``. Measured on real NFS (tests/nfs, the partition point): a
  client cut off past its lease re-takes the expired lock by itself when the link heals, once the other
  host has released it, and its cached pages then write zeros over the other host's line. So past
  ``STALL_SECS`` no write is started at all, whatever the lock and the size say.
- an append with a deadline (the daemon's, for a frame whose sender stops waiting at ``expires``;
  ``deadline_action``, docs/contract.md "A filing's deadline"): past it before the write, ``the append
  failed: the sender's deadline passed before the line was written to @<h>'s inbox; nothing was
  appended``; past it once the sync returned, the line is cut off again under the still-held lock and
  ``the append failed: the sender's deadline passed while the line was being synced, so it was taken back
  out of @<h>'s inbox; nothing was appended`` (if that cut fails: ``…; taking it back failed (<why>), so
  the line may still be in @<h>'s inbox``). A line is filed only if it was synced before the deadline.
"""

from __future__ import annotations

import _thread
import errno
import fcntl
import os
import time

from sotd import fsprim
from sotd.errors import AppendFailed, InboxBusy, InboxUnreadable, SotdError
from sotd.handles import is_directed

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from types import TracebackType
    from typing import Any

    from sotd.formats.layout import Layout

if TYPE_CHECKING:
    import signal as _signal
else:
    import _signal  # signal's C half: the same calls without signal.py's enum import (the hot path)

INBOX_LOCK_WAIT_DEFAULT = 2
INBOX_READ_WAIT_DEFAULT = 3
BLOCK = 4096
STALL_SECS = 5.0  # a step under the lock slower than this may have outlived an NFS lease

# Test seams: the calls that touch the inbox's bytes (fault tests replace them in-process).
_write = os.write
_fsync = os.fsync
_ftruncate = os.ftruncate
_monotonic = time.monotonic
_sleep = time.sleep


# ---------------------------------------------------------------------------------------------- line codec


def encode_line(frm: str, to: str, repo: str, msg: str, ts: str) -> bytes:
    """One inbox record: compact JSON as jq writes it (``sotd.text``), keys from, to, repo, msg, ts, LF-terminated.

    Text UTF-8 cannot carry (a lone surrogate) is written as U+FFFD, never as an escape (docs/contract.md).
    """
    from sotd.text import json_text

    obj = {"from": frm, "to": to, "repo": repo, "msg": msg, "ts": ts}
    return json_text(obj).encode("utf-8") + b"\n"


def decode_line(line: bytes) -> dict[str, Any] | None:
    """The JSON object on ``line``, or None when it is empty, not JSON, or not an object.

    Read through ``sotd.text.loads`` (bytes that are not UTF-8 decoded as jq does, a lone surrogate escape
    as U+FFFD), so whatever a line holds, what is shown of it can be printed.
    """
    from sotd.text import loads

    if not line.strip():
        return None
    try:
        obj = loads(line)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def complete_lines(data: bytes) -> list[bytes]:
    """The newline-terminated lines of ``data``, without their newline (an unterminated tail is dropped)."""
    if not data:
        return []
    return data.split(b"\n")[:-1]


# ------------------------------------------------------------------------------------------------- bounds


def _whole_secs(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if raw and raw.isascii() and raw.isdigit() and len(raw) <= 9:
        return int(raw)
    return default


def inbox_wait(environ: Mapping[str, str] | None = None) -> float:
    """``SOT_INBOX_LOCK_WAIT_SECS`` as a whole number of seconds; unset or not a whole number -> 2."""
    return float(_whole_secs(os.environ if environ is None else environ, "SOT_INBOX_LOCK_WAIT_SECS", 2))


def read_wait(environ: Mapping[str, str] | None = None) -> float:
    """``SOT_INBOX_READ_WAIT_SECS`` as a whole number of seconds; unset or not a whole number -> 3."""
    return float(_whole_secs(os.environ if environ is None else environ, "SOT_INBOX_READ_WAIT_SECS", 3))


# -------------------------------------------------------------------------------------------------- locks


class _Busy(Exception):
    """The lock was still held when the bound ran out (internal; callers raise the spec's sentence)."""


def _jitter_secs() -> float:
    return (15 + os.urandom(1)[0] % 11) / 1000.0


def _lock_nfs(fd: int, op: int, bound: float) -> None:
    """Non-blocking tries every 15-25 ms (jittered) until ``bound``; raises _Busy, or OSError for a fault."""
    deadline = _monotonic() + max(bound, 0.0)
    while True:
        try:
            fcntl.flock(fd, op | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        left = deadline - _monotonic()
        if left <= 0:
            raise _Busy
        _sleep(min(_jitter_secs(), left))


class _Waiter:
    """A helper thread that blocks in flock for a caller waiting with a bound; kept and reused.

    One request at a time: the caller fills ``fd``/``op`` and releases ``go``; the thread blocks in flock,
    then, under ``mu``, either answers (``got``, ``err``, ``done`` released) or, when the caller has given
    up, closes the descriptor (which drops the lock it just got) and goes back to the idle list itself.
    ``go`` and ``done`` are plain locks used as one-shot signals (cheaper than an Event's condition).
    """

    __slots__ = ("done", "err", "fd", "gave_up", "go", "got", "mu", "op")

    def __init__(self) -> None:
        import threading

        self.fd = -1
        self.op = 0
        self.err: OSError | None = None
        self.gave_up = False
        self.got = False
        self.mu = _thread.allocate_lock()
        self.go = _thread.allocate_lock()
        self.go.acquire()
        self.done = _thread.allocate_lock()
        self.done.acquire()
        threading.Thread(target=self._run, name="sotd-inbox-flock", daemon=True).start()

    def _run(self) -> None:
        while True:
            self.go.acquire()
            err: OSError | None = None
            try:
                fcntl.flock(self.fd, self.op)
            except OSError as e:
                err = e
            with self.mu:
                if not self.gave_up:
                    self.err = err
                    self.got = True
                    self.done.release()
                    continue
                # The caller left; the descriptor is ours: closing it releases the lock we just got.
                try:
                    os.close(self.fd)
                except OSError:
                    pass
                self.fd = -1
            _waiters.put_back(self)

    def wait(self, fd: int, op: int, bound: float) -> bool:
        """True when the lock was taken (or failed: see ``err``); False when the caller gave up.

        After False the descriptor belongs to the helper: the caller must not close it.
        """
        self.fd, self.op, self.err, self.gave_up, self.got = fd, op, None, False, False
        self.go.release()
        if self.done.acquire(timeout=max(bound, 0.0)):
            return True
        with self.mu:
            if self.got:  # answered between the timeout and here: the lock is the caller's
                self.done.acquire()
                return True
            self.gave_up = True
            return False


class _Waiters:
    """This process's idle helpers (see the module header): at most one per call contended at once."""

    __slots__ = ("idle", "mu", "started")

    def __init__(self) -> None:
        self.idle: list[_Waiter] = []
        self.mu = _thread.allocate_lock()
        self.started = 0  # helpers this process has started (a test reads it)

    def take(self) -> _Waiter:
        with self.mu:
            if self.idle:
                return self.idle.pop()
            self.started += 1
        return _Waiter()

    def put_back(self, w: _Waiter) -> None:
        with self.mu:
            self.idle.append(w)

    def forget(self) -> None:
        """In a forked child: the parent's helper threads do not exist here."""
        self.idle = []
        self.mu = _thread.allocate_lock()
        self.started = 0


_waiters = _Waiters()
os.register_at_fork(after_in_child=_waiters.forget)


class _Alarm(Exception):
    """The bound's timer fired during ``_alarm_wait`` (internal)."""


def _alarm_free() -> bool:
    """Whether SIGALRM is unused here: its default disposition, not blocked (a mask inherited across exec
    would hold the alarm back and leave the wait unbounded), and no real-time interval timer running."""
    return (
        _signal.getsignal(_signal.SIGALRM) == _signal.SIG_DFL
        and _signal.getitimer(_signal.ITIMER_REAL) == (0.0, 0.0)
        and _signal.SIGALRM not in _signal.pthread_sigmask(_signal.SIG_BLOCK, ())
    )


def _alarm_wait(fd: int, op: int, bound: float) -> bool | None:
    """A blocking flock on the main thread, cut off by a one-shot ``ITIMER_REAL`` after ``bound`` seconds.

    True: taken. Raises _Busy (the descriptor is still the caller's) or the flock's OSError. None: SIGALRM
    is not free here (another thread, a handler or a timer of the application's): use a helper. The handler
    raises at most once and only while armed; the timer is disarmed before the default disposition is put
    back (``signal`` runs a pending handler first, which by then does nothing), so no alarm outlives the call.
    """
    if not _alarm_free():
        return None
    armed = [True]

    def on_alarm(_signum: int, _frame: object) -> None:
        if armed[0]:
            armed[0] = False
            raise _Alarm

    try:
        _signal.signal(_signal.SIGALRM, on_alarm)
    except ValueError:  # not the main thread
        return None
    timed_out = False
    try:
        try:
            _signal.setitimer(_signal.ITIMER_REAL, bound)
            fcntl.flock(fd, op)
        finally:
            _signal.setitimer(_signal.ITIMER_REAL, 0.0)
            armed[0] = False
    except _Alarm:
        timed_out = True
    finally:
        _signal.signal(_signal.SIGALRM, _signal.SIG_DFL)
    if timed_out:
        # The timer may have fired just after flock returned: a lock this descriptor holds re-asserts at once.
        try:
            fcntl.flock(fd, op | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _Busy from None
    return True


def _lock_blocking(fd: int, op: int, bound: float) -> bool:
    """Take flock ``op`` on ``fd`` within ``bound``. False: gave up, and ``fd`` now belongs to a helper."""
    try:
        fcntl.flock(fd, op | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        pass
    if bound <= 0:
        raise _Busy
    got = _alarm_wait(fd, op, bound)
    if got is not None:
        return got
    waiter = _waiters.take()
    if not waiter.wait(fd, op, bound):
        return False
    err = waiter.err
    _waiters.put_back(waiter)
    if err is not None:
        raise err
    return True


def _take(fd: int, op: int, *, nfs: bool, bound: float) -> None:
    """Take the lock or raise _Busy (fd already closed or handed off) / OSError (fd still the caller's)."""
    if nfs:
        try:
            _lock_nfs(fd, op, bound)
        except _Busy:
            os.close(fd)
            raise
        return
    try:
        ok = _lock_blocking(fd, op, bound)
    except _Busy:
        os.close(fd)
        raise
    if not ok:
        raise _Busy


def _open_lock(path: str, dir_fd: int | None = None) -> int:
    """The lock file, opened read-write (created 0600), never through a link (``fsprim.LinkedPath``)."""
    return fsprim.open_nofollow(path, os.O_RDWR | os.O_CREAT, 0o600, real_folder=True, dir_fd=dir_fd)


def _linked(e: fsprim.LinkedPath) -> SotdError:
    from sotd.formats.layout import link_refused

    return link_refused(str(e.filename))


def _release(lock_fd: int) -> None:
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_UN)
    except OSError:
        pass
    try:
        os.close(lock_fd)
    except OSError:
        pass


# ----------------------------------------------------------------------------------------------- deadline

# The points of an append at which its deadline is checked, and what it then does.
BEFORE_LOCK = "before the lock"
BEFORE_WRITE = "before the write"
AFTER_SYNC = "after the sync"
GO = "go on"
GIVE_UP = "give up"  # nothing was written: fail, nothing appended
TAKE_BACK = "take back"  # the line is written and synced: cut it off again, then fail


def deadline_action(step: str, left: float | None) -> str:
    """What an append does at ``step`` with ``left`` seconds to its deadline (None: it has none).

    A line is filed only if its sync returned before the deadline, because past it the sender may have
    stopped waiting and said FAILED. So with time left it goes on; with none left before the write it
    gives up; with none left once the sync returned it takes the line back out (the lock is still held,
    so the file ends with exactly that line) and fails. A positive ``left`` before the lock is also the
    most the lock wait may take.
    """
    if left is None or left > 0:
        return GO
    return TAKE_BACK if step == AFTER_SYNC else GIVE_UP


def deadline_before_write_text(handle: str) -> str:
    return (
        f"the append failed: the sender's deadline passed before the line was written to @{handle}'s inbox; "
        "nothing was appended"
    )


def deadline_after_sync_text(handle: str) -> str:
    return (
        "the append failed: the sender's deadline passed while the line was being synced, so it was taken "
        f"back out of @{handle}'s inbox; nothing was appended"
    )


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - _monotonic()


def _take_back(fd: int, before: int, handle: str) -> AppendFailed:
    """Cut a synced line off again (the lock still held, the file ``before`` plus that line) and sync."""
    try:
        _ftruncate(fd, before)
        _fsync(fd)
    except OSError as e:
        return AppendFailed(
            "the append failed: the sender's deadline passed while the line was being synced; taking it "
            f"back failed ({_why(e)}), so the line may still be in @{handle}'s inbox"
        )
    return AppendFailed(deadline_after_sync_text(handle))


# ------------------------------------------------------------------------------------------------- append


def bound_text(bound: float) -> str:
    """A wait bound in seconds as the busy sentence gives it: a whole bound as a bare integer (``2``), a
    fraction (a daemon's bound trimmed to what is left of a send's deadline) to the millisecond, trailing
    zeros dropped (``0.75``, ``1.5``), and a positive bound under a millisecond as ``0.001``, so it never
    reads as ``0``. Rounding is to the nearest millisecond."""
    import math

    if not math.isfinite(bound):
        return str(bound)
    if bound == int(bound):
        return str(int(bound))
    ms = round(bound * 1000)
    if ms == 0:
        ms = 1 if bound > 0 else -1
    if ms % 1000 == 0:
        return str(ms // 1000)
    return f"{ms / 1000:.3f}".rstrip("0")


def busy_text(handle: str, bound: float) -> str:
    return f"the inbox lock for @{handle} was held for {bound_text(bound)}s — nothing was appended"


def cut_note(n: int, handle: str) -> str:
    """The shell's note for a tail cut (the daemon's wording is ``daemon_cut_note``)."""
    return f"note: cut {n} bytes of an unterminated line a dead writer left in @{handle}'s inbox"


def daemon_cut_note(n: int, path: str) -> str:
    return f"cut {n} bytes of an unterminated line a dead writer left in {path}"


def _why(e: OSError) -> str:
    return e.strerror or (os.strerror(e.errno) if e.errno else str(e))


def _tail_cut_length(fd: int, size: int) -> int:
    """Where the file should end: after its last ``\\n`` (0 if none), scanning back in 4096-byte blocks."""
    end = size
    while end > 0:
        start = max(0, end - BLOCK)
        block = os.pread(fd, end - start, start)
        if len(block) != end - start:
            raise OSError(errno.EIO, "short read while scanning for the last newline")
        i = block.rfind(b"\n")
        if i >= 0:
            return start + i + 1
        end = start
    return 0


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = _write(fd, view)
        if n <= 0:
            raise OSError(errno.ENOSPC, f"short write ({len(data) - len(view)} of {len(data)} bytes)")
        view = view[n:]


def _lock_still_held(lock_fd: int) -> bool:
    """Re-assert the exclusive lock (a no-op while it is held); False when the lock manager says otherwise."""
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False


def append(
    layout: Layout,
    handle: str,
    line: bytes,
    *,
    nfs: bool,
    bound: float,
    note: Callable[[str], None] | None = None,
    daemon: bool = False,
    deadline: float | None = None,
) -> None:
    """Append ``line`` (``\\n``-terminated; one is added if missing) to ``inbox/<h>.jsonl``: 6.4 steps 1-6.

    ``nfs``: the inbox's lock identity is ``nfs4 …`` (poll the lock); ``bound``: the lock wait in seconds.
    ``note`` receives the tail-cut note (the shell wording, or the daemon's when ``daemon``).
    ``deadline``: a ``time.monotonic()`` moment the whole append must be synced by (``deadline_action``).
    Raises ``AppendFailed`` with the spec's sentence; on any failure nothing was appended.
    """
    if not line.endswith(b"\n"):
        line += b"\n"
    left = _left(deadline)
    if deadline_action(BEFORE_LOCK, left) != GO:
        raise AppendFailed(deadline_before_write_text(handle))
    if left is not None:
        bound = min(bound, left)
    # the inbox folder, never through a link: both files below are opened relative to this descriptor
    try:
        dir_fd = fsprim.open_folder_nofollow(layout.inbox_dir)
    except fsprim.LinkedPath as e:
        raise _linked(e) from None
    except OSError as e:
        raise AppendFailed(f"the append failed: {_why(e)}") from e
    try:
        # 1. the lock
        lock_fd = _lock_exclusive(
            layout, handle, nfs=nfs, bound=bound, failed="the append failed", dir_fd=dir_fd
        )
        locked_at = _monotonic()
        try:
            _append_locked(
                layout=layout,
                handle=handle,
                line=line,
                lock_fd=lock_fd,
                locked_at=locked_at,
                note=note,
                daemon=daemon,
                deadline=deadline,
                dir_fd=dir_fd,
            )
        finally:
            _release(lock_fd)
    finally:
        os.close(dir_fd)


def _tail_state(fd: int) -> tuple[int, int]:
    """(size, where it should end): equal when the file is empty or ends in ``\\n`` (the tail cut's rule)."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size, size
    return size, _tail_cut_length(fd, size)


def torn_tail(layout: Layout, handle: str) -> int:
    """How many bytes of an unterminated last line ``inbox/<h>.jsonl`` ends in (0: none, or no file);
    what the tail cut of step 3 would remove. Reads only; ``OSError`` when the file cannot be read."""
    try:
        fd = fsprim.open_nofollow(layout.inbox(handle), os.O_RDONLY, real_folder=True)
    except FileNotFoundError:
        return 0
    except fsprim.LinkedPath as e:
        raise _linked(e) from None
    try:
        size, keep = _tail_state(fd)
        return size - keep
    finally:
        os.close(fd)


def _lock_exclusive(
    layout: Layout, handle: str, *, nfs: bool, bound: float, failed: str, dir_fd: int | None = None
) -> int:
    """The inbox lock taken as an appender takes it (step 1): its descriptor. ``AppendFailed`` with the
    busy sentence when it is not had within ``bound``, or with ``failed: <why>`` when it cannot be opened or
    taken; ``LinkRefused`` when it (or ``inbox/``) is a symbolic link."""
    try:
        lock_fd = _open_lock(layout.inbox_lock(handle), dir_fd)
    except fsprim.LinkedPath as e:
        raise _linked(e) from None
    except OSError as e:
        raise AppendFailed(f"{failed}: {_why(e)}") from e
    try:
        _take(lock_fd, fcntl.LOCK_EX, nfs=nfs, bound=bound)
    except _Busy:
        raise AppendFailed(busy_text(handle, bound)) from None
    except OSError as e:
        os.close(lock_fd)
        raise AppendFailed(f"{failed}: {_why(e)}") from e
    return lock_fd


def cut_torn_tail(layout: Layout, handle: str, *, nfs: bool, bound: float) -> int:
    """Step 3 alone (the tail cut), under the inbox lock as an appender takes it: the bytes cut (0 when
    the tail was whole by the time the lock was had). ``AppendFailed`` when the lock is not had in time."""
    lock_fd = _lock_exclusive(layout, handle, nfs=nfs, bound=bound, failed="the tail cut failed")
    try:
        fd = fsprim.open_nofollow(layout.inbox(handle), os.O_RDWR, real_folder=True)
        try:
            size, keep = _tail_state(fd)
            if keep == size:
                return 0
            _ftruncate(fd, keep)
            _fsync(fd)
            return size - keep
        finally:
            os.close(fd)
    except fsprim.LinkedPath as e:
        raise _linked(e) from None
    except OSError as e:
        raise AppendFailed(f"the tail cut failed: {_why(e)}") from e
    finally:
        _release(lock_fd)


def _append_locked(
    *,
    layout: Layout,
    handle: str,
    line: bytes,
    lock_fd: int,
    locked_at: float,
    note: Callable[[str], None] | None,
    daemon: bool,
    deadline: float | None = None,
    dir_fd: int | None = None,
) -> None:
    path = layout.inbox(handle)
    # 2. the inbox, under the lock (never through a link)
    try:
        fd = fsprim.open_nofollow(
            path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600, real_folder=True, dir_fd=dir_fd
        )
    except fsprim.LinkedPath as e:
        raise _linked(e) from None
    except OSError as e:
        raise AppendFailed(f"the append failed: {_why(e)}") from e
    try:
        # 3. the tail cut
        try:
            size, keep = _tail_state(fd)
            if keep != size:
                _ftruncate(fd, keep)
                if note is not None:
                    note(daemon_cut_note(size - keep, path) if daemon else cut_note(size - keep, handle))
                size = keep
        except OSError as e:
            raise AppendFailed(f"the append failed: {_why(e)}") from e
        before = size
        if _monotonic() - locked_at > STALL_SECS:
            raise AppendFailed(stalled_before_write_text(handle))
        if deadline_action(BEFORE_WRITE, _left(deadline)) != GO:
            raise AppendFailed(deadline_before_write_text(handle))
        # 4. write whole, then sync
        try:
            _write_all(fd, line)
            _fsync(fd)
            if _monotonic() - locked_at > STALL_SECS:
                if not _lock_still_held(lock_fd):
                    raise OSError(errno.ENOLCK, "the lock manager no longer grants the lock")
                if os.fstat(fd).st_size != before + len(line):
                    raise OSError(errno.ENOLCK, "the inbox changed while the append stalled")
        except OSError as e:
            # 5. the rollback
            stalled = _monotonic() - locked_at > STALL_SECS
            raise _rollback(fd, before, n=len(line), handle=handle, cause=e, stalled=stalled) from e
        if deadline_action(AFTER_SYNC, _left(deadline)) == TAKE_BACK:
            raise _take_back(fd, before, handle)
    finally:
        try:
            os.close(fd)
        except OSError:
            pass


def stalled_before_write_text(handle: str) -> str:
    return (
        f"the append failed: the inbox lock for @{handle} may have been lost while the append stalled "
        "before its write; nothing was appended"
    )


def _rollback(fd: int, before: int, *, n: int, handle: str, cause: OSError, stalled: bool) -> AppendFailed:
    """Cut the inbox back to ``before`` and build the error to raise."""
    lost = stalled and (cause.errno in (errno.EIO, errno.ENOLCK))
    why = _why(cause)
    try:
        if lost:
            # The lock may be someone else's by now: cut only our own line, only if it is still the end.
            size = os.fstat(fd).st_size
            if size not in (before, before + n):
                return AppendFailed(
                    f"the append failed: the inbox lock for @{handle} was lost while the append stalled "
                    f"({why}); the inbox grew meanwhile, so the line may still be in @{handle}'s inbox"
                )
        _ftruncate(fd, before)
    except OSError as e2:
        return AppendFailed(
            f"the append failed: {why}; the rollback failed too ({_why(e2)}), "
            f"so the line may still be in @{handle}'s inbox"
        )
    if lost:
        return AppendFailed(
            f"the append failed: the inbox lock for @{handle} was lost while the append stalled ({why})"
        )
    return AppendFailed(f"the append failed: {why}")


# ------------------------------------------------------------------------------------------------- reader


def read_busy_text(handle: str) -> str:
    return f"the inbox for @{handle} is being written — nothing was read; run comm-poll.sh again"


def lock_open_warning(handle: str) -> str:
    return (
        f"WARNING: the inbox lock for @{handle} failed (cannot open its lock file) — "
        "reading without it; a line may show twice, none is lost"
    )


def lock_fault_warning(handle: str, rc: int, text: str) -> str:
    """The warning for a flock fault: ``rc`` is the errno, ``text`` its message (``(code <rc>)`` if none)."""
    detail = f"{rc}: {text}" if text else f"code {rc}"
    return (
        f"WARNING: the inbox lock for @{handle} failed ({detail}) — "
        "reading without it; a line may show twice, none is lost"
    )


class ReadLock:
    """The reader's shared lock on ``inbox/<h>.lock`` (behaviour 6.5), as a context manager.

    Busy past ``bound`` -> ``InboxBusy`` (exit 75). A lock file that will not open, or any other flock
    fault -> ``warn(<the 6.5 WARNING line>)`` and the body runs unlocked (``locked`` is False).
    Use it only on a box that appends itself (``lockmanager.appends_itself``).
    """

    __slots__ = ("bound", "fd", "handle", "layout", "locked", "nfs", "warn")

    def __init__(
        self, layout: Layout, handle: str, *, nfs: bool, bound: float, warn: Callable[[str], None]
    ) -> None:
        self.layout = layout
        self.handle = handle
        self.nfs = nfs
        self.bound = bound
        self.warn = warn
        self.fd = -1
        self.locked = False

    def __enter__(self) -> ReadLock:
        try:
            fd = _open_lock(self.layout.inbox_lock(self.handle))
        except fsprim.LinkedPath as e:
            raise _linked(e) from None
        except OSError:
            self.warn(lock_open_warning(self.handle))
            return self
        try:
            _take(fd, fcntl.LOCK_SH, nfs=self.nfs, bound=self.bound)
        except _Busy:
            raise InboxBusy(read_busy_text(self.handle)) from None
        except OSError as e:
            os.close(fd)
            self.warn(lock_fault_warning(self.handle, e.errno or 0, e.strerror or ""))
            return self
        self.fd = fd
        self.locked = True
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def release(self) -> None:
        """Release the lock now (before the batch is printed: slow display never holds off a writer)."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            self.locked = False
            _release(fd)


def read_all(layout: Layout, handle: str) -> bytes | None:
    """Every byte of ``inbox/<h>.jsonl`` in one read; None when there is no inbox file."""
    path = layout.inbox(handle)
    try:
        fd = fsprim.open_nofollow(path, os.O_RDONLY, real_folder=True)
    except FileNotFoundError:
        return None
    except fsprim.LinkedPath as e:
        raise _linked(e) from None
    except OSError as e:
        raise InboxUnreadable(f"the inbox for @{handle} could not be read: {_why(e)}") from e
    try:
        with open(fd, "rb") as f:
            return f.read()
    except OSError as e:
        raise InboxUnreadable(f"the inbox for @{handle} could not be read: {_why(e)}") from e


def count_directed(lines: Iterable[bytes], handle: str) -> int:
    """How many of ``lines`` are directed mail for ``handle`` (``is_directed``): what ``unread`` counts."""
    n = 0
    for raw in lines:
        obj = decode_line(raw)
        if obj is not None and is_directed(obj, handle):
            n += 1
    return n
