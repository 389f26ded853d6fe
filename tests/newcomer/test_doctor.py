"""Issue 13, part 5: ``sotd doctor`` on a healthy box, and on each broken state it knows.

Each test breaks one thing on an otherwise healthy box (a real comm folder, the wrappers installed and on
PATH, the hooks registered in a private HOME's Claude Code settings, a joined session, a real daemon
started with ``sotd daemon start``), checks that doctor reports exactly that finding with the fix it
names, applies that fix as a user would (the named command, or ``sotd doctor --fix``), and checks that
doctor is then healthy again. The ssh route of ``box_unreachable`` and the comm-folder verdict between
boxes are in tests/multihost/test_doctor_links.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sotd.cli.install import scripts
from sotd.cli.install import settings as install
from sotd.formats import cursor, holder, lockmanager
from tests.conftest import SOTD, VENV_BIN, Comm, Session
from tests.newcomer.daemons import daemon, kill_daemon

pytestmark = pytest.mark.integration


class Box:
    def __init__(self, comm: Comm, s: Session, env: dict[str, str], sock: str) -> None:
        self.comm = comm
        self.s = s
        self.env = env
        self.sock = sock
        self.settings = os.path.join(env["HOME"], ".claude", "settings.json")

    def run(
        self, *args: str, env: dict[str, str] | None = None, without: tuple[str, ...] = ()
    ) -> subprocess.CompletedProcess[str]:
        """``sotd ARGS`` in the session's folder with the box's environment, ``env`` on top and the
        variables named in ``without`` unset."""
        merged = {**self.env, **(env or {})}
        return subprocess.run(
            [SOTD, *args],
            cwd=self.s.root,
            env={k: v for k, v in merged.items() if k not in without},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def doctor(
        self, *args: str, env: dict[str, str] | None = None, without: tuple[str, ...] = ()
    ) -> tuple[int, dict[str, Any]]:
        r = self.run("doctor", "--json", *args, env=env, without=without)
        assert r.returncode in (0, 1), r
        return r.returncode, json.loads(r.stdout)

    def findings(
        self, env: dict[str, str] | None = None, without: tuple[str, ...] = ()
    ) -> dict[str, dict[str, Any]]:
        code, doc = self.doctor(env=env, without=without)
        assert code == (0 if doc["healthy"] else 1)
        return {f["code"]: f for f in doc["findings"]}

    def wait_finding(self, code: str, bound: float = 20.0) -> dict[str, dict[str, Any]]:
        """The findings, asked every 0.2 s until ``code`` is one of them or ``bound`` seconds passed."""
        deadline = time.monotonic() + bound
        found: dict[str, Any] = {}
        while time.monotonic() < deadline and code not in found:
            found = self.findings()
            time.sleep(0.2)
        return found

    def package_copy(self) -> str:
        """A copy of the sotd package (no caches) in a folder of its own: the folder, for PYTHONPATH."""
        import sotd

        site = os.path.join(self.comm.work, "site")
        shutil.copytree(
            os.path.dirname(sotd.__file__),
            os.path.join(site, "sotd"),
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        return site

    def restart_daemon(self) -> None:
        """The fix doctor names for a daemon that runs other code: ``sotd daemon stop; sotd daemon start``."""
        assert self.run("daemon", "stop").returncode == 0
        assert self.run("daemon", "start").returncode == 0


@pytest.fixture
def box(tmp_path: Any) -> Iterator[Box]:
    comm = Comm(str(tmp_path))
    s = comm.session("alpha")
    home = os.path.join(comm.work, "home")
    os.makedirs(home)
    sock = os.path.join(comm.work, "run", "sotd.sock")
    env = dict(s.env)
    state = os.path.join(comm.work, "state")  # the daemon's rows and its private tmux server
    env.update(
        HOME=home,
        SOT_SOCKET=sock,
        SOTD_STATE_DIR=state,
        PATH=f"{comm.layout.bin_dir}:{VENV_BIN}:{os.environ['PATH']}",
    )
    s.env = env
    b = Box(comm, s, env, sock)
    install.write_claude_settings(b.settings, comm.layout.bin_dir)
    assert s.run("join", "--name", "alpha").code == 0
    assert daemon(env, "start").returncode == 0
    try:
        yield b
    finally:
        kill_daemon(sock)
        tmux_sock = os.path.join(state, "tmux", "tmux.sock")
        if os.path.exists(tmux_sock):
            subprocess.run(
                ["tmux", "-S", tmux_sock, "kill-server"], check=False, capture_output=True, timeout=30
            )


def _only(b: Box, code: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    found = b.findings(env)
    assert list(found) == [code], found
    return found[code]


def _healthy(b: Box, env: dict[str, str] | None = None) -> None:
    assert b.findings(env) == {}


def _fix(b: Box) -> None:
    r = b.run("doctor", "--fix")
    assert r.returncode == 0, r
    assert r.stdout.startswith("fixed "), r.stdout


def test_a_healthy_box(box: Box) -> None:
    r = box.run("doctor")
    assert (r.returncode, r.stderr) == (0, ""), r
    lines = r.stdout.splitlines()
    assert lines[-1] == "sotd doctor: no problem found"
    assert f"ok  identity: @alpha ({box.s.self_file})" in lines
    assert f"ok  Claude Code hooks: registered in {box.settings}" in lines
    code, doc = box.doctor()
    assert (code, doc["healthy"], doc["findings"], doc["fixed"]) == (0, True, [], [])


def test_doctor_alone_writes_nothing(box: Box) -> None:
    os.chmod(box.comm.home, 0o755)
    before = sorted((p, os.stat(p).st_mode) for p, _d, _f in os.walk(box.comm.home))
    assert box.doctor()[0] == 1
    assert sorted((p, os.stat(p).st_mode) for p, _d, _f in os.walk(box.comm.home)) == before


def test_no_comm_folder(box: Box) -> None:
    other = os.path.join(box.comm.work, "elsewhere")
    env = {"SOT_COMM_HOME": other}
    found = box.findings(env)
    assert found["no_comm_folder"]["fix"].startswith("sotd comm join")
    r = box.run("doctor", "--fix", env=env)
    assert r.stdout.splitlines()[0] == f"fixed no_comm_folder: made the comm folder {other}"
    assert "no_comm_folder" not in box.findings(env)


def test_folder_modes(box: Box) -> None:
    os.chmod(box.comm.home, 0o755)
    os.chmod(box.comm.layout.inbox_dir, 0o755)
    f = _only(box, "folder_modes")
    assert f["what"] == f"the comm folder is open to group or other: {box.comm.home} (0o755)"
    assert f["fix"].startswith("sotd doctor --fix") and f["fixable"]
    _fix(box)
    assert oct(os.stat(box.comm.layout.inbox_dir).st_mode & 0o777) == "0o700"
    _healthy(box)


def test_registry_unreadable(box: Box) -> None:
    reg = box.comm.layout.registry
    with open(reg, "w") as f:
        f.write('{"agents": 5}\n')
    f = _only(box, "registry_unreadable")
    assert f["fix"] == f"move it aside and join again (its rows are lost): mv {reg} {reg}.bad; sotd comm join"
    os.rename(reg, reg + ".bad")
    assert box.s.run("join", "--name", "alpha").code == 0
    _healthy(box)


def _dead_holder() -> holder.Holder:
    """A holder record of a process of this box that has exited (proof of death: its /proc is gone)."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    tick = holder.start_field(p.pid)
    me = holder.own("testhost")
    p.kill()
    p.wait()
    return holder.Holder("testhost", me.machine, me.boot, me.pidns, p.pid, tick)


