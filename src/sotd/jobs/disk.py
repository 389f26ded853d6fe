"""The disk a run's workspace may hold, and what finished workspaces keep (ocx.md 1.5 ``disk``; issue 24).

* **Per run:** with ``jobs.policy.workspaces.cap = "filesystem"`` (the default) the workspace is a file
  system of its own, exactly the run's capped ``limits.disk``: a sparse image ``STATE/.disks/<RUN-HASH>.img``
  of that size, ``mkfs.ext4`` (no journal, nothing reserved), mounted ``-o loop,nosuid,nodev`` on the
  workspace folder right after the ``directory`` step made it (``discard``: what is deleted inside is freed
  in the image too). A write past the cap gets ENOSPC inside the
  sandbox; the image can never hold more than its size. ``fs_full`` says when the supervisor ends the run
  ``limit: disk``. ``measured`` keeps the old sampling (a node not root, or without loop devices; docs).
* **Node-wide:** ``admit`` (pure) refuses a run whose cap would pass ``jobs.policy.workspaces.total``
  (live runs count their caps, finished ones what they hold) or the free space of the file system holding
  the images (they are sparse: a live run may still write up to its cap); finished workspaces yield
  first, oldest first.
* **Retention:** ``retention`` (pure) keeps the newest ``keep`` finished workspaces while they hold at
  most ``keep_bytes``; the rest are unmounted, their image deleted and their folder removed. A live run's
  workspace, or one that holds or lies inside it, is never removed.

The I/O shell is ``Disks``: one JSON record per run in ``STATE/.disks/<RUN-HASH>.json`` (written at
admission, ``made`` once this node made the workspace, ``ended`` when the run ended), every decision
taken under an ``flock`` of ``STATE/.disks/.lock`` so two runs starting at once see each other.

Guarantee: a run never lands more than its cap on this node's disk, all runs together never more than
the node's bound, and a workspace is removed only when its run ended and only if this node made it.
What would break it: removing by a record's path without ``made`` (a refused run names a workspace
another run made), or a run that ends without ``Disks.end`` (it would count as live forever; every end
of a run calls it, and a restarted node ends the runs it finds dead).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass

from sotd import fsprim
from sotd.jobs import paths, placeholders
from sotd.jobs.errors import Refused

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from sotd.jobs.nodepolicy import WorkspacePolicy

DISKS = ".disks"  # STATE/.disks/<RUN-HASH>.json and .img
FS_BLOCK = 4096  # the image is a whole number of these (never larger than the cap)
MIN_FS = 1 << 20  # below this mkfs.ext4 cannot make a file system
FULL_SLACK = 64 << 10  # a workspace file system with less than this left for the sandbox is full
TOOL_TIMEOUT = 120.0
MKFS = "/usr/sbin/mkfs.ext4"
MOUNT = "/usr/bin/mount"
UMOUNT = "/usr/bin/umount"

# ------------------------------------------------------------------------------------------- decisions


def size_text(n: int) -> str:
    """``8388608`` -> ``8M``; a size that is no whole unit stays in bytes. Pure."""
    for unit, shift in (("T", 40), ("G", 30), ("M", 20), ("K", 10)):
        if n and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def fs_size(cap: int) -> int:
    """The image size for a disk cap: the cap rounded down to whole ``FS_BLOCK``s. Pure."""
    return cap // FS_BLOCK * FS_BLOCK


def fs_refusal(cap_mode: str, euid: int, has_loop: bool, has_mkfs: bool, cap: int | None) -> str | None:
    """Why this node cannot give a run's workspace a file system of its ``cap``; ``None`` when it can or
    the policy asks for ``measured``. Pure (table test)."""
    if cap_mode != "filesystem" or cap is None:
        return None
    switch = 'set jobs.policy.workspaces.cap = "measured" to accept a disk cap measured every 2 s instead'
    if euid != 0:
        return f"this node cannot hold run.limits.disk with a file system of the workspace's own: it is not root; {switch}"
    if not has_loop:
        return f"this node cannot hold run.limits.disk with a file system of the workspace's own: it has no loop devices (/dev/loop-control); {switch}"
    if not has_mkfs:
        return f"this node cannot hold run.limits.disk with a file system of the workspace's own: {MKFS} is missing (apt install e2fsprogs); {switch}"
    if fs_size(cap) < MIN_FS:
        return f"run.limits.disk must be at least {size_text(MIN_FS)} on this node: the workspace is a file system of that size"
    return None


def fs_full(avail: int, free_inodes: int) -> bool:
    """Pure: is a workspace file system with ``avail`` bytes and ``free_inodes`` left to the sandbox full
    (the next write gets ENOSPC)?"""
    return avail < FULL_SLACK or free_inodes == 0


@dataclass(frozen=True)
class Held:
    """One run's workspace as the disk decisions see it: its cap, what it holds now (allocated bytes),
    when it ended (``None``: live) and whether this node made it."""

    run_hash: str
    workspace: str
    cap: int
    bytes: int = 0
    ended: float | None = None
    made: bool = True


def _near(a: str, b: str) -> bool:
    return placeholders.inside(a, b) or placeholders.inside(b, a)


def retention(finished: Sequence[Held], live: Sequence[Held], keep: int, keep_bytes: int) -> list[str]:
    """Pure: the RUN-HASHes of finished workspaces to remove. Newest first, the longest run of them that
    counts at most ``keep`` and holds at most ``keep_bytes`` is kept; every older one goes. One that a
    live run's workspace holds, lies inside, or equals is never named."""
    out: list[str] = []
    count = held = 0
    keeping = True
    for h in sorted(finished, key=lambda x: (x.ended or 0.0, x.run_hash), reverse=True):
        if keeping and count < keep and held + h.bytes <= keep_bytes:
            count, held = count + 1, held + h.bytes
            continue
        keeping = False
        if not any(_near(h.workspace, x.workspace) for x in live):
            out.append(h.run_hash)
    return out


