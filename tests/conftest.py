"""Shared fixtures: a private comm folder, sessions that run the real ``sotd`` as subprocesses."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests import hypothesis_profiles

hypothesis_profiles.load()  # the property tests' budget: ci, or long (SOTD_HYPOTHESIS_PROFILE)

VENV_BIN = os.path.dirname(sys.executable)
SOTD = shutil.which("sotd", path=VENV_BIN) or "sotd"


class Result:
    def __init__(self, p: subprocess.CompletedProcess[str]) -> None:
        self.out = p.stdout
        self.err = p.stderr
        self.code = p.returncode

    @property
    def out_lines(self) -> list[str]:
        return self.out.splitlines()

    @property
    def err_lines(self) -> list[str]:
        return self.err.splitlines()

    def __repr__(self) -> str:
        return f"Result(code={self.code}, out={self.out!r}, err={self.err!r})"


def wait_for(pred: Any, timeout: float = 20.0, what: str = "condition") -> Any:
    """Poll ``pred`` every 50 ms until it gives something true (returned), at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def stop_proc(p: subprocess.Popen[Any]) -> None:
    """SIGTERM, then SIGKILL past 10 s (a test's own child: a daemon, a server, a tracer)."""
    p.terminate()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(5)


@pytest.fixture
def daemons() -> Iterator[list[Any]]:
    """The real daemons a test starts (``tests.integration.test_daemon.start`` appends each): each is
    stopped when the test ends, whatever happened."""
    started: list[Any] = []
    yield started
    for d in started:
        d.stop()


def running(pid: int) -> bool:
    """Whether ``pid`` is a process that has not yet exited (absent or a zombie: False)."""
    from sotd import sysprobe

    got = sysprobe.stat_of(pid)
    return got is not None and bool(got[1]) and got[1][0] != "Z"


