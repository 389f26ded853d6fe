"""Behaviour 6.1: take, fresh read, wait loop, reclaim step and every FAILED sentence (one process)."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from sotd.errors import LockFailed
from sotd.formats import holder, reglock
from sotd.formats.holder import Holder
from sotd.formats.layout import Layout
from sotd.formats.reglock import RegistryLock, take_file

pytestmark = pytest.mark.unit

T0 = 1_800_000_000.0


class Clock:
    """A fake wall clock; ``sleep`` advances it (settles and polls cost no real time)."""

    def __init__(self, t: float = T0) -> None:
        self.t = t
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, d: float) -> None:
        self.sleeps.append(d)
        self.t += d


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(reglock, "_wallclock", c.now)
    monkeypatch.setattr(reglock, "_sleep", c.sleep)
    return c


@pytest.fixture
def lay(tmp_path) -> Layout:
    return Layout(str(tmp_path / "comm"))


@pytest.fixture
def hooks(monkeypatch):
    """Record hook points; ``on[point]`` runs a callable there."""

    class Hooks:
        def __init__(self) -> None:
            self.seen: list[str] = []
            self.on: dict[str, object] = {}

        def __call__(self, point: str) -> None:
            self.seen.append(point)
            fn = self.on.get(point)
            if fn is not None:
                fn()  # type: ignore[operator]

    h = Hooks()
    monkeypatch.setattr(reglock, "_hook", h)
    return h


@pytest.fixture
def me() -> Holder:
    return holder.own("me")


def dead(me: Holder, name: str = "d", start: str = "1") -> Holder:
    """A record proved dead from here: this pid, another start tick (its pid now names another process)."""
    return Holder(name, me.machine, me.boot, me.pidns, me.pid, start)


def alive(me: Holder, name: str = "t") -> Holder:
    """A record that is running: this very process under another host name."""
    return Holder(name, me.machine, me.boot, me.pidns, me.pid, me.start)


def put(path: str, content: str | bytes, mtime: float | None = T0) -> None:
    data = content.encode() if isinstance(content, str) else content
    with open(path, "wb") as f:
        f.write(data)
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def put_record(path: str, h: Holder, mtime: float | None = T0) -> None:
    put(path, h.record() + "\n", mtime)


def content(path: str) -> str:
    with open(path) as f:
        return f.read()


def fail_text(lk: RegistryLock) -> str:
    with pytest.raises(LockFailed) as ei:
        lk.acquire()
    assert not lk.held
    return ei.value.message


@pytest.fixture(autouse=True)
def _comm(lay):
    os.makedirs(lay.home)


# ---------------------------------------------------------------------------------------------- env


@pytest.mark.parametrize(
    ("value", "want"),
    [(None, 10.0), ("10", 10.0), ("0", 0.0), ("0.2", 0.2), ("0.5", 0.5), (" 3 ", 3.0), ("1e1", 10.0),
     ("", 10.0), ("abc", 10.0), ("-1", 10.0), ("nan", 10.0), ("inf", 10.0)],
)  # fmt: skip
def test_1_13_wait_bound_env(value, want):
    env = {} if value is None else {"SOT_LOCK_WAIT_SECS": value}
    assert reglock.wait_bound(env) == want


@pytest.mark.parametrize(
    ("value", "want"), [(None, 1.0), ("0", 0.0), ("0.05", 0.05), ("x", 1.0), ("-2", 1.0)]
)
def test_1_13_settle_env(value, want, lay, monkeypatch):
    env = {} if value is None else {"SOT_COMM_TEST_LOCK_SETTLE": value}
    assert reglock.settle_secs(env) == want
    monkeypatch.delenv("SOT_COMM_TEST_LOCK_SETTLE", raising=False)
    if value is not None:
        monkeypatch.setenv("SOT_COMM_TEST_LOCK_SETTLE", value)
    assert RegistryLock(lay, "h", 1).settle == want
    assert RegistryLock(lay, "h", 1, settle=0.25).settle == 0.25


# ---------------------------------------------------------------------------------------------- take


def test_6_1_take_links_synced_temp_and_removes_it(lay, me):
    tmp = lay.reglock_tmp(me.holder_id())
    assert take_file(lay.reglock, tmp, b"rec\n") is True
    assert content(lay.reglock) == "rec\n"
    assert not os.path.exists(tmp)
    assert stat.S_IMODE(os.stat(lay.reglock).st_mode) == 0o600
    assert os.stat(lay.reglock).st_nlink == 1


def test_6_1_take_eexist_is_held_and_never_replaces(lay):
    put(lay.reglock, "first\n")
    assert take_file(lay.reglock, lay.reglock_tmp("x"), b"second\n") is False
    assert content(lay.reglock) == "first\n"
    assert not os.path.exists(lay.reglock_tmp("x"))


def test_6_1_take_removes_stale_temp(lay):
    tmp = lay.reglock_tmp("x")
    put(tmp, "stale junk from a dead try\n")
    assert take_file(lay.reglock, tmp, b"fresh\n") is True
    assert content(lay.reglock) == "fresh\n"


def test_6_1_take_directory_at_lock_path_is_held(lay):
    os.mkdir(lay.reglock)
    assert take_file(lay.reglock, lay.reglock_tmp("x"), b"r\n") is False


def test_6_1_take_link_error_but_same_file_is_success(lay, monkeypatch):
    """NFSv3 retransmit: the link happened but its answer was lost (EEXIST/EIO); st_nlink 2 says ours."""
    real_link = os.link

    def link_then_fail(src, dst, *a, **kw):
        real_link(src, dst)
        raise OSError(errno.EEXIST, "File exists")

    monkeypatch.setattr(os, "link", link_then_fail)
    assert take_file(lay.reglock, lay.reglock_tmp("x"), b"mine\n") is True
    assert content(lay.reglock) == "mine\n"
    assert not os.path.exists(lay.reglock_tmp("x"))


def test_6_1_take_other_link_error_cannot_be_taken(lay, me, monkeypatch):
    def eperm(*a, **kw):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", eperm)
    msg = fail_text(RegistryLock(lay, "me", 5, me=me))
    assert msg == (
        f"registry lock {lay.reglock} cannot be taken: cannot hard-link in {lay.home}: Operation not permitted"
    )
    assert not os.path.exists(lay.reglock)
    assert os.listdir(lay.home) == []


def test_6_1_take_temp_unwritable_cannot_be_taken(tmp_path, me):
    lay = Layout(str(tmp_path / "missing"))
    msg = fail_text(RegistryLock(lay, "me", 5, me=me))
    assert msg == (
        f"registry lock {lay.reglock} cannot be taken: cannot write {lay.reglock_tmp(me.holder_id())}:"
        " No such file or directory"
    )


def test_6_1_take_stale_temp_unremovable_cannot_be_taken(lay, me):
    os.mkdir(lay.reglock_tmp(me.holder_id()))  # unlink of a directory fails (EISDIR)
    msg = fail_text(RegistryLock(lay, "me", 5, me=me))
    assert msg.startswith(f"registry lock {lay.reglock} cannot be taken: cannot remove the stale temp ")


# ---------------------------------------------------------------------------------------------- take/release


def test_6_1_context_manager_takes_and_releases(lay, me):
    with RegistryLock(lay, "me", 1) as lk:
        assert lk.held
        assert content(lay.reglock) == lk.me.record() + "\n"
        assert lk.me.name == "me"
        assert lk.me.pid == os.getpid()
    assert os.listdir(lay.home) == []


def test_6_1_release_on_exception(lay):
    with pytest.raises(ZeroDivisionError), reglock.hold(lay, "me", 1):
        1 / 0  # noqa: B018
    assert not os.path.exists(lay.reglock)


def test_6_1_release_never_removes_anothers_lock(lay, me):
    lk = RegistryLock(lay, "me", 1, me=me)
    lk.acquire()
    os.unlink(lay.reglock)
    put_record(lay.reglock, alive(me, "t"))
    lk.release()
    assert content(lay.reglock) == alive(me, "t").record() + "\n"


def test_6_1_own_record_proof_dashes_when_mount_not_vouched(lay, monkeypatch):
    monkeypatch.setattr(
        holder, "vouch", lambda home: "the comm home's filesystem (x) does not prove a fresh read"
    )
    with RegistryLock(lay, "me", 1) as lk:
        assert lk.me.record() == f"me:-:-:-:{os.getpid()}:-"


# ---------------------------------------------------------------------------------------------- FAILED texts


def test_6_1_failed_named_holder_alive(lay, me, clock):
    t = alive(me, "otherhost")
    put_record(lay.reglock, t, mtime=T0 - 42)
    msg = fail_text(RegistryLock(lay, "me", 0, me=me))
    assert msg == (
        f"registry lock {lay.reglock} is held by otherhost pid {t.pid} start {t.start} (42s old): it is running."
        " If it is dead, run any comm command on otherhost."
    )
    assert content(lay.reglock) == t.record() + "\n"
    assert [f for f in os.listdir(lay.home) if ".reclaim." in f] == []


def test_6_1_failed_named_other_machine(lay, me, clock):
    other = Holder("far", "f" * 32, "otherboot", "4026531836", 77, "9")
    put_record(lay.reglock, other, mtime=T0 - 3)
    msg = fail_text(RegistryLock(lay, "me", 0, me=me))
    assert msg == (
        f"registry lock {lay.reglock} is held by far pid 77 start 9 (3s old): it is on another machine."
        " If it is dead, run any comm command on far."
    )


def test_6_1_failed_named_start_unknown_and_future_mtime(lay, me, clock):
    other = Holder("far", "f" * 32, "otherboot", "1", 77, "-")
    put_record(lay.reglock, other, mtime=T0 + 100)
    msg = fail_text(RegistryLock(lay, "me", 0, me=me))
    assert msg.startswith(f"registry lock {lay.reglock} is held by far pid 77 start - (0s old): ")


def test_6_1_failed_this_box_cannot_prove(lay, me, clock):
    t = dead(me)
    put_record(lay.reglock, t, mtime=T0)
    unproven = Holder("me", "-", "-", "-", me.pid, "-")
    msg = fail_text(RegistryLock(lay, "me", 0, me=unproven))
    assert msg == (
        f"registry lock {lay.reglock} is held by d pid {t.pid} start 1 (0s old): this box cannot prove a death."
        " If it is dead, run any comm command on d."
    )
    assert content(lay.reglock) == t.record() + "\n"


def test_6_1_failed_by_hand_holder_without_proof(lay, me, clock):
    put(lay.reglock, "old:-:-:-:123:-\n", mtime=T0 - 5)
    msg = fail_text(RegistryLock(lay, "me", 0, me=me))
    assert msg == (
        f"registry lock {lay.reglock} still held (5s old): it is on another machine. If its holder is dead,"
        f" remove {lay.reglock} by hand and retry."
    )


def test_6_1_failed_by_hand_directory(lay, me, clock):
    os.mkdir(lay.reglock)
    os.utime(lay.reglock, (T0 - 7, T0 - 7))
    msg = fail_text(RegistryLock(lay, "me", 0, me=me))
    assert msg == (
        f"registry lock {lay.reglock} still held (7s old): held by an older version that records no holder."
        f" If its holder is dead, remove {lay.reglock} by hand and retry."
    )


@pytest.mark.parametrize(
    ("data", "shown"),
    [
        (b"", "empty"),
        (b"\n", "empty"),
        (b"garbage\n", "garbage"),
        (b"a:b:c\nx:y:z:w:1:2\n", "a:b:c"),
        (b"a:b:c:d:pid:f\n", "a:b:c:d:pid:f"),
        (b"bad\x01byte", "bad?byte"),
        (b"x" * 100, "x" * 80 + "…"),
    ],
)
def test_6_1_failed_by_hand_record_names_no_holder(lay, me, clock, data, shown):
    put(lay.reglock, data, mtime=T0)
    msg = fail_text(RegistryLock(lay, "me", 0, me=me))
    assert msg == (
        f"registry lock {lay.reglock} still held (0s old): its record names no holder ({shown})."
        f" If its holder is dead, remove {lay.reglock} by hand and retry."
    )
    with open(lay.reglock, "rb") as f:
        assert f.read() == data


def test_6_1_failed_gone_at_last_read(lay, me, clock, hooks):
    t = alive(me)
    put_record(lay.reglock, t)
    hooks.on["judged"] = lambda: os.unlink(lay.reglock)
    msg = fail_text(RegistryLock(lay, "me", 0, me=me))
    assert msg == (
        f"registry lock {lay.reglock} was held by t pid {t.pid} start {t.start} when last read (it is running);"
        " it may have been released since. Retry."
    )
    assert "by hand" not in msg and "is held" not in msg


def test_6_1_failed_no_holder_known(lay, me, clock, hooks):
    put_record(lay.reglock, alive(me))
    hooks.on["step"] = lambda: os.unlink(lay.reglock)
    msg = fail_text(RegistryLock(lay, "me", 0, me=me))
    assert msg == (
        f"registry lock {lay.reglock} was not taken by the deadline: its record could not be read,"
        " so it may have been released since. Retry."
    )


def test_6_1_failed_no_clock(lay, me, monkeypatch):
    put_record(lay.reglock, alive(me))

    def broken() -> float:
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(reglock, "_wallclock", broken)
    msg = fail_text(RegistryLock(lay, "me", 5, me=me))
    assert msg == f"registry lock {lay.reglock} is held, and there is no clock to wait by: Invalid argument"


# ---------------------------------------------------------------------------------------------- reclaim step


def markers(lay: Layout) -> dict[str, str]:
    prefix = ".registry.lock.reclaim."
    return {
        f[len(prefix) :]: content(os.path.join(lay.home, f))
        for f in os.listdir(lay.home)
        if f.startswith(prefix)
    }


def test_6_1_reclaim_dead_holder_marker_settle_remove_retake(lay, me, clock, hooks):
    d = dead(me)
    put_record(lay.reglock, d)
    with RegistryLock(lay, "me", 10, me=me, settle=1.0):
        assert content(lay.reglock) == me.record() + "\n"
    assert markers(lay) == {d.holder_id(): me.record() + "\n"}  # kept forever
    assert clock.sleeps == [1.0]
    i = hooks.seen.index
    assert i("judged") < i("after_marker") < i("settle") < i("before_remove") < i("after_remove")
    assert hooks.seen.count("before_take") == 2


def test_6_1_reclaim_lock_gone_during_settle_retakes(lay, me, clock, hooks):
    put_record(lay.reglock, dead(me))
    hooks.on["settle"] = lambda: os.unlink(lay.reglock)
    with RegistryLock(lay, "me", 0, me=me, settle=0.5):
        assert content(lay.reglock) == me.record() + "\n"
    assert "before_remove" not in hooks.seen


def test_6_1_reclaim_taken_again_during_settle(lay, me, clock, hooks):
    t = alive(me, "newone")

    def retaken() -> None:
        os.unlink(lay.reglock)
        put_record(lay.reglock, t, mtime=T0)

    put_record(lay.reglock, dead(me))
    hooks.on["settle"] = retaken
    msg = fail_text(RegistryLock(lay, "me", 0, me=me, settle=0.5))
    assert msg == (
        f"registry lock {lay.reglock} is held by newone pid {t.pid} start {t.start} (0s old): it was taken"
        " again during the reclaim. If it is dead, run any comm command on newone."
    )
    assert content(lay.reglock) == t.record() + "\n"


@pytest.mark.parametrize("junk", [b"", b"junk\n"])
def test_6_1_reclaim_record_changed_during_settle(lay, me, clock, hooks, junk):
    def changed() -> None:
        os.unlink(lay.reglock)
        put(lay.reglock, junk)

    put_record(lay.reglock, dead(me))
    hooks.on["settle"] = changed
    msg = fail_text(RegistryLock(lay, "me", 0, me=me, settle=0.5))
    assert msg == (
        f"registry lock {lay.reglock} was not taken by the deadline: its record changed during the reclaim. Retry."
    )
    with open(lay.reglock, "rb") as f:
        assert f.read() == junk


def test_6_1_reclaim_retake_lost(lay, me, clock, hooks):
    t = alive(me, "quick")
    put_record(lay.reglock, dead(me))
    hooks.on["after_remove"] = lambda: put_record(lay.reglock, t, mtime=T0)
    msg = fail_text(RegistryLock(lay, "me", 0, me=me, settle=0.1))
    assert "another process took it as soon as a dead holder's lock was removed" in msg
    assert msg == (
        f"registry lock {lay.reglock} is held by quick pid {t.pid} start {t.start} (0s old): another process"
        " took it as soon as a dead holder's lock was removed. If it is dead, run any comm command on quick."
    )
    assert hooks.seen.count("before_take") == 2  # bound 0: one take, one step, one retake


def test_6_1_reclaim_chain_dead_reclaimer_is_passed(lay, me, clock):
    d, r = dead(me, "d", "1"), dead(me, "r", "2")
    put_record(lay.reglock, d)
    put_record(lay.reclaim_marker(d.holder_id()), r)
    with RegistryLock(lay, "me", 10, me=me, settle=0.2):
        assert content(lay.reglock) == me.record() + "\n"
    assert markers(lay) == {d.holder_id(): r.record() + "\n", r.holder_id(): me.record() + "\n"}


def test_6_1_reclaim_chain_lock_naming_dead_reclaimer_is_removed(lay, me, clock):
    """The lock names a chain member that is not D (a reclaimer that retook and died): still removed."""
    d, r = dead(me, "d", "1"), dead(me, "r", "2")
    put_record(lay.reglock, d)
    put_record(lay.reclaim_marker(d.holder_id()), r)
    lk = RegistryLock(lay, "me", 10, me=me, settle=0.2)
    real = reglock._hook

    def swap(point: str) -> None:
        if point == "settle":
            os.unlink(lay.reglock)
            put_record(lay.reglock, r)

    reglock._hook = swap
    try:
        lk.acquire()
    finally:
        reglock._hook = real
    assert content(lay.reglock) == me.record() + "\n"
    lk.release()


def test_6_1_reclaim_chain_reclaimer_alive_did_not_finish(lay, me, clock):
    d, r = dead(me), alive(me, "rr")
    put_record(lay.reglock, d, mtime=T0 - 12)
    put_record(lay.reclaim_marker(d.holder_id()), r)
    msg = fail_text(RegistryLock(lay, "me", 0, me=me))
    assert msg == (
        f"registry lock {lay.reglock} is held by d pid {d.pid} start 1 (12s old): it is dead, but its reclaim"
        f" by rr pid {r.pid} did not finish: it is running. If it is dead, run any comm command on d."
    )
    assert content(lay.reglock) == d.record() + "\n"


def test_6_1_reclaim_chain_cycle_is_by_hand(lay, me, clock):
    d, r = dead(me, "d", "1"), dead(me, "r", "2")
    put_record(lay.reglock, d)
    put_record(lay.reclaim_marker(d.holder_id()), r)
    m_r = lay.reclaim_marker(r.holder_id())
    put_record(m_r, d)
    msg = fail_text(RegistryLock(lay, "me", 0, me=me))
    assert msg == (
        f"registry lock {lay.reglock} still held (0s old): its reclaim marker {m_r} names {d.record()}, which its"
        f" reclaim chain already holds, so no reclaim can pass it. If its holder is dead, remove {lay.reglock}"
        " by hand and retry."
    )
    assert content(lay.reglock) == d.record() + "\n"


@pytest.mark.parametrize("cycle", ["own holder", "two links"])
def test_6_1_marker_naming_a_passed_record_ends_the_wait_at_once(lay, me, clock, hooks, cycle):
    """Seed 000: a marker naming a record the walk already passed ends the walk (issue 14): one step,
    no poll, no sleep, however long the bound (markers are never removed, so no wait can do better)."""
    d, r = dead(me, "d", "1"), dead(me, "r", "2")
    put_record(lay.reglock, d)
    if cycle == "own holder":
        put_record(lay.reclaim_marker(d.holder_id()), d)
    else:
        put_record(lay.reclaim_marker(d.holder_id()), r)
        put_record(lay.reclaim_marker(r.holder_id()), d)
    msg = fail_text(RegistryLock(lay, "me", 10, me=me))
    assert "which its reclaim chain already holds, so no reclaim can pass it" in msg
    assert msg.endswith(f"remove {lay.reglock} by hand and retry.")
    assert hooks.seen.count("step") == 1 and hooks.seen.count("before_take") == 1
    assert (clock.t, clock.sleeps) == (T0, [])


def test_6_1_reclaim_marker_naming_me_goes_to_settle(lay, me, clock, hooks):
    d = dead(me)
    put_record(lay.reglock, d)
    put_record(lay.reclaim_marker(d.holder_id()), me)
    with RegistryLock(lay, "me", 0, me=me, settle=0.1):
        pass
    assert "settle" in hooks.seen and "before_remove" in hooks.seen


@pytest.mark.parametrize(
    ("mk", "inner"),
    [
        (lambda p: put(p, "junk\n"), "it names no holder (junk)"),
        (lambda p: put(p, ""), "it names no holder (empty)"),
        (os.mkdir, "it is a directory"),
    ],
)
def test_6_1_reclaim_marker_unreadable(lay, me, clock, mk, inner):
    d = dead(me)
    put_record(lay.reglock, d)
    m = lay.reclaim_marker(d.holder_id())
    mk(m)
    msg = fail_text(RegistryLock(lay, "me", 0, me=me))
    assert msg == (
        f"registry lock {lay.reglock} is held by d pid {d.pid} start 1 (0s old): its reclaim marker {m} cannot"
        f" be read ({inner}). If it is dead, run any comm command on d."
    )


def test_6_1_reclaim_chain_walk_past_deadline(lay, me, monkeypatch):
    ticks = iter(range(1000))
    monkeypatch.setattr(reglock, "_wallclock", lambda: T0 + next(ticks))
    monkeypatch.setattr(reglock, "_sleep", lambda d: None)
    d, r = dead(me, "d", "1"), dead(me, "r", "2")
    put_record(lay.reglock, d, mtime=T0)
    put_record(lay.reclaim_marker(d.holder_id()), r)
    msg = fail_text(RegistryLock(lay, "me", 0.5, me=me))
    assert ": its reclaim chain was still being walked at the deadline. If it is dead" in msg
    assert msg.startswith(f"registry lock {lay.reglock} is held by d pid {d.pid} start 1 (")
    assert content(lay.reglock) == d.record() + "\n"


def test_6_1_reclaim_vouch_on_first_link(lay, me, clock, monkeypatch):
    reason = "the comm home is mounted nocto, so no read of it is proved fresh"
    monkeypatch.setattr(holder, "vouch", lambda home: reason)
    d = dead(me)
    put_record(lay.reglock, d)
    msg = fail_text(RegistryLock(lay, "me", 0, me=me))
    assert msg == (
        f"registry lock {lay.reglock} is held by d pid {d.pid} start 1 (0s old): {reason}."
        " If it is dead, run any comm command on d."
    )
    assert markers(lay) == {}


def test_6_1_reclaim_marker_cannot_be_taken(lay, me, clock, monkeypatch):
    d = dead(me)
    put_record(lay.reglock, d)
    real_link = os.link

    def link(src, dst, *a, **kw):
        if ".reclaim." in dst:
            raise OSError(errno.EROFS, "Read-only file system")
        return real_link(src, dst, *a, **kw)

    monkeypatch.setattr(os, "link", link)
    msg = fail_text(RegistryLock(lay, "me", 0, me=me))
    assert msg == (
        f"registry lock {lay.reglock} cannot be taken: cannot hard-link in {lay.home}: Read-only file system"
    )


# ---------------------------------------------------------------------------------------------- wait loop


def test_6_1_wait_bound_0_live_holder_one_take_one_step(lay, me, clock, hooks):
    put_record(lay.reglock, alive(me))
    fail_text(RegistryLock(lay, "me", 0, me=me))
    assert hooks.seen.count("before_take") == 1
    assert hooks.seen.count("step") == 1
    assert clock.sleeps == []


def test_6_1_wait_bound_0_dead_holder_retakes_past_deadline(lay, me, clock, hooks):
    put_record(lay.reglock, dead(me))
    with RegistryLock(lay, "me", 0, me=me, settle=1.0):
        pass
    assert hooks.seen.count("before_take") == 2
    assert hooks.seen.count("step") == 1


def test_6_1_wait_polls_every_50ms_until_bound(lay, me, clock, hooks):
    put_record(lay.reglock, alive(me))
    fail_text(RegistryLock(lay, "me", 1, me=me))
    assert all(0 < s <= 0.05 + 1e-9 for s in clock.sleeps)
    assert abs(sum(clock.sleeps) - 1.0) < 1e-6
    assert 20 <= hooks.seen.count("before_take") <= 22
    assert hooks.seen.count("step") == hooks.seen.count("before_take") - 1


def test_6_1_wait_bound_counts_wall_time_slow_tries(lay, me, clock, hooks):
    """0.5 s per try and a 1 s bound: 2-3 tries."""
    put_record(lay.reglock, alive(me))
    hooks.on["before_take"] = lambda: setattr(clock, "t", clock.t + 0.5)
    fail_text(RegistryLock(lay, "me", 1, me=me))
    assert 2 <= hooks.seen.count("before_take") <= 3


def test_6_1_wait_takes_when_holder_releases(lay, me, clock, hooks):
    put_record(lay.reglock, alive(me))
    n = {"steps": 0}

    def step() -> None:
        n["steps"] += 1
        if n["steps"] == 3:
            os.unlink(lay.reglock)

    hooks.on["step"] = step
    with RegistryLock(lay, "me", 10, me=me):
        assert content(lay.reglock) == me.record() + "\n"
    assert n["steps"] == 3


def test_6_1_wait_retake_lost_then_keeps_waiting(lay, me, clock, hooks):
    """With time left, a lost retake does not end the wait; the new holder's release lets us in."""
    t = alive(me, "quick")
    put_record(lay.reglock, dead(me))
    hooks.on["after_remove"] = lambda: put_record(lay.reglock, t)
    hooks.on["judged"] = lambda: os.unlink(lay.reglock) if hooks.seen.count("judged") == 2 else None
    with RegistryLock(lay, "me", 5, me=me, settle=0.1):
        assert content(lay.reglock) == me.record() + "\n"


