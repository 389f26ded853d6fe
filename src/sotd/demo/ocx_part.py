"""The OCX part of the demo (``scripts/demo --ocx``): one run end to end between two nodes.

A throw-away Fossil project (trunk holds a Makefile and ``board.c``) is served by a loopback ``fossil
server``. Node A clones it as ``alice``, node B as ``lab-user`` with a node policy that lets
``build-user`` run as uid 1000. A posts the seed's build example addressed to B's clone; B's node takes
it, builds trunk in the bubblewrap sandbox and answers ``started``, then ``ended passed`` with the image's
hash, then sends the image. A reads the answers and checks the image against the hash on record. Every
step is the real ``sotd ocx`` CLI, printed as typed.

Part 2 (``OcxDemo.session``): the seed's agent-session example as written (password, clone, checkout steps).
B's clone gets the run's login and a loopback server of its own (the commands the node's refusals name),
B runs ``sotd daemon run`` with a policy allowing sessions. The session is the real Claude Code TUI when
``scripts/setup`` installed the pinned one (``$SOTD_DEMO_CLAUDE``, as for the rows demo: the native binary's
folder is the run's ``$$release$$``, its config a demo folder the run brings as ``homes``, its model the
scripted stand-in ``sotd.demo.scripted_model`` on 127.0.0.1, which has it read the mail mirror and run the
reply), else ``sotd.demo.scripted_agent`` (a scripted stand-in, woken by mail; it answers each post of
``inbox.jsonl`` through the outbox); the transcript says which ran. A posts the run, a post from alice and
then alice's stop; the demo fails unless the answer and ``ended stopped`` arrive.

Bounded (well under 60 s); the servers, the daemon and its tmux server are stopped and the folder removed
at the end, also after a failure. Needs root, fossil, bubblewrap, make, cc and tmux. What would break it: a
sandbox that cannot run ``/usr/bin/python3`` (the scripted agent runs from the release folder). The project,
servers, configurations, policies and run bodies are ``sotd.demo.ocx_seed``'s builders, which the OCX tests
use too; this module adds what the demo prints.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

from sotd.demo import ocx_seed as seed
from sotd.demo import scripted_model
from sotd.demo.rows_part import real_claude
from sotd.jobs import disk
from sotd.jobs.spec import output_name

STEP_S = 30.0
USERS = {"alice": ("alicepw", "oiy"), "lab-user": ("labpw", "oiy")}


def policy(top: str, *, release: str | None = None, port: int = 0, homes: tuple[str, ...] = ()) -> str:
    """B's node policy: builds as ``build-user``; with ``release`` (part 2) also sessions as
    ``agent-user``, with network, the release folder, B's clone served on ``port`` and ``homes``."""
    if release is None:
        return seed.node_policy(f"{top}/b-root", f"{top}/b-state", users=["build-user"],
                                read_only=["/usr", "/etc/alternatives"], limits={"wall": "5m"})  # fmt: skip
    return seed.node_policy(
        f"{top}/b-root", f"{top}/b-state", users=["build-user", "agent-user"],
        read_only=[*seed.SESSION_READ_ONLY[:-1], "/lib64", "/etc/alternatives", "$$release$$"],
        limits={"wall": "5m"}, release=release, clone_url=f"http://127.0.0.1:{port}/", sessions=True,
        network=True, homes=list(homes),
    )  # fmt: skip


def native_claude(exe: str) -> str:
    """The native executable behind the npm install's ``node_modules/.bin/claude``: its platform
    package's ``claude`` (the folder docs/ocx.md binds as ``$$release$$``) when that is the same file,
    else whatever the link resolves to."""
    scope = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(exe))), "@anthropic-ai")
    for name in sorted(os.listdir(scope)) if os.path.isdir(scope) else []:
        candidate = os.path.join(scope, name, "claude")
        if (
            name.startswith("claude-code-linux-")
            and os.path.isfile(candidate)
            and os.path.samefile(candidate, exe)
        ):
            return candidate
    return os.path.realpath(exe)


def _tail(path: str, n: int = 12) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()[-n:]
    except OSError:
        return [f"({path} unreadable)"]


