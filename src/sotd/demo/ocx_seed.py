"""sotd/demo/ocx_seed.py: the OCX set-up the demo and the OCX tests share, each builder once.

The seed's two run examples (the build of ``out/board.img`` and the agent session: seed 002, and
docs/ocx.md "The seed's session example") with real values, the board project on a throw-away Fossil hub,
a loopback ``fossil server`` on a free port, a node's ``ocx.toml`` and its node policy. ``scripts/demo
--ocx`` (``sotd.demo.ocx_part``) prints what it runs; tests/ocx/runkit.py, the OCX session tests and the
real-agent OCX test build their nodes and runs from the same functions, so a change to the seed's
examples is made in one place.

Guarantee: every builder returns the same bytes each call for the same arguments (the run bodies are
posted as JSON, so their key order is part of the run's hash), and a new object each call: a test that
edits a body (an attack's workspace) changes only its own. What would break it: a builder that fills in a
value from the environment (a port, a path) the caller did not pass, or one that hands out a module
constant (``WORKSPACE_DIR``, ``SESSION_STEPS``) instead of a copy.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import Any

# The board project: trunk holds a Makefile whose ``image`` target writes out/board.img.
MAKEFILE = "image: out/board.img\n\nout/board.img: board.c\n\tmkdir -p out\n\tcc -o out/board board.c\n\t./out/board > out/board.img\n"
BOARD_C = '#include <stdio.h>\nint main(void) { for (int i = 0; i < 64; i++) printf("board %d\\n", i); return 0; }\n'
BUILD_COMMAND = ["make", "-C", "$$tree$$", "image"]
WORKSPACE_DIR = {"step": "directory", "at": "$$root$$/$$process_user$$/projects/$$repository_name$$/$$run$$"}
# The session example's steps as the seed writes them: a password for the run's login, a clone, a checkout.
SESSION_STEPS = [
    WORKSPACE_DIR,
    {"step": "password"},
    {"step": "clone", "into": "$$workspace$$/clone"},
    {"step": "checkout", "of": "trunk", "into": "$$workspace$$/tree"},
]
SESSION_READ_ONLY = ["/usr", "/bin", "/lib", "/etc/resolv.conf", "/etc/ssl/certs", "$$release$$"]
SERVER_BOUND_S = 15.0


def fossil(*args: str, env: Mapping[str, str] | None, cwd: str | None = None, timeout: float = 60.0) -> str:
    """``fossil ARGS``; its stdout. A failure raises RuntimeError with fossil's own words."""
    p = subprocess.run(["fossil", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                       check=False)  # fmt: skip
    if p.returncode:
        raise RuntimeError(f"fossil {args[0]} failed: {p.stderr.strip() or p.stdout.strip()}")
    return p.stdout


def make_hub(path: str, users: Mapping[str, tuple[str, str]], env: Mapping[str, str] | None = None) -> None:
    """A new repository at ``path`` (admin ``admin``) with ``users``: login -> (password, capabilities)."""
    fossil("init", path, "--admin-user", "admin", env=env)
    for login, (pw, caps) in users.items():
        fossil("user", "new", login, f"{login}@example.invalid", pw, "-R", path, env=env)
        fossil("user", "capabilities", login, caps, "-R", path, env=env)


def commit_board(hub: str, checkout: str, env: Mapping[str, str] | None) -> None:
    """One check-in on the hub's trunk holding the Makefile and board.c, made in the new (and then
    removed) folder ``checkout``."""
    os.mkdir(checkout)
    fossil("open", hub, "--workdir", checkout, env=env, cwd=checkout)
    for name, text in (("Makefile", MAKEFILE), ("board.c", BOARD_C)):
        with open(os.path.join(checkout, name), "w") as f:
            f.write(text)
    fossil("add", "Makefile", "board.c", env=env, cwd=checkout)
    fossil("commit", "-m", "the lab board", "--user", "admin", "--no-warnings", env=env, cwd=checkout)
    fossil("close", "--force", env=env, cwd=checkout)
    shutil.rmtree(checkout)


def serve(
    repo: str, env: Mapping[str, str] | None, log: Any = subprocess.DEVNULL
) -> tuple[int, subprocess.Popen[bytes]]:
    """``fossil server --localhost`` for ``repo`` on a free loopback port, once it accepts (at most
    ``SERVER_BOUND_S``); the port and the server. A server that does not come up is stopped and raises."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    srv = subprocess.Popen(["fossil", "server", "--localhost", "--port", str(port), repo], stdout=log, stderr=log,
                           env=env)  # fmt: skip
    deadline = time.monotonic() + SERVER_BOUND_S
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return port, srv
        except OSError:
            time.sleep(0.1)
    stop(srv)
    raise RuntimeError("the fossil server did not start")


def stop(proc: subprocess.Popen[bytes] | subprocess.Popen[str], bound: float = 10.0) -> None:
    """SIGTERM ``proc`` (a server, a node, a daemon); SIGKILL it if it is still there after ``bound`` s."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=bound)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def node_config(index: str, clones: Sequence[Mapping[str, object]]) -> str:
    """The text of a node's ``ocx.toml``: its index, a 1 s interval and one ``[[clone]]`` table each."""
    lines = [f'index = "{index}"', "interval = 1", ""]
    for c in clones:
        lines.append("[[clone]]")
        for k, v in c.items():
            if isinstance(v, list):
                lines.append(f"{k} = [" + ", ".join(f'"{x}"' for x in v) + "]")
            else:
                lines.append(f'{k} = "{v}"')
        lines.append("")
    return "\n".join(lines)


def node_policy(
    root: str,
    state: str,
    *,
    users: Sequence[str],
    read_only: Sequence[str],
    limits: Mapping[str, object],
    release: str | None = None,
    clone_url: str | None = None,
    sessions: bool = False,
    network: bool = False,
    homes: Sequence[str] = (),
    senders: Sequence[str] = ("alice",),
) -> str:
    """The text of a node policy for the clone ``proj`` (uid and gid 1000; the workspace read-write)."""
    out = ["[runs]", f'root = "{root}"', f'state = "{state}"']
    if release is not None:
        out.append(f'release = "{release}"')
    out.append(f"senders = {{ proj = {json.dumps(list(senders))} }}")
    if clone_url is not None:
        out += ["[runs.clone_urls]", f'proj = "{clone_url}"']
    out += ["", "[jobs.policy]", f"users = {json.dumps(list(users))}", "uids = [1000]", "gids = [1000]"]
    if sessions:
        out.append("sessions = true")
    if network:
        out.append("network = true")
    out += [f"read_only = {json.dumps(list(read_only))}", 'read_write = ["$$workspace$$"]']
    if homes:
        out.append(f"homes = {json.dumps(list(homes))}")
    out += ["", "[jobs.policy.limits]", *(f"{k} = {json.dumps(v)}" for k, v in limits.items())]
    return "\n".join(out) + "\n"


def build_body(
    clone: str,
    command: Sequence[str],
    *,
    user: str = "build-user",
    limits: Mapping[str, object] | None = None,
    ends_with_parent: bool = True,
    objective: str = "build trunk for the lab board and send the image",
) -> dict[str, Any]:
    """The seed's build example with real values (``clone`` is the addressed clone's server-code)."""
    return {
        "clone": clone,
        "objective": objective,
        "workspace": [dict(WORKSPACE_DIR), {"step": "files", "of": "trunk", "into": "$$workspace$$/tree"}],
        "sandbox": {
            "uid": 1000, "gid": 1000, "linux_capabilities": [], "network": False,
            "isolate_terminal": True, "ends_with_parent": ends_with_parent,
            "proc": "/proc", "dev": "/dev", "tmp": "/tmp",
            "read_only": ["/usr", "/etc/alternatives"], "read_write": ["$$workspace$$"],
            "homes": [], "created_files": [],
        },
        "limits": dict(limits) if limits is not None else {"wall": "1h", "cpu": 3000, "processes": 256, "file_size": "2G"},
        "process": {
            "user": user, "command": list(command), "env": {"PATH": "/usr/bin:/bin", "HOME": "$$workspace$$"},
            "verdict": True,
            "unversioned_files": [{"at": "$$workspace$$/tree/out/board.img", "as": "builds/board.img"}],
        },
    }  # fmt: skip


def session_body(
    clone: str,
    command: Sequence[str],
    env: Mapping[str, str],
    *,
    wall: str = "8h",
    homes: Sequence[str] = (),
    steps: Sequence[Mapping[str, str]] = SESSION_STEPS,
    network: bool = True,
    read_only: Sequence[str] = SESSION_READ_ONLY,
) -> dict[str, Any]:
    """The seed's agent-session example with real values: ``command`` runs as ``agent-user`` in the tree,
    hears alice, and is delivered mail from its start."""
    return {
        "clone": clone,
        "objective": "answer each post in this thread about the parser",
        "workspace": [dict(s) for s in steps],
        "sandbox": {
            "uid": 1000, "gid": 1000, "linux_capabilities": [], "network": network,
            "isolate_terminal": True, "ends_with_parent": True, "proc": "/proc", "dev": "/dev", "tmp": "/tmp",
            "read_only": list(read_only), "read_write": ["$$workspace$$"], "homes": list(homes),
            "created_files": [],
        },
        "limits": {"wall": wall},
        "process": {
            "user": "agent-user", "command": list(command), "env": dict(env), "cwd": "$$tree$$",
            "session": True, "hears": ["alice"], "deliveries": "start",
        },
    }  # fmt: skip


def reply_py(*, to_post: bool) -> str:
    """A scripted agent's work when woken: answer each post of the session's mail mirror (``inbox.jsonl``)
    not yet answered by an answer in its outbox (``said``: "read: " and the post's text; with ``to_post``
    also the post's hash). Run as ``python3 reply.py WORKSPACE RUN-HASH``."""
    said = '{"to_post": m["hash"], "text": ' if to_post else '{"text": '
    return f"""\
import json, os, sys
ws, run = sys.argv[1], sys.argv[2]
for line in open(os.path.join(ws, "inbox.jsonl")):
    m = json.loads(line)
    name = os.path.join(ws, "outbox", m["hash"][:16] + ".json")
    if os.path.exists(name) or os.path.exists(os.path.join(ws, "outbox", "sent", m["hash"][:16] + ".json")):
        continue
    doc = {{"ocx": 2, "re": run, "said": {said}"read: " + m["message"]["post"]["text"]}}}}
    with open(name + ".tmp", "w") as f:
        f.write(json.dumps(doc))
    os.replace(name + ".tmp", name)
"""


def run_login_commands(clone: str) -> list[tuple[str, ...]]:
    """The fossil commands that give a session run's login (``agent-user``) a place in ``clone`` (what the
    node's refusal names), as argument lists after ``fossil``."""
    return [
        ("user", "new", "agent-user", "agent-user@localhost", "unused-password", "-R", clone),
        ("user", "capabilities", "agent-user", "gio", "-R", clone),
    ]


def daemon_env(env: Mapping[str, str], top: str, host: str) -> dict[str, str]:
    """``env`` for a node's ``sotd daemon run`` below ``top`` named ``host``: its socket in ``top/run``
    (made here, 0700), its state in ``top/dstate``, its hosts file ``top/hosts.toml``."""
    run_dir = os.path.join(top, "run")
    os.mkdir(run_dir, 0o700)
    out = dict(env)
    out.update(SOT_SELF_HOST=host, SOT_COMM_TEST_HOST=host, SOT_HOSTS_TOML=os.path.join(top, "hosts.toml"),
               SOT_SOCKET=os.path.join(run_dir, "sotd.sock"), SOTD_STATE_DIR=os.path.join(top, "dstate"))  # fmt: skip
    return out