def test_registry_lock_held_for_hours_on_another_machine(box: Box) -> None:
    """Issue 27: a holder this box cannot judge (another machine), holding for hours, is a problem."""
    other = holder.Holder("farbox", "0" * 32, "b" * 8, "4026531836", 4242, "123")
    with open(box.comm.layout.reglock, "w") as f:
        f.write(other.record() + "\n")
    old = time.time() - 3 * 3600 - 60
    os.utime(box.comm.layout.reglock, (old, old))
    f = _only(box, "registry_lock_held_long")
    assert f["what"] == (
        f"the registry lock {box.comm.layout.reglock} has been held for 3h01m by farbox pid 4242 "
        "(it is on another machine)"
    ), f
    assert f["fix"].startswith("on farbox: ps -p 4242 -o pid,etime,args; if it is gone there: ")
    os.unlink(box.comm.layout.reglock)


def test_registry_lock_dead_holder(box: Box) -> None:
    dead = _dead_holder()
    with open(box.comm.layout.reglock, "w") as f:
        f.write(dead.record() + "\n")
    f = _only(box, "registry_lock_dead_holder")
    assert f["what"].endswith(f"held by testhost pid {dead.pid}, which is dead (it has exited)")
    _fix(box)
    assert not os.path.exists(box.comm.layout.reglock)
    # the reclaim left its marker (the lock's rule keeps them); the next --fix removes it
    assert set(box.findings()) <= {"stale_reclaim_markers"}


