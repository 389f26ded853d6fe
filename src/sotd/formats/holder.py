"""The registry lock's holder record, its proof fields, the judge of a holder's death, and the vouch.

File: ``<comm>/.registry.lock`` and its markers ``.registry.lock.reclaim.<id>`` hold one record
``name:machine:boot:pidns:pid:start`` + ``\\n``.
Spec: seed 000 "The registry lock"; behaviour 6.1 (record, judge, vouch).
Guarantee: a holder is judged DEAD only from proof read on its own machine (same boot and pid namespace
with its pid gone or reused, or the same machine and host after a reboot); nothing else, and no timeout,
proves a death, so a frozen or foreign holder is never forced.
What would break it: treating ``-`` as equal to ``-``, or a machine id that two live machines share
(clones); an empty or ``uninitialized`` machine id is therefore ``-``.

The probes themselves (``/proc``, ``/etc/machine-id``) live in ``sotd.sysprobe``; this module turns their
``None`` into the record's ``-``. Seams: ``sysprobe.PROC`` and ``sysprobe.MACHINE_ID_PATH``.
"""

from __future__ import annotations

import os

from sotd import sysprobe
from sotd.errors import FormatError
from sotd.formats.layout import safe_component

DEAD = "DEAD"
ALIVE = "ALIVE"
UNPROVABLE = "UNPROVABLE"

# The reasons of behaviour 6.1 (protocol: keep byte for byte).
WHY_NO_OWN_PROOF = "this box cannot prove a death"
WHY_PID_REUSED = "its pid now names another process"
WHY_RUNNING = "it is running"
WHY_EXITED = "it has exited"
WHY_PROC_UNREADABLE = "its /proc entry cannot be read"
WHY_REBOOTED = "its machine has rebooted since"
WHY_OTHER_MACHINE = "it is on another machine"
WHY_OTHER_PIDNS = "it is in another pid namespace"

# File systems whose reads the comm folder can trust to be fresh (behaviour 6.1, vouch).
FRESH_FS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "tmpfs", "nfs", "nfs4"})

_NONE = "-"
_MAX_PID_DIGITS = 19


def _field(raw: str) -> str:
    """A proof field as the record holds it: no ``:``, no white space, never empty (else ``-``)."""
    s = raw.strip()
    if not s or ":" in s or any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in s):
        return _NONE
    return s


def machine_field() -> str:
    """This machine's id as a proof field (``sysprobe.machine_id``); unreadable, empty or
    ``uninitialized`` is ``-``."""
    return _field(sysprobe.machine_id() or "")


def boot_field() -> str:
    """The kernel's boot id as a proof field (``sysprobe.boot_id``), else ``-``."""
    return _field(sysprobe.boot_id() or "")


def pidns_field(pid: int | str) -> str:
    """The pid namespace's inode number as a proof field (``sysprobe.pidns``), else ``-``."""
    return sysprobe.pidns(pid) or _NONE


def start_field(pid: int | str) -> str:
    """The process's start tick as a proof field (``sysprobe.start_tick``), else ``-``."""
    return sysprobe.start_tick(pid) or _NONE


class Holder:
    """One holder record. Fields are strings except ``pid``; ``-`` marks a field that could not be read."""

    __slots__ = ("boot", "machine", "name", "pid", "pidns", "start")

    def __init__(  # noqa: PLR0917 - the record's six fields, in record order
        self, name: str, machine: str, boot: str, pidns: str, pid: int, start: str
    ) -> None:
        self.name = name
        self.machine = machine
        self.boot = boot
        self.pidns = pidns
        self.pid = pid
        self.start = start

    def record(self) -> str:
        """``name:machine:boot:pidns:pid:start`` (no newline)."""
        return f"{self.name}:{self.machine}:{self.boot}:{self.pidns}:{self.pid}:{self.start}"

    def holder_id(self) -> str:
        """The record as file names write it (``:`` as ``.``)."""
        return self.record().replace(":", ".")

    def proven(self) -> bool:
        """True when any proof field (machine, boot, pid namespace) is known."""
        return not (self.machine == _NONE and self.boot == _NONE and self.pidns == _NONE)

    @classmethod
    def parse(cls, line: str) -> Holder:
        """The record in ``line`` (one optional trailing ``\\n``); ``FormatError`` for anything else."""
        if not isinstance(line, str):
            raise FormatError("a holder record is text")
        text = line[:-1] if line.endswith("\n") else line
        parts = text.split(":")
        if len(parts) != 6:
            raise FormatError(f"a holder record has six ':'-fields, not {len(parts)}")
        for p in parts:
            if not p or "\n" in p or "\r" in p:
                raise FormatError("a holder record has no empty field and no line break")
        pid = parts[4]
        if not (pid.isascii() and pid.isdigit()) or len(pid) > _MAX_PID_DIGITS:
            raise FormatError(f"a holder record's pid is a number, not {pid!r}")
        return cls(parts[0], parts[1], parts[2], parts[3], int(pid), parts[5])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Holder):
            return NotImplemented
        return self.record() == other.record()

    def __hash__(self) -> int:
        return hash(self.record())

    def __repr__(self) -> str:
        return f"Holder({self.record()!r})"


