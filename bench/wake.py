"""The wake's speed and its false wakes (issue #5): a real daemon, its private tmux server, scripted agents.

One ``sotd daemon run`` in its own comm folder starts rows in tmux windows, each running the scripted
Claude-like screen ``sotd.demo.scripted_agent`` under ``sot-capsule`` with ``--log-keys --times``: the agent logs
every key it receives with the phase it was in and a wall-clock stamp, so both measures are read off the
agent's own log, not the daemon's.

- **idle**: one row at a free prompt. Each round files one message through the daemon (``comm.file``; the
  clock starts when the answer is back, i.e. when the send returns) and waits for the agent's log of the
  Enter after the wake line (its ``line`` event). Latency = that stamp minus the filing. Rounds are spaced
  1-2.5 s apart (rotating) so they fall at different points of the daemon's 2 s tick; the inotify trigger
  makes the tick matter little. The floor is the hold itself (1.5 s): the wake cannot type before it.
- **busy**: one row that alternates 6 s idle and 6 s busy on its own, and while busy hides its spinner for
  1.2 s after every 0.6 s of spinner (a prompt that reads free and still for under 1.5 s). Each round files
  one message as a busy spell starts; a **false wake** is any key that reaches the agent while it is busy
  or flashing. The wake must land in the idle spell that follows, once per batch.

- **plain send-keys** (the peer, issue 6): the same scripted agent, with the idle row's flags less its
  start-up join, in a pane of a second private tmux server started the way the daemon starts its own
  (``-f /dev/null``, 200x50). Each idle round is followed by two plain rounds: ``tmux send-keys -t <pane>
  <wake line> Enter`` from a fresh client, clock started just before the client is spawned, stopped at
  the agent's log of the line (the same end point as the idle row's). This is what a peer that types into a pane does, with no check of the
  screen at all; the ratio of sotd's wake to it is the price of the hold and the checks. It runs here,
  beside the daemon, rather than in ``bench/peers.py``: the end point is the agent's own log, which only
  this workload sets up, and both then share one run, one agent and one load.

Usage: ``python -m bench.wake [--quick] [--rounds N] [--busy-rounds M]``; writes ``bench/results/wake.json``.
Bounded: every wait has a deadline; the daemon and both tmux servers are killed at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench import common

HOST = common.HOST
TARGET_MEDIAN_S = 2.5
BUSY_ARGS = ["--alternate", "6,6", "--flash", "1.2", "--flash-gap", "0.6"]


def _events(log: str) -> list[dict[str, Any]]:
    try:
        with open(log, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return []


def _wait(pred: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")


class Daemon:
    """A comm folder, a daemon on a socket under a short /tmp path, and the daemon's tmux server."""

    def __init__(self) -> None:
        from sotd.formats import registry
        from sotd.formats.layout import Layout, ensure_home

        self.work = tempfile.mkdtemp(prefix="sw-", dir="/tmp")
        self.home = os.path.join(self.work, "comm")
        self.layout = Layout(self.home)
        ensure_home(self.layout)
        registry.ensure(self.layout)
        self.sock = os.path.join(self.work, "run", "sotd.sock")
        self.state = os.path.join(self.work, "state")
        self.env = common.clean_env()
        self.env.update(
            SOT_COMM_HOME=self.home,
            SOT_SELF_HOST=HOST,
            SOT_COMM_TEST_HOST=HOST,
            SOT_HOSTS_TOML=os.path.join(self.work, "hosts.toml"),
            SOTD_STATE_DIR=self.state,
            SOT_SOCKET=self.sock,
        )
        subprocess.run(
            [common.SOTD, "comm", "install"], env=self.env, check=True, capture_output=True, timeout=60
        )
        self.log = os.path.join(self.work, "daemon.log")
        with open(self.log, "ab") as f:
            self.proc = subprocess.Popen(
                [common.SOTD, "daemon", "run", "--socket", self.sock], env=self.env, stdout=f, stderr=f
            )
        _wait(self._answers, 30, "the daemon to answer")

    def _answers(self) -> bool:
        from sotd.errors import DaemonUnreachable

        if self.proc.poll() is not None:
            raise RuntimeError(f"the daemon exited {self.proc.returncode}")
        try:
            self.request("version.query", {}, 1.0)
        except DaemonUnreachable:
            return False
        return True

    def request(self, op: str, payload: dict[str, object], deadline: float = 10.0) -> dict[str, object]:
        from sotd.client import unix
        from sotd.wire import hello as wire_hello

        hello = wire_hello.hello_payload(host=HOST, os_user=f"uid:{os.geteuid()}", role="cli")
        return unix.request(self.sock, op, payload, hello, deadline_s=deadline)

    def row(self, wid: str) -> dict[str, object]:
        spaces = self.request("workspace.list", {})["workspaces"]
        assert isinstance(spaces, list)
        return next((w for w in spaces if w["workspace_id"] == wid), {})

    def create(self, name: str, *args: str) -> str:
        """A Ready row running the scripted agent; the path of its log."""
        log = os.path.join(self.work, f"{name}.agent.log")
        root = os.path.join(self.work, name)
        os.makedirs(root, exist_ok=True)
        argv = [common.PYTHON, "-m", "sotd.demo.scripted_agent", "--log", log, "--work", "0.3"]
        argv += ["--at-start", "comm-join.sh", "--log-keys", "--times", *args]
        answer = self.request(
            "workspace.create",
            {
                "label": name,
                "project_root": os.path.realpath(root),
                "agent": "claude",
                "agent_name": name,
                "command": argv,
            },
        )
        if answer.get("ok") is not True:
            raise RuntimeError(f"workspace.create: {answer}")
        wid = str(answer["workspace_id"])
        _wait(lambda: self.row(wid).get("handle") == name, 30, f"row {name} to join")
        _wait(lambda: self.row(wid).get("phase") == "ready", 30, f"row {name} to be ready")
        return log

    def file(self, to: str, text: str) -> float:
        """File one message; the wall-clock time the answer came back."""
        answer = self.request("comm.file", {"from": "bench", "to": to, "text": text})
        if answer != {"ok": True}:
            raise RuntimeError(f"comm.file: {answer}")
        return time.time()

    def close(self) -> None:
        common.stop_proc(self.proc)
        tmux_sock = os.path.join(self.state, "tmux", "tmux.sock")
        if os.path.exists(tmux_sock):
            subprocess.run(
                ["tmux", "-S", tmux_sock, "kill-server"], capture_output=True, timeout=10, check=False
            )
        shutil.rmtree(self.work, ignore_errors=True)


