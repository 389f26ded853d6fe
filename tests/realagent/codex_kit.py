"""tests/realagent/codex_kit.py: the real-agent tier's Codex kit — the pinned Codex, a temp ``CODEX_HOME``
with the stand-in provider and hooks trusted the way Codex records trust, the real TUI in the tier's
private tmux, and a sotd daemon whose ``codex`` rows run it (issue 12 part 1; testing-notes §5).

- ``codex_exe()``: the Codex that ``scripts/setup`` installed into ``.agents/codex`` at the pin in
  ``scripts/codex.pin``; missing or another version raises ``kit.NotInstalled`` with the install's own
  error (``.agents/codex.error``), never a skip.
- ``CodexHome``: ``CODEX_HOME`` + ``HOME`` in the test's folder. ``config.toml`` selects the provider
  ``sotd_standin`` (``base_url`` = the stand-in, ``wire_api = "responses"``, ``env_key`` a dummy key),
  ``gpt-5.5`` (the catalogue's GPT-6 models are sent no shell tool here) with the notices Codex records
  once its "try the new model" offer is answered, and
  ``features.daemon_auto_start = false`` (else the TUI copies its package, about 400 MB, into
  ``CODEX_HOME/packages`` and leaves a managed app-server daemon running after it exits). ``trust(folder)`` writes ``[projects."<path>"] trust_level = "trusted"``; ``rules(...)``
  writes a ``rules/*.rules`` file; ``trust_hooks(cwd)`` asks Codex itself (``codex app-server``,
  ``hooks/list``) for each hook's key and current hash and records ``[hooks.state."<key>"]
  trusted_hash``, exactly what Codex's own "Trust all and continue" writes (seen on 0.171.0), so no
  "Hooks need review" dialog shows.
- ``Codex``: one session in ``kit.Panes``; ``wait_idle`` reads the screen with sotd's Codex predicate.
- ``OutsideRow``: a session's ground outside any row (comm folder, settings installed, project and hooks
  trusted) and ``sotd comm`` with its environment.
- ``CodexBox``: ``kit.Box`` whose rows run the pinned ``codex`` (``SOTD_AGENT_ARGV_CODEX``) with this home.

What would break it: a home that lets a dialog through (every wait times out on it), hooks written after
``trust_hooks`` (their hash changes and Codex skips them silently), or a leaked ``CODEX_HOME``/
``OPENAI_*`` from the developer's own shell.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from typing import Any

from sotd.terminal import codex_prompt
from sotd.terminal.tmux import parse_capture
from tests.conftest import SOTD
from tests.realagent import kit
from tests.realagent.codex_standin import MODEL, CodexStandIn

PIN_FILE = os.path.join(kit.TOP, "scripts", "codex.pin")
PREFIX = os.path.join(kit.TOP, ".agents", "codex")
ERROR_FILE = os.path.join(kit.TOP, ".agents", "codex.error")
PACKAGE = "@openai/codex"
KEY_ENV = "SOTD_STANDIN_KEY"
API_KEY = "sk-sotd-standin-realagent-tier"


def pin() -> str:
    return kit.read_pin(PIN_FILE)


def codex_exe() -> str:
    """The pinned ``codex``, checked by running ``codex --version`` (``codex-cli <version>``)."""
    want = pin()
    return kit.pinned_exe("Codex", PREFIX, ERROR_FILE, "codex", want, lambda got: got == f"codex-cli {want}")


# ------------------------------------------------------------------------------------------ config.toml


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v))  # a TOML basic string is a JSON string for the text used here


def _toml_key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() else json.dumps(k)


def toml_text(doc: dict[str, Any], prefix: str = "") -> str:
    """``doc`` as TOML: plain keys first, then one ``[table]`` per nested dict (recursively)."""
    lines = [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    out = "\n".join(lines) + ("\n" if lines else "")
    for k, v in doc.items():
        if isinstance(v, dict):
            name = f"{prefix}.{_toml_key(k)}" if prefix else _toml_key(k)
            plain = [x for x in v.values() if not isinstance(x, dict)]
            if plain or not v:
                out += f"\n[{name}]\n"
            out += toml_text(v, name)
    return out


class CodexHome:
    """A temp ``CODEX_HOME`` (and ``HOME``) that reaches Codex's composer with no dialog."""

    def __init__(self, root: str, model: CodexStandIn, *, settings: dict[str, Any] | None = None) -> None:
        self.root = root
        self.home = os.path.join(root, "home")
        self.codex_home = os.path.join(self.home, ".codex")
        self.tmp = os.path.join(root, "tmp")
        for d in (self.codex_home, self.tmp):
            os.makedirs(d, exist_ok=True)
        self.config_path = os.path.join(self.codex_home, "config.toml")
        self.hooks_path = os.path.join(self.codex_home, "hooks.json")
        self.model = model
        self.doc: dict[str, Any] = {
            "model": MODEL,
            "model_provider": "sotd_standin",
            "features": {"daemon_auto_start": False},
            "model_providers": {
                "sotd_standin": {
                    "name": "sotd stand-in",
                    "base_url": model.url,
                    "env_key": KEY_ENV,
                    "wire_api": "responses",
                }
            },
            "projects": {},
            # what Codex records once a person answered its first-run notices (seen on 0.171.0): the
            # screen-reader probe, the "try the new model" offer for this model, the new-model banner
            "tui": {"screen_reader_detection_done": True, "model_availability_nux": {"gpt-6.1-sol": 1}},
            "notice": {"model_migrations": {MODEL: "gpt-6-sol"}},
        }
        self.doc.update(settings or {})
        self.write_config()

    def write_config(self) -> None:
        with open(self.config_path, "w", encoding="utf-8") as f:
            f.write(toml_text(self.doc))

    def adopt(self) -> None:
        """Take ``config.toml`` as it is now (what ``sotd comm install`` added to it) into the doc, so the
        next ``trust`` / ``trust_hooks`` writes it back instead of dropping it."""
        import tomllib

        with open(self.config_path, "rb") as f:
            self.doc = tomllib.load(f)

    def trust(self, folder: str) -> str:
        """Mark ``folder`` (made when missing) a trusted project; its real path."""
        os.makedirs(folder, exist_ok=True)
        real = os.path.realpath(folder)
        self.doc.setdefault("projects", {})[real] = {"trust_level": "trusted"}
        self.write_config()
        return real

    def rules(self, name: str, *patterns: tuple[list[str], str]) -> str:
        """Write ``rules/<name>.rules`` with one ``prefix_rule`` per (pattern, decision); its path."""
        folder = os.path.join(self.codex_home, "rules")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{name}.rules")
        with open(path, "w", encoding="utf-8") as f:
            for pattern, decision in patterns:
                f.write(f"prefix_rule(pattern = {json.dumps(pattern)}, decision = {json.dumps(decision)})\n")
        return path

    def write_hooks(self, doc: dict[str, Any]) -> None:
        with open(self.hooks_path, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)

    def list_hooks(self, cwd: str) -> list[dict[str, Any]]:
        """Codex's own account of the hooks it would run in ``cwd`` (``codex app-server``, ``hooks/list``)."""
        env = self.env()
        p = subprocess.Popen([codex_exe(), "app-server"], cwd=cwd, env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             start_new_session=True)  # fmt: skip
        assert p.stdin is not None and p.stdout is not None
        try:

            def send(doc: dict[str, Any]) -> None:
                assert p.stdin is not None
                p.stdin.write(json.dumps(doc) + "\n")
                p.stdin.flush()

            def answer(rid: int) -> dict[str, Any]:
                assert p.stdout is not None
                for _ in range(200):
                    line = p.stdout.readline()
                    if not line:
                        break
                    doc = json.loads(line)
                    if doc.get("id") == rid:
                        if "error" in doc:
                            raise AssertionError(f"codex app-server: {doc['error']}")
                        return dict(doc["result"])
                raise AssertionError(f"codex app-server gave no answer to request {rid}")

            send(
                {
                    "id": 1,
                    "method": "initialize",
                    "params": {"clientInfo": {"name": "sotd-tests", "version": "0"}},
                }
            )
            answer(1)
            send({"method": "initialized"})
            send({"id": 2, "method": "hooks/list", "params": {"cwds": [cwd]}})
            data = answer(2)["data"]
            return [h for entry in data for h in entry.get("hooks", [])]
        finally:
            p.stdin.close()
            try:
                os.killpg(p.pid, 15)
            except ProcessLookupError:
                pass
            p.wait(10)
            p.stdout.close()

    def trust_hooks(self, cwd: str) -> list[str]:
        """Record every listed hook as trusted at its current hash, as Codex's review does; the keys."""
        state = self.doc.setdefault("hooks", {}).setdefault("state", {})
        keys = []
        for h in self.list_hooks(cwd):
            if h.get("isManaged"):
                continue
            state[str(h["key"])] = {"trusted_hash": str(h["currentHash"])}
            keys.append(str(h["key"]))
        self.write_config()
        return keys

    def env(self, model: object = None, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The session's environment (``model`` is accepted for ``kit.Box``'s call; the home knows its own)."""
        env = kit.agent_env()
        env.update(
            HOME=self.home,
            CODEX_HOME=self.codex_home,
            TMPDIR=self.tmp,
            TERM="xterm-256color",
            LANG="C.UTF-8",
        )
        env[KEY_ENV] = API_KEY
        env.update(extra or {})
        return env


class OutsideRow:
    """A Codex session's ground outside any row: a comm folder of its own (``kit.comm_folder``), sotd's
    agent settings installed in ``home``, the project folder and its hooks trusted, and ``sotd(...)``,
    ``sotd comm`` with the test's environment (``SOT_COMM_SELF_FILE`` unset: a caller pins one per call).

    The kit writes ``config.toml`` whole when it records trust (Codex itself edits it in place), so the
    settings are installed again after it: ``reinstalled`` is that second install's result, and
    ``hooks.json`` is unchanged by it, so the hooks' trust holds.
    """

    def __init__(self, home: CodexHome, top: str, project: str = "alpha") -> None:
        self.home = home
        self.comm = os.path.join(top, "comm")
        kit.comm_folder(self.comm)
        self.base = {k: v for k, v in os.environ.items() if not k.startswith(kit.DROP)}
        self.base.update(home.env(), **self.comm_env())
        first = self.sotd("install", "--agent-settings", cwd=home.home)
        assert first.returncode == 0, first
        self.project = home.trust(os.path.join(top, project))
        assert home.trust_hooks(self.project), "Codex listed none of sotd's hooks"
        self.reinstalled = self.sotd("install", "--agent-settings", cwd=home.home)
        assert self.reinstalled.returncode == 0, self.reinstalled

    def comm_env(self) -> dict[str, str]:
        return {"SOT_COMM_HOME": self.comm, "SOT_SELF_HOST": "testhost", "SOT_COMM_TEST_HOST": "testhost"}

    def sotd(self, *args: str, cwd: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([SOTD, "comm", *args], env={**self.base, **extra}, cwd=cwd, capture_output=True,
                              text=True, timeout=60, check=False)  # fmt: skip

    def session_env(self) -> dict[str, str]:
        """The Codex session's own environment: its home, this comm folder, a plain PATH."""
        return self.home.env(None, {**self.comm_env(), "PATH": "/usr/local/bin:/usr/bin:/bin"})