@dataclass(frozen=True)
class Admission:
    """``admit``'s answer: the finished workspaces to remove first, and the refusal (``None``: admitted)."""

    remove: tuple[str, ...] = ()
    refusal: str | None = None


def admit(
    cap: int,
    live: Sequence[Held],
    kept: Sequence[Held],
    *,
    total: int,
    total_text: str,
    free: int,
    where: str,
) -> Admission:
    """Pure: may a new run with disk cap ``cap`` start beside the ``live`` runs and the ``kept`` finished
    workspaces, on a node whose runs may hold ``total`` together and whose image file system has ``free``
    bytes (at ``where``)? Live runs count their caps (they may grow to them), kept ones what they hold;
    kept ones yield, oldest first, before a run is refused. The refusal names the bound."""
    live_caps = sum(x.cap for x in live)
    if live_caps + cap > total:
        return Admission(refusal=(
            f"this node's bound on what all runs' workspaces may hold, jobs.policy.workspaces.total"
            f" ({total_text}), would be passed: the {len(live)} live runs' disk caps take"
            f" {size_text(live_caps)} and this run's disk cap is {size_text(cap)}"
        ))  # fmt: skip
    may_grow = sum(max(0, x.cap - x.bytes) for x in live) + cap
    removing: list[str] = []
    holding = sum(x.bytes for x in kept)
    for h in sorted(kept, key=lambda x: (x.ended or 0.0, x.run_hash)):
        if live_caps + cap + holding <= total and may_grow <= free:
            break
        if any(_near(h.workspace, x.workspace) for x in live):
            continue
        removing.append(h.run_hash)
        holding -= h.bytes
        free += h.bytes
    if may_grow > free:
        return Admission(refusal=(
            f"the file system holding this node's workspaces ({where}) has {size_text(free)} free: less than"
            f" the live runs may still write ({size_text(may_grow - cap)}) plus this run's disk cap"
            f" ({size_text(cap)})"
        ))  # fmt: skip
    return Admission(remove=tuple(removing))


def mounted_at(mountinfo: str, path: str) -> bool:
    """Pure: does ``/proc/self/mountinfo`` text list a mount whose mount point is ``path``?"""
    want = os.path.normpath(path)
    return any(p == want for p in mount_points(mountinfo))


def mount_points(mountinfo: str) -> list[str]:
    """Pure: every mount point ``/proc/self/mountinfo`` text lists (its octal escapes decoded)."""
    out = []
    for line in mountinfo.splitlines():
        f = line.split(" ")
        if len(f) > 4:
            point = f[4]
            for esc, ch in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
                point = point.replace(esc, ch)
            out.append(point)
    return out


# ------------------------------------------------------------------------------------------------- I/O


def _tool(argv: list[str]) -> None:
    try:
        p = subprocess.run(argv, capture_output=True, timeout=TOOL_TIMEOUT, check=False,
                           env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError(f"{os.path.basename(argv[0])}: {e}") from None
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).decode(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"{os.path.basename(argv[0])} exited {p.returncode}: {tail[0]}")


