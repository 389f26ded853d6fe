"""tests/realagent/kit.py: the real-agent tier's kit — the pinned Claude Code, a first-run-free HOME, the
real TUI in a private tmux server, and a sotd daemon whose rows run it (issue 11 part 1; testing-notes §5).

- ``claude_exe()``: the Claude Code that ``scripts/setup`` installed into ``.agents/claude-code`` at the
  pin in ``scripts/claude-code.pin``; when it is missing or another version it raises ``NotInstalled``
  whose text is the install's own error (``.agents/claude-code.error``), never a skip.
- ``kits()``: the Claude Codes to run against: the pin, and the newest when ``scripts/setup --newest``
  put it beside the pin in ``.agents/claude-code-newest`` (the fixture ``claude_kit``, parametrized
  ``pin`` / ``newest``, picks one; a test asks for both with ``parametrize(..., indirect=True)``).
- ``ClaudeHome``: a temp ``HOME`` whose ``.claude.json`` says onboarding is done, the release notes are
  seen, the dummy API key is approved and each project folder is trusted, so no first-run dialog shows;
  ``env(model)`` is the environment a session needs (the stand-in's URL, no inherited ``ANTHROPIC_*``,
  ``CLAUDE*``, ``SOT_*``, ``TMUX`` or ``IS_SANDBOX``; ``TMPDIR`` inside the test's folder).
- ``Panes``: a private tmux server (socket under a short /tmp folder) to run ``claude`` in, read its
  screen the wake's way, and type into it.
- ``Box``: ``sotd daemon run`` in a throw-away comm folder whose rows run the pinned ``claude`` with that
  HOME and model (``SOTD_AGENT_ARGV_CLAUDE``), so ``sotd comm spawn`` starts the real TUI.

The model is the only stand-in (``standin.StandIn``). What would break the tier: a HOME that lets a
first-run dialog through (every wait would time out on a dialog), or an environment that leaks the
developer's own ``ANTHROPIC_*`` or tmux into the session.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

from sotd.demo import scripted_model
from sotd.terminal import prompt
from sotd.terminal.tmux import Tmux, capture_argv, parse_capture
from tests.conftest import SOTD, clean_env, wait_for
from tests.realagent.standin import StandIn

TOP = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PIN_FILE = os.path.join(TOP, "scripts", "claude-code.pin")
PREFIX = os.path.join(TOP, ".agents", "claude-code")
ERROR_FILE = os.path.join(TOP, ".agents", "claude-code.error")
PACKAGE = "@anthropic-ai/claude-code"
# The dummy key: Claude Code remembers an approved key by its last 20 characters.
API_KEY = scripted_model.API_KEY
DROP = ("ANTHROPIC_", "CLAUDE", "IS_SANDBOX", "SOT_", "SOTD_", "TMUX", "COMM_STATUS_", "CODEX", "OPENAI_")
# What an agent under test takes from the test run's own environment: only these. Anything else can change
# how its TUI draws (``NO_COLOR``, ``FORCE_COLOR``, ``CI``, ``COLORTERM`` decide whether it colours at all),
# and the stored captures are drawn with none of it; a case that wants one sets it (``screens.Case.env``).
INHERIT = ("PATH", "USER", "LOGNAME", "SHELL")


def agent_env() -> dict[str, str]:
    """The environment an agent session starts from: ``INHERIT`` from this process, autostart off."""
    env = {k: os.environ[k] for k in INHERIT if k in os.environ}
    env["SOT_DAEMON_AUTOSTART"] = clean_env()["SOT_DAEMON_AUTOSTART"]
    return env


def read_pin(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read().strip()


def pin() -> str:
    return read_pin(PIN_FILE)


class NotInstalled(AssertionError):
    """The pinned Claude Code is not there: the tier fails with this text (the install's own error)."""


def pinned_exe(product: str, prefix: str, error_file: str, name: str, want: str,
               is_pin: Callable[[str], bool]) -> str:  # fmt: skip
    """``prefix``'s ``node_modules/.bin/NAME``, checked by running ``NAME --version`` (``is_pin`` of its
    stdout); else ``NotInstalled`` with the install's own error (``error_file``) or the command to run."""
    exe = os.path.join(prefix, "node_modules", ".bin", name)
    why = ""
    if os.path.exists(error_file):
        with open(error_file, encoding="utf-8", errors="replace") as f:
            why = f.read().strip()
    if not os.access(exe, os.X_OK):
        raise NotInstalled(
            f"{product} {want} is not installed in {prefix} (the real-agent tier needs it): "
            + (f"the install failed:\n{why}" if why else "run scripts/setup")
        )
    try:
        p = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30, check=False)
        got = p.stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NotInstalled(f"{exe} --version failed: {e}") from e
    if not is_pin(got):
        raise NotInstalled(f"{exe} is {got or p.stderr.strip()!r}, the pin is {want}: run scripts/setup")
    return exe


