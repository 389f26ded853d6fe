"""Paths the run executor touches, opened without following symlinks (ocx.md 1.3-1.4, O6; issue 18).

Every path a workspace step, a sandbox bind or the output collector uses is opened one component at a
time from ``/``, each relative to the descriptor of its parent and with ``O_NOFOLLOW``, so the check and
the use are one act: bubblewrap is handed the descriptor (``--bind-fd`` / ``--ro-bind-fd``), a step
creates and hands over its folders through descriptors (``mkdir`` / ``fchmod`` / ``fchown`` relative to
a held parent), and outputs are read through the descriptor they were checked with.

* ``open_nofollow(path, what)``: an ``O_PATH`` descriptor of ``path``, or ``Refused`` when ``path`` is,
  or passes through, a symlink (the reason names the link).
* ``make_workspace(root, at, uid, gid)``: the ``directory`` step. Every existing folder from ``$$root$$``
  down to the workspace's parent must be owned by root and writable by no one else (``sandbox_writable``
  is the pure rule), so a workspace can never lie inside another run's workspace nor anywhere a sandbox
  can write; missing parents are made 0755, the workspace 0700 and handed to the sandbox uid/gid.
* ``make_below(top, path, uid, gid, last)``: the missing folders of ``path`` below the held ``top``,
  each made and handed to the sandbox uid/gid through its parent's descriptor.

The no-follow primitives for what root does in a folder a run or a check-in controls (issue 24), each
relative to a held folder descriptor and each with its test in ``tests/integration/test_jobs_nofollow.py``:

* ``entry_kind_at(dir_fd, name)``: what is at ``name`` (``"a symlink"``, ``"a folder"``, ...), never
  following it; ``None`` when nothing is.
* ``make_dir_at`` / ``make_file_at``: a new folder or file at ``name`` (``mkdir`` / ``O_CREAT|O_EXCL``),
  opened with ``O_NOFOLLOW``, its mode and owner set through that descriptor.
* ``copy_in_at(src, dir_fd, uid, gid)``: the node's entry ``src`` (a file, a folder tree, a link)
  copied as a new entry of its own name: every source component read with ``O_NOFOLLOW``, every destination
  entry created exclusively and set (mode, owner, times) through its own descriptor; nothing existing
  is written into, so no ``copystat`` ever lands on a path someone else placed.
* ``chown_tree_fd``: lchown relative to held folders; entries already owned are left alone, and a file
  with more than one hard link that someone else owns is ``Refused`` (it may be a file outside).

Guarantee: no path text is resolved twice; a symlink anywhere on a path ends the run ``refused`` with
the link named. What would break it: a caller that opens ``path`` again by name after the check (the
runner passes descriptors; the session rows, which cannot inherit descriptors, are documented in
docs/jobs.md) or a folder from ``$$root$$`` down that a sandbox can write.
"""

from __future__ import annotations

import errno
import os
import stat

from sotd.jobs.errors import Refused

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def components(path: str) -> list[str]:
    """The names of a normalised absolute ``path`` (``/a/b`` -> ``['a', 'b']``; ``/`` -> ``[]``)."""
    p = os.path.normpath(path)
    if not p.startswith("/"):
        raise ValueError(f"not an absolute path: {path!r}")
    return [c for c in p.split("/") if c]


def sandbox_writable(mode: int, owner: int) -> bool:
    """Pure: can anyone but root change the entries of a folder with this ``mode`` and ``owner``?"""
    return owner != 0 or bool(mode & 0o022)


def _symlink_refusal(what: str, path: str, upto: list[str]) -> Refused:
    link = "/" + "/".join(upto)
    if os.path.normpath(link) == os.path.normpath(path):
        return Refused(f"{what} {path} is a symlink: refused")
    return Refused(f"{what} {path} passes through the symlink {link}: refused")