def test_stale_reclaim_markers(box: Box) -> None:
    named, reclaimer = _dead_holder(), _dead_holder()
    marker = box.comm.layout.reclaim_marker(named.holder_id())
    with open(marker, "w") as f:
        f.write(reclaimer.record() + "\n")
    f = _only(box, "stale_reclaim_markers")
    assert f["what"] == f"1 reclaim marker(s) of dead holders are left: {marker}"
    _fix(box)
    assert not os.path.exists(marker)
    _healthy(box)


def test_a_marker_whose_reclaimer_lives_is_kept(box: Box) -> None:
    named = _dead_holder()
    marker = box.comm.layout.reclaim_marker(named.holder_id())
    with open(marker, "w") as f:
        f.write(holder.own("testhost").record() + "\n")  # this test process: alive
    _healthy(box)


def test_torn_inbox_tail(box: Box) -> None:
    assert box.s.run("send", "@alpha", "first").code == 0
    path = box.comm.layout.inbox("alpha")
    with open(path, "ab") as f:
        f.write(b'{"from":"dead","to":"alpha"')
    whole = box.comm.inbox_bytes("alpha")[: -len(b'{"from":"dead","to":"alpha"')]
    f = _only(box, "torn_inbox_tail")
    assert (
        f["what"] == "the inbox of @alpha ends in 27 bytes of an unterminated line (a writer died mid-line)"
    )
    _fix(box)
    assert box.comm.inbox_bytes("alpha") == whole
    _healthy(box)


def test_cursor_past_end(box: Box) -> None:
    assert box.s.run("send", "@alpha", "first").code == 0
    with open(box.comm.layout.cursor("alpha"), "w") as f:
        f.write("9 " + cursor.line_hash(b"gone") + "\n")
    f = _only(box, "cursor_past_end")
    assert f["fix"] == "run comm-poll.sh (sotd comm poll) in its session: poll writes a fresh cursor"
    assert box.s.run("poll").code == 0
    _healthy(box)


def test_lock_record(box: Box) -> None:
    kill_daemon(box.sock)
    os.unlink(box.comm.layout.lock_manager)
    found = box.findings()
    assert set(found) == {"lock_record", "daemon_down"}
    assert found["lock_record"]["fix"].startswith("sotd daemon start")
    assert found["daemon_down"]["fix"] == "sotd daemon start"
    assert box.run("daemon", "start").returncode == 0
    assert lockmanager.read_record(box.comm.layout) is not None
    _healthy(box)


def test_daemon_code_changed(box: Box) -> None:
    """The daemon runs a copy of the package; a file of that copy changes under it (its own watch)."""
    kill_daemon(box.sock)
    site = box.package_copy()
    copy_env = {"PYTHONPATH": site, "SOTD_TEST_CODE_CHECK_SECS": "0.2"}
    assert box.run("daemon", "start", env=copy_env).returncode == 0
    # the change must come after the daemon's first fingerprint, taken when its watch starts: change the
    # file again each second until doctor sees it (a change before that fingerprint is part of it)
    found: dict[str, dict[str, Any]] = {}
    for _ in range(20):
        with open(os.path.join(site, "sotd", "daemon", "hub.py"), "a") as f:
            f.write("\n# changed\n")
        found = box.wait_finding("daemon_code_changed", bound=1.0)
        if "daemon_code_changed" in found:
            break
    assert list(found) == ["daemon_code_changed"], found
    assert found["daemon_code_changed"]["fix"] == "sotd daemon stop; sotd daemon start"
    box.restart_daemon()
    _healthy(box)


def test_daemon_down(box: Box) -> None:
    kill_daemon(box.sock)
    f = _only(box, "daemon_down")
    assert f["what"].startswith(f"no daemon answers at {box.sock}")
    assert box.run("daemon", "start").returncode == 0
    _healthy(box)


def test_hosts_toml_unreadable(box: Box) -> None:
    path = os.path.join(box.comm.home, "hosts.toml")
    with open(path, "w") as f:
        f.write("hub = [\n")
    f = _only(box, "hosts_toml_unreadable")
    assert f["fix"] == f"fix the file (docs/deploy.md shows its shape): {path}; then: sotd daemon reload"
    os.unlink(path)
    _healthy(box)


