"""Small sotd-driving programs for one "host" of the NFS tier's guest; each prints one JSON line last.

File: ``tests/nfs/guest/helper.py`` (guest side, run by points.py on host A or inside host B's namespaces).
Usage: ``helper.py <verb> <args…>``. Every verb uses sotd's own code paths (``sotd.formats``) on the NFS
mount it is given; a seam is replaced only where a point needs to hold a lock at a chosen moment, and the
verb says so.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import sys
import threading
import time
from typing import Any

from sotd import _clock
from sotd.errors import SotdError
from sotd.formats import holder, inbox, lockmanager, registry
from sotd.formats.layout import Layout, ensure_home
from sotd.formats.reglock import RegistryLock


def emit(obj: dict[str, Any]) -> None:
    print(json.dumps(obj), flush=True)


def layout_of(home: str) -> Layout:
    lay = Layout(home)
    ensure_home(lay)
    return lay


def verb_identity(home: str) -> dict[str, Any]:
    lay = layout_of(home)
    return {
        "hostname": socket.gethostname(),
        "machine_id": holder.machine_field(),
        "boot_id": holder.boot_field(),
        "identity": lockmanager.lock_manager_of(lay.inbox_dir),
        "own_lock": lockmanager.own_lock(lay),
        "vouch": holder.vouch(home),
        "record": holder.own(socket.gethostname(), proven=holder.vouch(home) is None).record(),
    }


def wait_file(path: str, secs: float) -> bool:
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        if os.path.exists(path):
            return True
        time.sleep(0.01)
    return False


def touch_file(path: str, text: str = "") -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def payload(who: str, i: int) -> str:
    return f"{who} {i:05d} " + "x" * 100


def verb_append(home: str, handle: str, who: str, n: str, mode: str, go: str) -> dict[str, Any]:
    """``n`` appends to ``inbox/<handle>.jsonl`` once ``go`` exists: ``sotd`` (``inbox.append``, the lock as
    this host computes it) or ``plain`` (O_APPEND, write, fsync, no lock: what the lock is for)."""
    lay = layout_of(home)
    own = lockmanager.own_lock(lay)
    nfs = lockmanager.is_nfs(own) if own else False
    path = lay.inbox(handle)
    failures: list[str] = []
    if not wait_file(go, 60):
        return {"error": "no go"}
    t = time.monotonic()
    lat: list[float] = []
    for i in range(int(n)):
        t1 = time.monotonic()
        if mode == "sotd":
            line = inbox.encode_line(who, handle, "nfs", payload(who, i), _clock.stamp())
            try:
                inbox.append(lay, handle, line, nfs=nfs, bound=30.0)
            except SotdError as e:
                failures.append(e.message)
        else:
            data = (json.dumps({"from": who, "to": handle, "msg": payload(who, i)}) + "\n").encode()
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
        lat.append(time.monotonic() - t1)
    secs = time.monotonic() - t
    lat.sort()
    return {
        "own_lock": own,
        "n": int(n),
        "secs": round(secs, 3),
        "failures": failures[:5],
        "failed": len(failures),
        "p50": lat[len(lat) // 2],
        "p99": lat[int(len(lat) * 0.99)],
    }


def answer_kind(answer: dict[str, Any]) -> str:
    """Which of the filing's outcomes an answer is (docs/contract.md "A filing's deadline")."""
    if answer.get("ok") is True:
        return "ok"
    text = str(answer.get("error", ""))
    for kind, words in (
        ("expired", "the frame arrived after its sender stopped waiting"),
        ("busy", "was held for"),
        ("before the write", "deadline passed before the line was written"),
        ("taken back", "so it was taken back out of"),
        ("no reply", "no reply to comm.file"),
        ("sender gave up", "the daemon did not answer at"),  # the sender's own wait ran out first
    ):
        if words in text:
            return kind
    return "other"


