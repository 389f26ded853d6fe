"""Behaviour 6.1 under forced interleavings: threads driven through ``reglock._hook`` with events, no sleeps.

Each thread plays a separate taker by its own record (another host name, or a start tick that makes it a
proved-dead record), so the judge sees exactly what it would see across processes.
"""

from __future__ import annotations

import os
import queue
import threading

import pytest

from sotd.errors import LockFailed
from sotd.formats import holder, reglock
from sotd.formats.holder import Holder
from sotd.formats.layout import Layout
from sotd.formats.reglock import RegistryLock, take_file

pytestmark = [pytest.mark.races, pytest.mark.timeout(60)]

WAIT = 10.0  # the most any event wait may take before the test fails


class Router:
    """The module hook, dispatching each point to a per-thread handler."""

    def __init__(self) -> None:
        self.by_thread: dict[str, dict[str, object]] = {}
        self.lock = threading.Lock()

    def on(self, thread: str, point: str, fn: object) -> None:
        with self.lock:
            self.by_thread.setdefault(thread, {})[point] = fn

    def __call__(self, point: str) -> None:
        with self.lock:
            fn = self.by_thread.get(threading.current_thread().name, {}).get(point)
        if fn is not None:
            fn()  # type: ignore[operator]


@pytest.fixture
def router(monkeypatch) -> Router:
    r = Router()
    monkeypatch.setattr(reglock, "_hook", r)
    return r


@pytest.fixture
def lay(tmp_path) -> Layout:
    lay = Layout(str(tmp_path / "comm"))
    os.makedirs(lay.home)
    return lay


@pytest.fixture
def me() -> Holder:
    return holder.own("me")


def dead(me: Holder, name: str, start: str) -> Holder:
    return Holder(name, me.machine, me.boot, me.pidns, me.pid, start)


def content(path: str) -> str:
    with open(path) as f:
        return f.read()


def put_record(path: str, h: Holder) -> None:
    with open(path, "w") as f:
        f.write(h.record() + "\n")


FINISHED: queue.Queue[str] = queue.Queue()


def run(name: str, fn, results: dict[str, object]) -> threading.Thread:
    def body() -> None:
        try:
            results[name] = fn()
        except BaseException as e:
            results[name] = e
        FINISHED.put(name)

    t = threading.Thread(target=body, name=name, daemon=True)
    t.start()
    return t


def once(fn):
    """``fn`` on the first call only (per hook registration)."""
    state = {"done": False}

    def wrapper() -> None:
        if not state["done"]:
            state["done"] = True
            fn()

    return wrapper


def must(ev: threading.Event) -> None:
    assert ev.wait(WAIT), "an interleaving step never happened"


def test_6_1_race_two_takers_exactly_one_wins(lay, router):
    """Both reach the link together; the link never replaces, so exactly one holds and the other names it."""
    for _round in range(10):
        barrier = threading.Barrier(2, timeout=WAIT)
        results: dict[str, object] = {}
        locks = {n: RegistryLock(lay, n, 0, settle=0) for n in ("a", "b")}
        for n in locks:
            router.on(n, "before_link", barrier.wait)
        threads = [run(n, locks[n].acquire, results) for n in locks]
        for t in threads:
            t.join(WAIT)
            assert not t.is_alive()
        winners = [n for n in locks if results[n] is None]
        losers = [n for n in locks if isinstance(results[n], LockFailed)]
        assert len(winners) == 1 and len(losers) == 1, results
        w, lo = winners[0], losers[0]
        rec = locks[w].me
        assert content(lay.reglock) == rec.record() + "\n"
        assert str(results[lo]) == (
            f"registry lock {lay.reglock} is held by {w} pid {rec.pid} start {rec.start} (0s old): it is running."
            f" If it is dead, run any comm command on {w}."
        )
        locks[w].release()
        assert os.listdir(lay.home) == []


def test_6_1_race_many_links_at_once_one_true(lay):
    n = 8
    barrier = threading.Barrier(n, timeout=WAIT)
    results: dict[str, object] = {}

    def one(i: int):
        return lambda: (barrier.wait(), take_file(lay.reglock, lay.reglock_tmp(f"t{i}"), f"{i}\n".encode()))[
            1
        ]

    threads = [run(f"t{i}", one(i), results) for i in range(n)]
    for t in threads:
        t.join(WAIT)
    assert sorted(map(str, results.values())) == ["False"] * (n - 1) + ["True"]
    winner = next(k for k, v in results.items() if v is True)
    assert content(lay.reglock) == winner[1:] + "\n"
    assert sorted(os.listdir(lay.home)) == [".registry.lock"]


def test_6_1_race_take_while_reclaimer_settles_names_unfinished_reclaim(lay, router, me):
    """T tries while R holds D's marker and settles: T must not touch the lock and names R's reclaim."""
    d = dead(me, "d", "1")
    put_record(lay.reglock, d)
    in_settle, t_done = threading.Event(), threading.Event()
    results: dict[str, object] = {}
    r_lock = RegistryLock(lay, "r", 0, settle=0)
    t_lock = RegistryLock(lay, "t", 0, settle=0)
    router.on("R", "settle", lambda: (in_settle.set(), must(t_done)))
    r = run("R", r_lock.acquire, results)
    must(in_settle)
    tt = run("T", t_lock.acquire, results)
    tt.join(WAIT)
    assert isinstance(results["T"], LockFailed)
    assert (
        f": it is dead, but its reclaim by r pid {me.pid} did not finish: it is running. If it is dead, run any"
        " comm command on d." in str(results["T"])
    )
    assert content(lay.reglock) == d.record() + "\n"
    t_done.set()
    r.join(WAIT)
    assert results["R"] is None
    assert content(lay.reglock) == r_lock.me.record() + "\n"
    r_lock.release()