def test_1_13_try_delay_seam(lay, me, clock, monkeypatch):
    monkeypatch.setenv("SOT_COMM_TEST_LOCK_TRY_DELAY", "0.25")
    with RegistryLock(lay, "me", 1, me=me):
        pass
    assert clock.sleeps == [0.25]


def test_6_1_read_fresh_shapes(lay, me):
    assert reglock.read_fresh(lay.reglock) == ("gone", None)
    put_record(lay.reglock, me)
    assert reglock.read_fresh(lay.reglock) == ("record", me)
    os.unlink(lay.reglock)
    put(lay.reglock, "nope\n")
    assert reglock.read_fresh(lay.reglock) == ("garbage", "nope")
    os.unlink(lay.reglock)
    os.mkdir(lay.reglock)
    assert reglock.read_fresh(lay.reglock) == ("dir", None)


def test_6_1_bound_0_walks_the_whole_chain_in_its_one_step(lay, me, monkeypatch, hooks):
    """Decision: with bound 0 the one step is whole; the mid-walk deadline applies to longer bounds."""
    ticks = iter(range(1000))
    monkeypatch.setattr(reglock, "_wallclock", lambda: T0 + next(ticks))
    monkeypatch.setattr(reglock, "_sleep", lambda d: None)
    d, r = dead(me, "d", "1"), dead(me, "r", "2")
    put_record(lay.reglock, d)
    put_record(lay.reclaim_marker(d.holder_id()), r)
    with RegistryLock(lay, "me", 0, me=me):
        assert content(lay.reglock) == me.record() + "\n"
    assert hooks.seen.count("step") == 1 and hooks.seen.count("before_take") == 2


