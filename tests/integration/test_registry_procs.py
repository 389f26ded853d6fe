"""Behaviour 6.2: many real processes doing read-decide-write under the real registry lock."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from sotd.errors import RegistryUnreadable
from sotd.formats import registry
from sotd.formats.layout import Layout

pytestmark = pytest.mark.integration

WRITER = r"""
import os, sys, time
from sotd.formats import registry
from sotd.formats.layout import Layout
lay = Layout(sys.argv[1]); name = sys.argv[2]; go = sys.argv[3]
deadline = time.monotonic() + 20
while not os.path.exists(go) and time.monotonic() < deadline:
    time.sleep(0.005)
def change(doc):
    registry.put(doc, name, {"root": "/r/" + name, "last_seen": "2026-01-01T00:00:00Z"})
    return True, None
registry.update(lay, "testhost", change, bound=40)
"""


def test_6_2_32_writers_lose_nothing_reader_sees_one_document(tmp_path: object) -> None:
    lay = Layout(os.path.join(str(tmp_path), "comm"))
    os.makedirs(lay.home)
    registry.ensure(lay)
    go = os.path.join(str(tmp_path), "go")
    env = {**os.environ, "SOT_COMM_HOME": lay.home}
    names = [f"w{i:02d}" for i in range(32)]
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, lay.home, n, go], env=env, stderr=subprocess.PIPE)
        for n in names
    ]
    stop = threading.Event()
    bad: list[str] = []
    reads = [0]

    def reader() -> None:
        deadline = time.monotonic() + 60
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                doc = registry.read(lay)
            except RegistryUnreadable as e:
                bad.append(e.message)
                continue
            if doc is None:
                bad.append("absent")
            reads[0] += 1

    t = threading.Thread(target=reader)
    t.start()
    time.sleep(0.3)
    with open(go, "w"):
        pass
    errs = []
    for p in procs:
        _out, err = p.communicate(timeout=50)
        if p.returncode:
            errs.append(err.decode())
    stop.set()
    t.join(10)
    assert errs == []
    assert bad == []
    assert reads[0] > 0
    doc = registry.read(lay)
    assert doc is not None
    assert sorted(registry.agents_of(doc)) == names
    assert sorted(n for n in os.listdir(lay.home) if n.startswith("registry.json")) == ["registry.json"]
    assert not os.path.exists(lay.reglock)