class PlainPane:
    """The peer: the scripted agent in a pane of a private tmux server that nothing watches; keys typed with
    a bare ``tmux send-keys``."""

    def __init__(self, d: Daemon) -> None:
        from sotd.terminal.tmux import DEFAULT_SIZE

        self.sock = os.path.join(d.work, "plain.sock")
        self.log = os.path.join(d.work, "plain.agent.log")
        self.env = dict(d.env)
        self.base = [shutil.which("tmux") or "tmux", "-S", self.sock]
        root = os.path.join(d.work, "plain")
        os.makedirs(root, exist_ok=True)
        argv = [common.PYTHON, "-m", "sotd.demo.scripted_agent", "--log", self.log, "--work", "0.3"]
        argv += ["--log-keys", "--times"]
        size = ["-x", str(DEFAULT_SIZE[0]), "-y", str(DEFAULT_SIZE[1])]
        subprocess.run(
            [
                *self.base,
                "-f",
                os.devnull,
                "new-session",
                "-d",
                "-s",
                "plain",
                "-c",
                root,
                *size,
                "--",
                *argv,
            ],
            env=self.env,
            check=True,
            capture_output=True,
            timeout=20,
        )
        _wait(self._prompt, 30, "the plain pane's agent to draw its prompt")

    def _prompt(self) -> bool:
        from sotd.terminal.prompt import GLYPH

        p = subprocess.run(
            [*self.base, "capture-pane", "-p", "-t", "plain"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        return GLYPH in p.stdout

    def round(self, text: str) -> tuple[float, float]:
        """(keys sent -> the agent logged the line, s; the send-keys client's wall, s)."""
        before = len(_lines(self.log))
        t0 = time.time()
        wall, _ = common.spawn_timed([*self.base, "send-keys", "-t", "plain", text, "Enter"], self.env)
        _wait(lambda: len(_lines(self.log)) > before, 10, "the plain pane's agent to read the line")
        latency = float(_lines(self.log)[before]["t"]) - t0
        _wait(lambda: _idle_at_prompt(self.log), 10, "the plain pane's agent to finish the line")
        return latency, wall

    def close(self) -> None:
        subprocess.run([*self.base, "kill-server"], capture_output=True, timeout=10, check=False)


def _lines(log: str) -> list[dict[str, Any]]:
    from sotd.terminal.prompt import WAKE_LINE

    return [e for e in _events(log) if e["event"] == "line" and e["text"] == WAKE_LINE]


def _false_keys(log: str) -> list[dict[str, Any]]:
    """Keys that reached the agent while it was busy or flashing (the wake typed into a working screen)."""
    out = []
    for e in _events(log):
        if (e["event"] == "key" and e.get("phase") != "idle") or e["event"] == "key-while-working":
            out.append(e)
    return out


def _idle_at_prompt(log: str) -> bool:
    """The agent finished its last submitted line (its log's last phase change is to idle)."""
    phases = [e for e in _events(log) if e["event"] == "phase"]
    return not phases or phases[-1]["text"] == "idle"


def idle_rounds(d: Daemon, rounds: int, plain: PlainPane | None = None) -> dict[str, object]:
    """The idle row's rounds; with ``plain``, two plain send-keys rounds after each (interleaved)."""
    from sotd.terminal.prompt import WAKE_LINE

    log = d.create("idle")
    time.sleep(1.0)
    samples: list[float] = []
    keys: list[float] = []
    client: list[float] = []
    for i in range(rounds):
        before = len(_lines(log))
        filed = d.file("idle", f"round {i}")
        _wait(lambda n=before: len(_lines(log)) > n, 30, f"the wake of idle round {i}")
        line = _lines(log)[before]
        samples.append(float(line["t"]) - filed)
        _wait(lambda: _idle_at_prompt(log), 10, "the agent to finish the wake's line")
        t_next = time.monotonic() + 1.0 + 0.5 * (i % 4)
        if plain is not None:
            for _ in range(2):
                lat, wall = plain.round(WAKE_LINE)
                keys.append(lat)
                client.append(wall)
        time.sleep(max(0.0, t_next - time.monotonic()))
    time.sleep(4.5)  # two more ticks: nothing is typed again
    out: dict[str, object] = {
        "latency_s": common.summary(samples),
        "samples_s": [round(x, 3) for x in samples],
        "wakes": len(_lines(log)),
        "batches": rounds,
        "false_wakes": len(_false_keys(log)),
    }
    if plain is not None:
        out["send_keys"] = {
            "keys_to_line_ms": common.summary(keys, 1000),
            "client_ms": common.summary(client, 1000),
            "lines": len(_lines(plain.log)),
            "sent": len(keys),
        }
    return out


def busy_rounds(d: Daemon, rounds: int) -> dict[str, object]:
    log = d.create("busy", *BUSY_ARGS)
    latencies: list[float] = []
    flashes_pending = 0
    for i in range(rounds):
        seen = len(_events(log))

        def busy_started(seen: int = seen) -> float | None:
            new = _events(log)[seen:]
            return next((float(e["t"]) for e in new if e["event"] == "phase" and e["text"] == "busy"), None)

        _wait(busy_started, 30, f"a busy spell (round {i})")
        before = len(_lines(log))
        filed = d.file("busy", f"busy round {i}")
        _wait(lambda n=before: len(_lines(log)) > n, 40, f"the wake of busy round {i}")
        t_line = float(_lines(log)[before]["t"])
        latencies.append(t_line - filed)
        flashes_pending += sum(
            1
            for e in _events(log)
            if e["event"] == "phase" and e["text"] == "flash" and filed < float(e["t"]) < t_line
        )
    time.sleep(4.5)
    return {
        "latency_s": common.summary(latencies),
        "samples_s": [round(x, 3) for x in latencies],
        "wakes": len(_lines(log)),
        "batches": rounds,
        "false_wakes": len(_false_keys(log)),
        "false_keys": _false_keys(log)[:10],
        "flashes_while_mail_waited": flashes_pending,
    }


def main() -> int:
    ap = common.base_parser(__doc__ or "wake")
    ap.add_argument("--rounds", type=int, default=None, help="idle rounds (default 15; quick 4)")
    ap.add_argument("--busy-rounds", type=int, default=None, help="busy rounds (default 5; quick 2)")
    args = ap.parse_args()
    if shutil.which("tmux") is None:
        return common.finish("wake", {"not_run": "tmux is not installed"}, args.no_write, args.quick)
    n_idle = args.rounds or (4 if args.quick else 15)
    n_busy = args.busy_rounds or (2 if args.quick else 5)
    from sotd.daemon.decide import TICK_SECS
    from sotd.terminal.attempt import HOLD_SECS

    d = Daemon()
    plain: PlainPane | None = None
    try:
        result: dict[str, object] = {"machine": common.machine(d.work)}
        result["params"] = {
            "idle_rounds": n_idle,
            "busy_rounds": n_busy,
            "hold_s": HOLD_SECS,
            "tick_s": TICK_SECS,
            "busy_agent": " ".join(BUSY_ARGS),
            "target_median_s": TARGET_MEDIAN_S,
        }
        plain = PlainPane(d)
        idle = idle_rounds(d, n_idle, plain)
        busy = busy_rounds(d, n_busy)
    finally:
        if plain is not None:
            plain.close()
        d.close()
    result["machine"]["load_avg_end"] = common.load_avg()  # type: ignore[index]
    result["idle"] = idle
    result["busy"] = busy
    med = idle["latency_s"]["median"]  # type: ignore[index]
    sk = idle.pop("send_keys")
    keys_med = sk["keys_to_line_ms"]["median"] / 1000  # type: ignore[index]
    result["send_keys"] = {
        **sk,  # type: ignore[dict-item]
        "ratio_wake_to_send_keys": med / keys_med,
        "wake_minus_hold_ms": (med - HOLD_SECS) * 1000,
        "ratio_wake_minus_hold_to_send_keys": (med - HOLD_SECS) / keys_med,
    }
    result["pass_median"] = med < TARGET_MEDIAN_S
    result["pass_false_wakes"] = idle["false_wakes"] == 0 and busy["false_wakes"] == 0
    result["pass_once_per_batch"] = idle["wakes"] == n_idle and busy["wakes"] == n_busy
    result["pass"] = bool(
        result["pass_median"] and result["pass_false_wakes"] and result["pass_once_per_batch"]
    )
    return common.finish("wake", result, args.no_write, args.quick)


if __name__ == "__main__":
    sys.exit(main())
