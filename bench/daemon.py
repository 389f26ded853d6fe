"""The daemon's ``comm.file`` over its Unix socket (issue #4): round-trip latency and throughput, against the
raw write+fsync floor measured in the same run.

One real ``sotd daemon run`` (a subprocess, its own comm folder, no ``hosts.toml``: the hub of its folder)
files to one live handle. Latency rounds interleave, in rotated order:

- **floor**: what the append cannot avoid: ``open(O_APPEND)`` + ``write`` of one encoded line + ``fsync`` +
  ``close`` on a file of the same folder, in this process;
- **one-shot**: ``sotd.client.unix.request`` (connect, hello, ``comm.file``, answer, close), what a
  ``sotd comm send`` that goes through the daemon does once its process is up;
- **connection**: ``comm.file`` on a connection already past its hello (one request in flight): the
  daemon's own round trip (parse, fresh registry read, lock, append, fsync, answer).

Throughput: 1 and 4 client threads, each with its own connection and one request in flight, for a fixed
number of filings each; lines per second over the wall, and the floor's lines per second (one thread,
back-to-back write+fsync) from the same run. Every ``ok`` must be a line in the inbox exactly once.

Usage: ``python -m bench.daemon [--quick]``; writes ``bench/results/daemon.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

from bench import common

HANDLE = "alice"


class Conn:
    """One connection past its hello; ``file`` sends one ``comm.file`` and waits for its answer."""

    def __init__(self, path: str, hello: dict[str, object]) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(30)
        self.sock.connect(path)
        self.buf = b""
        self.id = 1
        self._send("hello", hello)
        if self._answer().get("ok") is not True:
            raise RuntimeError("hello refused")

    def _send(self, op: str, payload: dict[str, object]) -> None:
        env = {"v": 1, "id": self.id, "kind": "req", "op": op, "payload": payload}
        self.sock.sendall(json.dumps(env, separators=(",", ":")).encode() + b"\n")

    def _answer(self) -> dict[str, object]:
        while b"\n" not in self.buf:
            data = self.sock.recv(65536)
            if not data:
                raise RuntimeError("the daemon closed the connection")
            self.buf += data
        raw, _, self.buf = self.buf.partition(b"\n")
        env = json.loads(raw)
        if env.get("kind") != "res" or env.get("id") != self.id:
            raise RuntimeError(f"unexpected line: {raw[:200]!r}")
        self.id += 1
        payload: dict[str, object] = env["payload"]
        return payload

    def file(self, text: str) -> dict[str, object]:
        from sotd.wire import payloads

        self._send(payloads.COMM_FILE, payloads.comm_file_payload("bench", HANDLE, text))
        return self._answer()

    def close(self) -> None:
        self.sock.close()


def _client(c: Conn, tag: str, count: int, go: threading.Barrier, errors: list[BaseException]) -> None:
    try:
        go.wait(10)
        for i in range(count):
            if c.file(f"{tag}-{i}") != {"ok": True}:
                raise RuntimeError("comm.file refused")
    except BaseException as e:  # reported by the caller
        errors.append(e)


def run(rounds: int, per_round: int, tput_each: int) -> dict[str, object]:
    from sotd import _clock
    from sotd.client import unix
    from sotd.formats import inbox, registry
    from sotd.wire import hello as wire_hello
    from sotd.wire import payloads

    work = tempfile.mkdtemp(prefix="sotd-bd-", dir=common.bench_dir() or "/tmp")
    proc: subprocess.Popen[bytes] | None = None
    try:
        layout = common.make_comm(work)
        facts = common.machine(layout.home)
        with open(layout.registry, "wb") as f:
            f.write(
                registry.encode(
                    {
                        "protocol_version": 1,
                        "agents": {HANDLE: {"host": common.HOST, "last_seen": _clock.stamp(), "root": "/x"}},
                    }
                )
            )
        sock = os.path.join(work, "run", "sotd.sock")
        env = common.clean_env()
        env.update(
            SOT_COMM_HOME=layout.home,
            SOT_SELF_HOST=common.HOST,
            SOT_HOSTS_TOML=os.path.join(work, "no-hosts.toml"),
            XDG_RUNTIME_DIR=os.path.join(work, "xdg"),
        )
        log = open(os.path.join(work, "daemon.log"), "ab")  # noqa: SIM115 (closed in finally)
        try:
            proc = subprocess.Popen(
                [common.SOTD, "daemon", "run", "--socket", sock], env=env, stdout=log, stderr=log
            )
        finally:
            log.close()
        hello = wire_hello.hello_payload(
            host=common.HOST, os_user=wire_hello.os_user_for_uid(os.geteuid()), role="cli", name="bench"
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                unix.request(sock, "version.query", {}, hello, deadline_s=1.0)
                break
            except Exception:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("the daemon did not start") from None
                time.sleep(0.1)

        line = inbox.encode_line("bench", HANDLE, "daemon", "x" * 60, _clock.stamp())
        floor_path = os.path.join(layout.home, "floor.jsonl")

        def floor_once(_tag: str = "") -> None:
            fd = os.open(floor_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)

        sent = 0

        def one_shot(tag: str) -> None:
            nonlocal sent
            p = payloads.comm_file_payload("bench", HANDLE, tag)
            if unix.request(sock, "comm.file", p, hello, deadline_s=10) != {"ok": True}:
                raise RuntimeError("one-shot comm.file refused")
            sent += 1

        conn = Conn(sock, hello)

        def on_conn(tag: str) -> None:
            nonlocal sent
            if conn.file(tag) != {"ok": True}:
                raise RuntimeError("comm.file refused")
            sent += 1

        cases = {"floor": floor_once, "one-shot": one_shot, "connection": on_conn}
        wall: dict[str, list[float]] = {k: [] for k in cases}
        names = list(cases)
        for name in names:  # warm-up, untimed
            cases[name](f"warm-{name}")
        for r in range(rounds):
            k = r % len(names)
            for name in names[k:] + names[:k]:
                fn = cases[name]
                for i in range(per_round):
                    t0 = time.perf_counter()
                    fn(f"{name}-{r}-{i}")
                    wall[name].append(time.perf_counter() - t0)
        conn.close()

        # throughput: back-to-back, lines per second over the wall
        t0 = time.perf_counter()
        for _ in range(tput_each):
            floor_once()
        floor_lps = tput_each / (time.perf_counter() - t0)
        tput: dict[str, dict[str, float | int]] = {}
        for clients in (1, 4):
            conns = [Conn(sock, hello) for _ in range(clients)]
            errors: list[BaseException] = []
            go = threading.Barrier(clients + 1)

            threads = [
                threading.Thread(target=_client, args=(c, f"tp{clients}-{n}", tput_each, go, errors))
                for n, c in enumerate(conns)
            ]
            for th in threads:
                th.start()
            go.wait(10)
            t0 = time.perf_counter()
            for th in threads:
                th.join(600)
            took = time.perf_counter() - t0
            for c in conns:
                c.close()
            if errors or any(th.is_alive() for th in threads):
                raise RuntimeError(f"throughput with {clients} clients failed: {errors[:1]}")
            sent += clients * tput_each
            lps = clients * tput_each / took
            tput[str(clients)] = {
                "clients": clients,
                "lines": clients * tput_each,
                "seconds": took,
                "lines_per_s": lps,
                "ratio_to_floor": lps / floor_lps,
            }
        with open(layout.inbox(HANDLE), "rb") as f:
            got = [json.loads(x)["msg"] for x in f.read().splitlines()]
        once = len(got) == len(set(got)) == sent
    finally:
        if proc is not None:
            common.stop_proc(proc)
        shutil.rmtree(work, ignore_errors=True)
    facts["load_avg_end"] = common.load_avg()
    return {
        "workload": "daemon",
        "machine": facts,
        "params": {"rounds": rounds, "per_round": per_round, "tput_each": tput_each, "line_bytes": len(line)},
        "latency_ms": {k: common.summary(v, 1000) for k, v in wall.items()},
        "ratio_one_shot_to_floor": common.ratio(wall["one-shot"], wall["floor"]),
        "ratio_connection_to_floor": common.ratio(wall["connection"], wall["floor"]),
        "floor_lines_per_s": floor_lps,
        "throughput": tput,
        "filed": len(got),
        "acknowledged": sent,
        "pass": once,
    }


def main(argv: list[str] | None = None) -> int:
    ap = common.base_parser(__doc__)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--per-round", type=int, default=20)
    ap.add_argument("--tput-each", type=int, default=300)
    a = ap.parse_args(argv)
    if a.quick:
        a.rounds, a.per_round, a.tput_each = 4, 10, 50
    try:
        result = run(a.rounds, a.per_round, a.tput_each)
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        result = {"workload": "daemon", "not_run": f"{e}", "machine": common.machine(tempfile.gettempdir())}
    return common.finish("daemon", result, a.no_write, a.quick)


if __name__ == "__main__":
    sys.exit(main())