def claude_exe() -> str:
    """The pinned ``claude`` binary, checked by running ``claude --version``."""
    want = pin()
    return pinned_exe(
        "Claude Code", PREFIX, ERROR_FILE, "claude", want, lambda got: got.startswith(want + " ")
    )


NEWEST_PREFIX = os.path.join(TOP, ".agents", "claude-code-newest")


class ClaudeKit:
    """One installed Claude Code: ``label`` (``pin`` / ``newest``), its ``exe`` and ``version``."""

    def __init__(self, label: str, exe: str, version: str) -> None:
        self.label, self.exe, self.version = label, exe, version

    def __repr__(self) -> str:
        return f"ClaudeKit({self.label} {self.version})"


def newest_claude() -> ClaudeKit | None:
    """The newest Claude Code ``scripts/setup --newest`` installed beside the pin, or None when there is
    none (not asked for, or the pin is the newest)."""
    exe = os.path.join(NEWEST_PREFIX, "node_modules", ".bin", "claude")
    if not os.access(exe, os.X_OK):
        return None
    try:
        p = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    words = p.stdout.split()
    if p.returncode != 0 or not words or words[0] == pin():
        return None
    return ClaudeKit("newest", exe, words[0])


def kits() -> list[ClaudeKit]:
    """The pin (raises ``NotInstalled`` when it is missing), then the newest when it is installed."""
    out = [ClaudeKit("pin", claude_exe(), pin())]
    newest = newest_claude()
    if newest is not None:
        out.append(newest)
    return out


# ------------------------------------------------------------------------------------------------- HOME