def _step(dir_fd: int, name: str, flags: int, what: str, *, path: str, upto: list[str]) -> int:
    """``openat(dir_fd, name, flags | O_NOFOLLOW)``; a symlink there is ``Refused``."""
    try:
        fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError:
                raise e from None
            if stat.S_ISLNK(st.st_mode):
                raise _symlink_refusal(what, path, upto) from None
        raise
    if flags & os.O_PATH and stat.S_ISLNK(os.fstat(fd).st_mode):
        os.close(fd)
        raise _symlink_refusal(what, path, upto)
    return fd


def open_nofollow(path: str, what: str, *, flags: int = os.O_PATH) -> int:
    """A descriptor of ``path`` opened with ``flags`` (default ``O_PATH``), every component without
    following a symlink. ``Refused`` names a symlink; a missing path raises ``FileNotFoundError``."""
    names = components(path)
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, name in enumerate(names):
            last = i == len(names) - 1
            nfd = _step(
                fd, name, flags if last else os.O_PATH | os.O_DIRECTORY, what, path=path, upto=names[: i + 1]
            )
            os.close(fd)
            fd = nfd
        if not names and flags != os.O_PATH:
            nfd = os.open("/", flags | os.O_CLOEXEC)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_dest(path: str, what: str) -> None:
    """``Refused`` when the part of ``path`` that exists on this host is, or passes through, a symlink: a
    mount point or created file bwrap places there would follow it (the rest is made by bwrap inside)."""
    names = components(path)
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, name in enumerate(names):
            try:
                nfd = _step(fd, name, os.O_PATH, what, path=path, upto=names[: i + 1])
            except (FileNotFoundError, NotADirectoryError):
                return
            os.close(fd)
            fd = nfd
    finally:
        os.close(fd)


def open_dir(path: str, what: str) -> int:
    """An ``O_RDONLY | O_DIRECTORY`` descriptor of the folder ``path`` (usable with ``fchown``/``*at``)."""
    return open_nofollow(path, what, flags=os.O_RDONLY | os.O_DIRECTORY)


def make_workspace(root: str, at: str, uid: int, gid: int, what: str) -> None:
    """The ``directory`` step (see the module docstring). ``Refused`` for a symlink or a folder a sandbox
    can write on the way; ``FileExistsError`` when ``at`` already exists."""
    rel = components(at)[len(components(root)) :]
    if not rel or os.path.join(root, *rel) != os.path.normpath(at):
        raise Refused(f"{what} must lie below $$root$$ ({root}): {at}")
    fd = open_dir(root, what)
    try:
        st = os.fstat(fd)
        if sandbox_writable(st.st_mode, st.st_uid):
            raise Refused(
                f"{what}: $$root$$ ({root}) (owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}) is"
                " where a sandbox could write: refused"
            )
        cur = root
        for name in rel[:-1]:
            cur = os.path.join(cur, name)
            try:
                os.mkdir(name, 0o755, dir_fd=fd)
                made = True
            except FileExistsError:
                made = False
            nfd = _step(fd, name, os.O_RDONLY | os.O_DIRECTORY, what, path=at, upto=components(cur))
            os.close(fd)
            fd = nfd
            if made:
                os.fchmod(fd, 0o755)  # whatever the umask: the sandbox uid searches its way down
            st = os.fstat(fd)
            if sandbox_writable(st.st_mode, st.st_uid):
                raise Refused(
                    f"{what}: the workspace {at} would lie inside {cur} (owner uid {st.st_uid}, mode"
                    f" {stat.S_IMODE(st.st_mode):04o}), where a sandbox could write: refused"
                )
        os.mkdir(rel[-1], 0o700, dir_fd=fd)
        wfd = _step(fd, rel[-1], os.O_RDONLY | os.O_DIRECTORY, what, path=at, upto=components(at))
        try:
            os.fchmod(wfd, 0o700)
            os.fchown(wfd, uid, gid)
        finally:
            os.close(wfd)
    finally:
        os.close(fd)


