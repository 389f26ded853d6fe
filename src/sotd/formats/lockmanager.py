"""The inbox lock manager: which kernel lock arbitrates ``inbox/``, and the hub's record of it.

File: ``inbox-lock-manager`` (0600): ``<identity>\\n<machine-id>\\n`` (``<identity>\\n`` with no machine id),
written only by the folder's hub through ``.inbox-lock-manager.<mid|none>.<pid>.<seq>``.
Spec: seed 000 "The lock manager"; behaviour 6.4 (lock identity, record, who appends where, daemon route),
2.4 (hub and guests).
Guarantee: a process appends to an inbox itself only when the lock manager it computes for ``inbox/`` is the
one the hub recorded, so every appender of a folder excludes every other through one lock manager; anything
else is handed to a daemon. Two hubs racing at start: exactly one creates the record (hard link never
replaces), the other keeps it and refuses filings.
What would break it: a writer that appends on a bare ``none`` identity (no machine id: nothing ties two
machines' locks together), or a hub that replaces a record another machine wrote.

Decisions are pure functions (``manager_from_mountinfo``, ``decide``, ``route``); the rest is a thin shell.
"""

from __future__ import annotations

import os
import sys

from sotd import fsprim
from sotd.errors import LockRecordFailed
from sotd.formats import holder

TYPE_CHECKING = False
if TYPE_CHECKING:
    from sotd.formats.layout import Layout

LOCAL_FSTYPES = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs"})
MOUNTINFO = "/proc/self/mountinfo"
_seq = 0

# ------------------------------------------------------------------------------------------ lock identity


def mount_of(mountinfo_text: str, path: str) -> tuple[str, str, str] | None:
    """``(fstype, source, super_options)`` of the mount holding canonical ``path`` (``holder.mount_for``:
    the longest whole-component mount-point prefix, ties to the later entry, octal escapes decoded)."""
    found = holder.mount_for(mountinfo_text, path)
    if found is None:
        return None
    fstype, source, _mount_opts, super_opts = found
    return fstype, source, super_opts


def _is_nfs4_with_server_locks(super_opts: str) -> bool:
    opts = super_opts.split(",")
    vers4 = any(o == "vers=4" or o.startswith("vers=4.") for o in opts)
    return vers4 and "local_lock=none" in opts


def _mid(machine_id: str | None) -> str:
    """A usable machine id, or "" ("-", "uninitialized" and blanks are no id)."""
    m = (machine_id or "").strip()
    return "" if m in ("-", "uninitialized") else m


def manager_of_mount(mount: tuple[str, str, str] | None, machine_id: str | None) -> str:
    """The lock identity for a mount ``(fstype, source, super_options)`` (behaviour 6.4)."""
    mid = _mid(machine_id)
    if mount is not None:
        fstype, source, super_opts = mount
        if fstype == "nfs4" and source and _is_nfs4_with_server_locks(super_opts):
            return f"nfs4 {source}"
        if fstype in LOCAL_FSTYPES and mid:
            return f"local {mid}"
    return f"none@{mid}" if mid else "none"


def manager_from_mountinfo(mountinfo_text: str, path: str, machine_id: str | None) -> str:
    """The lock identity of canonical ``path`` given the text of ``/proc/self/mountinfo``."""
    return manager_of_mount(mount_of(mountinfo_text, path), machine_id)


def machine_id_or_none() -> str | None:
    """This machine's id (``holder.machine_field``: ``/etc/machine-id``); None when unknown or uninitialized."""
    if not sys.platform.startswith("linux"):
        return None
    return _mid(holder.machine_field()) or None


def lock_manager_of(folder: str) -> str:
    """The lock identity of ``folder`` here (``none``/``none@<id>`` off Linux or when unreadable).

    Test seam: ``$SOT_COMM_TEST_LOCK_IDENTITY``, when set, is this process's identity for every folder (a
    test makes one process compute what another machine would: a box that cannot take the lock itself).
    """
    forced = os.environ.get("SOT_COMM_TEST_LOCK_IDENTITY", "")
    if forced:
        return forced
    mid = machine_id_or_none()
    if not sys.platform.startswith("linux"):
        return manager_of_mount(None, mid)
    try:
        with open(MOUNTINFO, encoding="utf-8", errors="surrogateescape") as f:
            text = f.read()
    except OSError:
        return manager_of_mount(None, mid)
    return manager_from_mountinfo(text, os.path.realpath(folder), mid)