def own(host: str, *, proven: bool = True) -> Holder:
    """This process's record for declared host ``host``; proof fields ``-`` unless proven and confirmed."""
    name = safe_component(host) or _NONE
    pid = os.getpid()
    if proven:
        got = sysprobe.stat_of("self")
        if got is not None and got[0] == str(pid):
            return Holder(name, machine_field(), boot_field(), pidns_field(pid), pid, start_field(pid))
    return Holder(name, _NONE, _NONE, _NONE, pid, _NONE)


def _same(a: str, b: str) -> bool:
    """Field equality where ``-`` never equals anything."""
    return a != _NONE and a == b


def judge(holder: Holder, me: Holder) -> tuple[str, str]:
    """(verdict, reason) for ``holder`` judged from this box (``me``); reads only ``/proc/<holder pid>``."""
    if not me.proven():
        return UNPROVABLE, WHY_NO_OWN_PROOF
    if _same(holder.boot, me.boot) and _same(holder.pidns, me.pidns):
        tick = start_field(holder.pid)
        if tick != _NONE:
            if holder.start not in (_NONE, tick):
                return DEAD, WHY_PID_REUSED
            if tick == holder.start:
                return ALIVE, WHY_RUNNING
            return UNPROVABLE, WHY_PROC_UNREADABLE
        try:
            os.lstat(os.path.join(sysprobe.PROC, str(holder.pid)))
        except FileNotFoundError:
            return DEAD, WHY_EXITED
        except (OSError, ValueError):
            pass
        return UNPROVABLE, WHY_PROC_UNREADABLE
    same_host = holder.name == me.name
    if (
        _same(holder.machine, me.machine)
        and same_host
        and _NONE not in (holder.boot, me.boot)
        and holder.boot != me.boot
    ):
        return DEAD, WHY_REBOOTED
    if not _same(holder.machine, me.machine) or not same_host:
        return UNPROVABLE, WHY_OTHER_MACHINE
    return UNPROVABLE, WHY_OTHER_PIDNS


def _unescape(s: str) -> str:
    """Decode mountinfo's octal escapes (``\\040`` is a space)."""
    if "\\" not in s:
        return s
    out: list[str] = []
    i = 0
    n = len(s)
    while i < n:
        ch = s[i]
        if ch == "\\" and i + 4 <= n and all(c in "01234567" for c in s[i + 1 : i + 4]):
            out.append(chr(int(s[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _covers(mount_point: str, path: str) -> bool:
    if mount_point == "/":
        return path.startswith("/")
    mp = mount_point.rstrip("/")
    return path == mp or path.startswith(mp + "/")


def mount_for(mountinfo_text: str, path: str) -> tuple[str, str, str, str] | None:
    """(fstype, source, mount options, super options) of the mount holding absolute ``path``, or None.

    The mount is the entry of ``mountinfo_text`` (``/proc/self/mountinfo``) whose mount point is the
    longest whole-component prefix of ``path``; among equal mount points the later entry wins.
    """
    best: tuple[str, str, str, str] | None = None
    best_len = -1
    for line in mountinfo_text.split("\n"):
        fields = line.split(" ")
        if len(fields) < 7:
            continue
        try:
            sep = fields.index("-", 6)
        except ValueError:
            continue
        if sep + 1 >= len(fields):
            continue
        mount_point = _unescape(fields[4])
        if not mount_point.startswith("/") or not _covers(mount_point, path):
            continue
        depth = len(mount_point.rstrip("/"))
        if depth >= best_len:
            best_len = depth
            fstype = _unescape(fields[sep + 1])
            source = _unescape(fields[sep + 2]) if sep + 2 < len(fields) else ""
            super_opts = _unescape(fields[sep + 3]) if sep + 3 < len(fields) else ""
            best = (fstype, source, _unescape(fields[5]), super_opts)
    return best


def vouch(home: str) -> str | None:
    """None when the comm folder's mount proves a fresh read, else the reason of behaviour 6.1."""
    try:
        with open(os.path.join(sysprobe.PROC, "self", "mountinfo"), "rb") as f:
            text = f.read().decode("utf-8", "surrogateescape")
    except (OSError, ValueError):
        text = ""
    found = mount_for(text, os.path.realpath(home)) if text else None
    fstype = found[0] if found is not None and found[0] else "unknown"
    if fstype not in FRESH_FS:
        return f"the comm home's filesystem ({fstype}) does not prove a fresh read"
    assert found is not None
    options = set(found[2].split(",")) | set(found[3].split(","))
    if "nocto" in options:
        return "the comm home is mounted nocto, so no read of it is proved fresh"
    return None
