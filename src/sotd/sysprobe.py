"""What this box and its processes say about themselves: ``/proc`` stat fields, the start tick, the pid
namespace, the boot id, the machine id and the declared host. A leaf: the standard library only.

Files: ``/proc/<pid>/stat``, ``/proc/<pid>/ns/pid``, ``/proc/sys/kernel/random/boot_id``,
``/etc/machine-id``; ``os.uname()`` for the host name.
Spec: behaviour 6.1 (the holder record's proof fields), 1.1 (the declared host), the daemon status file's
start tick (``sotd daemon stop`` never signals a recycled pid).
Guarantee: each probe answers a value or ``None`` ("could not be read"), never a guess: a field of the
wrong shape is ``None``, so two unreadable facts are never taken for one fact. The callers turn ``None``
into their own marker (the holder record's ``-``, the status file's refusal).
What would break it: splitting a stat line at the FIRST ``)`` (a process may name itself ``a) b``), or
reading an empty or ``uninitialized`` machine id as an id (clones share it).

Seams: ``PROC`` and ``MACHINE_ID_PATH`` are read at call time, so a unit test can point them at a fake tree.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

PROC = "/proc"
MACHINE_ID_PATH = "/etc/machine-id"

# Field 22 of /proc/<pid>/stat (starttime) is the 20th after the comm's closing ")"; field 4 (ppid) the 2nd.
_START_AFTER_COMM = 19
_PPID_AFTER_COMM = 1


def _digits(raw: str) -> str | None:
    return raw if raw and raw.isascii() and raw.isdigit() else None


# ---------------------------------------------------------------------------------------------- pure


def split_stat(data: bytes) -> tuple[str, list[str]] | None:
    """(pid field, fields after the LAST ``)``) of one ``/proc/<pid>/stat`` text, or None (no ``)``)."""
    text = data.decode("utf-8", "replace")
    head, sep, tail = text.rpartition(")")
    if not sep:
        return None
    return head.split(" (", 1)[0].strip(), tail.split()


def tick_in(after_comm: list[str]) -> str | None:
    """The start tick (field 22, clock ticks since boot) among the fields after the comm, or None."""
    return _digits(after_comm[_START_AFTER_COMM]) if len(after_comm) > _START_AFTER_COMM else None


def ppid_in(after_comm: list[str]) -> int | None:
    """The parent pid (field 4) among the fields after the comm, or None."""
    got = _digits(after_comm[_PPID_AFTER_COMM]) if len(after_comm) > _PPID_AFTER_COMM else None
    return None if got is None else int(got)


def pidns_in(link: str) -> str | None:
    """The inode number of a ``/proc/<pid>/ns/pid`` link's text (``pid:[N]``), or None."""
    if link.startswith("pid:[") and link.endswith("]"):
        return _digits(link[5:-1])
    return None


def machine_id_in(first_line: str) -> str | None:
    """The machine id of ``/etc/machine-id``'s first line: trimmed; empty or ``uninitialized`` is None
    (machine-id(5): a first boot that has not committed one)."""
    s = first_line.strip()
    return None if not s or s == "uninitialized" else s


def host_label(nodename: str) -> str:
    """The declared host a host name gives: its first dot-label, trimmed and lower-cased."""
    return nodename.split(".", 1)[0].strip().lower()


# ---------------------------------------------------------------------------------------------- reads


def _first_line(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            data = f.read(4096)
    except (OSError, ValueError):
        return None
    return data.split(b"\n", 1)[0].decode("utf-8", "replace")


def stat_bytes(pid: int | str, proc: str | None = None) -> bytes | None:
    """The text of ``<proc>/<pid>/stat`` (``proc`` defaults to ``PROC``), or None when unreadable."""
    try:
        with open(os.path.join(PROC if proc is None else proc, str(pid), "stat"), "rb") as f:
            return f.read(8192)
    except (OSError, ValueError):
        return None


def stat_of(pid: int | str, proc: str | None = None) -> tuple[str, list[str]] | None:
    """``split_stat`` of ``stat_bytes``, or None when unreadable or not a stat line."""
    data = stat_bytes(pid, proc)
    return None if data is None else split_stat(data)


def start_tick(pid: int | str) -> str | None:
    """The process's start tick (``/proc/<pid>/stat`` field 22), or None when it cannot be read."""
    got = stat_of(pid)
    return None if got is None else tick_in(got[1])


def pidns(pid: int | str) -> str | None:
    """The inode number of the process's pid namespace (``/proc/<pid>/ns/pid``), or None."""
    try:
        link = os.readlink(os.path.join(PROC, str(pid), "ns", "pid"))
    except (OSError, ValueError):
        return None
    return pidns_in(link)


def boot_id() -> str | None:
    """The kernel's boot id (``/proc/sys/kernel/random/boot_id``, trimmed), or None."""
    line = _first_line(os.path.join(PROC, "sys", "kernel", "random", "boot_id"))
    return None if line is None else (line.strip() or None)


def machine_id() -> str | None:
    """This machine's id (``machine_id_in`` of ``/etc/machine-id``), or None when unreadable or unset."""
    line = _first_line(MACHINE_ID_PATH)
    return None if line is None else machine_id_in(line)


def declared_host(environ: Mapping[str, str]) -> str:
    """This box's declared host (behaviour 1.1): ``$SOT_SELF_HOST`` verbatim, else ``host_label`` of the
    host name; ``""`` when the host name cannot be read (each caller says what that means for it)."""
    override = environ.get("SOT_SELF_HOST")
    if override:
        return override
    try:
        node = os.uname().nodename
    except (AttributeError, OSError):
        return ""
    return host_label(node)


__all__ = [
    "MACHINE_ID_PATH",
    "PROC",
    "boot_id",
    "declared_host",
    "host_label",
    "machine_id",
    "machine_id_in",
    "pidns",
    "pidns_in",
    "ppid_in",
    "split_stat",
    "start_tick",
    "stat_bytes",
    "stat_of",
    "tick_in",
]
