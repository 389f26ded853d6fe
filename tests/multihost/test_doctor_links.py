"""``sotd doctor``'s hub and link check over real ssh (issue 13, part 4: "the hub and every link in
``hosts.toml``: reachable over its ssh route, the same comm folder or not").

Two boxes in their own network namespaces, each with its own sshd, comm folder and daemon: boxa the hub,
boxb a guest (tests/multihost/netns.py). Checked: on the hub, boxb answers over ``ssh:boxb/boxb`` and is
reported as serving another comm folder (each box has its own here); on the guest, the hub answers over
its route, likewise another folder; boxb's daemon stopped, the hub's doctor reports ``box_unreachable``
with the fix ``on boxb: sotd daemon start``, and once that is done the finding is gone. The same-folder
verdict is tested over the unix route in tests/newcomer/test_doctor.py::test_box_unreachable (two daemons
of one folder); the marks' comparison in tests/unit/test_folder_mark.py.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import SOTD
from tests.multihost.conftest import build_net
from tests.multihost.test_cross_box import World

TOPOLOGY = 'hub = "boxa"\n\n[boxes.boxa]\nssh = "boxa"\n\n[boxes.boxb]\nssh = "boxb"\n'

pytestmark = [pytest.mark.multihost, pytest.mark.serial, pytest.mark.root, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    for net in build_net(["boxa", "boxb"]):
        w = World(net)
        for comm in w.comms.values():  # two boxes only (the World's own topology names a third)
            with open(os.path.join(comm.home, "hosts.toml"), "w") as f:
                f.write(TOPOLOGY)
        try:
            w.start("boxa")
            w.start("boxb")
            yield w
        finally:
            for box in list(w.daemons):
                w.stop(box)


def doctor(w: World, box: str) -> tuple[dict[str, Any], list[str]]:
    r = w.net.run(box, [SOTD, "doctor", "--json"])
    doc = json.loads(r.stdout)
    assert r.returncode == (0 if doc["healthy"] else 1), r
    return {f["code"]: f for f in doc["findings"]}, doc["ok"]


def test_the_hub_sees_each_guest_over_ssh_and_its_own_folder(world: World) -> None:
    found, ok = doctor(world, "boxa")
    assert "box_unreachable" not in found, found
    there = world.net.boxes["boxb"].comm_home
    here = world.net.boxes["boxa"].comm_home
    assert f"boxb: answers over ssh:boxb/boxb; another comm folder ({there} there; {here} here)" in ok, ok


def test_a_guest_sees_the_hub_over_its_route(world: World) -> None:
    found, ok = doctor(world, "boxb")
    assert "box_unreachable" not in found, found
    there = world.net.boxes["boxa"].comm_home
    here = world.net.boxes["boxb"].comm_home
    assert f"boxa: answers over ssh:boxa/boxa; another comm folder ({there} there; {here} here)" in ok, ok


def test_a_stopped_guest_is_unreachable_until_started(world: World) -> None:
    world.stop("boxb")
    found, _ok = doctor(world, "boxa")
    f = found["box_unreachable"]
    assert f["what"].startswith("the daemon of boxb does not answer over ssh:boxb/boxb ("), f
    assert f["fix"] == "on boxb: sotd daemon start (its daemon is down); then on boxa: sotd doctor", f
    world.start("boxb")  # the fix, run on boxb (its daemon in the foreground, as the World starts it)
    found, ok = doctor(world, "boxa")
    assert "box_unreachable" not in found, found
    assert any(line.startswith("boxb: answers over ssh:boxb/boxb; ") for line in ok), ok
    assert os.path.isdir(world.net.boxes["boxb"].comm_home)
