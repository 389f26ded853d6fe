"""Fixtures of the browser tier (tests/browser): a comm folder with its real daemon and rows' tmux server,
a real ``sotd web`` beside it, and Debian's Chromium (headless) driven by Selenium through Debian's
``/usr/bin/chromedriver`` (scripts/setup installs both; Selenium's own browser downloads are not used).

Every test here is marked ``browser`` and ``serial`` (added below): the page's 2 s promises are read
against a clock, so these run in the serial group, one at a time, not beside the parallel pass.
A screenshot of each state a test reaches is kept under ``tests/artifacts/browser/<test>/`` (or
``$SOTD_TEST_ARTIFACTS``), never committed. Every wait is bounded.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import SOTD, wait_for
from tests.integration.test_rows import Box

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ARTIFACTS = os.environ.get("SOTD_TEST_ARTIFACTS") or os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "artifacts", "browser"
)


@pytest.hookimpl(tryfirst=True)  # before -m deselects: the serial pass must see these marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "/tests/browser/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.browser)
            item.add_marker(pytest.mark.serial)


class Fleet:
    """A comm folder, its daemon and the daemon's tmux server (``tests.integration.test_rows.Box``), and
    ``sotd web`` beside them."""

    def __init__(self) -> None:
        self.box = Box(prefix="sb-")
        self.work, self.home, self.layout = self.box.work, self.box.home, self.box.layout
        self.sock, self.state, self.tmux, self.env = (
            self.box.sock,
            self.box.state,
            self.box.tmux,
            self.box.env,
        )
        self.procs: list[subprocess.Popen[bytes]] = []
        # the person at this box: a handle of their own, in a project folder, who starts `sotd web`
        self.me = self.session("boss")
        assert self.run(self.me, "join", "boss").code == 0
        self.web_log = os.path.join(self.work, "web.err")
        out = os.path.join(self.work, "web.out")
        with open(out, "wb") as o, open(self.web_log, "wb") as e:
            self.procs.append(
                subprocess.Popen([SOTD, "web"], env=self.me["env"], cwd=self.me["root"], stdout=o, stderr=e)
            )

        def url() -> str | None:
            with open(out, encoding="utf-8") as f:
                first = f.readline()
            return first.strip() if first.endswith("\n") else None  # the whole first line

        self.url: str = wait_for(url, what="sotd web to print its address")
        m = re.fullmatch(r"(http://127\.0\.0\.1:(\d+))/\?s=([A-Za-z0-9_-]+)", self.url)
        assert m, self.url
        self.base, self.port, self.secret = m.group(1), int(m.group(2)), m.group(3)

    def request(self, op: str, payload: dict[str, Any], deadline_s: float = 10.0) -> dict[str, Any]:
        return self.box.request(op, payload, deadline_s=deadline_s)

    def session(self, name: str) -> dict[str, Any]:
        root = os.path.realpath(os.path.join(self.work, name))
        os.makedirs(root, exist_ok=True)
        env = dict(self.env)
        env.update(SOT_COMM_SELF_FILE=os.path.join(self.home, "self", f"{name}-session.txt"), PWD=root)
        return {"root": root, "env": env}

    def run(self, who: dict[str, Any], *args: str) -> Any:
        from tests.conftest import Result

        p = subprocess.run(
            [SOTD, "comm", *args],
            cwd=who["root"],
            env=who["env"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return Result(p)

    def inbox_bytes(self, handle: str) -> bytes:
        try:
            with open(self.layout.inbox(handle), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return b""

    def close(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
        self.box.close()


@pytest.fixture
def fleet() -> Iterator[Fleet]:
    if shutil.which("tmux") is None:
        pytest.fail("the browser tier needs tmux (scripts/setup installs it)")
    f = Fleet()
    yield f
    f.close()


@pytest.fixture(scope="session")
def chromium_ok() -> None:
    for exe in (CHROMIUM, CHROMEDRIVER):
        if not os.access(exe, os.X_OK):
            pytest.fail(
                f"the browser tier needs {exe} (scripts/setup --tests installs chromium and chromium-driver)"
            )


class Page:
    """One headless Chromium on the page; ``shot(name)`` keeps a screenshot of the state it shows."""

    def __init__(self, folder: str) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        for a in (
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--window-size=1280,1000",
        ):
            opts.add_argument(a)
        self.folder = folder
        self.user_data = tempfile.mkdtemp(prefix="sb-chrome-", dir="/tmp")
        opts.add_argument(f"--user-data-dir={self.user_data}")
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
        os.makedirs(folder, exist_ok=True)

    def shot(self, name: str) -> str:
        path = os.path.join(self.folder, f"{name}.png")
        self.driver.save_screenshot(path)
        return path

    def close(self) -> None:
        self.driver.quit()
        shutil.rmtree(self.user_data, ignore_errors=True)


@pytest.fixture
def page(chromium_ok: None, request: pytest.FixtureRequest) -> Iterator[Page]:
    p = Page(os.path.join(ARTIFACTS, request.node.name))
    yield p
    p.close()


def start_web(env: dict[str, str], cwd: str, out: str) -> tuple[subprocess.Popen[bytes], str]:
    """``sotd web`` started with ``env`` in ``cwd`` (stdout to ``out``, stderr beside it), and the address
    it prints as its whole first line."""
    with open(out, "wb") as o, open(out + ".err", "wb") as e:
        proc = subprocess.Popen([SOTD, "web"], env=env, cwd=cwd, stdout=o, stderr=e)

    def first() -> str | None:
        with open(out, encoding="utf-8") as f:
            line = f.readline()
        return line.strip() if line.endswith("\n") else None

    return proc, str(wait_for(first, 20, "sotd web's address"))


def within(secs: float, pred: Any, what: str) -> Any:
    """``pred`` true within ``secs`` (the page's promise), polled every 50 ms; the value it gave."""
    deadline = time.monotonic() + secs
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {secs} s: {what}")
        time.sleep(0.05)
