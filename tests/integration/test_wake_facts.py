"""The wake's reading shell (``daemon.wake.read_facts``): it hands the pure ``decide.stop_held`` the
asking handle's own registry entry, read through ``registry.agents_of`` / ``AgentRow`` (issue 16: the
registry's agent list has one home), and nothing when the registry cannot be read. Real files, real flock.
"""

from __future__ import annotations

import pytest

from sotd import _clock
from sotd.daemon import decide
from sotd.daemon.wake import read_facts
from sotd.formats import inbox, registry
from sotd.formats.layout import Layout, ensure_home

pytestmark = pytest.mark.integration


def _box(tmp_path, registry_bytes: bytes) -> Layout:
    lay = Layout(str(tmp_path / "comm"))
    ensure_home(lay, {"SOT_COMM_HOME": lay.home})
    line = inbox.encode_line("a", "b", "", "hi", _clock.stamp())
    inbox.append(lay, "b", line, nfs=False, bound=2.0)
    with open(lay.registry, "wb") as f:
        f.write(registry_bytes)
    return lay


def test_the_entry_is_the_asking_handles_own(tmp_path) -> None:
    mark = _clock.stamp()
    doc = {"protocol_version": 1, "agents": {"b": {"host": "h"}, "c": {"host": "h", "stop_at": mark}}}
    lay = _box(tmp_path, registry.encode(doc))
    facts = read_facts(lay, "b", None)
    assert facts is not None and facts.unread == 1
    assert facts.entry == {"host": "h"}
    assert decide.stop_held(facts.entry, _clock.now()) is False  # c's mark does not hold b
    held = read_facts(lay, "c", None)
    assert held is not None and held.entry is None  # c has no unread mail: its entry is not read


def test_an_unreadable_registry_gives_no_entry(tmp_path) -> None:
    lay = _box(tmp_path, b'{"agents": []}\n')
    facts = read_facts(lay, "b", None)
    assert facts is not None and facts.unread == 1 and facts.entry is None
