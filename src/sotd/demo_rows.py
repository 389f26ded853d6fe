"""The rows part of the demo (``python -m sotd.demo``): a daemon, two rows, mail, the wake, replies.

Everything runs as real processes: ``sotd daemon run`` in a temporary comm folder, ``sotd comm …`` typed
by "you" (a session outside any row), and two rows the daemon starts in tmux windows, each running the
scripted agent ``sotd.demo_agent`` under ``sot-capsule``. When the wake types its line at a row's prompt,
the scripted agent runs ``comm-poll.sh`` and sends its reply, as Claude Code would when told so.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

STEP_WAIT_S = 20.0
RULE_SHOWN = 60


def _sotd() -> list[str]:
    exe = shutil.which("sotd", path=os.path.dirname(sys.executable))
    return [exe] if exe else [sys.executable, "-m", "sotd.cli.main"]


def _events(log: str) -> list[dict[str, str]]:
    try:
        with open(log, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return []


class Demo:
    def __init__(self) -> None:
        self.work = tempfile.mkdtemp(prefix="sotd-demo-", dir="/tmp")
        self.home = os.path.join(self.work, "comm")
        self.sock = os.path.join(self.work, "run", "sotd.sock")
        self.state = os.path.join(self.work, "state")
        self.daemon_log = os.path.join(self.work, "sotd.log")
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith(("SOT_", "SOTD_", "TMUX", "CLAUDE"))
        }
        self.env.update(
            SOT_COMM_HOME=self.home,
            SOT_SELF_HOST="demo",
            SOT_COMM_TEST_HOST="demo",
            SOT_HOSTS_TOML=os.path.join(self.work, "hosts.toml"),
            SOT_SOCKET=self.sock,
            SOTD_STATE_DIR=self.state,
        )
        self.you = os.path.join(self.work, "you")
        os.makedirs(self.you)
        self.daemon: subprocess.Popen[bytes] | None = None
        self.log_seen = 0

    # ------------------------------------------------------------------------------------------ helpers

    def typed(self, *args: str, quiet: bool = False) -> subprocess.CompletedProcess[str]:
        env = dict(self.env)
        env.update(SOT_COMM_SELF_FILE=os.path.join(self.home, "self", "you-session.txt"), PWD=self.you)
        if not quiet:
            print(f"\n[you]$ sotd comm {' '.join(_shell(a) for a in args)}")
        p = subprocess.run(
            [*_sotd(), "comm", *args],
            cwd=self.you,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if not quiet:
            for line in (p.stdout + p.stderr).splitlines():
                print(f"  {line}")
            if p.returncode:
                print(f"  (exit {p.returncode})")
        return p

    def daemon_lines(self, *needles: str) -> None:
        """Print the daemon's new log lines that mention any of ``needles``."""
        try:
            with open(self.daemon_log, encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            return
        for line in lines[self.log_seen :]:
            if any(n in line for n in needles):
                print("  sotd: " + line.split(" INFO ", 1)[-1].split(" WARNING ", 1)[-1])
        self.log_seen = len(lines)

    def screen(self, title: str, pane: str) -> None:
        from sotd.terminal.tmux import Tmux

        t = Tmux(os.path.join(self.state, "tmux", "tmux.sock"), session="sotd")
        try:
            text = t.capture(pane)[0]
        except Exception as e:
            print(f"  (no screen for {title}: {e})")
            return
        import re

        lines = [re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", x).rstrip() for x in text.splitlines()]
        while lines and not lines[-1]:
            lines.pop()
        print(f"\n  ┌── screen of row {title} ──")
        for line in lines:
            shown = "─" * RULE_SHOWN if line and set(line) == {"─"} else line
            print("  │ " + shown.replace("\u00a0", " "))
        print("  └──")

    def wait(self, what: str, pred: object) -> bool:
        assert callable(pred)
        deadline = time.monotonic() + STEP_WAIT_S
        while time.monotonic() < deadline:
            if pred():
                return True
            time.sleep(0.1)
        print(f"  (gave up waiting for {what})")
        return False

    # --------------------------------------------------------------------------------------------- run

    def run(self) -> int:
        print("# sot-comm rows and the wake: a daemon runs two agent rows in tmux, mail wakes them.")
        print(f"# comm folder {self.home}; the daemon's state (rows, tmux socket) in {self.state}")
        subprocess.run(
            [*_sotd(), "comm", "install"], env=self.env, capture_output=True, timeout=60, check=True
        )
        print(f"# installed the wrappers (comm-poll.sh, comm-send.sh, …) into {self.home}/bin")
        os.makedirs(os.path.dirname(self.sock), mode=0o700, exist_ok=True)
        with open(self.daemon_log, "ab") as f:
            self.daemon = subprocess.Popen(
                [*_sotd(), "daemon", "run", "--socket", self.sock], env=self.env, stdout=f, stderr=f
            )
        if not self.wait("the daemon", lambda: os.path.exists(self.sock)):
            return 1
        print(f"\n$ sotd daemon run --socket {self.sock} &")
        time.sleep(0.3)
        self.daemon_lines("listening", "hub")
        self.typed("join", "--name", "you")

        logs: dict[str, str] = {}
        replies = {
            "alpha": "comm-poll.sh && comm-send.sh @beta 'alpha here: the build is green on my side — can you rerun the flaky test?'",
            "beta": "comm-poll.sh && comm-send.sh @you 'beta here: reran the flaky test 20 times, all green; closing it.'",
        }
        for name in ("alpha", "beta"):
            root = os.path.join(self.work, name)
            os.makedirs(root)
            logs[name] = os.path.join(self.work, f"{name}.agent.log")
            agent = [
                sys.executable,
                "-m",
                "sotd.demo_agent",
                "--log",
                logs[name],
                "--work",
                "0.5",
                "--at-start",
                "comm-join.sh",
                "--on-wake",
                replies[name],
            ]
            p = self.typed("spawn", root, "--name", name, "--command", shlex.join(agent))
            if p.returncode:
                return 1
        self.daemon_lines("row ", "declared")
        panes = {w["label"]: w["pane"] for w in self._list()}
        self.screen("alpha (idle at its prompt)", panes["alpha"])

        self.typed("send", "@alpha", "please check the build, then ask @beta about the flaky test")
        print(
            "\n# nobody types into alpha: the daemon sees the unread mail and alpha's free prompt, holds 1.5 s,"
        )
        print("# types the wake line, checks it sits alone in the input box, then presses Enter.")
        ok = self.wait("alpha's reply", lambda: any(e["event"] == "ran" for e in _events(logs["alpha"])))
        self.daemon_lines("comm wake")
        self.screen("alpha (woken: it polled and replied to @beta)", panes["alpha"])
        ok = ok and self.wait("beta's reply", lambda: any(e["event"] == "ran" for e in _events(logs["beta"])))
        self.daemon_lines("comm wake")
        self.screen("beta (woken by alpha's mail: it polled and replied to you)", panes["beta"])
        self.typed("poll")
        time.sleep(2.5)
        print("\n# one wake per batch: the read mail is not typed again")
        for name in ("alpha", "beta"):
            n = sum(1 for e in _events(logs[name]) if e["event"] == "line")
            print(f"  {name}: {n} line(s) submitted at its prompt")
        self.typed("list")
        self.typed("despawn", "alpha")
        self.typed("despawn", "beta")
        return 0 if ok else 1

    def _list(self) -> list[dict[str, str]]:
        from sotd.client import unix
        from sotd.wire import messages

        hello = messages.hello_payload(host="demo", os_user=f"uid:{os.geteuid()}", role="cli")
        answer = unix.request(self.sock, "workspace.list", {}, hello, deadline_s=5.0)
        spaces = answer.get("workspaces")
        return spaces if isinstance(spaces, list) else []

    def close(self) -> None:
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)
            try:
                self.daemon.wait(10)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait(5)
        sock = os.path.join(self.state, "tmux", "tmux.sock")
        if os.path.exists(sock):
            subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True, timeout=10, check=False)
        shutil.rmtree(self.work, ignore_errors=True)


def _shell(a: str) -> str:
    return a if a and all(c.isalnum() or c in "@-_./=" for c in a) else "'" + a.replace("'", "'\\''") + "'"


def main() -> int:
    if shutil.which("tmux") is None:
        print("the rows demo needs tmux (apt-get install tmux); run python -m sotd.demo --quick for the rest")
        return 1
    demo = Demo()
    started = time.monotonic()
    try:
        status = demo.run()
    finally:
        demo.close()
    print(
        f"\n# done in {time.monotonic() - started:.1f}s; the daemon, its tmux server and the folder are gone"
    )
    return status