def test_6_1_race_take_right_after_remove_wins_and_reclaimer_loses_retake(lay, router, me):
    d = dead(me, "d", "1")
    put_record(lay.reglock, d)
    removed, taken = threading.Event(), threading.Event()
    results: dict[str, object] = {}
    r_lock = RegistryLock(lay, "r", 0, settle=0)
    t_lock = RegistryLock(lay, "t", 0, settle=0)
    router.on("R", "after_remove", lambda: (removed.set(), must(taken)))
    r = run("R", r_lock.acquire, results)
    must(removed)
    tt = run("T", lambda: (t_lock.acquire(), taken.set()), results)
    tt.join(WAIT)
    r.join(WAIT)
    assert results["T"] == (None, None)
    assert isinstance(results["R"], LockFailed)
    assert "another process took it as soon as a dead holder's lock was removed" in str(results["R"])
    assert f"is held by t pid {me.pid} start {me.start}" in str(results["R"])
    assert content(lay.reglock) == t_lock.me.record() + "\n"
    t_lock.release()
    assert not os.path.exists(lay.reglock)


def test_6_1_race_taken_again_during_settle_is_never_removed(lay, router, me):
    """D's lock vanishes during R's settle and T takes it: R's re-read names T, so R leaves it alone."""
    d = dead(me, "d", "1")
    put_record(lay.reglock, d)
    in_settle = threading.Event()
    results: dict[str, object] = {}
    r_lock = RegistryLock(lay, "r", 0, settle=0)
    t_lock = RegistryLock(lay, "t", 0, settle=0)
    gate = threading.Event()
    router.on("R", "settle", lambda: (in_settle.set(), must(gate)))
    r = run("R", r_lock.acquire, results)
    must(in_settle)
    os.unlink(lay.reglock)
    tt = run("T", t_lock.acquire, results)
    tt.join(WAIT)
    assert results["T"] is None
    gate.set()
    r.join(WAIT)
    assert isinstance(results["R"], LockFailed)
    assert str(results["R"]) == (
        f"registry lock {lay.reglock} is held by t pid {me.pid} start {me.start} (0s old): it was taken again"
        " during the reclaim. If it is dead, run any comm command on t."
    )
    assert content(lay.reglock) == t_lock.me.record() + "\n"
    t_lock.release()


def test_6_1_race_two_reclaimers_one_marker(lay, router, me):
    """Two waiters prove D dead at once: one marker, so one remover; the other names the reclaim."""
    d = dead(me, "d", "1")
    put_record(lay.reglock, d)
    barrier = threading.Barrier(2, timeout=WAIT)
    results: dict[str, object] = {}
    locks = {n: RegistryLock(lay, n, 0, settle=0) for n in ("a", "b")}
    removes: list[str] = []
    hold_settle = threading.Event()
    while not FINISHED.empty():
        FINISHED.get_nowait()
    for n in locks:
        router.on(n, "judged", once(barrier.wait))
        router.on(n, "settle", lambda: must(hold_settle))
        router.on(n, "before_remove", lambda n=n: removes.append(n))
    threads = [run(n, locks[n].acquire, results) for n in locks]
    # the loser of the marker finishes first (the winner waits in its settle)
    done_first = FINISHED.get(timeout=WAIT)
    hold_settle.set()
    for t in threads:
        t.join(WAIT)
    assert isinstance(results[done_first], LockFailed)
    assert "did not finish: it is running" in str(results[done_first])
    winner = next(n for n in locks if n != done_first)
    assert results[winner] is None and removes == [winner]
    assert content(lay.reglock) == locks[winner].me.record() + "\n"
    locks[winner].release()


class _Died(BaseException):
    """A reclaimer that dies mid-settle (its thread ends with its marker taken)."""


def test_6_1_race_marker_chain_reclaimer_died_too(lay, router, me):
    d = dead(me, "d", "1")
    r1 = dead(me, "r1", "3")  # R1's record is provably dead from here: its pid names another process
    put_record(lay.reglock, d)
    results: dict[str, object] = {}
    r1_lock = RegistryLock(lay, "r1", 0, settle=0, me=r1)

    def die() -> None:
        raise _Died

    router.on("R1", "settle", die)
    t = run("R1", r1_lock.acquire, results)
    t.join(WAIT)
    assert isinstance(results["R1"], _Died)
    m_d = lay.reclaim_marker(d.holder_id())
    assert content(m_d) == r1.record() + "\n"
    assert content(lay.reglock) == d.record() + "\n"

    r2_lock = RegistryLock(lay, "r2", 0, settle=0)
    t = run("R2", r2_lock.acquire, results)
    t.join(WAIT)
    assert results["R2"] is None
    assert content(lay.reglock) == r2_lock.me.record() + "\n"
    assert content(m_d) == r1.record() + "\n"  # markers are never removed
    assert content(lay.reclaim_marker(r1.holder_id())) == r2_lock.me.record() + "\n"
    r2_lock.release()


def test_6_1_race_release_after_reclaimed_never_removes_new_lock(lay, router, me):
    """A holder whose lock was (wrongly) reclaimed must not remove the next holder's lock on release."""
    a = RegistryLock(lay, "a", 0, settle=0)
    a.acquire()
    os.unlink(lay.reglock)
    b = RegistryLock(lay, "b", 0, settle=0)
    b.acquire()
    a.release()
    assert content(lay.reglock) == b.me.record() + "\n"
    b.release()
