"""File-system primitives every layer may use: whole-file replacement, and the private-folder rule.

A leaf: the standard library only (``scripts/check``'s import-linter holds it to that), so formats, jobs,
ocxrun, the daemon and the client share one copy of each step.

Whole-file replacement (``write_atomic``): temp, write whole, fsync, rename, fsync the folder.
Files: any file we replace whole (registry.json via registry.json.tmp, self files via <file>.tmp.XXXXXX,
cursors, the daemon's status file, row records, run records).
Spec: behaviour 6.2 (registry write), 6.7 (self file), 6.0 (a private entry: no group or other bit).
Guarantee: the target holds either its old bytes (same inode) or all the new bytes; on any failure the
temp is removed and ``AtomicStepError`` (an ``OSError`` naming the failed ``step``) is raised for the
caller to translate into its own sentence.
What would break it: renaming before the temp's bytes are synced, or removing the temp after a rename;
a second hand-rolled ``os.replace``/``os.rename`` elsewhere (``tests/unit/test_one_home.py`` fails on one).

Steps: ``"write"`` (create or write the temp), ``"check"`` (the caller's ``verify`` refused the bytes read
back), ``"flush"`` (fsync of the temp), ``"rename"``. The folder's fsync after the rename is best effort:
the new file is already in place, so a failure there is not reported as "nothing was written".
Seams: ``_fsync`` and ``_rename`` are module attributes a fault test may replace.

The private-folder rule (``is_open``, ``owned_private``, ``is_private_folder``): an entry is private when
this account owns it and neither group nor other has any permission bit.
"""

from __future__ import annotations

import errno
import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

_fsync = os.fsync
_rename = os.rename

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


class AtomicStepError(OSError):
    """An ``OSError`` that names the step of the replacement that failed."""

    def __init__(self, step: str, err: int, strerror: str, filename: str | None = None) -> None:
        super().__init__(err, strerror, filename)
        self.step = step

    def __reduce__(self) -> tuple[object, ...]:
        return (AtomicStepError, (self.step, self.errno, self.strerror, self.filename))


def _step_error(step: str, e: OSError) -> AtomicStepError:
    err = e.errno if e.errno is not None else errno.EIO
    return AtomicStepError(step, err, e.strerror or str(e), e.filename)


def fsync_dir(path: str) -> None:
    """fsync the folder ``path`` (makes a rename or link in it durable). Raises ``OSError``."""
    fd = os.open(path, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    try:
        _fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd`` (loops over short writes)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.EIO, "short write")
        view = view[n:]


def unlink_quiet(path: str) -> None:
    """Remove ``path`` if it can be removed; nothing is said when it cannot (a temp left to clean up)."""
    try:
        os.unlink(path)
    except OSError:
        pass


def _read_back(fd: int, n: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, n, 0)
    os.lseek(fd, 0, os.SEEK_SET)  # pragma: no cover - Windows
    return os.read(fd, n)  # pragma: no cover


def _random_suffix() -> str:
    return os.urandom(4).hex()[:6]


def write_atomic(
    path: str,
    data: bytes,
    *,
    tmp: str | None = None,
    mode: int = 0o600,
    exact_mode: bool = False,
    verify: Callable[[bytes], bool] | None = None,
    sync: bool = True,
    sync_folder: bool = True,
) -> None:
    """Replace ``path`` with ``data``. ``tmp`` names the temp (a stale one is removed first, then it is
    created exclusively); by default ``<path>.tmp.XXXXXX``. ``mode`` is the temp's creation mode (the umask
    applies) or, with ``exact_mode``, set on it whatever the umask. ``verify`` sees the bytes read back from
    the temp. ``sync=False`` skips the temp's fsync (a cache that may be lost: the read hint) and
    ``sync_folder=False`` the folder's (a file whose loss a crash may cost: a cursor re-shows a batch).
    """
    if tmp is None:
        tmp = f"{path}.tmp.{_random_suffix()}"
    else:
        unlink_quiet(tmp)
    try:
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, mode)
    except OSError as e:
        raise _step_error("write", e) from e
    renamed = False
    try:
        step = "write"
        try:
            write_all(fd, data)
            if exact_mode:
                os.fchmod(fd, mode)
            if verify is not None:
                back = _read_back(fd, len(data) + 1)
                step = "check"
                if not verify(back):
                    raise OSError(errno.EIO, "the written file did not read back as written")
            step = "flush"
            if sync:
                _fsync(fd)
        except OSError as e:
            raise _step_error(step, e) from e
        finally:
            os.close(fd)
        try:
            _rename(tmp, path)
        except OSError as e:
            raise _step_error("rename", e) from e
        renamed = True
    finally:
        if not renamed:
            unlink_quiet(tmp)
    if not sync_folder:
        return
    try:
        fsync_dir(os.path.dirname(path) or ".")
    except OSError:
        pass


# ---------------------------------------------------------------------------------------------- private


def is_open(mode: int) -> bool:
    """Behaviour 6.0's rule: an entry is open when group or other has any permission bit."""
    return bool(mode & 0o077)


def owned_private(st: os.stat_result, uid: int) -> bool:
    """The entry ``st`` belongs to ``uid`` and is open to no one else."""
    return st.st_uid == uid and not is_open(st.st_mode)


def is_private_folder(st: os.stat_result, uid: int) -> bool:
    """``st`` is a folder (not a link to one) that ``owned_private`` holds for ``uid``."""
    return stat.S_ISDIR(st.st_mode) and owned_private(st, uid)