def verb_file_via_daemon(
    sock: str, handle: str, who: str, n: str, go: str, waits_s: str = "5"
) -> dict[str, Any]:
    """``n`` lines handed to this host's daemon at ``sock`` as ``comm.file`` (one connection each), once
    ``go`` exists: how a host that does not take the inbox lock itself files (v3 host B). ``waits_s``: the
    sender's wait for each, cycled through a comma-separated list (``sotd comm send`` waits 5 s)."""
    from sotd.client import unix
    from sotd.wire import hello as wire_hello

    hello = wire_hello.hello_payload(host=socket.gethostname(), os_user=f"uid:{os.geteuid()}", role="cli")
    waits = [float(x) for x in waits_s.split(",")]
    failures: list[str] = []
    failed_seq: list[int] = []
    kinds: dict[str, int] = {}
    others: list[str] = []
    if not wait_file(go, 60):
        return {"error": "no go"}
    t = time.monotonic()
    lat: list[float] = []
    for i in range(int(n)):
        t1 = time.monotonic()
        wait = waits[i % len(waits)]
        # as ``sotd comm send`` does: ``expires`` when it stops waiting, and it waits no longer for the verdict
        frame = {
            "from": who,
            "to": handle,
            "text": payload(who, i),
            "broadcast": False,
            "expires": round(_clock.now() + wait, 3),
        }
        try:
            answer = unix.request(sock, "comm.file", frame, hello, deadline_s=wait)
        except SotdError as e:
            answer = {"error": e.message}
        kind = answer_kind(answer)
        kinds[kind] = kinds.get(kind, 0) + 1
        if kind == "other":
            others.append(str(answer))
        if kind != "ok":
            failures.append(str(answer))
            failed_seq.append(i)
        lat.append(time.monotonic() - t1)
    secs = time.monotonic() - t
    lat.sort()
    return {
        "n": int(n),
        "secs": round(secs, 3),
        "failures": failures[:5],
        "failed": len(failures),
        "failed_seq": failed_seq,
        "kinds": kinds,
        "others": others[:5],
        "p50": lat[len(lat) // 2],
        "p99": lat[int(len(lat) * 0.99)],
    }


def verb_hold_inbox(home: str, handle: str, who: str, ready: str) -> dict[str, Any]:
    """Append through ``inbox.append``, but stop inside the lock after writing half the line (the
    ``inbox._write`` seam), say so in ``ready`` (our pid) and sleep until killed."""
    lay = layout_of(home)
    own = lockmanager.own_lock(lay)
    real = inbox._write

    def half_then_hang(fd: int, data: Any) -> int:
        b = bytes(data)
        real(fd, b[: len(b) // 2])
        os.fsync(fd)
        touch_file(ready, str(os.getpid()))
        time.sleep(300)
        return 0

    inbox._write = half_then_hang
    line = inbox.encode_line(who, handle, "nfs", payload(who, 0), _clock.stamp())
    inbox.append(lay, handle, line, nfs=lockmanager.is_nfs(own or ""), bound=10.0)
    return {"error": "the holder was not killed"}


def verb_late_writer(home: str, handle: str, who: str, ready: str, go: str) -> dict[str, Any]:
    """Append through ``inbox.append``, pausing inside the lock at its first ``fstat`` of the inbox (this
    process's ``os.fstat`` wrapped) until ``go`` exists: the writer a partition cuts off while it holds the
    inbox lock, as an RPC that hangs until the link heals would."""
    lay = layout_of(home)
    own = lockmanager.own_lock(lay)
    real_fstat = os.fstat
    real_write = inbox._write
    paused: list[float] = []
    writes: list[int] = []

    def pause_then_fstat(fd: int) -> os.stat_result:
        if not paused:
            t = time.monotonic()
            touch_file(ready, str(os.getpid()))
            wait_file(go, 180)
            paused.append(time.monotonic() - t)
        return real_fstat(fd)

    def counted_write(fd: int, data: Any) -> int:
        writes.append(len(data))
        return real_write(fd, data)

    os.fstat = pause_then_fstat
    inbox._write = counted_write
    line = inbox.encode_line(who, handle, "nfs", "the late write", _clock.stamp())
    try:
        inbox.append(lay, handle, line, nfs=lockmanager.is_nfs(own or ""), bound=10.0)
        outcome: dict[str, Any] = {"filed": True}
    except SotdError as e:
        outcome = {"filed": False, "message": e.message}
    finally:
        os.fstat = real_fstat
    outcome.update(own_lock=own, paused=paused, writes=writes)
    return outcome


def verb_hold_reglock(home: str, host: str, ready: str) -> dict[str, Any]:
    """Take the registry lock as ``host`` and hold it (``ready`` gets our pid) until killed."""
    lay = layout_of(home)
    with RegistryLock(lay, host, 10.0) as lk:
        touch_file(ready, f"{os.getpid()} {lk.me.record()}")
        time.sleep(300)
    return {"error": "the holder was not killed"}


def verb_take_reglock(home: str, host: str, bound: str) -> dict[str, Any]:
    """Take and release the registry lock as ``host`` within ``bound`` s: ``taken`` or the FAILED text,
    and the lock file's record while it was held."""
    lay = layout_of(home)
    t = time.monotonic()
    try:
        with RegistryLock(lay, host, float(bound)) as lk:
            with open(lay.reglock) as f:
                held = f.read()
            return {
                "taken": True,
                "held_record": held,
                "me": lk.me.record(),
                "vouch": holder.vouch(home),
                "wait": round(time.monotonic() - t, 3),
            }
    except SotdError as e:
        return {"taken": False, "message": e.message, "wait": round(time.monotonic() - t, 3)}


class _Counting:
    """Wraps ``registry._read_once`` (looked up at call time by ``read_bytes``) to count the errors that
    sent a registry read into its retry (ESTALE is the NFS one)."""

    def __init__(self) -> None:
        self.errors: dict[str, int] = {}
        self.real = registry._read_once
        registry._read_once = self

    def __call__(self, path: str) -> bytes:
        try:
            return self.real(path)
        except FileNotFoundError:
            raise
        except OSError as e:
            k = errno.errorcode.get(e.errno or 0, str(e.errno))
            self.errors[k] = self.errors.get(k, 0) + 1
            raise


def verb_registry_put(home: str, host: str, name: str) -> dict[str, Any]:
    """One registry write as ``host``: the row ``name`` put (a whole new file renamed over the registry)."""
    lay = layout_of(home)

    def change(doc: dict[str, Any]) -> tuple[bool, None]:
        registry.put(doc, name, {"host": host, "last_seen": _clock.stamp(), "root": "/nowhere"})
        return True, None

    try:
        registry.update(lay, host, change, bound=30.0)
    except SotdError as e:
        return {"error": e.message}
    return {"put": name}


class _HeldFirstRead:
    """Replaces ``registry._read_once``: its first call opens the registry, says so (creates ``opened``),
    waits until ``renamed`` exists and only then reads from the descriptor it opened. That holds open, on
    purpose, the window in which another host renames a new registry over the opened file; the error the
    read then gets (ESTALE on v3) is the kernel's own. Every later call is the real ``_read_once``."""

    def __init__(self, opened: str, renamed: str) -> None:
        self.opened, self.renamed = opened, renamed
        self.real = registry._read_once
        self.calls = 0
        self.first = "not called"
        registry._read_once = self

    def __call__(self, path: str) -> bytes:
        self.calls += 1
        if self.calls > 1:
            return self.real(path)
        fd = os.open(path, os.O_RDONLY)
        try:
            touch_file(self.opened)
            if not wait_file(self.renamed, 60):
                self.first = "no rename came"
                raise OSError(errno.ETIMEDOUT, "no rename came")
            chunks: list[bytes] = []
            try:
                while b := os.read(fd, 1 << 16):
                    chunks.append(b)
            except OSError as e:
                self.first = errno.errorcode.get(e.errno or 0, str(e.errno))
                raise
            self.first = "read"
            return b"".join(chunks)
        finally:
            os.close(fd)


def verb_stale_read(home: str, opened: str, renamed: str) -> dict[str, Any]:
    """One ``registry.read_bytes`` whose first try reads, from a descriptor opened before it, a registry
    another host has since replaced (``_HeldFirstRead``). Returns what that first read got, how many tries
    the read took and the rows of the document it returned."""
    lay = layout_of(home)
    held = _HeldFirstRead(opened, renamed)
    try:
        data = registry.read_bytes(lay)
    except SotdError as e:
        return {"first_read": held.first, "tries": held.calls, "unreadable": e.message}
    if data is None:
        return {"first_read": held.first, "tries": held.calls, "absent": True}
    try:
        rows = sorted(registry.agents_of(registry.parse(data)))
    except SotdError as e:
        return {"first_read": held.first, "tries": held.calls, "unparseable": e.message}
    return {"first_read": held.first, "tries": held.calls, "rows": rows}


def verb_registry_churn(home: str, host: str, n: str, go: str, secs: str) -> dict[str, Any]:
    """``n`` registry writes as ``host`` once ``go`` exists (joins, touches, leaves in turn, each also
    counting in the shared ``counter`` row), while a reader thread parses every read until the writes end
    (and at least ``secs``). Returns what was written, what the reader saw and the retries that fired."""
    lay = layout_of(home)
    counting = _Counting()
    if not wait_file(go, 60):
        return {"error": "no go"}
    stop = threading.Event()
    seen = {"reads": 0, "unparseable": 0, "unreadable": [], "absent": 0}

    def reader() -> None:
        while not stop.is_set():
            try:
                data = registry.read_bytes(lay)
            except SotdError as e:
                seen["unreadable"].append(e.message)  # type: ignore[attr-defined]
                continue
            if data is None:
                seen["absent"] += 1  # type: ignore[operator]
                continue
            seen["reads"] += 1  # type: ignore[operator]
            try:
                registry.parse(data)
            except SotdError:
                seen["unparseable"] += 1  # type: ignore[operator]

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    kept: list[str] = []
    failures: list[str] = []
    t = time.monotonic()
    for i in range(int(n)):
        name = f"{host}-{i}"

        def change(doc: dict[str, Any], i: int = i, name: str = name) -> tuple[bool, None]:
            agents = registry.agents_of(doc)
            c = agents.get("counter")
            c = dict(c) if isinstance(c, dict) else {"host": "-", "n": 0}
            c["n"] = int(c.get("n", 0)) + 1
            c[host] = int(c.get(host, 0)) + 1
            agents["counter"] = c
            if i % 3 == 0:
                registry.put(doc, name, {"host": host, "last_seen": _clock.stamp(), "root": "/nowhere"})
            elif i % 3 == 1:
                registry.set_last_seen(doc, f"{host}-{i - 1}")
            elif i % 6 == 5:
                registry.delete(doc, f"{host}-{i - 5}")
            return True, None

        try:
            registry.update(lay, host, change, bound=60.0)
        except SotdError as e:
            failures.append(e.message)
            continue
        if i % 3 == 0:
            kept.append(name)
        elif i % 6 == 5:
            kept.remove(f"{host}-{i - 5}")
    write_secs = time.monotonic() - t
    while time.monotonic() - t < float(secs):
        time.sleep(0.05)
    stop.set()
    th.join(10)
    return {
        "kept": kept,
        "failures": failures[:5],
        "failed": len(failures),
        "n": int(n),
        "write_secs": round(write_secs, 3),
        "reader": seen,
        "retry_errors": counting.errors,
    }


def main() -> None:
    verb, args = sys.argv[1], sys.argv[2:]
    t = time.monotonic()
    verbs = {
        "identity": verb_identity,
        "append": verb_append,
        "file_via_daemon": verb_file_via_daemon,
        "hold_inbox": verb_hold_inbox,
        "late_writer": verb_late_writer,
        "hold_reglock": verb_hold_reglock,
        "take_reglock": verb_take_reglock,
        "registry_churn": verb_registry_churn,
        "registry_put": verb_registry_put,
        "stale_read": verb_stale_read,
    }
    out = verbs[verb](*args)
    out["secs"] = round(time.monotonic() - t, 3)
    out["pid"] = os.getpid()
    emit(out)


if __name__ == "__main__":
    main()