def _mountinfo() -> str:
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def mounts_below(mountinfo: str, top: str) -> list[str]:
    """Pure: the mount points at or below ``top`` in ``/proc/self/mountinfo`` text, deepest first."""
    out = {p for p in mount_points(mountinfo) if placeholders.inside(p, top)}
    return sorted(out, key=lambda p: (-p.count("/"), p))


def release_below(top: str) -> list[str]:
    """Unmount every file system mounted at or below ``top`` (deepest first; lazily when busy): for an
    operator removing a node's ``$$root$$``, and for tests. The mount points unmounted."""
    done = []
    for point in mounts_below(_mountinfo(), top):
        for argv in ([UMOUNT, point], [UMOUNT, "--lazy", point]):
            try:
                _tool(argv)
            except RuntimeError:
                continue
            done.append(point)
            break
    return done


def allocated(path: str) -> int:
    """Bytes of disk the file ``path`` takes (0 when it is gone)."""
    try:
        return os.stat(path, follow_symlinks=False).st_blocks * 512
    except OSError:
        return 0


class Disks:
    """The records and mounts of one node's workspaces (see the module docstring). Stateless beyond the
    files in ``STATE/.disks``; any number of instances may act on one state folder."""

    def __init__(self, state_dir: str, policy: WorkspacePolicy) -> None:
        self.dir = os.path.join(state_dir, DISKS)
        self.policy = policy

    def _rec_path(self, run_hash: str) -> str:
        return os.path.join(self.dir, run_hash + ".json")

    def image(self, run_hash: str) -> str:
        return os.path.join(self.dir, run_hash + ".img")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(self.dir, ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _read(self, run_hash: str) -> dict[str, object] | None:
        try:
            with open(self._rec_path(run_hash), encoding="utf-8") as f:
                d = json.load(f)
        except (OSError, ValueError):
            return None
        return d if isinstance(d, dict) else None

    def _write(self, rec: dict[str, object]) -> None:
        fsprim.write_atomic(self._rec_path(str(rec["run"])), json.dumps(rec).encode(), sync_folder=False)

    def _held(self, rec: dict[str, object], points: frozenset[str]) -> Held:
        h = str(rec["run"])
        cap = rec.get("cap")
        size = rec.get("bytes")
        ws = str(rec.get("workspace") or "")
        if rec.get("mode") == "filesystem" and rec.get("made"):
            # the image's blocks on the host, or what its file system counts used (written, not yet
            # flushed through the loop device), whichever is more
            size = allocated(self.image(h))
            if ws and os.path.normpath(ws) in points:
                with contextlib.suppress(OSError):
                    st = os.statvfs(ws)
                    size = max(size, (st.f_blocks - st.f_bfree) * st.f_frsize)
        ended = rec.get("ended")
        return Held(
            run_hash=h, workspace=str(rec.get("workspace") or ""), cap=cap if isinstance(cap, int) else 0,
            bytes=size if isinstance(size, int) else 0, ended=float(ended) if isinstance(ended, int | float) else None,
            made=rec.get("made") is True,
        )  # fmt: skip

    def held(self) -> list[Held]:
        """Every run's workspace this node has a record of (live and finished)."""
        out = []
        try:
            names = sorted(os.listdir(self.dir))
        except OSError:
            return []
        points = frozenset(mount_points(_mountinfo()))
        for n in names:
            if n.endswith(".json"):
                rec = self._read(n[: -len(".json")])
                if rec is not None and isinstance(rec.get("run"), str):
                    out.append(self._held(rec, points))
        return out

    def free(self) -> int:
        st = os.statvfs(self.dir)
        return st.f_bavail * st.f_frsize

    def reserve(self, run_hash: str, workspace: str, cap: int) -> None:
        """Admit a run with ``cap`` (``Refused`` naming the bound it would pass), removing finished
        workspaces retention or room asks for, and record it live."""
        pol = self.policy
        why = fs_refusal(
            pol.cap, os.geteuid(), os.path.exists("/dev/loop-control"), os.path.exists(MKFS), cap
        )
        if why:
            raise Refused(why)
        with self._locked():
            every = [h for h in self.held() if h.run_hash != run_hash]
            live = [h for h in every if h.ended is None]
            finished = [h for h in every if h.ended is not None]
            gone = set(retention(finished, live, pol.keep, pol.keep_bytes))
            kept = [h for h in finished if h.run_hash not in gone]
            total_text = pol.text.get("total", size_text(pol.total))
            adm = admit(
                cap, live, kept, total=pol.total, total_text=total_text, free=self.free(), where=self.dir
            )
            for h in [*gone, *adm.remove]:
                self._remove(h)
            if adm.refusal:
                raise Refused(adm.refusal)
            self._write({"run": run_hash, "workspace": workspace, "cap": cap, "mode": pol.cap,
                         "reserved": time.time(), "made": False, "ended": None})  # fmt: skip

    def make(self, run_hash: str, workspace: str, uid: int, gid: int) -> None:
        """Right after the ``directory`` step made the (empty) ``workspace``: mount its own file system
        there (``filesystem``), owned by ``uid``/``gid``, mode 0700, with nothing in it. ``RuntimeError``
        (the step's failure) when this node cannot."""
        rec = self._read(run_hash)
        if rec is None:
            return  # not admitted through reserve (a caller without a disk cap)
        if rec.get("mode") == "filesystem":
            img = self.image(run_hash)
            fd = os.open(img, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                os.ftruncate(fd, fs_size(int(str(rec["cap"]))))
            finally:
                os.close(fd)
            rec["made"] = True  # from here a removal cleans up the image (and the mount, if any)
            self._write(rec)
            _tool([MKFS, "-q", "-F", "-m", "0", "-O", "^has_journal", "-L", "sotd-workspace",
                   "-E", f"root_owner={uid}:{gid},nodiscard", img])  # fmt: skip
            _tool([MOUNT, "-o", "loop,nosuid,nodev,discard", "-t", "ext4", img, workspace])
            wfd = paths.open_dir(workspace, "the workspace")
            try:
                if not mounted_at(_mountinfo(), workspace):
                    raise RuntimeError(f"the workspace's file system is not mounted at {workspace}")
                with contextlib.suppress(FileNotFoundError):
                    os.rmdir("lost+found", dir_fd=wfd)
                os.fchmod(wfd, 0o700)
                os.fchown(wfd, uid, gid)
            finally:
                os.close(wfd)
        else:
            rec["made"] = True
            self._write(rec)

    def full(self, workspace: str) -> bool:
        """Is the mounted workspace file system at ``workspace`` full (``fs_full``)?"""
        try:
            st = os.statvfs(workspace)
        except OSError:
            return False
        return fs_full(st.f_bavail * st.f_frsize, st.f_favail)

    def own_fs(self, run_hash: str) -> bool:
        """Did this node give the run's workspace a file system of its own?"""
        rec = self._read(run_hash)
        return rec is not None and rec.get("mode") == "filesystem" and rec.get("made") is True

    def end(self, run_hash: str) -> None:
        """The run ended: record when (and, ``measured``, the bytes it holds), then apply the retention.
        Idempotent; a run with no record only triggers the retention."""
        with self._locked():
            rec = self._read(run_hash)
            if rec is not None and rec.get("ended") is None:
                rec["ended"] = time.time()
                ws = str(rec.get("workspace") or "")
                if rec.get("mode") != "filesystem" and rec.get("made") and ws:
                    try:
                        rec["bytes"] = paths.disk_used(ws)
                    except (OSError, Refused):
                        rec["bytes"] = 0
                if not rec.get("made"):
                    self._drop(run_hash)  # no workspace was made: nothing is held
                else:
                    self._write(rec)
            self._sweep()

    def sweep(self) -> list[str]:
        """Apply the retention now; the RUN-HASHes whose workspaces were removed."""
        with self._locked():
            return self._sweep()

    def _sweep(self) -> list[str]:
        every = self.held()
        live = [h for h in every if h.ended is None]
        gone = retention(
            [h for h in every if h.ended is not None], live, self.policy.keep, self.policy.keep_bytes
        )
        for h in gone:
            self._remove(h)
        return gone

    def _drop(self, run_hash: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._rec_path(run_hash))

    def _remove(self, run_hash: str) -> None:
        """Remove a finished run's workspace (only if this node made it): unmount, delete the image, then
        the folder; last the record. A failure leaves the record, so the next sweep tries again."""
        rec = self._read(run_hash)
        if rec is None:
            return
        ws = str(rec.get("workspace") or "")
        if rec.get("made") and ws:
            img = self.image(run_hash)
            if mounted_at(_mountinfo(), ws):
                try:
                    _tool([UMOUNT, ws])
                except RuntimeError:
                    try:
                        _tool([UMOUNT, "--lazy", ws])
                    except RuntimeError:
                        return
            if os.path.lexists(img):
                os.unlink(img)
            if os.path.isdir(ws) and not os.path.islink(ws):
                shutil.rmtree(ws, ignore_errors=True)  # fd-based: never follows a link inside
        self._drop(run_hash)
