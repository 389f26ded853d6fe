"""The rows part of the demo (``python -m sotd.demo``): a daemon, two rows, mail, the wake, replies.

Everything runs as real processes: ``sotd daemon run`` in a temporary comm folder, ``sotd comm …`` typed
by "you" (a session outside any row), and two rows the daemon starts in tmux windows under
``sot-capsule``. Each row runs the real Claude Code TUI when it is installed (``$SOTD_DEMO_CLAUDE``, which
``scripts/demo`` sets to the pinned ``.agents/claude-code`` install of ``scripts/setup``): it joins by its
SessionStart hook, and its model is the scripted stand-in ``sotd.demo.scripted_model`` on 127.0.0.1 (there is no
model to reach offline), which answers the wake line with ``comm-poll.sh`` and the mail with
``comm-send.sh``. Without it (or with ``SOTD_DEMO_AGENT=scripted``) each row runs the scripted agent
``sotd.demo.scripted_agent``, which does the same by itself. The transcript says which agent ran.
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

from sotd.demo import scripted_model
from sotd.terminal import prompt

STEP_WAIT_S = 20.0
RULE_SHOWN = 60
REPLIES = {
    "alpha": ("beta", "alpha here: the build is green on my side — can you rerun the flaky test?"),
    "beta": ("you", "beta here: reran the flaky test 20 times, all green; closing it."),
}
TASK = "please check the build, then ask @beta about the flaky test"


def real_claude(environ: dict[str, str]) -> tuple[str, str] | None:
    """``(path, version)`` of the Claude Code the demo may run (``$SOTD_DEMO_CLAUDE``, answering
    ``--version`` with ``$SOTD_DEMO_CLAUDE_PIN`` when that is set), or None: the scripted agent runs."""
    exe = environ.get("SOTD_DEMO_CLAUDE", "")
    if environ.get("SOTD_DEMO_AGENT") == "scripted" or not exe or not os.access(exe, os.X_OK):
        return None
    try:
        p = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    version = p.stdout.split(" ", 1)[0].strip()
    pin = environ.get("SOTD_DEMO_CLAUDE_PIN", "")
    if p.returncode != 0 or not version or (pin and version != pin):
        return None
    return exe, version


def _sotd() -> list[str]:
    exe = shutil.which("sotd", path=os.path.dirname(sys.executable))
    return [exe] if exe else [sys.executable, "-m", "sotd.cli.main"]


def _events(log: str) -> list[dict[str, str]]:
    try:
        with open(log, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return []


class RowsDemo:
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
        self.claude = real_claude(dict(os.environ))
        self.model: scripted_model.StandIn | None = None
        if self.claude is not None:
            self.real_home = os.path.join(self.work, "claude-home")
            tmp = os.path.join(self.work, "claude-tmp")
            os.makedirs(tmp)
            scripted_model.write_first_run(self.real_home, self.claude[1])
            self.model = scripted_model.StandIn(in_order=False, idle_text="SITREP: nothing to do").start()
            self.env = {k: v for k, v in self.env.items() if not k.startswith(("ANTHROPIC_", "IS_SANDBOX"))}
            self.env.update(scripted_model.session_env(self.real_home, tmp, self.model.url))
            self.env["SOTD_AGENT_ARGV_CLAUDE"] = json.dumps([self.claude[0]])

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
        if self.claude is not None:
            assert self.model is not None
            print(
                f"# agent: the real Claude Code {self.claude[1]} TUI ({self.claude[0]}) in each row; its model is"
            )
            print(
                f"#   sotd.demo.scripted_model, a scripted stand-in for the Messages API on {self.model.url} (offline)"
            )
            for name, (to, text) in REPLIES.items():
                self.model.add(
                    scripted_model.bash("comm-poll.sh", when=prompt.WAKE_LINE),  # alpha's wake comes first
                    scripted_model.bash(f"comm-send.sh @{to} {shlex.quote(text)}", when=_asked_of(name)),
                    scripted_model.text(f"SITREP: replied to @{to}", when=f"filed -> @{to}"),
                )
        else:
            why = (
                "SOTD_DEMO_AGENT=scripted"
                if os.environ.get("SOTD_DEMO_AGENT") == "scripted"
                else "the pinned Claude Code is not installed: scripts/setup puts it in .agents/claude-code"
            )
            print(f"# agent: the scripted stand-in sotd.demo.scripted_agent in each row ({why})")
        for name in ("alpha", "beta"):
            root = os.path.join(self.work, name)
            os.makedirs(root)
            logs[name] = os.path.join(self.work, f"{name}.agent.log")
            if self.claude is not None:
                scripted_model.trust_project(self.real_home, root)
                p = self.typed("spawn", root, "--name", name)
            else:
                to, text = REPLIES[name]
                agent = [
                    sys.executable,
                    "-m",
                    "sotd.demo.scripted_agent",
                    "--log",
                    logs[name],
                    "--work",
                    "0.5",
                    "--at-start",
                    "comm-join.sh",
                    "--on-wake",
                    f"comm-poll.sh && comm-send.sh @{to} {shlex.quote(text)}",
                ]
                p = self.typed("spawn", root, "--name", name, "--command", shlex.join(agent))
            if p.returncode:
                return 1
        self.daemon_lines("row ", "declared")
        panes = {w["label"]: w["pane"] for w in self._list()}

        if self.claude is not None:
            self.wait("both rows at their prompts", lambda: self._idle(panes))
        self.screen("alpha (idle at its prompt)", panes["alpha"])

        self.typed("send", "@alpha", TASK)
        print(
            "\n# nobody types into alpha: the daemon sees the unread mail and alpha's free prompt, holds 1.5 s,"
        )
        print("# types the wake line, checks it sits alone in the input box, then presses Enter.")
        ok = self.wait("alpha's reply", lambda: self._replied("alpha", logs))
        if self.claude is not None:
            self.wait("alpha's turn to end", lambda: self._idle({"alpha": panes["alpha"]}))
        self.daemon_lines("comm wake")
        self.screen("alpha (woken: it polled and replied to @beta)", panes["alpha"])
        ok = ok and self.wait("beta's reply", lambda: self._replied("beta", logs))
        if self.claude is not None:
            self.wait("beta's turn to end", lambda: self._idle({"beta": panes["beta"]}))
        self.daemon_lines("comm wake")
        self.screen("beta (woken by alpha's mail: it polled and replied to you)", panes["beta"])
        self.typed("poll")
        time.sleep(2.5)
        print("\n# one wake per batch: the read mail is not typed again")
        for name in ("alpha", "beta"):
            print(f"  {name}: {self._lines(name, logs)} line(s) submitted at its prompt")
        self.typed("list")
        self.typed("despawn", "alpha")
        self.typed("despawn", "beta")
        return 0 if ok else 1

    def _idle(self, panes: dict[str, str]) -> bool:
        from sotd.terminal.tmux import Tmux

        t = Tmux(os.path.join(self.state, "tmux", "tmux.sock"), session="sotd")
        try:
            return all(
                prompt.is_free(prompt.screen_from_capture(*t.capture(p)), "claude")[0] for p in panes.values()
            )
        except Exception:
            return False

    def _replied(self, name: str, logs: dict[str, str]) -> bool:
        if self.model is None:
            return any(e["event"] == "ran" for e in _events(logs[name]))
        to = REPLIES[name][0]
        return any(
            f"filed -> @{to}" in r.newest_user_text and r.step is not None for r in self.model.main_requests()
        )

    def _lines(self, name: str, logs: dict[str, str]) -> int:
        if self.model is None:
            return sum(1 for e in _events(logs[name]) if e["event"] == "line")
        mine = f"this session is @{name}"
        sessions = {_session_of(r) for r in self.model.main_requests() if mine in json.dumps(r.body)}
        return sum(
            1
            for r in self.model.main_requests()
            if _session_of(r) in sessions and r.newest_user_text.rstrip().endswith(prompt.WAKE_LINE)
        )

    def _list(self) -> list[dict[str, str]]:
        from sotd.client import unix
        from sotd.wire import hello as wire_hello
        from sotd.wire import payloads

        hello = wire_hello.hello_payload(host="demo", os_user=f"uid:{os.geteuid()}", role="cli")
        answer = unix.request(self.sock, payloads.WORKSPACE_LIST, {}, hello, deadline_s=5.0)
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
        if self.model is not None:
            self.model.stop()
        shutil.rmtree(self.work, ignore_errors=True)


def _session_of(r: scripted_model.Request) -> str:
    """The Claude Code session a request came from (``metadata.user_id`` holds it as JSON)."""
    meta = r.body.get("metadata")
    try:
        doc = json.loads(meta.get("user_id", "")) if isinstance(meta, dict) else {}
    except ValueError:
        return ""
    return str(doc.get("session_id", "")) if isinstance(doc, dict) else ""


def _asked_of(name: str) -> str:
    """What alpha's or beta's poll shows of the mail it answers (the text it was sent)."""
    return TASK if name == "alpha" else REPLIES["alpha"][1]


def _shell(a: str) -> str:
    return a if a and all(c.isalnum() or c in "@-_./=" for c in a) else "'" + a.replace("'", "'\\''") + "'"


def main() -> int:
    if shutil.which("tmux") is None:
        print("the rows demo needs tmux (apt-get install tmux); run python -m sotd.demo --quick for the rest")
        return 1
    demo = RowsDemo()
    started = time.monotonic()
    try:
        status = demo.run()
    finally:
        demo.close()
    print(
        f"\n# done in {time.monotonic() - started:.1f}s; the daemon, its tmux server and the folder are gone"
    )
    return status