def make_below(top: str, path: str, uid: int, gid: int, what: str, *, last: bool) -> int:
    """Make the missing folders of ``path`` below ``top`` (``path`` itself too when ``last``), each 0755
    and owned by ``uid``/``gid``, through descriptors; the descriptor of ``path``'s folder when ``last``,
    else of its parent. ``Refused`` for a symlink on the way; ``FileExistsError`` when ``last`` and
    ``path`` exists."""
    rel = components(path)[len(components(top)) :]
    if not rel or os.path.join(top, *rel) != os.path.normpath(path):
        raise Refused(f"{what} must lie below {top}: {path}")
    names = rel if last else rel[:-1]
    fd = open_dir(top, what)
    try:
        cur = top
        for i, name in enumerate(names):
            cur = os.path.join(cur, name)
            try:
                os.mkdir(name, 0o755, dir_fd=fd)
                made = True
            except FileExistsError:
                if last and i == len(names) - 1:
                    raise
                made = False
            nfd = _step(fd, name, os.O_RDONLY | os.O_DIRECTORY, what, path=path, upto=components(cur))
            os.close(fd)
            fd = nfd
            if made:
                os.fchmod(fd, 0o755)
                os.fchown(fd, uid, gid)
    except BaseException:
        os.close(fd)
        raise
    return fd


def chown_tree_fd(top: str, uid: int, gid: int, what: str) -> None:
    """Hand ``top`` and everything below it to ``uid``/``gid`` through ``os.fwalk`` descriptors (never
    following a symlink, never re-resolving a path). An entry already owned by ``uid``/``gid`` is left
    as it is; a non-folder with more than one hard link owned by anyone else is ``Refused`` (a link to a
    file outside the tree would hand that file over)."""
    fd = open_dir(top, what)
    try:
        if (os.fstat(fd).st_uid, os.fstat(fd).st_gid) != (uid, gid):
            os.fchown(fd, uid, gid)
        for root, dirs, files, dfd in os.fwalk(".", follow_symlinks=False, dir_fd=fd):
            for n in dirs + files:
                st = os.stat(n, dir_fd=dfd, follow_symlinks=False)
                if (st.st_uid, st.st_gid) == (uid, gid):
                    continue
                if not stat.S_ISDIR(st.st_mode) and st.st_nlink > 1:
                    shown = os.path.normpath(os.path.join(top, root, n))
                    raise Refused(
                        f"{what}: {shown} has {st.st_nlink} hard links and belongs to uid {st.st_uid}: the"
                        f" node does not hand it to uid {uid}: refused"
                    )
                os.chown(n, uid, gid, dir_fd=dfd, follow_symlinks=False)
    finally:
        os.close(fd)


def disk_used(top: str) -> int:
    """Bytes of disk the tree at ``top`` takes (allocated blocks, hard links counted once), walked
    through descriptors without following a symlink."""
    fd = open_dir(top, "the workspace")
    seen: set[tuple[int, int]] = set()
    total = 0
    try:
        st = os.fstat(fd)
        total += st.st_blocks * 512
        for _root, dirs, files, dfd in os.fwalk(".", follow_symlinks=False, dir_fd=fd):
            for n in dirs + files:
                try:
                    st = os.stat(n, dir_fd=dfd, follow_symlinks=False)
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
    finally:
        os.close(fd)
    return total


KIND_NAMES = {stat.S_IFLNK: "a symlink", stat.S_IFDIR: "a folder", stat.S_IFREG: "a file"}