def is_nfs(manager: str) -> bool:
    """True for an ``nfs4 <source>`` identity (appenders poll the lock instead of blocking)."""
    return manager.startswith("nfs4 ")


# ------------------------------------------------------------------------------------------------- record


def encode_record(manager: str, machine_id: str | None) -> bytes:
    mid = _mid(machine_id)
    return f"{manager}\n{mid}\n".encode() if mid else f"{manager}\n".encode()


def parse_record(data: bytes) -> tuple[str, str]:
    """``(line 1, line 2)`` of a record's bytes (missing lines are "")."""
    lines = data.decode("utf-8", "surrogateescape").split("\n")
    first = lines[0].rstrip("\r")
    second = lines[1].rstrip("\r") if len(lines) > 1 else ""
    return first, second


def read_record(layout: Layout) -> tuple[str, str] | None:
    """The record's two lines, or None when there is no record file (a directory there holds no record: a
    hub's create then fails with the link's own error). Other read errors raise ``OSError``; a record that is
    a symbolic link is never read through (``fsprim.LinkedPath``, an ``OSError``: a box then appends nothing
    itself, and a daemon refuses its filings naming the link)."""
    try:
        data = fsprim.read_nofollow(layout.lock_manager, 65536)
    except (FileNotFoundError, IsADirectoryError):
        return None
    return parse_record(data)


GUEST = "guest"  # not the hub: never writes
NO_ID = "no_id"  # own identity is bare none: keep, refuse everything
CREATE = "create"
CURRENT = "current"  # line 1 is already our identity
REPLACE = "replace"  # our machine wrote it under another identity (a remount)
FOREIGN = "foreign"  # another machine's manager: keep it, refuse filings
WRITES = frozenset({CREATE, REPLACE})


def decide(record: tuple[str, str] | None, own_manager: str, own_mid: str | None, is_hub: bool) -> str:
    """What a starting daemon does with the record (behaviour 6.4). Only CREATE and REPLACE write."""
    if not is_hub:
        return GUEST
    if own_manager == "none":
        return NO_ID
    if record is None:
        return CREATE
    if record[0] == own_manager:
        return CURRENT
    mid = _mid(own_mid)
    if mid and record[1] == mid:
        return REPLACE
    return FOREIGN


def _tmp_path(layout: Layout, mid: str) -> str:
    global _seq
    _seq += 1
    return layout.lock_manager_tmp(mid or "none", os.getpid(), _seq)


