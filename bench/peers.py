"""Peers on the same work (issue 6): durable delivery into one recipient's mailbox, on W2's grid.

N in {1, 4, 16} writer processes x M messages (M scaled per N so every cell files about the same number of
messages) into one recipient, bodies of 200 B and 4 KiB (W2's grid), every kind in the same run, in an
order rotated per round:

- ``raw``: ``os.write`` + ``os.fsync`` on one shared O_APPEND file, no lock (the floor, as in W2);
- ``sotd``: ``sotd.formats.inbox.append`` (flock, tail check, write, fsync);
- ``maildir``: Python's ``mailbox.Maildir.add`` (tmp file, fsync -- CPython's ``_sync_close`` -- link into
  ``new/``), then an fsync of ``new/`` so the link itself is durable;
- ``sqlite``: one ``INSERT`` per message into a WAL database with ``synchronous=FULL``, one transaction
  each, ``busy_timeout`` 30 s (stdlib ``sqlite3``);
- ``jsonarray``: the JSON-array-per-inbox format: under an exclusive flock, read the array, append, write a
  temp file, fsync, rename (the shape of Claude Code agent teams' inbox files). Its cost grows with the
  inbox, so the first and last tenth of its deliveries are reported apart.

Two passes, so that no reader's cost leaks into the throughput of another kind:

- **Throughput and send latency**: the writers alone (no reader), 4 rounds of 250 / 64 / 16 messages per
  writer at N = 1 / 4 / 16 (about 1-1.5 minutes on the 2-core machine); per cell the deliveries per
  second of all writers together and each delivery's latency (p50/p95/p99), each also as a ratio to the
  raw floor of the same rounds.
- **Send -> readable**: one short run per cell (64 messages in all) with a reader thread in the parent that
  looks for new messages every 1 ms the way a recipient of that format would (raw and sotd: read from
  the last offset, sotd under the inbox's shared lock; Maildir: list ``new/`` and open what is new;
  SQLite: ``SELECT ... WHERE id > last``; JSON array: parse the file whenever its inode or size changed);
  the time from the start of a delivery to the first look that shows it.

Per verb, cold processes (``bench/peers_mcp.py``, in the same run, after the above): sotd's ``send`` and
``poll`` beside MCP Agent Mail's ``send_message`` and ``fetch_inbox`` through its server on loopback, with
the ``python -c pass`` floor (``result["per_verb"]``).

The wake's peer (plain ``tmux send-keys`` into the agent's pane) is measured by ``bench/wake.py`` in the
same run as sotd's own wake, into the same scripted agent, so the two sit in one table.

Usage: ``python -m bench.peers [--quick]``; writes ``bench/results/peers.json``.
"""

from __future__ import annotations

import fcntl
import json
import mailbox
import multiprocessing as mp
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

from bench import common

KINDS = ("raw", "sotd", "maildir", "sqlite", "jsonarray")
NS = (1, 4, 16)
BODIES = (200, 4096)
TS = "2026-01-01T00:00:00Z"


def body(wid: str, seq: int, size: int) -> str:
    """A body of ``size`` bytes that names its sender and sequence number at its start."""
    head = f"peer {wid} {seq} "
    return head + "x" * max(0, size - len(head))


def ident(text: str) -> tuple[str, int] | None:
    parts = text.split(" ", 3)
    if len(parts) < 3 or parts[0] != "peer":
        return None
    try:
        return parts[1], int(parts[2])
    except ValueError:
        return None


# ------------------------------------------------------------------------------------------- writers


def _setup(kind: str, root: str) -> None:
    os.makedirs(root)
    if kind == "sotd":
        common.make_comm(root)
    elif kind == "maildir":  # made once here: concurrent Maildir(create=True) calls race on the subfolders
        mailbox.Maildir(os.path.join(root, "maildir"), create=True)
    elif kind == "sqlite":
        db = sqlite3.connect(os.path.join(root, "queue.db"))
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE q(id INTEGER PRIMARY KEY, rcpt TEXT, sender TEXT, body TEXT, ts TEXT)")
        db.commit()
        db.close()


