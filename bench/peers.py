"""Peers on the same work (issue 6): durable delivery into one recipient's mailbox, and the tmux wake floor.

Delivery, N in {1, 4} writer processes x M messages of a 200-byte body to one recipient, every kind in the
same run, in an order rotated per round:

- ``raw``: ``os.write`` + ``os.fsync`` on one shared O_APPEND file, no lock (the floor);
- ``sotd``: ``sotd.formats.inbox.append`` (flock, tail check, write, fsync);
- ``maildir``: Python's ``mailbox.Maildir.add`` (tmp file, fsync -- CPython's ``_sync_close`` -- link into
  ``new/``), then an fsync of ``new/`` so the link itself is durable;
- ``sqlite``: one ``INSERT`` per message into a WAL database with ``synchronous=FULL``, one transaction
  each, ``busy_timeout`` 30 s (stdlib ``sqlite3``);
- ``jsonarray``: the JSON-array-per-inbox format: under an exclusive flock, read the array, append, write a
  temp file, fsync, rename (the shape of Claude Code agent teams' inbox files). Its cost grows with the
  inbox, so the first and last tenth of its deliveries are reported apart.

Wake: a private tmux server (``-S`` socket in the temp folder, ``-f /dev/null``) with one pane running a
reader that stamps each line it reads; ``tmux send-keys -t <pane> <line> Enter`` from a fresh client
process, timed to the client's exit and to the reader's stamp. sotd's own wake path is not in the tree
yet, so this is the floor only.

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
import time

from bench import common

KINDS = ("raw", "sotd", "maildir", "sqlite", "jsonarray")
BODY = "peer message " + "x" * 187  # 200 bytes


def _deliverer(kind: str, root: str, wid: str, m: int, barrier, out) -> None:  # type: ignore[no-untyped-def]
    from sotd.formats import inbox
    from sotd.formats.layout import Layout

    rec = {"from": wid, "to": "rcpt", "repo": "bench", "msg": BODY, "ts": "2026-01-01T00:00:00Z"}
    line = inbox.encode_line(wid, "rcpt", "bench", BODY, "2026-01-01T00:00:00Z")
    setup: dict[str, object] = {}
    if kind == "raw":
        setup["fd"] = os.open(os.path.join(root, "raw.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    elif kind == "sotd":
        setup["layout"] = Layout(os.path.join(root, "comm"))
    elif kind == "maildir":
        md = mailbox.Maildir(os.path.join(root, "maildir"), create=False)
        setup["md"] = md
        setup["newfd"] = os.open(os.path.join(root, "maildir", "new"), os.O_RDONLY)
        setup["msg"] = mailbox.MaildirMessage(f"From: {wid}\nTo: rcpt\n\n{BODY}\n")
    elif kind == "sqlite":
        db = sqlite3.connect(os.path.join(root, "queue.db"), timeout=30, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        setup["db"] = db
    else:
        setup["lock"] = os.open(os.path.join(root, "rcpt.json.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    lat: list[float] = []
    barrier.wait()
    t_begin = time.perf_counter()
    for _ in range(m):
        t0 = time.perf_counter()
        if kind == "raw":
            os.write(setup["fd"], line)  # type: ignore[arg-type]
            os.fsync(setup["fd"])  # type: ignore[arg-type]
        elif kind == "sotd":
            inbox.append(setup["layout"], "rcpt", line, nfs=False, bound=30.0)  # type: ignore[arg-type]
        elif kind == "maildir":
            setup["md"].add(setup["msg"])  # type: ignore[attr-defined]
            os.fsync(setup["newfd"])  # type: ignore[arg-type]
        elif kind == "sqlite":
            setup["db"].execute(  # type: ignore[attr-defined]
                "INSERT INTO q(rcpt, sender, body, ts) VALUES (?, ?, ?, ?)", ("rcpt", wid, BODY, rec["ts"])
            )
        else:
            _json_array_deliver(root, setup["lock"], rec)  # type: ignore[arg-type]
        lat.append(time.perf_counter() - t0)
    out.put((t_begin, time.perf_counter(), lat))


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


def deliver(kind: str, work: str, tag: str, n: int, m: int) -> dict[str, object]:
    root = os.path.join(work, f"{kind}-{tag}")
    os.makedirs(root)
    if kind == "sotd":
        common.make_comm(root)
    if kind == "maildir":  # made once here: concurrent Maildir(create=True) calls race on the subfolders
        mailbox.Maildir(os.path.join(root, "maildir"), create=True)
    if kind == "sqlite":
        db = sqlite3.connect(os.path.join(root, "queue.db"))
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE q(id INTEGER PRIMARY KEY, rcpt TEXT, sender TEXT, body TEXT, ts TEXT)")
        db.commit()
        db.close()
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(n)
    out = ctx.Queue()
    ps = [ctx.Process(target=_deliverer, args=(kind, root, f"w{i}", m, barrier, out)) for i in range(n)]
    for p in ps:
        p.start()
    res = [out.get(timeout=600) for _ in ps]
    for p in ps:
        p.join(30)
    got = _count(kind, root)
    if got != n * m:
        raise RuntimeError(f"{kind}: {got} messages delivered, want {n * m}")
    shutil.rmtree(root, ignore_errors=True)
    lat = [x for r in res for x in r[2]]
    tenth = max(1, m // 10)
    return {
        "per_s": n * m / (max(r[1] for r in res) - min(r[0] for r in res)),
        "lat": lat,
        "first": [x for r in res for x in r[2][:tenth]],
        "last": [x for r in res for x in r[2][-tenth:]],
    }


READER = r"""
import sys, time, os
out = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
os.write(out, b"ready\n")
for line in sys.stdin:
    os.write(out, f"{time.monotonic_ns()} {line.strip()}\n".encode())
