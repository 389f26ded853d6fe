"""docs/ocx.md's walk-through of the seed's session example as a doc test (issue 21): every command of
the numbered list under "The seed's session example, as written, on a node set up from scratch" is read
from the page, checked to be exactly the commands this test runs, and run in the page's order against a
node B made from scratch (a loopback hub; node A posts as alice). Substitutions: ``PW`` and ``hub:8080``
are the hub's, port 8081 a free port, ``b.fossil``/``session.json``/``post.json``/``stop.json`` files in
the test's folder, ``RUN-HASH`` the run's hash, ``DAEMON-STATE`` the daemon's state folder. The agent is
the scripted ``sotd.demo.scripted_agent`` (tests/realagent runs the real Claude Code)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from sotd.demo import ocx_seed as seed
from tests.integration.test_ocx_sessions import REPLY_PY, wait_for
from tests.ocx import runkit as rk
from tests.ocx.fossilkit import base_env, free_port, wait_port

pytestmark = [
    pytest.mark.integration,
    pytest.mark.serial,
    pytest.mark.root,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("bwrap") is None or shutil.which("tmux") is None,
        reason="needs root, bubblewrap and tmux",
    ),
    pytest.mark.timeout(240),
]

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "ocx.md")

# The commands the page gives, in its order (checked against the page before anything runs).
EXPECTED = [
    "sotd ocx clone http://lab-user:PW@hub:8080/ b.fossil",
    "fossil user new agent-user agent-user@localhost unused-password -R b.fossil",
    "fossil user capabilities agent-user gio -R b.fossil",
    "fossil server --localhost --port 8081 b.fossil",
    "sotd comm install",
    "sotd daemon run",
    "sotd ocx server-code proj",
    "sotd ocx post session.json --repo proj",
    "sotd ocx post post.json --repo proj",
    "sotd ocx answers RUN-HASH",
    "tmux -S DAEMON-STATE/tmux/tmux.sock list-windows",
    "sotd ocx post stop.json --repo proj",
]


def page_commands() -> list[str]:
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    start = text.index("### The seed's session example, as written, on a node set up from scratch")
    start = text.index("\n1. ", start)
    end = text.index("This list is a doc test", start)
    spans = [" ".join(s.split()) for s in re.findall(r"`([^`]*)`", text[start:end], flags=re.S)]
    return [s for s in spans if re.match(r"(sotd|fossil|tmux) ", s)]


def test_the_page_lists_the_commands_this_test_runs() -> None:
    assert page_commands() == EXPECTED


@pytest.fixture
def lab() -> Iterator[rk.Lab]:
    with rk.served_lab("sotd-ocxwalk") as served:
        yield served


def test_the_session_walkthrough_runs_as_the_page_gives_it(lab: rk.Lab) -> None:
    assert page_commands() == EXPECTED
    top = os.path.join(lab.top, "walk")
    os.mkdir(top, 0o755)
    cfg = os.path.join(top, "ocx.toml")
    env = seed.daemon_env({**base_env(top), "SOT_OCX_CONFIG": cfg}, top, "boxb")
    port = free_port()
    run_hash = ""
    subs = {
        "http://lab-user:PW@hub:8080/": f"http://lab-user:labpw@127.0.0.1:{lab.port}/",
        "b.fossil": os.path.join(top, "b.fossil"),
        "8081": str(port),
        "session.json": os.path.join(top, "session.json"),
        "post.json": os.path.join(top, "post.json"),
        "stop.json": os.path.join(top, "stop.json"),
        "DAEMON-STATE": env["SOTD_STATE_DIR"],
    }
    procs: list[subprocess.Popen[bytes]] = []
    log_path = os.path.join(top, "daemon.log")

    def argv(cmd: str) -> list[str]:
        words = [subs.get(w, w) for w in cmd.replace("RUN-HASH", run_hash).split()]
        for k, v in subs.items():
            if k.startswith("DAEMON-STATE"):
                words = [w.replace(k, v) for w in words]
        return [rk.SOTD, *words[1:]] if words[0] == "sotd" else words

    def run(cmd: str) -> str:
        p = subprocess.run(argv(cmd), env=env, capture_output=True, text=True, timeout=120, check=False)
        assert p.returncode == 0, (cmd, p.stdout, p.stderr)
        return p.stdout

    def daemon_log() -> str:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    try:
        cmds = iter(EXPECTED)
        run(next(cmds))  # 1. the clone; then ocx.toml names it (prose)
        rk.write_config(cfg, os.path.join(top, "b.sqlite"),
                        [{"name": "proj", "repository": subs["b.fossil"], "login": "lab-user",
                          "url": f"http://lab-user@127.0.0.1:{lab.port}/"}])  # fmt: skip
        run(next(cmds))  # 2. the run's login in B's clone
        run(next(cmds))
        with open(os.path.join(top, "server.log"), "w") as log:  # the server writes it; our copy closes
            procs.append(subprocess.Popen(argv(next(cmds)), env=env, stdout=log, stderr=log))  # 3. its server
        wait_port("127.0.0.1", port)
        release = os.path.join(top, "release")  # 4. the policy (prose), with the scripted agent's release
        os.mkdir(release, 0o755)
        import sotd.demo.scripted_agent

        shutil.copy(sotd.demo.scripted_agent.__file__, os.path.join(release, "scripted_agent.py"))
        with open(os.path.join(release, "reply.py"), "w") as f:
            f.write(REPLY_PY)
        with open(os.path.join(top, "ocx-policy.toml"), "w") as f:
            f.write(f'[runs]\nroot = "b-root"\nstate = "b-state"\nrelease = "{release}"\n'
                    '[runs.senders]\nproj = ["alice"]\n'
                    f'[runs.clone_urls]\nproj = "http://127.0.0.1:{port}/"\n\n'
                    '[jobs.policy]\nusers = ["agent-user"]\nuids = [1000]\ngids = [1000]\nsessions = true\n'
                    'network = true\nread_only = ["/usr", "/bin", "/lib", "/etc/resolv.conf", "/etc/ssl/certs",'
                    ' "$$release$$"]\nread_write = ["$$workspace$$"]\n')  # fmt: skip
        run(next(cmds))  # 5. comm install, the daemon
        with open(log_path, "a") as dl:
            procs.append(subprocess.Popen(argv(next(cmds)), env=env, stdout=dl, stderr=dl))
        code = run(next(cmds)).strip()  # 6. B's server-code, into the seed's example, posted from A
        command = ["/usr/bin/python3", "$$release$$/scripted_agent.py", "--work", "0.3",
                   "--on-wake", "/usr/bin/python3 $$release$$/reply.py $$workspace$$ $$run$$"]  # fmt: skip
        body = seed.session_body(code, command, {"PATH": "/usr/bin:/bin", "HOME": "$$workspace$$",
                                                 "TERM": "xterm-256color"})  # fmt: skip
        with open(subs["session.json"], "w") as f:
            f.write(json.dumps({"ocx": 2, "to": "lab-user", "run": body}))
        post_cmd = next(cmds)
        a_env = lab.envs["a"]
        run_hash = subprocess.run(argv(post_cmd), env=a_env, capture_output=True, text=True, timeout=120,
                                  check=True).stdout.strip()  # fmt: skip
        rk.wait_answer(lab, "a", run_hash, "started", bound=90)
        with open(subs["post.json"], "w") as f:  # 7. alice's post; the answer; the row
            f.write(json.dumps({"ocx": 2, "re": run_hash, "post": {"text": "the parser drops a token"}}))
        subprocess.run(argv(next(cmds)), env=a_env, capture_output=True, timeout=120, check=True)
        answers_cmd = next(cmds)

        def said() -> str:
            subprocess.run([rk.SOTD, "ocx", "sync"], env=a_env, capture_output=True, timeout=120, check=True)
            out = subprocess.run(argv(answers_cmd), env=a_env, capture_output=True, text=True, timeout=120,
                                 check=True).stdout  # fmt: skip
            return out if " said " in out and "from=lab-user" in out else ""

        assert "post re=" in wait_for(said, 90, "the session's answer")
        windows_cmd, tried = next(cmds), []

        def windows() -> str:
            # the row answered through its own wake command; its window may still be settling in the
            # daemon's tmux (a loaded machine saw one list-windows before the server answered): each
            # try's status and stderr are kept for the failure's message
            p = subprocess.run(
                argv(windows_cmd), env=env, capture_output=True, text=True, timeout=30, check=False
            )
            tried.append((p.returncode, p.stderr.strip()))
            return p.stdout if p.returncode == 0 else ""

        try:
            assert wait_for(windows, 30, "the session's window in the daemon's tmux").strip()
        except AssertionError:
            raise AssertionError(f"{windows_cmd}: {tried[-5:]}") from None
        with open(subs["stop.json"], "w") as f:  # 8. alice's stop
            f.write(json.dumps({"ocx": 2, "re": run_hash, "stop": {}}))
        subprocess.run(argv(next(cmds)), env=a_env, capture_output=True, timeout=120, check=True)
        assert rk.wait_answer(lab, "a", run_hash, "ended", bound=60)["outcome"] == "stopped"
        assert next(cmds, None) is None  # every command of the page ran
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=40)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=10)
        sock = os.path.join(env["SOTD_STATE_DIR"], "tmux", "tmux.sock")
        if os.path.exists(sock):
            subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True, timeout=10, check=False)
    assert "ended: stopped" in daemon_log(), daemon_log()[-3000:]