def _deliverer(kind: str, root: str, wid: str, m: int, size: int, barrier, out) -> None:  # type: ignore[no-untyped-def]
    from sotd.formats import inbox
    from sotd.formats.layout import Layout

    bodies = [body(wid, s, size) for s in range(m)]
    state: dict[str, object] = {}
    if kind == "raw":
        state["fd"] = os.open(os.path.join(root, "raw.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        state["lines"] = [inbox.encode_line(wid, "rcpt", "bench", b, TS) for b in bodies]
    elif kind == "sotd":
        state["layout"] = Layout(os.path.join(root, "comm"))
        state["lines"] = [inbox.encode_line(wid, "rcpt", "bench", b, TS) for b in bodies]
    elif kind == "maildir":
        state["md"] = mailbox.Maildir(os.path.join(root, "maildir"), create=False)
        state["newfd"] = os.open(os.path.join(root, "maildir", "new"), os.O_RDONLY)
        state["msgs"] = [mailbox.MaildirMessage(f"From: {wid}\nTo: rcpt\n\n{b}\n") for b in bodies]
    elif kind == "sqlite":
        db = sqlite3.connect(os.path.join(root, "queue.db"), timeout=30, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        state["db"] = db
    else:
        state["lock"] = os.open(os.path.join(root, "rcpt.json.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    starts: list[int] = []
    lat: list[int] = []
    barrier.wait()
    t_begin = time.monotonic_ns()
    for s in range(m):
        t0 = time.monotonic_ns()
        if kind == "raw":
            os.write(state["fd"], state["lines"][s])  # type: ignore[arg-type, index]
            os.fsync(state["fd"])  # type: ignore[arg-type]
        elif kind == "sotd":
            inbox.append(state["layout"], "rcpt", state["lines"][s], nfs=False, bound=30.0)  # type: ignore[arg-type, index]
        elif kind == "maildir":
            state["md"].add(state["msgs"][s])  # type: ignore[attr-defined, index]
            os.fsync(state["newfd"])  # type: ignore[arg-type]
        elif kind == "sqlite":
            state["db"].execute(  # type: ignore[attr-defined]
                "INSERT INTO q(rcpt, sender, body, ts) VALUES (?, ?, ?, ?)", ("rcpt", wid, bodies[s], TS)
            )
        else:
            rec = {"from": wid, "to": "rcpt", "repo": "bench", "msg": bodies[s], "ts": TS}
            _json_array_deliver(root, state["lock"], rec)  # type: ignore[arg-type]
        t1 = time.monotonic_ns()
        starts.append(t0)
        lat.append(t1 - t0)
    out.put((wid, t_begin, time.monotonic_ns(), starts, lat))


def _json_array_deliver(root: str, lock_fd: int, rec: dict[str, str]) -> None:
    path = os.path.join(root, "rcpt.json")
    fcntl.flock(lock_fd, fcntl.LOCK_EX)
    try:
        try:
            with open(path, "rb") as f:
                arr = json.loads(f.read())
        except FileNotFoundError:
            arr = []
        arr.append(rec)
        tmp = path + f".tmp.{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(json.dumps(arr).encode())
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
    finally:
        fcntl.flock(lock_fd, fcntl.LOCK_UN)


# -------------------------------------------------------------------------------------------- readers


class Reader(threading.Thread):
    """Looks for new messages every ``interval`` s as a recipient of ``kind`` would; first-seen times."""

    def __init__(self, kind: str, root: str, interval: float = 0.001) -> None:
        super().__init__(daemon=True)
        self.kind, self.root, self.interval = kind, root, interval
        self.seen: dict[tuple[str, int], int] = {}
        self.stop = threading.Event()
        self.offset = 0
        self.names: set[str] = set()
        self.last_id = 0
        self.count = 0
        self.sig: tuple[int, int] | None = None
        self.db: sqlite3.Connection | None = None

    def run(self) -> None:
        try:
            while True:
                last = self.stop.is_set()
                self.look()
                if last:
                    return
                time.sleep(self.interval)
        finally:
            if self.db is not None:
                self.db.close()

    def _mark(self, texts: list[str]) -> None:
        now = time.monotonic_ns()
        for t in texts:
            k = ident(t)
            if k is not None and k not in self.seen:
                self.seen[k] = now

    def look(self) -> None:
        kind, root = self.kind, self.root
        if kind in ("raw", "sotd"):
            if kind == "raw":
                path, lock = os.path.join(root, "raw.jsonl"), None
            else:
                from sotd.formats.layout import Layout

                lay = Layout(os.path.join(root, "comm"))
                path, lock = lay.inbox("rcpt"), lay.inbox_lock("rcpt")
            data = _read_from(path, self.offset, lock)
            data = data[: data.rfind(b"\n") + 1]
            self.offset += len(data)
            self._mark([json.loads(x)["msg"] for x in data.split(b"\n")[:-1]])
        elif kind == "maildir":
            new = os.path.join(root, "maildir", "new")
            fresh = [n for n in os.listdir(new) if n not in self.names]
            texts = []
            for n in fresh:
                self.names.add(n)
                with open(os.path.join(new, n), encoding="utf-8") as f:
                    texts.append(f.read().split("\n\n", 1)[1])
            self._mark(texts)
        elif kind == "sqlite":
            if self.db is None:
                self.db = sqlite3.connect(os.path.join(root, "queue.db"), timeout=30)
            rows = self.db.execute(
                "SELECT id, substr(body, 1, 40) FROM q WHERE id > ? ORDER BY id", (self.last_id,)
            ).fetchall()
            if rows:
                self.last_id = rows[-1][0]
            self._mark([r[1] for r in rows])
        else:
            path = os.path.join(root, "rcpt.json")
            try:
                st = os.stat(path)
            except FileNotFoundError:
                return
            if (st.st_ino, st.st_size) == self.sig:
                return
            with open(path, "rb") as f:  # replaced whole by rename: no lock needed to read a complete array
                arr = json.loads(f.read())
            self.sig = (st.st_ino, st.st_size)
            self._mark([r["msg"] for r in arr[self.count :]])
            self.count = len(arr)


def _read_from(path: str, offset: int, lock: str | None) -> bytes:
    lk = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600) if lock else -1
    try:
        if lk >= 0:
            fcntl.flock(lk, fcntl.LOCK_SH)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return b""
        try:
            size = os.fstat(fd).st_size
            return os.pread(fd, size - offset, offset) if size > offset else b""
        finally:
            os.close(fd)
    finally:
        if lk >= 0:
            os.close(lk)


def _count(kind: str, root: str) -> int:
    if kind == "raw":
        with open(os.path.join(root, "raw.jsonl"), "rb") as f:
            return f.read().count(b"\n")
    if kind == "sotd":
        with open(os.path.join(root, "comm", "inbox", "rcpt.jsonl"), "rb") as f:
            return f.read().count(b"\n")
    if kind == "maildir":
        return len(os.listdir(os.path.join(root, "maildir", "new")))
    if kind == "sqlite":
        db = sqlite3.connect(os.path.join(root, "queue.db"))
        try:
            return int(db.execute("SELECT count(*) FROM q").fetchone()[0])
        finally:
            db.close()
    with open(os.path.join(root, "rcpt.json"), "rb") as f:
        return len(json.loads(f.read()))


def _collect(out, ps: list, limit: float) -> list:  # type: ignore[no-untyped-def, type-arg]
    """Every writer's result; a writer that died or a run past ``limit`` seconds stops the run."""
    import queue

    res = []
    deadline = time.monotonic() + limit
    while len(res) < len(ps):
        try:
            res.append(out.get(timeout=0.5))
        except queue.Empty:
            dead = [p for p in ps if p.exitcode not in (None, 0)]
            if dead or time.monotonic() > deadline:
                for p in ps:
                    p.kill()
                why = f"a writer exited {dead[0].exitcode}" if dead else f"over {limit:.0f} s"
                raise RuntimeError(f"delivery run stopped: {why}") from None
    for p in ps:
        p.join(30)
    return res


def deliver(
    kind: str, work: str, tag: str, n: int, m: int, size: int, watch: bool = False
) -> dict[str, object]:
    """One run of ``n`` writers x ``m`` messages of ``size`` bytes; with ``watch``, a reader measures
    send -> readable."""
    root = os.path.join(work, f"{kind}-{tag}")
    _setup(kind, root)
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(n + 1)  # the parent too: the reader starts after the forks, so no writer
    out = ctx.Queue()  # inherits a descriptor that holds the reader's shared lock
    ps = [ctx.Process(target=_deliverer, args=(kind, root, f"w{i}", m, size, barrier, out)) for i in range(n)]
    for p in ps:
        p.start()
    reader = Reader(kind, root) if watch else None
    if reader:
        reader.start()
    barrier.wait(60)
    res = _collect(out, ps, 300)
    e2e: list[float] = []
    if reader:
        reader.stop.set()
        reader.join(60)
        e2e = [
            (reader.seen[(r[0], s)] - r[3][s]) / 1e9
            for r in res
            for s in range(m)
            if (r[0], s) in reader.seen
        ]
        if len(e2e) != n * m:
            raise RuntimeError(f"{kind}: the reader saw {len(e2e)} of {n * m} messages")
    got = _count(kind, root)
    if got != n * m:
        raise RuntimeError(f"{kind}: {got} messages delivered, want {n * m}")
    shutil.rmtree(root, ignore_errors=True)
    lat = [x / 1e9 for r in res for x in r[4]]
    tenth = max(1, m // 10)
    return {
        "per_s": n * m / ((max(r[2] for r in res) - min(r[1] for r in res)) / 1e9),
        "lat": lat,
        "first": [x / 1e9 for r in res for x in r[4][:tenth]],
        "last": [x / 1e9 for r in res for x in r[4][-tenth:]],
        "e2e": e2e,
    }


# ------------------------------------------------------------------------------------------------ run


def run(rounds: int, ms: dict[int, int], readable_total: int) -> dict[str, object]:
    from sotd.formats import inbox  # noqa: F401  (imported once here, not in every forked writer)

    work = tempfile.mkdtemp(prefix="sotd-bench-peers-", dir=common.bench_dir())
    acc: dict[str, dict[str, list[float]]] = {}
    cells = [(n, size) for n in NS for size in BODIES]
    t_start = time.monotonic()
    try:
        facts = common.machine(work)
        for r in range(rounds):
            for c, (n, size) in enumerate(cells):
                k = (r + c) % len(KINDS)
                for kind in KINDS[k:] + KINDS[:k]:
                    res = deliver(kind, work, f"{r}-{n}-{size}", n, ms[n], size)
                    a = acc.setdefault(
                        f"{kind} {n} {size}", {"per_s": [], "lat": [], "first": [], "last": [], "e2e": []}
                    )
                    a["per_s"].append(res["per_s"])  # type: ignore[arg-type]
                    for key in ("lat", "first", "last"):
                        a[key] += res[key]  # type: ignore[operator]
        t_tput = time.monotonic() - t_start
        for c, (n, size) in enumerate(cells):  # the readable pass: short runs, a reader watching
            m = max(1, readable_total // n)
            k = c % len(KINDS)
            for kind in KINDS[k:] + KINDS[:k]:
                res = deliver(kind, work, f"e2e-{n}-{size}", n, m, size, watch=True)
                acc[f"{kind} {n} {size}"]["e2e"] += res["e2e"]  # type: ignore[operator]
        t_e2e = time.monotonic() - t_start - t_tput
    finally:
        shutil.rmtree(work, ignore_errors=True)
    facts["load_avg_end"] = common.load_avg()
    rows = []
    for n, size in cells:
        floor = acc[f"raw {n} {size}"]
        for kind in KINDS:
            a = acc[f"{kind} {n} {size}"]
            rows.append(
                {
                    "kind": kind,
                    "n": n,
                    "body": size,
                    "per_s": common.summary(a["per_s"]),
                    "ratio_to_floor": common.ratio(a["per_s"], floor["per_s"]),
                    "ratio_to_sotd": common.ratio(a["per_s"], acc[f"sotd {n} {size}"]["per_s"]),
                    "latency_ms": common.summary(a["lat"], 1000),
                    "latency_ratio_to_floor": common.ratio(a["lat"], floor["lat"]),
                    "first_tenth_ms": common.summary(a["first"], 1000),
                    "last_tenth_ms": common.summary(a["last"], 1000),
                    "e2e_ms": common.summary(a["e2e"], 1000) if a["e2e"] else None,
                }
            )
    return {
        "workload": "peers",
        "machine": facts,
        "params": {
            "rounds": rounds,
            "messages_per_writer": {str(k): v for k, v in ms.items()},
            "bodies": list(BODIES),
            "readable_messages_per_cell": readable_total,
            "reader_interval_ms": 1.0,
            "seconds": {"throughput": round(t_tput, 1), "readable": round(t_e2e, 1)},
        },
        "delivery": rows,
    }


def main(argv: list[str] | None = None) -> int:
    ap = common.base_parser(__doc__)
    ap.add_argument("--rounds", type=int, default=4)
    a = ap.parse_args(argv)
    ms, readable = {1: 250, 4: 64, 16: 16}, 64
    if a.quick:
        a.rounds, ms, readable = 1, {1: 60, 4: 16, 16: 4}, 32
    result = run(a.rounds, ms, readable)
    from bench import peers_mcp

    try:
        result["per_verb"] = peers_mcp.run(5 if a.quick else 20)
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:  # recorded, not fatal to the rest
        result["per_verb"] = {"not_run": f"the MCP Agent Mail run failed: {type(e).__name__}: {e}"}
    return common.finish("peers", result, a.no_write, a.quick)


if __name__ == "__main__":
    sys.exit(main())