def _write_tmp(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        fsprim.write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_folder(path: str) -> None:
    try:
        fsprim.fsync_dir(path)
    except OSError:
        pass


def _record_error(layout: Layout, e: OSError) -> LockRecordFailed:
    return LockRecordFailed(
        f"the inbox lock record {layout.lock_manager} could not be written: {e.strerror or e}",
    )


def write_for_hub(layout: Layout, own_manager: str, own_mid: str | None) -> str:
    """Run the hub's start-up decision and write what it says; returns the decision taken.

    Create: exclusive temp, synced, hard-linked to the record, temp removed; a link that fails re-reads and
    re-decides (a directory at the path raises the link's error). Replace: temp renamed over the record.
    Raises ``LockRecordFailed`` when a write fails.
    """
    mid = _mid(own_mid)
    data = encode_record(own_manager, mid)
    path = layout.lock_manager
    for _ in range(8):
        try:
            record = read_record(layout)
        except OSError as e:
            raise _record_error(layout, e) from e
        verdict = decide(record, own_manager, mid, True)
        if verdict not in WRITES:
            return verdict
        tmp = _tmp_path(layout, mid)
        try:
            if verdict == REPLACE:
                fsprim.write_atomic(path, data, tmp=tmp)
                return verdict
            _write_tmp(tmp, data)
            try:
                os.link(tmp, path)
            except OSError as link_err:
                # NFS may report a link that happened as failed: a temp with two names was linked.
                try:
                    if os.stat(tmp).st_nlink == 2:
                        _sync_folder(layout.home)
                        return verdict
                except OSError:
                    pass
                if os.path.isdir(path) or not isinstance(link_err, FileExistsError):
                    raise link_err from None
                continue  # someone else created it: re-read and re-decide
            _sync_folder(layout.home)
            return verdict
        except OSError as e:
            raise _record_error(layout, e) from e
        finally:
            fsprim.unlink_quiet(tmp)
    raise LockRecordFailed(f"the inbox lock record {path} kept changing while this hub wrote it")


# -------------------------------------------------------------------------------------------------- route

LOCAL = "local"
FORWARD = "forward"
REFUSE = "refuse"


def no_record_text(path: str) -> str:
    return f"no inbox lock record at {path}: restart this daemon to write it"


def remounted_text(own: str, rec: str) -> str:
    return (
        f"this hub's inbox lock is now {own} but its record says {rec}: "
        "restart this daemon to re-record it after the remount"
    )


def foreign_text(rec: str, rec_mid: str, own: str, path: str) -> str:
    by = f"written by machine {rec_mid}" if rec_mid else "written by an unknown machine"
    return (
        f"the inbox lock record names {rec}, {by}, a different lock manager from this hub's {own}: "
        f"stop every daemon on this comm folder, delete {path}, then start the hub"
    )


def no_machine_id_text(path: str) -> str:
    return (
        f"this hub has no machine id, so it cannot own the inbox lock record at {path}: "
        "give this machine a machine id (/etc/machine-id on Linux), then restart the daemon"
    )


def forwarded_to_guest_text(self_host: str) -> str:
    return f"a forwarded frame reached a daemon that is not its folder's hub ({self_host})"


def route(
    record: tuple[str, str] | None,
    own_manager: str,
    own_mid: str | None,
    is_hub: bool,
    forwarded: bool,
    *,
    path: str,
    self_host: str,
) -> tuple[str, str]:
    """Where a daemon's ``comm.file`` goes: ``("local", "")``, ``("forward", "")`` or ``("refuse", text)``.

    ``path`` is the record's path (for the texts), ``self_host`` this daemon's host name.
    """
    if own_manager != "none" and record is not None and record[0] == own_manager:
        return LOCAL, ""
    if not is_hub:
        if forwarded:
            return REFUSE, forwarded_to_guest_text(self_host)
        return FORWARD, ""
    if own_manager == "none":
        return REFUSE, no_machine_id_text(path)
    if record is None:
        return REFUSE, no_record_text(path)
    mid = _mid(own_mid)
    if mid and record[1] == mid:
        return REFUSE, remounted_text(own_manager, record[0])
    return REFUSE, foreign_text(record[0], record[1], own_manager, path)


def own_lock(layout: Layout) -> str | None:
    """This process's inbox lock identity when it takes the inbox lock itself, else None.

    It does on Linux when the record's line 1 is non-empty, not ``none``, and equal to the identity this
    process computes for ``inbox/``. Any doubt -> None (the line goes to a daemon instead).
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        record = read_record(layout)
    except OSError:
        return None
    if record is None or not record[0] or record[0] == "none":
        return None
    own = lock_manager_of(layout.inbox_dir)
    return own if record[0] == own else None


def appends_itself(layout: Layout) -> bool:
    """True when this process takes the inbox lock itself (see ``own_lock``)."""
    return own_lock(layout) is not None


# ------------------------------------------------------------------------------------ the folder's mark

SAME = "same"
OTHER = "other"
UNKNOWN = "unknown"


def folder_mark(layout: Layout) -> str:
    """This comm folder's mark, as any box that mounts it reads it: the hub's record file's inode number,
    modification time (ns) and bytes (``<ino>:<mtime_ns>:<line 1>|<line 2>``); "" with no record (or an
    unreadable one). The record is written once, through a hard link, by the folder's hub, so every box
    that mounts the same folder (NFS included: the inode number and the time are the server's) reads the
    same mark, and a record in another folder differs in its inode, its time or its machine id. Used by
    ``sotd doctor`` (docs/doctor.md, "the same comm folder or not"); only reads."""
    try:
        fd = fsprim.open_nofollow(layout.lock_manager, os.O_RDONLY)
    except OSError:
        return ""
    try:
        with open(fd, "rb") as f:
            st = os.fstat(f.fileno())
            data = f.read(65536)
    except OSError:
        return ""
    first, second = parse_record(data)
    return f"{st.st_ino}:{st.st_mtime_ns}:{first}|{second}"


def same_folder(mine: str, theirs: str) -> str:
    """Whether two boxes' marks (``folder_mark``) show one comm folder: ``SAME`` when both are there and
    equal, ``OTHER`` when they differ (one of them missing counts: the record is in every box's view of a
    shared folder), ``UNKNOWN`` when neither folder has a record yet."""
    if not mine and not theirs:
        return UNKNOWN
    return SAME if mine == theirs else OTHER
