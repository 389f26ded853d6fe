"""``sotd web``'s OCX runs (issue 30 item 1: "OCX runs on this node with state, limits hit and outputs"),
from real runs: a loopback ``fossil server`` hub and nodes A and B (``tests/ocx/runkit.served_lab``); A
posts two runs to B's clone, B's node (the real ``sotd ocx node``) takes them and runs them under
bubblewrap with their limits: the seed's build, which passes and puts its image on record, and one that
writes past its 1 MiB ``file_size`` limit. ``sotd web`` runs with B's environment and its page, open
before B's node runs, shows both as they end, with no reload: outcome, the limit and the limits hit, the
output and its hash as ``ended`` put them on record.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.browser.conftest import Page, start_web, within
from tests.conftest import Comm, stop_proc
from tests.ocx import runkit as rk

pytestmark = [pytest.mark.root, pytest.mark.timeout(240)]

BIG = "mkdir -p $HOME/tree/out; head -c 4194304 /dev/zero > $HOME/tree/out/board.img"


@pytest.fixture
def node_b() -> Iterator[tuple[rk.Lab, str]]:
    """The lab, and the address of a ``sotd web`` started with node B's environment."""
    with rk.served_lab("sotd-webocx") as lab:
        env = dict(lab.envs["b"])
        comm = Comm(lab.top, record=False, install=False)  # B's comm folder: $SOT_COMM_HOME of runkit
        assert comm.home == env["SOT_COMM_HOME"]
        env.update(
            SOT_SELF_HOST=comm.host,
            SOT_COMM_TEST_HOST=comm.host,
            SOT_COMM_SELF_FILE=os.path.join(comm.home, "self", "web-session.txt"),
            SOT_SOCKET=os.path.join(lab.top, "no-daemon.sock"),
            SOT_DAEMON_AUTOSTART="off",
            PWD=lab.top,
        )
        web, url = start_web(env, lab.top, os.path.join(lab.top, "web.out"))
        try:
            yield lab, url
        finally:
            stop_proc(web)


def run_row(page: Page, run: str) -> list[str] | None:
    """The cells of the page's row for ``run`` (its first 16 hex digits), once its phase is ``done`` (the
    node records the ended body before the run's phase moves on: a row can show ``started`` beside its
    outcome for a moment)."""
    cells = page.driver.execute_script(
        "const r = document.querySelector('#ocx tr[data-run=\"' + arguments[0] + '\"]');"
        "return r ? Array.from(r.querySelectorAll('td')).map((td) => td.textContent) : null;",
        run[:16],
    )
    return cells if cells and cells[4] == "done" else None


def test_real_runs_show_with_their_outcome_limit_and_outputs(node_b: tuple[rk.Lab, str], page: Page) -> None:
    lab, url = node_b
    page.driver.get(url)
    within(10, lambda: page.driver.execute_script("return document.body.dataset.updated"), "the first state")
    assert page.driver.execute_script("return document.getElementById('ocx-why').textContent") == "(no runs)"
    code_b = lab.server_code("b")
    h_build = rk.post_run(lab, "a", rk.run_body(code_b, ["make", "-C", "$$tree$$", "image"]))
    h_big = rk.post_run(
        lab, "a", rk.run_body(code_b, ["sh", "-c", BIG], limits={"file_size": "1M", "wall": "1m"})
    )
    log = rk.node_once(lab, "b")
    assert log.count("accepted") == 2, log
    ended = {k: b for k, b, _ in rk.answers(lab, "a", h_build) if k == "ended"}
    image_hash = ended["ended"]["outputs"]["builds/board.img"]
    # the page reads the node's runs every 5 s (a read while the node ran may show a run still
    # ``started``): both rows done within the next read and the page's 2 s, with 3 s for a loaded machine
    build = within(10, lambda: run_row(page, h_build), "the build run's row, done")
    big = within(10, lambda: run_row(page, h_big), "the file_size run's row, done")
    page.shot("ocx-runs")
    # run, repo, to, sender, phase, outcome (limit), limits hit, outputs
    assert build[0] == h_build[:16] and build[2] == "lab-user", build
    assert (build[4], build[5], build[6]) == ("done", "passed", ""), build
    assert build[7] == f"builds/board.img {image_hash[:16]}", build
    assert big[0] == h_big[:16] and (big[4], big[5]) == ("done", "limit (file_size)"), big
    assert "file_size" in big[6].split(", "), big
