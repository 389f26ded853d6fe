"""The registry lock: take by hard link, release, the reclaim step ("settle 1 s") and the bounded wait.

File: ``<comm>/.registry.lock`` (one holder record + ``\\n``), its take temps ``.registry.lock.tmp.<id>``
and its reclaim markers ``.registry.lock.reclaim.<id>`` (kept forever; this module never removes one).
Spec: seed 000 "The registry lock"; behaviour 6.1 (take, fresh read, wait loop, reclaim step, FAILED
texts), 2.7 (bounds), 1.13 (``SOT_LOCK_WAIT_SECS``, ``SOT_COMM_TEST_LOCK_SETTLE``).
Guarantee: at most one live holder. A take is a hard link of a synced temp (a link never replaces
anything, so the lock never exists without its holder line); a lock is removed by anyone but its holder
only after its holder was proved dead, by the one creator of that holder's marker, after a settle and a
fresh re-read that still names a proved-dead member of the marker chain.
What would break it: removing a lock on a stale read (open the folder before every read that decides),
or judging a holder by age; a timeout never proves a death.

Seams: ``_hook`` (called with a point name: ``before_take``, ``before_link``, ``after_link``, ``step``,
``judged``, ``after_marker``, ``settle``, ``before_remove``, ``after_remove``, ``release``), ``_wallclock``
(the real-time clock of the wait) and ``_sleep``; unset they change nothing.
"""

from __future__ import annotations

import errno
import os
import stat
import time

from sotd import fsprim
from sotd.errors import FormatError, LockFailed
from sotd.formats import holder as _holder
from sotd.formats.holder import DEAD, Holder

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType

    from sotd.formats.layout import Layout

_hook: Callable[[str], None] | None = None
_wallclock: Callable[[], float] = time.time
_sleep: Callable[[float], None] = time.sleep

DEFAULT_BOUND = 10.0
DEFAULT_SETTLE = 1.0
POLL_SECS = 0.05

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

# Reasons of behaviour 6.1 (protocol: keep byte for byte).
WHY_DIRECTORY = "held by an older version that records no holder"
WHY_UNREADABLE = "its record could not be read, so it may have been released since"
WHY_TAKEN_AGAIN = "it was taken again during the reclaim"
WHY_CHANGED = "its record changed during the reclaim"
WHY_CHAIN_DEADLINE = "its reclaim chain was still being walked at the deadline"
WHY_RETAKE_LOST = "another process took it as soon as a dead holder's lock was removed"

# Shapes of a fresh read.
_GONE = "gone"
_DIR = "dir"
_UNREADABLE = "unreadable"
_GARBAGE = "garbage"
_LINK = "link"  # a symbolic link at the lock's path: never read through (issue 25)
_RECORD = "record"

# Shapes of a failure's sentence.
_NAMED = "named"
_BY_HAND = "by_hand"
_NO_HOLDER = "no_holder"


def _at(point: str) -> None:
    hook = _hook
    if hook is not None:
        hook(point)


_INF = float("inf")