"""


def tmux_wake(work: str, rounds: int) -> dict[str, object] | str:
    """send-keys client wall, and keys -> line read by the pane's program; or why it could not run."""
    tmux = shutil.which("tmux")
    if not tmux:
        return "tmux is not installed"
    sock = os.path.join(work, "tmux.sock")
    stamps = os.path.join(work, "stamps")
    env = common.clean_env()
    base = [tmux, "-S", sock, "-f", os.devnull]
    subprocess.run(
        [
            *base,
            "new-session",
            "-d",
            "-s",
            "b",
            "-x",
            "200",
            "-y",
            "50",
            sys.executable,
            "-c",
            READER,
            stamps,
        ],
        env=env,
        check=True,
        timeout=20,
    )
    try:
        deadline = time.monotonic() + 10
        while not (os.path.exists(stamps) and os.path.getsize(stamps)):
            if time.monotonic() > deadline:
                return "the pane's reader did not start"
            time.sleep(0.01)
        client: list[float] = []
        typed: list[float] = []
        floor: list[float] = []
        for i in range(rounds):
            floor.append(common.spawn_timed([tmux, "-V"], env)[0])
            tag = f"wake{i}"
            size = os.path.getsize(stamps)
            t0 = time.monotonic_ns()
            w, _ = common.spawn_timed([*base, "send-keys", "-t", "b", tag, "Enter"], env)
            client.append(w)
            deadline = time.monotonic() + 5
            while True:
                with open(stamps, "rb") as f:
                    f.seek(size)
                    new = f.read()
                if tag.encode() in new:
                    ns = int(new.split(b" " + tag.encode())[0].split(b"\n")[-1])
                    typed.append((ns - t0) / 1e9)
                    break
                if time.monotonic() > deadline:
                    return f"the pane never read {tag}"
                time.sleep(0.0002)
        return {
            "tmux_version_floor_ms": common.summary(floor, 1000),
            "send_keys_client_ms": common.summary(client, 1000),
            "keys_to_line_read_ms": common.summary(typed, 1000),
            "ratio_client_to_floor": common.ratio(client, floor),
        }
    finally:
        subprocess.run([*base, "kill-server"], env=env, check=False, timeout=20, capture_output=True)


def run(rounds: int, ms: dict[int, int], wake_rounds: int) -> dict[str, object]:
    work = tempfile.mkdtemp(prefix="sotd-bench-peers-", dir=common.bench_dir())
    acc: dict[str, dict[str, list[float]]] = {}
    try:
        facts = common.machine(work)
        for r in range(rounds):
            for n, m in ms.items():
                k = r % len(KINDS)
                for kind in KINDS[k:] + KINDS[:k]:
                    res = deliver(kind, work, f"{r}-{n}", n, m)
                    a = acc.setdefault(f"{kind} n={n}", {"per_s": [], "lat": [], "first": [], "last": []})
                    a["per_s"].append(res["per_s"])  # type: ignore[arg-type]
                    for key in ("lat", "first", "last"):
                        a[key] += res[key]  # type: ignore[operator]
        wake = tmux_wake(work, wake_rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    facts["load_avg_end"] = common.load_avg()
    rows = []
    for n in ms:
        floor = acc[f"raw n={n}"]
        for kind in KINDS:
            a = acc[f"{kind} n={n}"]
            rows.append(
                {
                    "kind": kind,
                    "n": n,
                    "per_s": common.summary(a["per_s"]),
                    "ratio_to_floor": common.ratio(a["per_s"], floor["per_s"]),
                    "ratio_to_sotd": common.ratio(a["per_s"], acc[f"sotd n={n}"]["per_s"]),
                    "latency_ms": common.summary(a["lat"], 1000),
                    "first_tenth_ms": common.summary(a["first"], 1000),
                    "last_tenth_ms": common.summary(a["last"], 1000),
                }
            )
    return {
        "workload": "peers",
        "machine": facts,
        "params": {"rounds": rounds, "messages_per_writer": {str(k): v for k, v in ms.items()}, "body": 200},
        "delivery": rows,
        "wake": wake if isinstance(wake, dict) else {"not_run": wake},
        "wake_rounds": wake_rounds,
    }


def main(argv: list[str] | None = None) -> int:
    ap = common.base_parser(__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    ms, wake_rounds = {1: 400, 4: 150}, 40
    if a.quick:
        a.rounds, ms, wake_rounds = 1, {1: 100, 4: 40}, 10
    return common.finish("peers", run(a.rounds, ms, wake_rounds), a.no_write, a.quick)


if __name__ == "__main__":
    sys.exit(main())