def test_box_unreachable(box: Box) -> None:
    hub_sock = os.path.join(box.comm.work, "hub-run", "sotd.sock")
    with open(os.path.join(box.comm.home, "hosts.toml"), "w") as f:
        f.write(f'hub = "hubbox"\n[boxes.hubbox]\nendpoint = "unix:{hub_sock}"\n[boxes.testhost]\n')
    found = box.findings()
    assert "box_unreachable" in found, found
    assert found["box_unreachable"]["fix"].startswith("on hubbox: sotd daemon start")
    hub_env = {**box.env, "SOT_SELF_HOST": "hubbox", "SOT_SOCKET": hub_sock}
    assert daemon(hub_env, "start").returncode == 0
    try:
        _code, doc = box.doctor()
        assert "box_unreachable" not in {f["code"] for f in doc["findings"]}, doc
        # the hub's daemon serves this very folder: the marks both read are one (docs/doctor.md)
        assert (
            f"hubbox: answers over unix:{hub_sock}; the same comm folder as this box ({box.comm.home})"
            in doc["ok"]
        )
    finally:
        kill_daemon(hub_sock)


def test_wrappers_missing(box: Box) -> None:
    shutil.rmtree(box.comm.layout.bin_dir)
    os.unlink(box.settings)
    found = box.findings()
    assert list(found) == ["wrappers_missing"], found
    assert found["wrappers_missing"]["fix"] == "sotd comm install --agent-settings"
    assert box.run("comm", "install", "--agent-settings").returncode == 0
    _healthy(box)


def test_wrappers_stale(box: Box) -> None:
    path = os.path.join(box.comm.layout.bin_dir, "comm-send.sh")
    with open(path, "w") as f:
        f.write(scripts.wrapper_text("/gone/sotd", "comm-send.sh", "comm send"))
    assert _only(box, "wrappers_stale")["fix"] == "sotd comm install"
    assert box.run("comm", "install").returncode == 0
    _healthy(box)


def test_wrappers_not_on_path(box: Box) -> None:
    env = {"PATH": f"{VENV_BIN}:{os.environ['PATH']}"}
    f = _only(box, "wrappers_not_on_path", env)
    assert f["fix"] == f'add it to PATH (e.g. in ~/.profile): export PATH="{box.comm.layout.bin_dir}:$PATH"'
    _healthy(box)  # the box's own PATH has it


def test_hooks_not_registered(box: Box) -> None:
    os.unlink(box.settings)
    f = _only(box, "hooks_not_registered")
    assert f["fix"] == f"sotd comm install --agent-settings={box.settings}"
    assert box.run("comm", "install", f"--agent-settings={box.settings}").returncode == 0
    _healthy(box)


def test_not_joined(box: Box) -> None:
    assert box.s.run("leave").code == 0
    assert _only(box, "not_joined")["fix"] == "sotd comm join"
    assert box.s.run("join", "--name", "alpha").code == 0
    _healthy(box)


def test_row_down(box: Box) -> None:
    """A row whose agent exits before it is Ready ends ``terminal`` (the daemon's own rows, on its own
    private tmux server)."""
    from sotd.client import unix
    from sotd.wire import hello as wire_hello

    hello = wire_hello.hello_payload(host="testhost", os_user=f"uid:{os.geteuid()}", role="cli")
    root = os.path.join(box.comm.work, "proj")
    os.makedirs(root)
    created = unix.request(
        box.sock,
        "workspace.create",
        {
            "label": "quick",
            "project_root": root,
            "agent": "claude",
            "agent_name": "quick",
            "command": ["true"],
        },
        hello,
        deadline_s=10,
    )
    assert created.get("ok") is True, created
    found = box.wait_finding("row_down")
    assert list(found) == ["row_down"], found
    slug = created["slug"]
    assert found["row_down"]["what"] == f"row {slug} (@?, {os.path.realpath(root)}) is terminal"
    assert (
        found["row_down"]["fix"]
        == f"sotd comm despawn {slug} (then sotd comm spawn {os.path.realpath(root)} to run it again)"
    )
    r = box.s.run("despawn", slug)
    assert r.code == 0, r
    _healthy(box)


def test_daemon_version(box: Box) -> None:
    """The daemon runs a copy of the package that says it is another version."""
    import sotd

    kill_daemon(box.sock)
    site = box.package_copy()
    init = os.path.join(site, "sotd", "__init__.py")
    with open(init) as f:
        text = f.read()
    with open(init, "w") as f:
        f.write(text.replace(f'__version__ = "{sotd.__version__}"', '__version__ = "0.0.1"'))
    assert box.run("daemon", "start", env={"PYTHONPATH": site}).returncode == 0
    f = _only(box, "daemon_version")
    assert f["what"] == f"the daemon at {box.sock} runs sotd 0.0.1, this command is {sotd.__version__}"
    assert f["fix"] == "sotd daemon stop; sotd daemon start"
    box.restart_daemon()
    _healthy(box)


