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

Never through a link (``open_nofollow``, ``LinkedPath``; issue 25, behaviour 6.0): a comm-folder file is
opened with ``O_NOFOLLOW`` on its last component, and, with ``real_folder``, its folder is opened as a
descriptor with ``O_NOFOLLOW`` too and the file opened relative to it, so neither a linked file nor a linked
layout folder (``inbox/``, ``read/``, ``self/``) is ever followed, with no window between a check and the
open. A link found is ``LinkedPath`` (an ``OSError`` naming the link) for the caller's sentence; an lstat
is made only after an open has failed. ``write_atomic(real_folder=True)`` lstats the folder before its temp
(a rename never follows a link at the target: it replaces the link, whose target stays as it was).
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


class LinkedPath(OSError):
    """An open refused because ``filename`` is a symbolic link (the file, or the folder it was to be in)."""

    def __init__(self, link: str) -> None:
        super().__init__(errno.ELOOP, "it is a symbolic link", link)

    def __reduce__(self) -> tuple[object, ...]:
        return (LinkedPath, (self.filename,))


def is_link(name: str, dir_fd: int | None = None) -> bool:
    """``name`` (relative to ``dir_fd``) is a symbolic link; False when it is not, or cannot be lstat'd."""
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def open_folder_nofollow(path: str) -> int:
    """A descriptor on the folder ``path`` (``O_NOFOLLOW`` on its last component); ``LinkedPath`` when
    that component is a symbolic link, else the open's own ``OSError``."""
    try:
        return os.open(path, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC)
    except OSError as e:
        if e.errno in (errno.ENOTDIR, errno.ELOOP) and is_link(path):
            raise LinkedPath(path) from None
        raise


def open_nofollow(
    path: str, flags: int, mode: int = 0o600, *, real_folder: bool = False, dir_fd: int | None = None
) -> int:
    """``os.open`` of ``path`` that never follows a symbolic link at its last component, nor (with
    ``real_folder``) at its folder's: ``LinkedPath`` naming the link, else the open's own ``OSError``.
    ``dir_fd``: the folder already opened by ``open_folder_nofollow`` (one descriptor for several opens)."""
    flags |= _O_NOFOLLOW | _O_CLOEXEC
    if dir_fd is not None:
        return _open_last(os.path.basename(path), flags, mode, dir_fd, path)
    if not real_folder:
        return _open_last(path, flags, mode, None, path)
    folder, name = os.path.split(path)
    dir_fd = open_folder_nofollow(folder or ".")
    try:
        return _open_last(name, flags, mode, dir_fd, path)
    finally:
        os.close(dir_fd)


def _open_last(name: str, flags: int, mode: int, dir_fd: int | None, path: str) -> int:
    """``os.open`` of ``name`` (below ``dir_fd``) with ``O_NOFOLLOW`` in ``flags``: a link there is
    ``LinkedPath(path)``, any other failure the open's own ``OSError``."""
    try:
        return os.open(name, flags, mode, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP and is_link(name, dir_fd):
            raise LinkedPath(path) from None
        raise


def read_nofollow(path: str, limit: int, *, real_folder: bool = False) -> bytes:
    """Up to ``limit`` bytes of ``path`` opened by ``open_nofollow`` (``FileNotFoundError`` as it comes)."""
    fd = open_nofollow(path, os.O_RDONLY, real_folder=real_folder)
    try:
        chunks: list[bytes] = []
        left = limit
        while left > 0:
            b = os.read(fd, min(left, 1 << 16))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        return b"".join(chunks)
    finally:
        os.close(fd)


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
    real_folder: bool = False,
    before_rename: Callable[[], None] | None = None,
) -> None:
    """Replace ``path`` with ``data``. ``tmp`` names the temp (a stale one is removed first, then it is
    created exclusively); by default ``<path>.tmp.XXXXXX``. ``mode`` is the temp's creation mode (the umask
    applies) or, with ``exact_mode``, set on it whatever the umask. ``verify`` sees the bytes read back from
    the temp. ``sync=False`` skips the temp's fsync (a cache that may be lost: the read hint) and
    ``sync_folder=False`` the folder's (a file whose loss a crash may cost: a cursor re-shows a batch).
    ``real_folder``: ``LinkedPath`` (nothing written) when the folder is a symbolic link.
    ``before_rename`` runs once the temp is synced and closed, just before the rename: what it raises
    leaves ``path`` untouched and the temp removed (the self file's slot guard, a compare-and-swap).
    """
    if real_folder:
        folder = os.path.dirname(path) or "."
        if is_link(folder):
            raise LinkedPath(folder)
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
            if before_rename is not None:
                before_rename()
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