@contextlib.contextmanager
def attached_strace(pid: int, *args: str) -> Iterator[None]:
    """``strace -f -qq <args> -p <pid>`` attached to every thread of ``pid`` for the block, then stopped."""
    strace = shutil.which("strace") or "/usr/bin/strace"
    tracer = subprocess.Popen(
        [strace, "-f", "-qq", *args, "-p", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )

    def attached() -> bool:
        if tracer.poll() is not None:
            raise AssertionError(f"strace exited {tracer.returncode}: {tracer.communicate()[1]!r}")
        return tracers_of(pid) == {tracer.pid}

    try:
        wait_for(attached, timeout=10, what="strace to attach")
        yield
    finally:
        stop_proc(tracer)
        if tracer.stderr is not None:
            tracer.stderr.close()


def tracers_of(pid: int) -> set[int]:
    """The tracer pid of each of ``pid``'s threads (0: not traced), as ``/proc`` says: ``{tracer}`` once a
    ``strace -f -p <pid>`` has attached to every thread."""
    out = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/status") as f:
            for row in f:
                if row.startswith("TracerPid:"):
                    out.add(int(row.split()[1]))
    return out


def clean_env() -> dict[str, str]:
    """The test process's environment without anything that would point at a real comm folder or tmux."""
    drop = ("SOT_", "SOTD_", "TMUX", "CLAUDE", "COMM_STATUS_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    # a command that needs this box's daemon starts one when none runs (cli/comm/autostart.py): tests that are
    # not about that must not leave daemons behind them, so they run with it off; tests/newcomer turns it on
    env["SOT_DAEMON_AUTOSTART"] = "off"
    return env


class Session:
    """One agent session: its own project folder and its own pinned self file, in one comm folder."""

    def __init__(self, comm: Comm, name: str) -> None:
        self.comm = comm
        self.name = name
        self.root = os.path.realpath(os.path.join(comm.work, name))
        os.makedirs(self.root, exist_ok=True)
        self.self_file = os.path.join(comm.home, "self", f"{name}-session.txt")
        self.env = clean_env()
        self.env.update(
            SOT_COMM_HOME=comm.home,
            SOT_SELF_HOST=comm.host,
            SOT_COMM_SELF_FILE=self.self_file,
            SOT_COMM_TEST_HOST=comm.host,
            SOT_SOCKET=os.path.join(comm.work, "no-daemon.sock"),
            PWD=self.root,
        )

    def run(
        self, *args: str, stdin: str | None = None, env: dict[str, str] | None = None, wrapper: bool = True
    ) -> Result:
        """Run a verb as this session: through its installed comm-<verb>.sh when there is one, as people do."""
        e = dict(self.env)
        if env:
            e.update(env)
        script = os.path.join(self.comm.layout.bin_dir, f"comm-{args[0]}.sh") if args else ""
        argv = [script, *args[1:]] if wrapper and os.path.exists(script) else [SOTD, "comm", *args]
        p = subprocess.run(
            argv,
            check=False,
            cwd=self.root,
            env=e,
            input=stdin if stdin is not None else "",
            capture_output=True,
            text=True,
            timeout=60,
        )
        return Result(p)


class Comm:
    """A private comm folder whose inbox lock identity is recorded the way the hub daemon records it."""

    def __init__(
        self, work: str, *, record: bool = True, install: bool = True, host: str = "testhost"
    ) -> None:
        from sotd.formats import lockmanager
        from sotd.formats.layout import Layout, ensure_home

        self.work = work
        self.home = os.path.join(work, "comm")
        self.host = host
        self.layout = Layout(self.home)
        ensure_home(self.layout)
        if record:
            lockmanager.write_for_hub(
                self.layout,
                lockmanager.lock_manager_of(self.layout.inbox_dir),
                lockmanager.machine_id_or_none(),
            )
        self.sessions: dict[str, Session] = {}
        if install:
            from sotd.cli.install.scripts import write_scripts as do_install

            do_install(self.layout, SOTD)

    def session(self, name: str) -> Session:
        if name not in self.sessions:
            self.sessions[name] = Session(self, name)
        return self.sessions[name]

    def inbox_bytes(self, handle: str) -> bytes:
        try:
            with open(self.layout.inbox(handle), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return b""


@pytest.fixture
def comm(tmp_path: object) -> Iterator[Comm]:
    yield Comm(str(tmp_path))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The fuzz tier's case count (``tests/fuzz/conftest.py`` records it per test), with its seed and budget."""
    total = tests = 0
    for kind in ("passed", "failed"):
        for rep in terminalreporter.stats.get(kind, []):
            got = dict(getattr(rep, "user_properties", [])).get("fuzz_cases")
            if getattr(rep, "when", "") == "call" and got is not None:
                total += int(got)
                tests += 1
    if tests:
        budget = os.environ.get("SOTD_FUZZ_BUDGET", "ci")
        seed = os.environ.get("SOTD_FUZZ_SEED", "") or "19"
        terminalreporter.write_line(
            f"fuzz tier: {total} cases in {tests} tests (seed {seed}, budget {budget}; "
            "set SOTD_FUZZ_SEED, or SOTD_FUZZ_BUDGET=long, to change them)"
        )


@pytest.fixture(autouse=True)
def _umask_kept() -> Iterator[None]:
    """Each test ends with the umask it began with: a command run in process (``sotd.cli.main`` sets 077
    for itself) must not leave a worker's later tests making folders a sandbox uid cannot search."""
    old = os.umask(0o022)
    os.umask(old)
    yield
    os.umask(old)


def long_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """The pass's tests with the ``long`` ones first, each group in its collected order (a stable sort)."""
    return sorted(items, key=lambda item: item.get_closest_marker("long") is None)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Start the ``long`` tests first (issue 31): under ``pytest -n`` the workers take tests in collected
    order, and a 30 s test collected last keeps one worker busy after the others have run dry. Every
    worker sorts the same collection the same way, as xdist requires."""
    items[:] = long_first(items)


def pytest_configure(config: pytest.Config) -> None:
    """Each pass ends with its tiers' wall times and its slowest tests (``tests/timing.py``)."""
    from tests.timing import Times

    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(Times(), "sotd-times")
