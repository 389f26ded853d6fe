"""Remote spawn and despawn, for real (issue 20): a session on the hub (boxa) spawns a row on the guest
boxb through ``--endpoint ssh:boxb/boxb``, over a real sshd, into boxb's daemon and its private tmux.

boxb's daemon runs in its own mount namespace with a tmpfs over ``<boxb>/private`` holding ``proj``: the
project folder exists on the target only (from boxa, ``<boxb>/private`` is empty), so a spawn that
checked the path on the spawning box would refuse it. boxb has run ``sotd comm install`` (docs/deploy.md),
so its rows find ``comm-join.sh`` and ``comm-send.sh`` in its own comm folder.

Checked: the path is checked on the target (a path the target lacks gets the target daemon's sentence);
``--agent none`` with ``--command`` makes a row that is ready at once; the task mail reaches the row's
handle on boxb and names a command present there; a row that is not ready prints a despawn hint that
works as printed (it carries the endpoint); a remote despawn removes the row's self-file slot on the
target; spawn's stdout and stderr, captured to one file, come in the order they were written.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.conftest import SOTD, wait_for
from tests.multihost.conftest import build_net
from tests.multihost.test_cross_box import World

pytestmark = [pytest.mark.multihost, pytest.mark.serial, pytest.mark.root, pytest.mark.timeout(180)]

EP = "ssh:boxb/boxb"


class SpawnWorld(World):
    def private(self) -> str:
        return os.path.join(self.net.boxes["boxb"].dir, "private")

    def start(self, box: str) -> None:
        if box != "boxb":
            super().start(box)
            return
        os.makedirs(self.private(), exist_ok=True)
        script = 'mount -t tmpfs tmpfs "$0" && mkdir "$0/proj" && exec "$@"'
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, self.private()]
        with open(self.log(box), "ab") as logf:
            self.daemons[box] = self.net.popen(
                box, [*argv, SOTD, "daemon", "run"], stdin=subprocess.DEVNULL, stdout=logf, stderr=logf
            )
        wait_for(lambda: self.net.run(box, [SOTD, "daemon", "status"]).returncode == 0, what="boxb's daemon")


@pytest.fixture(scope="module")
def world() -> Iterator[SpawnWorld]:
    for net in build_net(["boxa", "boxb"]):
        w = SpawnWorld(net)
        try:
            w.start("boxa")
            w.start("boxb")
            w.wait_link("boxb")
            r = net.run("boxb", [SOTD, "comm", "install"])
            assert r.returncode == 0, r
            assert w.comm("boxa", "hank", "join", "--name", "hank").code == 0
            yield w
        finally:
            for box in list(w.daemons):
                w.stop(box)


def spawn_to_file(world: SpawnWorld, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """``sotd comm spawn`` as hank on boxa with stdout and stderr on one file, as a user's ``> f 2>&1``."""
    e, cwd = world.session_env("boxa", "hank")
    e.update(env or {})
    out = os.path.join(world.net.base, f"spawn-{time.monotonic_ns()}.txt")
    argv = ["sh", "-c", '"$@" > "$0" 2>&1', out, SOTD, "comm", "spawn", *args]
    r = world.net.run("boxa", argv, env=e, cwd=cwd, timeout=120)
    with open(out) as f:
        return r.returncode, f.read()


def test_the_path_is_checked_on_the_target(world: SpawnWorld) -> None:
    proj = os.path.join(world.private(), "proj")
    assert not os.path.exists(proj)  # not on the spawning box
    missing = os.path.join(world.private(), "nowhere")
    code, text = spawn_to_file(world, missing, "--agent", "none", "--command", "sleep 60", "--endpoint", EP)
    assert code == 1
    said = json.dumps(
        {
            "error": f"project root {missing} cannot be resolved: No such file or directory",
            "code": "bad_request",
        }
    )
    hint = "see the rows and their phases: sotd doctor\n"  # issue 13: the next step, on its own line
    assert text == f"ERROR: workspace.create failed via {EP}\n  daemon said: {said}\n{hint}", (
        text
    )  # behaviour 1.10


def test_agent_none_command_row_is_ready_and_gets_its_task(world: SpawnWorld) -> None:
    proj = os.path.join(world.private(), "proj")
    cmd = "sh -c 'comm-join.sh --name rob; exec sleep 600'"
    code, text = spawn_to_file(
        world,
        proj,
        "--name",
        "rob",
        "--agent",
        "none",
        "--command",
        cmd,
        "--endpoint",
        EP,
        "--task",
        "say hi",
    )
    assert code == 0, text
    lines = text.splitlines()
    m = re.fullmatch(rf"Created workspace 'proj' \(slug=proj, id=(ws-[0-9a-f]+)\) via {EP}", lines[0])
    assert m, text
    wid = m.group(1)
    assert f"Capsule row ready (id={wid}, phase=ready)" in lines, text
    assert lines[-1] == "filed -> @rob", text
    (mail,) = world.inbox("boxb", "rob")
    assert mail["from"] == "hank"
    home_b = world.comms["boxb"].home
    send = os.path.join(home_b, "bin", "comm-send.sh")
    assert mail["msg"] == (
        f"Task from @hank: say hi — reply to @hank via {send} when done or blocked (say what you found or "
        "what you need)."
    )
    assert os.access(send, os.X_OK)  # the command the mail names is there, on the target
    # a remote despawn by name: the row, and its self-file slot in the target's folder, are gone
    slot = os.path.join(home_b, "self", f"boxb__{wid}.txt")
    wait_for(lambda: os.path.exists(slot), what="the row's self-file slot")
    r = world.comm("boxa", "hank", "despawn", "rob", "--endpoint", EP)
    assert r.code == 0, r
    assert r.out.startswith("Destroyed workspace: "), r
    assert not os.path.exists(slot)


def test_the_printed_despawn_hint_works_and_output_keeps_its_order(world: SpawnWorld) -> None:
    proj2 = os.path.join(world.private(), "proj")
    # a claude row whose command never shows a Claude prompt: not ready within the short wait
    code, text = spawn_to_file(
        world,
        proj2,
        "--name",
        "slow",
        "--command",
        "sleep 600",
        "--endpoint",
        EP,
        env={"SOT_COMM_SPAWN_CAPSULE_WAIT": "3"},
    )
    assert code == 1, text
    lines = text.splitlines()
    assert lines[0].startswith("Created workspace 'proj' "), text  # stdout's line first, as written
    hint = re.search(r"remove it with (.+)$", lines[-2] if "rolled back" in lines[-1] else lines[-1])
    assert hint, text
    argv = shlex.split(hint.group(1))
    assert argv[:3] == ["sotd", "comm", "despawn"] and argv[-2:] == ["--endpoint", EP], argv
    r = world.comm("boxa", "hank", *argv[2:])
    assert r.code == 0, r
    assert r.out.startswith("Destroyed workspace: "), r