def test_codex_hooks_not_registered(box: Box) -> None:
    """Checked only where Codex is set up (~/.codex); the fix it names merges Codex's hooks.json."""
    codex = os.path.join(box.env["HOME"], ".codex")
    os.makedirs(codex)
    f = _only(box, "hooks_not_registered")
    assert f["what"] == f"the sot-comm hooks are not (all) registered in Codex's settings {codex}/hooks.json"
    assert f["fix"] == (
        "sotd comm install --agent-settings (it merges Codex's hooks.json), then trust them in Codex: /hooks"
    )
    assert box.run("comm", "install", "--agent-settings").returncode == 0
    with open(os.path.join(codex, "hooks.json")) as fh:
        doc: dict[str, Any] = json.load(fh)
    assert not any(install.merge_claude_settings(doc, box.comm.layout.bin_dir, install.CODEX_EVENTS).values())
    _healthy(box)


def test_identity_refused(box: Box) -> None:
    """A process that names a row (``SOT_WORKSPACE_ID``) without running inside that row's capsule."""
    outside = ("SOT_COMM_SELF_FILE",)
    found = box.findings({"SOT_WORKSPACE_ID": "row1"}, without=outside)
    assert list(found) == ["identity_refused"], found
    assert found["identity_refused"]["fix"].endswith(
        "(or, outside any: unset SOT_COMM_SELF_FILE SOT_WORKSPACE_ID)"
    )
    code, doc = box.doctor(without=outside)  # the fix, outside any session
    assert (code, doc["findings"]) == (0, [])


def test_registry_lock_by_hand(box: Box) -> None:
    with open(box.comm.layout.reglock, "w") as fh:
        fh.write("garbage\n")
    f = _only(box, "registry_lock_by_hand")
    assert f["fix"] == f"when no sot-comm command is running: rm -r {box.comm.layout.reglock}"
    os.unlink(box.comm.layout.reglock)
    _healthy(box)


@pytest.mark.parametrize(
    "broken",
    [b'{"permissions": {"allow": ["Bash(ls)"]},,}', b'{"hooks": 5}'],
    ids=["no_json", "hooks_not_object"],
)
def test_agent_settings_unreadable(box: Box, broken: bytes) -> None:
    """Claude Code's settings that do not parse: doctor says so and names a fix that keeps the user's
    text (in the ``.bad`` copy); after it, the hooks are registered and doctor is healthy."""
    with open(box.settings, "wb") as f:
        f.write(broken)
    f = _only(box, "agent_settings_unreadable")
    assert f["what"].startswith(f"Claude Code's settings {box.settings} cannot be read: "), f
    fix = f"sotd comm install --agent-settings={box.settings}"
    assert f["fix"] == (
        f"set it aside (its settings stay in the .bad copy), then register: mv {box.settings} "
        f"{box.settings}.bad; {fix}"
    )
    r = box.run("comm", "install", f"--agent-settings={box.settings}")
    assert r.returncode != 0, r  # install refuses to overwrite what it cannot read: the fix is needed
    with open(box.settings, "rb") as fh:
        assert fh.read() == broken
    r = subprocess.run(
        ["sh", "-c", f["fix"].split(": ", 1)[1]],
        env=box.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r
    with open(box.settings + ".bad", "rb") as fh:
        assert fh.read() == broken
    _healthy(box)


def test_context_failed(box: Box) -> None:
    """A host name that cannot name a self slot (``SOT_SELF_HOST`` with a ``/``, no pinned self file):
    no command can name this session; the fix drops the variable, and doctor is then healthy."""
    outside, bad = ("SOT_COMM_SELF_FILE",), {"SOT_SELF_HOST": "test/host"}
    found = box.findings(bad, without=outside)
    assert "context_failed" in found, found
    f = found["context_failed"]
    assert (
        f["what"] == "comm-context: aborting before any write: no self slot can be named for host 'test/host'"
    )
    assert f["fix"] == (
        "drop the host name that cannot name a file: unset SOT_SELF_HOST; then check: sotd comm context"
    )
    r = box.run("comm", "context", env=bad, without=outside)
    assert r.returncode != 0 and f["what"] in r.stderr, r  # the check the fix names sees the same refusal
    assert box.findings(without=(*outside, "SOT_SELF_HOST")) == {}  # the fix: unset SOT_SELF_HOST