def _sotd() -> list[str]:
    exe = shutil.which("sotd", path=os.path.dirname(sys.executable))
    return [exe] if exe else [sys.executable, "-m", "sotd.cli.main"]


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "the OCX demo runs the sandbox as uid 1000: run it as root"
    for tool in ("fossil", "bwrap", "make", "cc", "setpriv", "tmux"):
        if shutil.which(tool) is None:
            return f"the OCX demo needs {tool} (apt-get install fossil bubblewrap make gcc util-linux)"
    return None


class OcxDemo:
    def __init__(self) -> None:
        self.top = tempfile.mkdtemp(prefix="sotd-demo-ocx-", dir="/tmp")
        os.chmod(self.top, 0o755)  # noqa: S103 -- the sandbox uid searches its way to its workspace
        drop = ("SOT_", "SOTD_", "TMUX", "CLAUDE")
        self.base = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
        self.base.update(HOME=self.top, USER="root", SOT_COMM_HOME=os.path.join(self.top, "comm"))
        self.server: subprocess.Popen[bytes] | None = None
        self.b_server: subprocess.Popen[bytes] | None = None
        self.daemon: subprocess.Popen[bytes] | None = None
        self.envs: dict[str, dict[str, str]] = {}
        self.claude = real_claude(dict(os.environ))  # (path, version) of the pinned Claude Code, or None
        self.model: scripted_model.StandIn | None = None

    def fossil(self, *args: str, cwd: str | None = None) -> str:
        return seed.fossil(*args, env=self.base, cwd=cwd, timeout=STEP_S)

    def typed(self, who: str, *args: str, show: bool = True) -> str:
        if show:
            print(f"\n[{who}]$ sotd ocx {' '.join(args)}")
        p = subprocess.run([*_sotd(), "ocx", *args], env=self.envs[who], capture_output=True, text=True,
                           timeout=STEP_S * 2, check=False)  # fmt: skip
        if show:
            for line in (p.stdout + p.stderr).splitlines():
                print(f"  {line}")
        if p.returncode:
            raise RuntimeError(f"sotd ocx {args[0]} exited {p.returncode}")
        return p.stdout

    def project(self) -> str:
        hub = os.path.join(self.top, "hub.fossil")
        seed.make_hub(hub, USERS, env=self.base)
        seed.commit_board(hub, os.path.join(self.top, "checkin"), env=self.base)
        return hub

    def serve(self, hub: str) -> int:
        port, self.server = seed.serve(hub, self.base)
        return port

    def node(self, who: str, login: str, port: int) -> None:
        env = dict(self.base)
        cfg = os.path.join(self.top, f"{who}.toml")
        env["SOT_OCX_CONFIG"] = cfg
        self.envs[who] = env
        clone = os.path.join(self.top, f"{who}.fossil")
        self.typed(who, "clone", f"http://{login}:{USERS[login][0]}@127.0.0.1:{port}/", clone)
        with open(cfg, "w") as f:
            f.write(seed.node_config(f"{self.top}/{who}.sqlite", [{"name": "proj", "repository": clone, "login": login,
                                                                   "url": f"http://{login}@127.0.0.1:{port}/"}]))  # fmt: skip
        if who == "b":
            with open(os.path.join(self.top, "ocx-policy.toml"), "w") as f:
                f.write(policy(self.top))

    def run(self) -> int:
        print(
            "# OCX v2: node A posts the seed's build example; node B builds trunk in a sandbox and answers."
        )
        hub = self.project()
        port = self.serve(hub)
        print(
            f"# hub: fossil server on 127.0.0.1:{port} ({hub}); logins alice (node A) and lab-user (node B)"
        )
        self.node("a", "alice", port)
        self.node("b", "lab-user", port)
        code = self.typed("b", "server-code", "proj").strip()
        body = seed.build_body(code, seed.BUILD_COMMAND)
        path = os.path.join(self.top, "build.json")
        with open(path, "w") as f:
            f.write(json.dumps({"ocx": 2, "to": "lab-user", "run": body}))
        print(f"\n# build.json: the seed's build example, with clone = B's server-code {code[:12]}…")
        run_hash = self.typed("a", "post", path, "--repo", "proj").strip()
        print("\n# B's node syncs, takes the run (its clone's server-code, to = a login it acts as), builds:")
        print("[b]$ sotd ocx node --once")
        p = subprocess.run([*_sotd(), "ocx", "node", "--once"], env=self.envs["b"], capture_output=True,
                           text=True, timeout=STEP_S * 2, check=False)  # fmt: skip
        for line in p.stderr.splitlines():
            if "ocx: run" in line:
                print("  " + line.split("ocx: ", 1)[-1])
        self.typed("a", "sync")
        self.typed("a", "answers", run_hash)
        rows = json.loads(self.typed("a", "answers", run_hash, "--json", show=False))
        got = {}
        for r in rows:
            shown = json.loads(self.typed("a", "show", r["hash"], "--json", show=False))
            doc = json.loads(shown["message"])
            got[r["kind"]] = doc[r["kind"]]
        ended = got.get("ended", {})
        print(f"\n# started: {json.dumps(got.get('started'))}")
        print(f"# ended:   {json.dumps(ended)}")
        stored = output_name(run_hash, "builds/board.img")  # the node stores outputs below ocx/out/RUN-HASH/
        img = subprocess.run(["fossil", "uv", "cat", stored, "-R", os.path.join(self.top, "a.fossil")],
                             env=self.base, capture_output=True, timeout=STEP_S, check=False).stdout  # fmt: skip
        h = hashlib.sha3_256(img).hexdigest()
        want = ended.get("outputs", {}).get("builds/board.img")
        print(f"\n[a]$ fossil uv cat {stored} -R a.fossil | sha3-256  ->  {h}")
        first = img.split(b"\n", 1)[0].decode(errors="replace")
        print(f"  {len(img)} bytes, first line {first!r}")
        ok = ended.get("outcome") == "passed" and want == h
        print(f"# the image {'matches' if ok else 'does NOT match'} the hash ended put on record")
        if not ok:
            return 1
        return self.session(code)

    def session(self, code: str) -> int:
        """Part 2: the seed's agent-session example as written, run by B's daemon in a terminal row."""
        print("\n# Part 2: the seed's agent-session example, as written (password, clone, checkout steps).")
        clone_b = os.path.join(self.top, "b.fossil")
        print("# B's operator gives the run's login a place in B's clone and serves that clone for the")
        print("# clone step (what the node's refusals name):")
        for args in seed.run_login_commands(clone_b):
            print(f"[b]$ fossil {' '.join(args)}")
            self.fossil(*args)
        port, self.b_server = seed.serve(clone_b, self.base)
        print(f"[b]$ fossil server --localhost --port {port} b.fossil")
        env = seed.daemon_env(self.envs["b"], self.top, "nodeb")
        if self.claude is not None:
            body = self._real_claude_body(code, port)
        else:
            body = self._scripted_body(code, port)
        dstate = env["SOTD_STATE_DIR"]
        subprocess.run(
            [*_sotd(), "comm", "install"], env=env, check=True, capture_output=True, timeout=STEP_S
        )
        print("[b]$ sotd comm install && sotd daemon run &")
        self.dlog = os.path.join(self.top, "daemon.log")
        with open(self.dlog, "a") as log:
            self.daemon = subprocess.Popen([*_sotd(), "daemon", "run"], env=env, stdout=log, stderr=log)
        self.dstate = dstate
        path = os.path.join(self.top, "session.json")
        with open(path, "w") as f:
            f.write(json.dumps({"ocx": 2, "to": "lab-user", "run": body}))
        run_hash = self.typed("a", "post", path, "--repo", "proj").strip()
        started = self._wait_kind(run_hash, "started")
        ws = ""
        if self.model is not None:  # the real TUI: its model reads the mirror, then runs the reply
            values = started.get("values")
            ws = str(values.get("workspace", "")) if isinstance(values, dict) else ""
            with open(os.path.join(ws, "reply.py"), "w") as f:
                f.write(seed.reply_py(to_post=False))
            self.model.add(
                scripted_model.bash(f"cat {ws}/inbox.jsonl", when="you have mail"),
                scripted_model.bash(
                    f"/usr/bin/python3 {ws}/reply.py {ws} {run_hash}", when="the parser drops a token"
                ),
            )
        post = os.path.join(self.top, "post.json")
        with open(post, "w") as f:
            f.write(json.dumps({"ocx": 2, "re": run_hash, "post": {"text": "the parser drops a token"}}))
        print(
            "\n# alice (in hears) posts in the run's thread; B files it as mail to the session, which wakes:"
        )
        self.typed("a", "post", post, "--repo", "proj")
        try:
            said = self._wait_kind(run_hash, "said")
        except RuntimeError:
            if self.model is not None:  # what the TUI said on its way out, and how far the model got
                print(
                    f"# Claude Code asked the stand-in model {len(self.model.main_requests())} times; its stderr:"
                )
                for line in _tail(os.path.join(ws, "claude.stderr")):
                    print(f"  {line}")
            raise
        print(f"# the session's answer, posted by B as lab-user: {json.dumps(said)}")
        if self.model is not None:
            ran = [step.value for step in self.model.answered() if step.kind == "bash"]
            print(
                f"# Claude Code asked the stand-in model {len(self.model.main_requests())} times; it ran: {ran}"
            )
        stop = os.path.join(self.top, "stop.json")
        with open(stop, "w") as f:
            f.write(json.dumps({"ocx": 2, "re": run_hash, "stop": {}}))
        self.typed("a", "post", stop, "--repo", "proj")
        ended = self._wait_kind(run_hash, "ended")
        self.typed("a", "answers", run_hash)
        return (
            0
            if said.get("text") == "read: the parser drops a token" and ended.get("outcome") == "stopped"
            else 1
        )

    def _scripted_body(self, code: str, port: int) -> dict[str, object]:
        """The session run's body with the scripted agent (copied into a release folder) as its command."""
        release = os.path.join(self.top, "release")
        os.mkdir(release, 0o755)
        from sotd.demo import scripted_agent

        shutil.copy(scripted_agent.__file__, os.path.join(release, "scripted_agent.py"))
        with open(os.path.join(release, "reply.py"), "w") as f:
            f.write(seed.reply_py(to_post=False))  # the stand-in agent's work when woken
        with open(os.path.join(self.top, "ocx-policy.toml"), "w") as f:
            f.write(policy(self.top, release=release, port=port))
        # an interpreter the sandbox shows (its /usr): the one a venv is made from, not the venv's link to
        # it (the venv's folder is not bound in the session)
        real = os.path.realpath(sys.executable)
        py = real if real.startswith("/usr/") else "/usr/bin/python3"
        command = [py, "$$release$$/scripted_agent.py", "--work", "0.3",
                   "--on-wake", f"{py} $$release$$/reply.py $$workspace$$ $$run$$"]  # fmt: skip
        why = (
            "SOTD_DEMO_AGENT=scripted"
            if os.environ.get("SOTD_DEMO_AGENT") == "scripted"
            else "the pinned Claude Code is not installed: scripts/setup puts it in .agents/claude-code"
        )
        print(f"# agent: the scripted stand-in sotd.demo.scripted_agent in the session ({why})")
        return seed.session_body(code, command, {"PATH": "/usr/bin:/bin", "HOME": "$$workspace$$",
                                                 "TERM": "xterm-256color", "LANG": "C.UTF-8"})  # fmt: skip

    def _real_claude_body(self, code: str, port: int) -> dict[str, object]:
        """The session run's body with the pinned Claude Code as its command: the native binary's folder
        is ``$$release$$`` (bound read-only, not copied), a config folder of the demo's is brought as the
        session's ``~/.claude`` (first run answered, the node's root trusted, ``cat`` and the reply
        allowed), the model is the scripted stand-in on 127.0.0.1."""
        assert self.claude is not None
        exe, version = self.claude
        binary = native_claude(exe)
        release = os.path.dirname(binary)
        config = os.path.join(self.top, "claude-config", ".claude")
        os.makedirs(config, 0o755)
        self.model = scripted_model.StandIn(in_order=False, idle_text="SITREP: nothing to do").start()
        key = scripted_model.API_KEY
        with open(os.path.join(config, ".config.json"), "w") as f:  # Claude Code's global config, here
            json.dump({"hasCompletedOnboarding": True, "lastReleaseNotesSeen": version,
                       "customApiKeyResponses": {"approved": [key[-20:]], "rejected": []},
                       "projects": {os.path.join(self.top, "b-root"): {"hasTrustDialogAccepted": True,
                                                                       "hasCompletedProjectOnboarding": True}}},
                      f)  # fmt: skip
        with open(os.path.join(config, "settings.json"), "w") as f:
            json.dump({"permissions": {"allow": ["Bash(cat:*)", "Bash(/usr/bin/python3:*)"],
                                       "additionalDirectories": [os.path.join(self.top, "b-root")]}}, f)  # fmt: skip
        with open(os.path.join(self.top, "ocx-policy.toml"), "w") as f:
            f.write(policy(self.top, release=release, port=port, homes=(config,)))
        print(f"# agent: the real Claude Code {version} TUI ({exe}) in the session's sandbox; its model is")
        print(
            f"#   sotd.demo.scripted_model, a scripted stand-in for the Messages API on {self.model.url} (offline)"
        )
        # its stderr to a workspace file: on the row's terminal it can end the TUI early (docs/ocx.md); the
        # shell stays to add the exit status there, which the demo prints if no answer comes
        command = [
            "/bin/sh",
            "-c",
            f"$$release$$/{shlex.quote(os.path.basename(binary))} --model claude-standin 2>>$$workspace$$/claude.stderr; echo exit=$? >>$$workspace$$/claude.stderr",
        ]
        env = {"PATH": "/usr/bin:/bin", "HOME": "$$workspace$$/home", "TERM": "xterm-256color", "LANG": "C.UTF-8",
               "ANTHROPIC_API_KEY": key, "ANTHROPIC_BASE_URL": self.model.url, "DISABLE_AUTOUPDATER": "1",
               "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}  # fmt: skip
        return seed.session_body(code, command, env, homes=[config],
                                 read_only=[*seed.SESSION_READ_ONLY[:3], "/lib64", *seed.SESSION_READ_ONLY[3:]])  # fmt: skip

    def _wait_kind(self, run_hash: str, kind: str) -> dict[str, object]:
        deadline = time.monotonic() + STEP_S * 3
        while time.monotonic() < deadline:
            self.typed("a", "sync", show=False)
            for r in json.loads(self.typed("a", "answers", run_hash, "--json", show=False)):
                if r["kind"] == kind:
                    doc = json.loads(
                        json.loads(self.typed("a", "show", r["hash"], "--json", show=False))["message"]
                    )
                    body: dict[str, object] = doc[kind]
                    return body
            time.sleep(0.5)
        raise RuntimeError(f"no {kind} for the session run within {STEP_S * 3:.0f}s")

    def close(self) -> None:
        if self.daemon is not None:
            seed.stop(self.daemon, 40)
            sock = os.path.join(self.dstate, "tmux", "tmux.sock")
            if os.path.exists(sock):
                subprocess.run(
                    ["tmux", "-S", sock, "kill-server"], capture_output=True, timeout=10, check=False
                )
        for srv in (self.server, self.b_server):
            if srv is not None:
                seed.stop(srv)
        if self.model is not None:
            self.model.stop()
        disk.release_below(self.top)  # each run's workspace is a loop-mounted file system of its own
        shutil.rmtree(self.top, ignore_errors=True)


def main() -> int:
    why = _missing()
    if why:
        print(why)
        return 1
    demo = OcxDemo()
    started = time.monotonic()
    try:
        status = demo.run()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        print(f"# the OCX demo failed: {e}")
        status = 1
    finally:
        demo.close()
    print(f"\n# done in {time.monotonic() - started:.1f}s; the fossil server and the folder are gone")
    return status