def test_6_1_release_removes_when_record_unreadable(lay, me, monkeypatch):
    lk = RegistryLock(lay, "me", 1, me=me)
    lk.acquire()
    monkeypatch.setattr(reglock, "read_fresh", lambda path: ("unreadable", "Input/output error"))
    lk.release()
    assert not os.path.exists(lay.reglock)


def test_6_1_release_leaves_directory_and_garbage(lay, me):
    lk = RegistryLock(lay, "me", 1, me=me)
    lk.acquire()
    os.unlink(lay.reglock)
    put(lay.reglock, "junk\n")
    lk.release()
    assert content(lay.reglock) == "junk\n"


# ------------------------------------------------------------------- long host names (issue 14 decision)


@pytest.mark.parametrize(
    ("prefix", "holder_id", "clamped"),
    [
        (".registry.lock.tmp.", "h" * 236, False),  # 255 bytes: the reference's name, unchanged
        (".registry.lock.tmp.", "h" * 237, True),  # 256 bytes: clamped to 255
        (".registry.lock.reclaim.", "h" * 400 + ".m.b.1.2.3", True),
        (".registry.lock.reclaim.", "box.m.b.4026531836.77.123", False),
    ],
)
def test_6_1_lock_leaf_clamps_only_what_no_file_system_can_name(prefix, holder_id, clamped):
    from sotd.formats.layout import NAME_MAX, lock_leaf

    leaf = lock_leaf(prefix, holder_id)
    assert len(leaf.encode()) <= NAME_MAX
    assert (leaf != prefix + holder_id) is clamped
    if clamped:
        assert leaf.startswith(prefix + holder_id[:100]) and len(leaf.encode()) == NAME_MAX
        assert lock_leaf(prefix, holder_id) == leaf  # one name per holder, in every process
        assert lock_leaf(prefix, holder_id[:-1] + "9") != leaf  # ids that differ late still differ


def test_6_1_take_and_reclaim_with_a_240_byte_host(lay, me, clock, hooks):
    """The lock's record keeps the whole 240-byte host; its temp and a dead holder's marker are clamped
    names, so the take and the reclaim both work (the take once failed: "cannot remove the stale temp")."""
    host = "h" * 240
    long_me = Holder(host, me.machine, me.boot, me.pidns, me.pid, me.start)
    temps: list[str] = []
    hooks.on["before_link"] = lambda: temps.extend(n for n in os.listdir(lay.home) if ".tmp." in n)
    with RegistryLock(lay, host, 10, me=long_me, settle=0.1):
        assert content(lay.reglock) == long_me.record() + "\n"
        assert content(lay.reglock).split(":", 1)[0] == host
    [temp] = temps
    assert len(temp.encode()) <= 255
    gone = dead(me, host, "1")  # a dead holder with the long host: its marker is clamped too
    put_record(lay.reglock, gone)
    with RegistryLock(lay, "me", 10, me=me, settle=0.1):
        assert content(lay.reglock) == me.record() + "\n"
    marker = lay.reclaim_marker(gone.holder_id())
    assert len(os.path.basename(marker).encode()) <= 255
    assert content(marker) == me.record() + "\n"