def _finite_nonneg(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        v = float(text.strip())
    except ValueError:
        return None
    if not 0 <= v < _INF:  # NaN, inf, negative: refused (no ``math``, a .so load: issue 17)
        return None
    return v


def wait_bound(environ: dict[str, str] | os._Environ[str] | None = None) -> float:
    """``SOT_LOCK_WAIT_SECS`` (fractions allowed), default 10; a bad value is 10."""
    env = os.environ if environ is None else environ
    v = _finite_nonneg(env.get("SOT_LOCK_WAIT_SECS"))
    return DEFAULT_BOUND if v is None else v


def settle_secs(environ: dict[str, str] | os._Environ[str] | None = None) -> float:
    """``SOT_COMM_TEST_LOCK_SETTLE`` (seconds, fractions allowed), default 1."""
    env = os.environ if environ is None else environ
    v = _finite_nonneg(env.get("SOT_COMM_TEST_LOCK_SETTLE"))
    return DEFAULT_SETTLE if v is None else v


class _CannotTake(Exception):
    """A take failed for a reason other than "held" (the ``why`` of "cannot be taken")."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _err(e: OSError) -> str:
    return e.strerror or errno.errorcode.get(e.errno or 0, str(e))


def _same_file(a: str, b: str) -> bool:
    try:
        sa = os.stat(a, follow_symlinks=False)
        sb = os.stat(b, follow_symlinks=False)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def take_file(path: str, tmp: str, data: bytes) -> bool:
    """Take ``path`` by hard-linking a synced temp ``tmp`` holding ``data``: True taken, False held.

    Raises ``_CannotTake`` for any failure that is not "held". The temp is removed in every case.
    """
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise _CannotTake(f"cannot remove the stale temp {tmp}: {_err(e)}") from None
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC | _O_NOFOLLOW, 0o600)
    except OSError as e:
        raise _CannotTake(f"cannot write {tmp}: {_err(e)}") from None
    try:
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        fsprim.unlink_quiet(tmp)
        raise _CannotTake(f"cannot write {tmp}: {_err(e)}") from None
    try:
        delay = _finite_nonneg(os.environ.get("SOT_COMM_TEST_LOCK_TRY_DELAY"))
        if delay:
            _sleep(delay)
        _at("before_link")
        try:
            os.link(tmp, path)
        except OSError as e:
            # NFS: the link may have happened although its answer was lost (a retransmit says EEXIST).
            try:
                if os.stat(tmp, follow_symlinks=False).st_nlink == 2 and _same_file(tmp, path):
                    return True
            except OSError:
                pass
            if e.errno == errno.EEXIST:
                return False
            raise _CannotTake(f"cannot hard-link in {os.path.dirname(path)}: {_err(e)}") from None
        _at("after_link")
        return True
    finally:
        fsprim.unlink_quiet(tmp)


def _open_folder(folder: str) -> None:
    """Open the folder (revalidates NFS caches) before a read that decides anything."""
    try:
        fd = os.open(folder, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    except OSError:
        return
    os.close(fd)


def read_fresh(path: str) -> tuple[str, object]:
    """A fresh read of the record at ``path``: (shape, value).

    Shapes: ``gone`` (no file), ``dir`` (an older mkdir-style holder), ``unreadable`` (value = why),
    ``garbage`` (value = the first line, shown in the by-hand text), ``record`` (value = ``Holder``),
    ``link`` (a symbolic link: never read through, and a take refuses it with the link sentence).
    """
    _open_folder(os.path.dirname(path))
    try:
        fd = os.open(path, os.O_RDONLY | _O_CLOEXEC | _O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return _GONE, None
    except OSError as e:
        try:
            st = os.stat(path, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                return _DIR, None
            if stat.S_ISLNK(st.st_mode):
                return _LINK, None
        except FileNotFoundError:
            return _GONE, None
        except OSError:
            pass
        return _UNREADABLE, _err(e)
    try:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            return _DIR, None
        chunks: list[bytes] = []
        total = 0
        while total < 4096:
            b = os.read(fd, 4096 - total)
            if not b:
                break
            chunks.append(b)
            total += len(b)
            if b"\n" in b:
                break
    except OSError as e:
        return _UNREADABLE, _err(e)
    finally:
        os.close(fd)
    line = b"".join(chunks).split(b"\n", 1)[0]
    text = line.decode("utf-8", "replace")
    try:
        return _RECORD, Holder.parse(text)
    except FormatError:
        return _GARBAGE, text


def _shown(text: str) -> str:
    """A garbage first line as the by-hand text shows it: ``empty`` or the line, made printable, cut."""
    if not text.strip():
        return "empty"
    clean = "".join(ch if ch.isprintable() else "?" for ch in text)
    return clean if len(clean) <= 80 else clean[:80] + "…"


class _Fail:
    """Why one step (or a lost retake) did not get the lock: the shape of the sentence, holder, reason.

    ``final``: no later step can do better (a marker naming a record the walk already passed: markers
    are never removed), so the wait ends at once instead of sitting out its bound.
    """

    __slots__ = ("final", "holder", "kind", "why")

    def __init__(self, kind: str, why: str, holder: Holder | None = None, *, final: bool = False) -> None:
        self.kind = kind
        self.why = why
        self.holder = holder
        self.final = final


class RegistryLock:
    """The registry lock as a context manager: ``with RegistryLock(layout, host, bound): ...``.

    ``__enter__`` takes it within ``bound`` seconds of wall time (one reclaim step per failed try) or
    raises ``LockFailed`` with the spec's sentence; ``__exit__`` releases it. ``me`` replaces this
    process's own record (tests); ``settle`` defaults to ``SOT_COMM_TEST_LOCK_SETTLE`` else 1 s.
    """

    __slots__ = ("_me", "bound", "held", "host", "layout", "settle")

    def __init__(
        self,
        layout: Layout,
        host: str,
        bound: float,
        *,
        settle: float | None = None,
        me: Holder | None = None,
    ) -> None:
        self.layout = layout
        self.host = host
        b = _finite_nonneg(str(bound))
        self.bound = 0.0 if b is None else b
        self.settle = settle_secs() if settle is None else max(0.0, settle)
        self._me = me
        self.held = False

    # -- context manager -------------------------------------------------------------------------
    def __enter__(self) -> RegistryLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    # -- the record --------------------------------------------------------------------------------
    @property
    def me(self) -> Holder:
        """This taker's record (proof fields ``-`` when the comm folder's mount proves no fresh read)."""
        if self._me is None:
            self._me = _holder.own(self.host, proven=_holder.vouch(self.layout.home) is None)
        return self._me

    def _try(self) -> bool:
        _at("before_take")
        me = self.me
        try:
            return take_file(
                self.layout.reglock, self.layout.reglock_tmp(me.holder_id()), (me.record() + "\n").encode()
            )
        except _CannotTake as e:
            raise self._cannot(e.why) from None

    def _cannot(self, why: str) -> LockFailed:
        return LockFailed(f"registry lock {self.layout.reglock} cannot be taken: {why}")

    # -- take, wait, release -------------------------------------------------------------------------
    def acquire(self) -> None:
        """Take the lock within the bound (behaviour 6.1 wait loop) or raise ``LockFailed``."""
        if self.held:
            return
        if self._try():
            self.held = True
            return
        path = self.layout.reglock
        try:
            deadline = _wallclock() + self.bound
        except OSError as e:
            raise LockFailed(
                f"registry lock {path} is held, and there is no clock to wait by: {_err(e)}"
            ) from None
        while True:
            removed, fail = self._step(deadline)
            if fail.final:
                break
            if removed:
                if self._try():
                    self.held = True
                    return
                fail = self._lost()
                if self.bound == 0:
                    break
            remaining = deadline - _wallclock()
            if remaining <= 0:
                break
            _sleep(min(POLL_SECS, remaining))
            if self._try():
                self.held = True
                return
            if _wallclock() >= deadline:
                break
        raise self._failed(fail)

    def release(self) -> None:
        """Remove the lock file; never when a fresh read shows it is no longer this holder's."""
        if not self.held:
            return
        self.held = False
        _at("release")
        shape, value = read_fresh(self.layout.reglock)
        if shape == _UNREADABLE or (shape == _RECORD and value == self.me):
            fsprim.unlink_quiet(self.layout.reglock)

    # -- the reclaim step ----------------------------------------------------------------------------
    def _lost(self) -> _Fail:
        shape, value = read_fresh(self.layout.reglock)
        if shape == _RECORD and isinstance(value, Holder):
            return _Fail(_NAMED, WHY_RETAKE_LOST, value)
        return _Fail(_NO_HOLDER, WHY_RETAKE_LOST)

    def _step(self, deadline: float) -> tuple[bool, _Fail]:
        """One reclaim step: (True, _) when it removed (or found gone) a proved-dead holder's lock."""
        lay = self.layout
        me = self.me
        _at("step")
        shape, value = read_fresh(lay.reglock)
        if shape == _DIR:
            return False, _Fail(_BY_HAND, WHY_DIRECTORY)
        if shape == _LINK:
            from sotd.formats.layout import link_refused

            raise LockFailed(link_refused(lay.reglock).message)
        if shape in (_GONE, _UNREADABLE):
            return False, _Fail(_NO_HOLDER, WHY_UNREADABLE)
        if shape == _GARBAGE:
            return False, _Fail(_BY_HAND, f"its record names no holder ({_shown(str(value))})")
        assert isinstance(value, Holder)
        first = value
        chain = [first]
        link = first
        while True:
            verdict, why = _holder.judge(link, me)
            _at("judged")
            if verdict != DEAD:
                if link is first:
                    return False, _Fail(_NAMED, why, first)
                return False, _Fail(
                    _NAMED,
                    f"it is dead, but its reclaim by {link.name} pid {link.pid} did not finish: {why}",
                    first,
                )
            if link is first:
                reason = _holder.vouch(lay.home)
                if reason is not None:
                    return False, _Fail(_NAMED, reason, first)
            marker = lay.reclaim_marker(link.holder_id())
            try:
                got = take_file(marker, lay.reglock_tmp(me.holder_id()), (me.record() + "\n").encode())
            except _CannotTake as e:
                raise self._cannot(e.why) from None
            _at("after_marker")
            if got:
                break
            mshape, mvalue = read_fresh(marker)
            if mshape != _RECORD or not isinstance(mvalue, Holder):
                mwhy = {
                    _GONE: "it is gone",
                    _DIR: "it is a directory",
                    _LINK: "it is a symbolic link",
                    _GARBAGE: f"it names no holder ({_shown(str(mvalue))})",
                }.get(mshape, str(mvalue))
                return False, _Fail(_NAMED, f"its reclaim marker {marker} cannot be read ({mwhy})", first)
            if mvalue == me:
                break
            if mvalue in chain:
                return False, _Fail(
                    _BY_HAND,
                    f"its reclaim marker {marker} names {mvalue.record()}, which its reclaim chain"
                    " already holds, so no reclaim can pass it",
                    first,
                    final=True,  # seed 000: such a marker ends the walk
                )
            # Bound 0 is one whole step (behaviour 6.1); a longer bound stops a walk that outlives it.
            if self.bound > 0 and _wallclock() > deadline:
                return False, _Fail(_NAMED, WHY_CHAIN_DEADLINE, first)
            chain.append(mvalue)
            link = mvalue
        # 3. settle, then a fresh re-read decides.
        _at("settle")
        if self.settle > 0:
            _sleep(self.settle)
        shape, value = read_fresh(lay.reglock)
        if shape == _GONE:
            return True, _Fail(_NO_HOLDER, WHY_UNREADABLE)
        if shape == _RECORD and isinstance(value, Holder):
            if value in chain:
                _at("before_remove")
                try:
                    os.unlink(lay.reglock)
                except FileNotFoundError:
                    pass
                except OSError as e:
                    raise self._cannot(f"cannot remove {lay.reglock}: {_err(e)}") from None
                _at("after_remove")
                return True, _Fail(_NO_HOLDER, WHY_UNREADABLE)
            return False, _Fail(_NAMED, WHY_TAKEN_AGAIN, value)
        return False, _Fail(_NO_HOLDER, WHY_CHANGED)

    # -- the FAILED sentence -------------------------------------------------------------------------
    def _failed(self, fail: _Fail) -> LockFailed:
        path = self.layout.reglock
        try:
            age: str | None = f"{max(0, int(_wallclock() - os.stat(path).st_mtime))}s"
        except FileNotFoundError:
            age = None
        except OSError:
            age = "unknown"
        h = fail.holder
        if fail.kind == _NO_HOLDER or (fail.kind == _BY_HAND and age is None):
            return LockFailed(f"registry lock {path} was not taken by the deadline: {fail.why}. Retry.")
        if h is not None and age is None:
            return LockFailed(
                f"registry lock {path} was held by {h.name} pid {h.pid} start {h.start} when last read"
                f" ({fail.why}); it may have been released since. Retry."
            )
        if fail.kind == _BY_HAND or h is None or not h.proven():
            return LockFailed(
                f"registry lock {path} still held ({age} old): {fail.why}. If its holder is dead,"
                f" remove {path} by hand and retry."
            )
        return LockFailed(
            f"registry lock {path} is held by {h.name} pid {h.pid} start {h.start} ({age} old): {fail.why}."
            f" If it is dead, run any comm command on {h.name}."
        )


def hold(layout: Layout, host: str, bound: float) -> RegistryLock:
    """A ``RegistryLock`` to use as ``with hold(layout, host, bound): ...``."""
    return RegistryLock(layout, host, bound)