class ClaudeHome:
    """A temp HOME with Claude Code's first run answered. ``settings`` goes to ``~/.claude/settings.json``
    (``reduced_motion`` adds ``"prefersReducedMotion": true``); ``trust(folder)`` adds a project."""

    def __init__(self, root: str, *, reduced_motion: bool = False, settings: dict[str, Any] | None = None,
                 version: str | None = None):  # fmt: skip
        self.root = root
        self.home = os.path.join(root, "home")
        self.tmp = os.path.join(root, "tmp")
        os.makedirs(os.path.join(self.home, ".claude"), exist_ok=True)
        os.makedirs(self.tmp, exist_ok=True)
        self.config = scripted_model.write_first_run(self.home, version or pin(), API_KEY)
        self.settings_path = os.path.join(self.home, ".claude", "settings.json")
        base = dict(settings or {})
        if reduced_motion:
            base["prefersReducedMotion"] = True
        self.write_settings(base)

    def write_settings(self, doc: dict[str, Any]) -> None:
        with open(self.settings_path, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)

    def read_settings(self) -> dict[str, Any]:
        with open(self.settings_path, encoding="utf-8") as f:
            doc = json.load(f)
        assert isinstance(doc, dict)
        return doc

    def update_settings(self, **kv: Any) -> None:
        doc = self.read_settings()
        doc.update(kv)
        self.write_settings(doc)

    def allow(self, *rules: str) -> None:
        """Add permission allow rules (e.g. ``Bash(sleep:*)``) to the settings."""
        doc = self.read_settings()
        perms = doc.setdefault("permissions", {})
        allow = perms.setdefault("allow", [])
        allow.extend(r for r in rules if r not in allow)
        self.write_settings(doc)

    def trust(self, folder: str) -> str:
        """Mark ``folder`` (made when missing) trusted and onboarded; its real path."""
        return scripted_model.trust_project(self.home, folder)

    def env(self, model: StandIn, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = agent_env()
        env.update(scripted_model.session_env(self.home, self.tmp, model.url, API_KEY))
        env.update(extra or {})
        return env


# ------------------------------------------------------------------------------------------------ panes


def short_dir(prefix: str) -> str:
    """A folder under /tmp whose socket paths fit sun_path's 108 bytes."""
    return tempfile.mkdtemp(prefix=prefix, dir="/tmp")


def settled(
    read: Callable[[], str], pred: Callable[[str], bool], timeout: float, what: str, calm: float = 0.4
) -> str:
    """The first capture for which ``pred`` holds and that is byte-identical ``calm`` s later (bounded)."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        last = read()
        if pred(last):
            time.sleep(calm)
            again = read()
            if again == last:
                return last
            continue
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last screen:\n{plain(last)}")


def showing(raw: str, pred: Callable[[str], bool]) -> str:
    """``raw`` when ``pred`` holds on its plain text, else the empty string (for ``wait_for``)."""
    return raw if pred(plain(raw)) else ""


def plain(raw: str) -> str:
    """A capture as text: escapes dropped, trailing spaces trimmed (for messages and ``in`` checks)."""
    s = prompt.screen_from_capture(parse_capture(raw)[0], 0, 0, 1)
    return "\n".join(s.lines)


def verdict(raw: str, agent: str = "claude") -> tuple[bool, str | None]:
    return prompt.is_free(prompt.screen_from_capture(*parse_capture(raw)), agent)


class Panes:
    """A private tmux server running Claude Code sessions; every call is bounded by tmux's timeout."""

    def __init__(self, size: tuple[int, int] = (100, 30)) -> None:
        self.dir = short_dir("sra-")
        self.sock = os.path.join(self.dir, "tmux.sock")
        self.tmux = Tmux(self.sock, session="ra", size=size)

    def start(self, cwd: str, env: dict[str, str], argv: list[str], name: str = "claude") -> str:
        """A window running ``argv`` with exactly ``env`` (``env -i``); the pane id."""
        full = ["/usr/bin/env", "-i", *[f"{k}={v}" for k, v in sorted(env.items())], *argv]
        return self.tmux.new_window(name, cwd, {}, full)

    def raw(self, pane: str) -> str:
        """tmux's raw answer to the wake's capture call (frame, then the cursor line)."""
        return self.tmux.run(capture_argv(self.sock, pane))

    def text(self, pane: str) -> str:
        return plain(self.raw(pane))

    def verdict(self, pane: str) -> tuple[bool, str | None]:
        return verdict(self.raw(pane))

    def wait(self, pane: str, pred: Callable[[str], bool], what: str, timeout: float = 30.0) -> str:
        """A settled raw capture on which ``pred(plain text)`` holds."""
        return settled(lambda: self.raw(pane), lambda r: pred(plain(r)), timeout, what)

    def wait_idle(self, pane: str, timeout: float = 40.0) -> str:
        """The settled raw capture of Claude Code's free, empty prompt."""
        return settled(
            lambda: self.raw(pane), lambda r: verdict(r) == (True, None), timeout, "the idle prompt"
        )

    def type(self, pane: str, text: str) -> None:
        self.tmux.send_text(pane, text)

    def enter(self, pane: str) -> None:
        self.tmux.send_enter(pane)

    def keys(self, pane: str, *keys: str) -> None:
        self.tmux.run([*self.tmux_base(), "send-keys", "-t", pane, *keys])

    def resize(self, pane: str, width: int, height: int) -> None:
        self.tmux.run([*self.tmux_base(), "resize-window", "-t", pane, "-x", str(width), "-y", str(height)])

    def tmux_base(self) -> list[str]:
        return ["tmux", "-S", self.sock]

    def close(self) -> None:
        self.tmux.kill_server()
        shutil.rmtree(self.dir, ignore_errors=True)


class PaneSession:
    """One agent's session in a pane of ``panes`` (``Claude`` here, ``codex_kit.Codex``): its screen, and
    typing into its input box as a person would. ``BOX`` names the box in a timeout's message;
    ``SUBMIT_PAUSE_S`` is how long the text stays in the box before Enter."""

    BOX = "the box"
    SUBMIT_PAUSE_S = 0.0
    panes: Panes
    pane: str

    def raw(self) -> str:
        return self.panes.raw(self.pane)

    def text(self) -> str:
        return self.panes.text(self.pane)

    def submit(self, text: str) -> None:
        """Type ``text`` and press Enter once it shows in the box (as a person would)."""
        self.panes.type(self.pane, text)
        wait_for(lambda: text in self.text(), timeout=10, what=f"{text!r} in {self.BOX}")
        if self.SUBMIT_PAUSE_S:
            time.sleep(self.SUBMIT_PAUSE_S)
        self.panes.enter(self.pane)


class Claude(PaneSession):
    """One real Claude Code session in ``panes``: its HOME, project folder and pane."""

    def __init__(self, panes: Panes, home: ClaudeHome, model: StandIn, project: str, *, extra_env=None,
                 args: tuple[str, ...] = (), name: str = "claude", exe: str | None = None) -> None:  # fmt: skip
        self.panes = panes
        self.home = home
        self.model = model
        self.project = home.trust(project)
        self.env = home.env(model, extra_env)
        self.pane = panes.start(self.project, self.env, [exe or claude_exe(), *args], name)

    def wait(
        self, pred: Callable[[str], bool], what: str, timeout: float = 30.0, *, settle: bool = True
    ) -> str:
        """A raw capture on which ``pred(plain text)`` holds; ``settle=False`` for a moving (working) screen."""
        if not settle:
            return wait_for(lambda: showing(self.raw(), pred), timeout, what)
        return self.panes.wait(self.pane, pred, what, timeout)

    def wait_idle(self, timeout: float = 40.0) -> str:
        return self.panes.wait_idle(self.pane, timeout)


# -------------------------------------------------------------------------------------------------- box


class Box:
    """``sotd daemon run`` in a throw-away comm folder; its rows run the pinned Claude Code with ``home``
    and ``model``. ``sotd(...)`` runs a verb as a session outside the rows (``you``)."""

    def __init__(self, home: ClaudeHome, model: StandIn, extra: dict[str, str] | None = None) -> None:
        from sotd.formats import registry
        from sotd.formats.layout import Layout, ensure_home

        self.claude = claude_exe()
        self.home = home
        self.model = model
        self.work = short_dir("srb-")
        self.comm = os.path.join(self.work, "comm")
        self.layout = Layout(self.comm)
        ensure_home(self.layout)
        registry.ensure(self.layout)
        self.sock = os.path.join(self.work, "run", "sotd.sock")
        self.state = os.path.join(self.work, "state")
        self.tmux = Tmux(os.path.join(self.state, "tmux", "tmux.sock"), session="sotd")
        self.env = home.env(model)
        self.env.update(
            SOT_COMM_HOME=self.comm,
            SOT_SELF_HOST="testhost",
            SOT_COMM_TEST_HOST="testhost",
            SOT_HOSTS_TOML=os.path.join(self.work, "hosts.toml"),
            SOTD_STATE_DIR=self.state,
            SOT_SOCKET=self.sock,
            SOTD_AGENT_ARGV_CLAUDE=json.dumps([self.claude]),
        )
        self.env.update(extra or {})
        self.log = os.path.join(self.work, "daemon.log")
        self.proc: subprocess.Popen[bytes] | None = None
        self.you = self.project("you")

    def install(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``sotd comm install`` (e.g. ``--agent-settings``) with this box's HOME; fails the test on error."""
        p = self.sotd("install", *args)
        assert p.returncode == 0, p
        return p

    def start(self) -> Box:
        os.makedirs(os.path.dirname(self.sock), mode=0o700, exist_ok=True)
        with open(self.log, "ab") as f:
            self.proc = subprocess.Popen([SOTD, "daemon", "run", "--socket", self.sock], env=self.env,
                                         stdout=f, stderr=f)  # fmt: skip
        wait_for(self._answers, what="the daemon to answer")
        return self

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"daemon exited {self.proc.returncode}: {self.logtext()}")
        from sotd.errors import DaemonUnreachable

        try:
            self.rows()
        except DaemonUnreachable:
            return False
        return True

    def project(self, name: str) -> str:
        return self.home.trust(os.path.join(self.work, name))

    def sotd(self, *args: str, session: str = "you", env: dict[str, str] | None = None,
             timeout: float = 60) -> subprocess.CompletedProcess[str]:  # fmt: skip
        """``sotd comm <args>`` as session ``session`` (its own self file, its own project folder)."""
        root = self.project(session)
        e = dict(self.env)
        e.update(SOT_COMM_SELF_FILE=os.path.join(self.comm, "self", f"{session}-session.txt"), PWD=root)
        e.update(env or {})
        return subprocess.run([SOTD, "comm", *args], cwd=root, env=e, capture_output=True, text=True,
                              timeout=timeout, check=False)  # fmt: skip

    def spawn(self, name: str, *args: str) -> dict[str, Any]:
        """``sotd comm spawn <project> --name NAME`` (agent claude); the row as ``workspace.list`` shows it."""
        root = self.project(name)
        p = self.sotd("spawn", root, "--name", name, *args)
        assert p.returncode == 0, p
        return wait_for(lambda: self.row(name), what=f"row {name} listed")

    def rows(self) -> list[dict[str, Any]]:
        from sotd.client import unix
        from sotd.wire import hello as wire_hello

        hello = wire_hello.hello_payload(host="testhost", os_user=f"uid:{os.geteuid()}", role="cli")
        answer = unix.request(self.sock, "workspace.list", {}, hello, deadline_s=5.0)
        spaces = answer.get("workspaces")
        return spaces if isinstance(spaces, list) else []

    def row(self, label: str) -> dict[str, Any] | None:
        return next((w for w in self.rows() if w.get("label") == label), None)

    def raw(self, pane: str) -> str:
        return self.tmux.run(capture_argv(self.tmux.socket_path, pane))

    def text(self, pane: str) -> str:
        return plain(self.raw(pane))

    def wait_screen(
        self, pane: str, pred: Callable[[str], bool], what: str, timeout: float = 30.0, *, settle: bool = True
    ) -> str:
        """A raw capture on which ``pred(plain text)`` holds; ``settle=False`` for a moving (working) screen."""
        if not settle:
            return wait_for(lambda: showing(self.raw(pane), pred), timeout, what)
        return settled(lambda: self.raw(pane), lambda r: pred(plain(r)), timeout, what)

    def wait_idle(self, pane: str, timeout: float = 40.0) -> str:
        return settled(
            lambda: self.raw(pane), lambda r: verdict(r) == (True, None), timeout, "the idle prompt"
        )

    def logtext(self) -> str:
        try:
            with open(self.log, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def wake_lines(self) -> list[str]:
        """The daemon's ``comm wake`` log lines (what it typed or refused, and why)."""
        return [ln for ln in self.logtext().splitlines() if "comm wake" in ln]

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.tmux.kill_server()
        shutil.rmtree(self.work, ignore_errors=True)


def comm_folder(comm: str) -> None:
    """A comm folder this box may take the inbox lock of itself (as the hub daemon would record it)."""
    from sotd.formats import lockmanager
    from sotd.formats.layout import Layout, ensure_home

    lay = Layout(comm)
    ensure_home(lay)
    lockmanager.write_for_hub(
        lay, lockmanager.lock_manager_of(lay.inbox_dir), lockmanager.machine_id_or_none()
    )
