"""``sotd web`` with a page open (issue 30 item 6): the CPU and memory of the web server and of the daemon
at idle, against the same processes with no page open, measured in the same run.

One real ``sotd daemon run`` (its own comm folder, its own rows' tmux server) with 100 live handles in the
registry (each with an inbox of 20 lines, so the unread counts are real reads) and 10 rows, each a plain
``bash`` in the daemon's tmux server (so the page reads 10 screens). One real ``sotd web`` beside it.

- **floor**: the daemon, the web server and the rows' tmux server for ``--secs`` with no page open (the
  web server only listens);
- **page open**: the same for ``--secs`` while one server-sent event stream is read (the page's
  ``/events``, with the cookie the secret set), counting the events received.

CPU is ``utime + stime + cutime + cstime`` from ``/proc/<pid>/stat`` (the children it reaped count: the
web server's one ``tmux`` call a second) over the window, as a percentage of one core; RSS is
``VmRSS`` at the window's end. The targets: the web server and the daemon each at most 5 % of one core and
30 MB with the page open.

Usage: ``python -m bench.web [--quick] [--secs S]``; writes ``bench/results/web.json``.
"""

from __future__ import annotations

import http.client
import os
import shutil
import subprocess
import tempfile
import threading
import time

from bench import common

HANDLES = 100
ROWS = 10
LINES = 20
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime, stime, and the reaped children's cutime, cstime (fields 14-17): the web server's tmux calls count
    return sum(int(x) for x in fields[11:15]) / TICK


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def window(pids: dict[str, int], secs: float) -> dict[str, dict[str, float]]:
    start = {k: cpu_s(p) for k, p in pids.items()}
    t0 = time.monotonic()
    time.sleep(secs)
    wall = time.monotonic() - t0
    return {
        k: {"cpu_pct": round(100 * (cpu_s(p) - start[k]) / wall, 2), "rss_mb": round(rss_mb(p), 1)}
        for k, p in pids.items()
    }


class Stream(threading.Thread):
    """One reader of ``/events`` (what an open page holds), counting the events it gets."""

    def __init__(self, port: int, cookie: str) -> None:
        super().__init__(daemon=True)
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.cookie = cookie
        self.events = 0
        self.first = threading.Event()

    def run(self) -> None:
        self.conn.request("GET", "/events", headers={"Cookie": self.cookie, "Host": self.conn.host})
        r = self.conn.getresponse()
        try:
            for line in r:
                if line.startswith(b"event: state"):
                    self.events += 1
                    self.first.set()
        except (OSError, ValueError):
            pass


def run(secs: float) -> dict[str, object]:
    from sotd import _clock
    from sotd.client import unix
    from sotd.formats import inbox, registry
    from sotd.wire import hello as wire_hello

    work = tempfile.mkdtemp(prefix="sotd-bw-", dir="/tmp")  # short: socket paths hold 108 bytes
    procs: list[subprocess.Popen[bytes]] = []
    tmux_sock = os.path.join(work, "state", "tmux", "tmux.sock")
    try:
        layout = common.make_comm(work)
        facts = common.machine(layout.home)
        stamp = _clock.stamp()
        agents = {
            f"h{i:03d}": {
                "host": common.HOST,
                "repo": f"r{i}",
                "root": f"/x/{i}",
                "last_seen": stamp,
                "state": "idle",
            }
            for i in range(HANDLES)
        }
        with open(layout.registry, "wb") as f:
            f.write(registry.encode({"protocol_version": 1, "agents": agents}))
        for name in agents:
            with open(layout.inbox(name), "wb") as f:
                for j in range(LINES):
                    f.write(inbox.encode_line("bench", name, "bench", f"message {j}", stamp))
        sock = os.path.join(work, "run", "sotd.sock")
        env = common.clean_env()
        env.update(
            SOT_COMM_HOME=layout.home,
            SOT_SELF_HOST=common.HOST,
            SOT_HOSTS_TOML=os.path.join(work, "no-hosts.toml"),
            SOTD_STATE_DIR=os.path.join(work, "state"),
            SOT_SOCKET=sock,
            SOT_COMM_NAME="h000",
            SOT_DAEMON_AUTOSTART="off",
        )
        with open(os.path.join(work, "daemon.log"), "ab") as log:
            procs.append(
                subprocess.Popen(
                    [common.SOTD, "daemon", "run", "--socket", sock], env=env, stdout=log, stderr=log
                )
            )
        hello = wire_hello.hello_payload(
            host=common.HOST, os_user=wire_hello.os_user_for_uid(os.geteuid()), role="cli", name="bench"
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                unix.request(sock, "version.query", {}, hello, deadline_s=1.0)
                break
            except Exception:
                if time.monotonic() > deadline or procs[0].poll() is not None:
                    raise RuntimeError("the daemon did not start") from None
                time.sleep(0.1)
        for i in range(ROWS):
            root = os.path.join(work, f"row{i}")
            os.makedirs(root)
            a = unix.request(
                sock,
                "workspace.create",
                {"label": f"row{i}", "project_root": root, "agent": "none", "agent_name": f"row{i}",
                 "command": ["bash", "--norc", "--noprofile", "-i"]},
                hello,
                deadline_s=20,
            )  # fmt: skip
            if a.get("ok") is not True:
                raise RuntimeError(f"workspace.create: {a}")
        tmux_pid = int(
            subprocess.run(
                ["tmux", "-S", tmux_sock, "display-message", "-p", "#{pid}"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        )
        out = os.path.join(work, "web.out")
        with open(out, "wb") as o, open(os.path.join(work, "web.err"), "wb") as e:
            procs.append(subprocess.Popen([common.SOTD, "web"], env=env, cwd=work, stdout=o, stderr=e))
        deadline = time.monotonic() + 20
        url = ""
        while not url.endswith("\n"):
            if time.monotonic() > deadline:
                raise RuntimeError("sotd web printed no address")
            time.sleep(0.1)
            with open(out, encoding="utf-8") as f:
                url = f.readline()
        port = int(url.split(":")[2].split("/")[0])
        secret = url.strip().split("?s=")[1]
        pids = {"web": procs[1].pid, "daemon": procs[0].pid, "tmux": tmux_pid}
        time.sleep(1.0)  # the starts settle
        floor = window(pids, secs)
        stream = Stream(port, f"sotd_web_{port}={secret}")
        stream.start()
        if not stream.first.wait(10):
            raise RuntimeError("the page's event stream sent nothing")
        time.sleep(2.0)  # the first reads (every inbox, every screen) are not idle
        events_before = stream.events
        page = window(pids, secs)
        events = stream.events - events_before
        stream.conn.close()
        return {
            "bench": "web",
            "machine": facts,
            "handles": HANDLES,
            "rows": ROWS,
            "secs": secs,
            "floor_no_page": floor,
            "page_open": page,
            "events_in_window": events,
            "targets": {"cpu_pct": 5.0, "rss_mb": 30.0},
            "within_targets": all(
                page[k]["cpu_pct"] <= 5.0 and page[k]["rss_mb"] <= 30.0 for k in ("web", "daemon")
            ),
        }
    finally:
        for p in reversed(procs):
            common.stop_proc(p)
        subprocess.run(["tmux", "-S", tmux_sock, "kill-server"], capture_output=True, check=False)
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = common.base_parser(__doc__ or "")
    ap.add_argument("--secs", type=float, default=20.0, help="each window's length")
    a = ap.parse_args()
    secs = 5.0 if a.quick else a.secs
    return common.finish("web", run(secs), a.no_write, a.quick)


if __name__ == "__main__":
    raise SystemExit(main())
