"""Behaviour 6.1, daemon only: one daemon thread at a time runs the registry-lock protocol (``regturn``)."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator

import pytest

from sotd.daemon import regturn
from sotd.errors import LockFailed
from sotd.formats import registry
from sotd.formats.layout import Layout

pytestmark = pytest.mark.unit


@pytest.fixture
def lay(tmp_path: object) -> Layout:
    lay = Layout(str(tmp_path))
    registry.ensure(lay)
    return lay


def read(lay: Layout) -> bytes:
    with open(lay.registry, "rb") as f:
        return f.read()


def stamp(doc: dict[str, object]) -> tuple[bool, str]:
    registry.agents_of(doc)["x"] = {"host": "h"}
    return True, "wrote"


@pytest.fixture
def turn_held() -> Iterator[threading.Event]:
    """Another thread of this "daemon" holds the turn until the event is set (at the latest, teardown)."""
    release = threading.Event()
    have = threading.Event()

    def hold() -> None:
        with regturn.TURN:
            have.set()
            release.wait(30)

    t = threading.Thread(target=hold, daemon=True)
    t.start()
    assert have.wait(10)
    yield release
    release.set()
    t.join(10)


def test_text_is_the_spec_sentence() -> None:
    assert regturn.not_tried_text("/c/.registry.lock") == (
        "registry lock /c/.registry.lock was not tried: another thread of this daemon held its turn past the bound"
    )


def test_bound_zero_is_one_try_at_the_turn(lay: Layout, turn_held: threading.Event) -> None:
    before = read(lay)
    t0 = time.monotonic()
    with pytest.raises(LockFailed) as e:
        regturn.update(lay, "h", stamp, bound=0)
    assert time.monotonic() - t0 < 0.5
    assert e.value.message == regturn.not_tried_text(lay.reglock)
    assert read(lay) == before
    assert not os.path.exists(lay.reglock)  # the lock itself was never tried


def test_waiting_for_the_turn_counts_toward_the_bound(lay: Layout, turn_held: threading.Event) -> None:
    t0 = time.monotonic()
    with pytest.raises(LockFailed) as e:
        regturn.update(lay, "h", stamp, bound=0.6)
    took = time.monotonic() - t0
    assert 0.55 <= took < 2.0, took
    assert e.value.message == regturn.not_tried_text(lay.reglock)


def test_the_lock_gets_what_is_left_of_the_bound(
    lay: Layout, turn_held: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[float] = []
    real = registry.update

    def spy(*a: object, bound: float, **kw: object) -> object:
        seen.append(bound)
        return real(*a, bound=bound, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(registry, "update", spy)
    timer_at = time.monotonic()
    threading.Timer(0.4, turn_held.set).start()
    late = time.monotonic() - timer_at  # a loaded machine may call update a while after the timer started
    _doc, got = regturn.update(lay, "h", stamp, bound=3.0)
    assert got == "wrote"
    assert len(seen) == 1 and 1.5 < seen[0] <= 3.0 - (0.4 - late) + 0.05, (seen, late)
    assert regturn.TURN.acquire(blocking=False)  # released after the write
    regturn.TURN.release()


def test_turn_is_released_when_the_change_raises(lay: Layout) -> None:
    def boom(doc: dict[str, object]) -> tuple[bool, None]:
        raise RuntimeError("x")

    with pytest.raises(RuntimeError):
        regturn.update(lay, "h", boom, bound=1)
    assert regturn.TURN.acquire(blocking=False)
    regturn.TURN.release()


def test_every_daemon_registry_write_goes_through_the_turn() -> None:
    """No daemon module but ``regturn`` runs the lock protocol itself (a source check)."""
    import sotd.daemon

    folder = os.path.dirname(sotd.daemon.__file__)
    direct = re.compile(r"\bregistry\.update\b|\bRegistryLock\b|\breglock\.hold\b|\bregistry\.touch\b")
    offenders = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".py") or name == "regturn.py":
            continue
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if direct.search(line):
                    offenders.append(f"{name}:{n}: {line.strip()}")
    assert offenders == []