# ---------------------------------------------------------------------------------------------- screens


def verdict(raw: str) -> tuple[bool, str | None]:
    from sotd.terminal import prompt

    return codex_prompt.is_free(prompt.screen_from_capture(*parse_capture(raw)))


def wait_idle(read: Callable[[], str], timeout: float = 40.0) -> str:
    """The settled raw capture of Codex's free, empty composer."""
    return kit.settled(read, lambda r: verdict(r) == (True, None), timeout, "Codex's idle composer", 0.8)


class Codex(kit.PaneSession):
    """One real Codex session in ``panes``: its home, project folder and pane."""

    BOX = "the composer"
    SUBMIT_PAUSE_S = 0.2

    def __init__(self, panes: kit.Panes, home: CodexHome, project: str, *, extra_env=None,
                 args: tuple[str, ...] = (), name: str = "codex") -> None:  # fmt: skip
        self.panes = panes
        self.home = home
        self.project = home.trust(project)
        self.env = home.env(None, extra_env)
        self.pane = panes.start(self.project, self.env, [codex_exe(), *args], name)

    def wait(self, pred: Callable[[str], bool], what: str, timeout: float = 30.0) -> str:
        return self.panes.wait(self.pane, pred, what, timeout)

    def wait_idle(self, timeout: float = 40.0) -> str:
        return wait_idle(self.raw, timeout)


class CodexBox(kit.Box):
    """``kit.Box`` whose rows run the pinned Codex with ``home`` (``sotd comm spawn ... --agent codex``)."""

    def __init__(self, home: CodexHome, model: CodexStandIn, extra: dict[str, str] | None = None) -> None:
        super().__init__(home, model, extra)  # type: ignore[arg-type]  # CodexHome has trust() and env()
        self.codex = codex_exe()
        self.env.update(SOTD_AGENT_ARGV_CODEX=json.dumps([self.codex]))

    def spawn(self, name: str, *args: str) -> dict[str, Any]:
        return super().spawn(name, "--agent", "codex", *args)

    def wait_idle(self, pane: str, timeout: float = 40.0) -> str:
        return wait_idle(lambda: self.raw(pane), timeout)