def entry_kind_at(dir_fd: int, name: str) -> str | None:
    """What is at ``name`` in the held folder, never following it (``"a symlink"``, ``"a folder"``,
    ``"a file"``, ``"a special file"``); ``None`` when nothing is there."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return KIND_NAMES.get(stat.S_IFMT(st.st_mode), "a special file")


def make_dir_at(dir_fd: int, name: str, mode: int, uid: int, gid: int) -> int:
    """A new folder ``name`` in the held folder (``FileExistsError`` when anything is there, a link
    included), opened without following a link, set to ``mode`` and ``uid``/``gid`` through its own
    descriptor; that descriptor (the caller closes it)."""
    os.mkdir(name, 0o700, dir_fd=dir_fd)
    return _owned(os.open(name, DIR_FLAGS, dir_fd=dir_fd), mode, uid, gid)


def make_file_at(dir_fd: int, name: str, mode: int, uid: int, gid: int) -> int:
    """A new empty file ``name`` in the held folder (``O_CREAT | O_EXCL | O_NOFOLLOW``: nothing that is
    there, a link included, is opened), its mode and owner set through its descriptor; that descriptor,
    open for writing (the caller closes it)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    return _owned(os.open(name, flags, 0o600, dir_fd=dir_fd), mode, uid, gid)


def _owned(fd: int, mode: int, uid: int, gid: int) -> int:
    """``fd`` once its owner is ``uid``/``gid`` and its mode ``mode`` (set through the descriptor, in that
    order: a chown clears set-id bits); closed when either fails."""
    try:
        os.fchown(fd, uid, gid)
        os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _copy_bytes(src_fd: int, dst_fd: int) -> None:
    while chunk := os.read(src_fd, 1 << 20):
        view = memoryview(chunk)
        while view:
            view = view[os.write(dst_fd, view) :]


def _copy_at(sdir: int, name: str, ddir: int, uid: int, gid: int) -> None:
    """Copy the entry ``name`` of the held source folder into the held destination folder (new)."""
    st = os.stat(name, dir_fd=sdir, follow_symlinks=False)
    kind = stat.S_IFMT(st.st_mode)
    mode = stat.S_IMODE(st.st_mode) & 0o1777  # no set-id bit survives a copy
    if kind == stat.S_IFLNK:
        os.symlink(os.readlink(name, dir_fd=sdir), name, dir_fd=ddir)
        os.chown(name, uid, gid, dir_fd=ddir, follow_symlinks=False)
        return
    if kind == stat.S_IFREG:
        sfd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=sdir)
        try:
            dfd = make_file_at(ddir, name, mode, uid, gid)
            try:
                _copy_bytes(sfd, dfd)
                os.utime(dfd, ns=(st.st_atime_ns, st.st_mtime_ns))
            finally:
                os.close(dfd)
        finally:
            os.close(sfd)
        return
    if kind == stat.S_IFDIR:
        sfd = os.open(name, DIR_FLAGS, dir_fd=sdir)
        try:
            dfd = make_dir_at(ddir, name, 0o700, uid, gid)
            try:
                for child in sorted(os.listdir(sfd)):
                    _copy_at(sfd, child, dfd, uid, gid)
                os.fchmod(dfd, mode)
                os.utime(dfd, ns=(st.st_atime_ns, st.st_mtime_ns))
            finally:
                os.close(dfd)
        finally:
            os.close(sfd)
    # sockets, FIFOs and devices are not copied: a home needs none, and opening one could block


def copy_in_at(src: str, dir_fd: int, uid: int, gid: int, what: str) -> str:
    """Copy the node's entry ``src`` (a file, a folder tree or a symlink, kept a symlink) as the new
    entry of the same name in the held folder ``dir_fd``, owned by ``uid``/``gid``, with the source's
    modes (set-id bits dropped) and times; the name. ``src`` is opened one component at a time without
    following a link (``Refused`` names one; ``FileNotFoundError`` when it is missing); every destination
    entry is created exclusively (``FileExistsError`` when the name is already there) and set through
    its own descriptor, so nothing already there is ever written into, changed or followed."""
    parent, base = os.path.split(os.path.normpath(src))
    if not base or base in (".", ".."):
        raise Refused(f"{what} {src} has no name to be copied under")
    pfd = open_dir(parent, what)
    try:
        os.close(_step(pfd, base, os.O_PATH, what, path=src, upto=components(src)))  # src a link: Refused
        _copy_at(pfd, base, dir_fd, uid, gid)
    finally:
        os.close(pfd)
    return base
