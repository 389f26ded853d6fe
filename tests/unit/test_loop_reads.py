"""``daemon.loopreads``: the read-only steps of ``comm.file`` run on the event loop only while a thread has
found the comm folder on a local disk or in memory (issue 27 item 8's scale); and ``Ops.comm_file`` runs
them there, with the append alone in a thread, or all of them in a thread as before.

``loop_safe`` is a table over mount tables of each kind; ``LoopReads`` is checked against this machine's own
mount table and clock; the mount that makes the memo stale is ``test_a_mount_ends_the_memo`` (root: a
private mount namespace)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest

from sotd import _clock
from sotd.daemon import loopreads, ops
from sotd.formats import lockmanager, registry
from sotd.wire import payloads
from tests.conftest import Comm

pytestmark = [pytest.mark.unit]

EXT4_ROOT = "22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n"


def line(n: int, point: str, fstype: str, source: str = "src", opts: str = "rw") -> str:
    """One ``/proc/self/mountinfo`` line for a mount of ``fstype`` at ``point``."""
    return f"{n} 22 0:{n} / {point} rw,relatime shared:{n} - {fstype} {source} {opts}\n"


def test_ancestors_are_the_path_and_each_folder_above_it() -> None:
    assert loopreads.ancestors("/a/b/c") == ["/a/b/c", "/a/b", "/a", "/"]
    assert loopreads.ancestors("/") == ["/"]


@pytest.mark.parametrize(
    ("table", "paths", "safe"),
    [
        (EXT4_ROOT, ["/home/u/.sot-comm", "/home/u/.sot-comm/inbox"], True),
        (EXT4_ROOT + line(30, "/tmp", "tmpfs", "tmpfs"), ["/tmp/x/comm"], True),
        (EXT4_ROOT + line(31, "/data", "xfs", "/dev/vdb"), ["/data/comm", "/data/comm/inbox"], True),
        # the inbox on another box's disk: its reads could wait on a server
        (EXT4_ROOT + line(32, "/srv/in", "nfs4", "h:/in", "rw,vers=4.2"), ["/c", "/srv/in/inbox"], False),
        (EXT4_ROOT + line(33, "/mnt/n", "nfs", "h:/x", "rw,vers=3"), ["/mnt/n/comm"], False),
        (EXT4_ROOT + line(34, "/home/u/r", "fuse.sshfs", "u@h:"), ["/home/u/r/comm"], False),
        (EXT4_ROOT + line(35, "/mnt/s", "cifs", "//h/s"), ["/mnt/s/comm"], False),
        # a local disk mounted inside a network folder: the lookup passes through the network folder
        (
            EXT4_ROOT + line(36, "/net", "nfs4", "h:/") + line(37, "/net/disk", "ext4", "/dev/vdc"),
            ["/net/disk/comm"],
            False,
        ),
        # a network folder elsewhere does not matter
        (EXT4_ROOT + line(38, "/net", "nfs4", "h:/"), ["/home/u/.sot-comm"], True),
        (line(40, "/", "overlay", "overlay"), ["/root/.sot-comm"], False),  # kept to the thread: not known
        ("", ["/home/u/.sot-comm"], False),  # no mount table: no
        (EXT4_ROOT, ["relative/comm"], False),
    ],
)
def test_loop_safe_only_when_every_mount_on_the_way_is_a_local_disk_or_memory(
    table: str, paths: list[str], safe: bool
) -> None:
    assert loopreads.loop_safe(table, paths) is safe


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux")
def test_verify_says_what_the_mount_table_says_and_the_memo_runs_out(tmp_path: Any) -> None:
    comm = Comm(str(tmp_path), install=False)
    with open(lockmanager.MOUNTINFO) as f:
        want = loopreads.loop_safe(
            f.read(), [os.path.realpath(comm.layout.home), os.path.realpath(comm.layout.inbox_dir)]
        )
    assert want, "the test's folder is on a local disk or tmpfs here"
    memo = loopreads.LoopReads(fresh_s=0.3)
    assert memo.fresh(time.monotonic()) is False  # never verified: the thread does the reads
    assert memo.verify(comm.layout) is True
    assert memo.fresh(time.monotonic()) is True
    time.sleep(0.35)
    assert memo.fresh(time.monotonic()) is False  # ran out: the next filing goes to a thread again
    assert memo.verify(comm.layout) is True  # and its check starts another while
    assert memo.fresh(time.monotonic()) is True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux")
def test_a_no_is_kept_as_long_as_a_yes(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder on NFS goes to a thread at every filing; the mount table is not read again at each."""
    comm = Comm(str(tmp_path), install=False)
    asked: list[list[str]] = []

    def on_nfs(_text: str, paths: Any) -> bool:
        asked.append(list(paths))
        return False

    monkeypatch.setattr(loopreads, "loop_safe", on_nfs)
    memo = loopreads.LoopReads(fresh_s=0.3)
    assert [memo.verify(comm.layout) for _ in range(5)] == [False] * 5
    assert memo.fresh(time.monotonic()) is False
    assert len(asked) == 1
    time.sleep(0.35)
    assert memo.verify(comm.layout) is False
    assert len(asked) == 2


@pytest.mark.root
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux")
def test_a_mount_ends_the_memo(tmp_path: Any) -> None:
    """In a private mount namespace: verified, then a tmpfs mounted anywhere: no longer fresh."""
    comm = Comm(str(tmp_path), install=False)
    spot = tmp_path / "spot"
    spot.mkdir()
    script = textwrap.dedent(
        f"""
        import subprocess, sys, time
        from sotd.daemon import loopreads
        from sotd.formats.layout import Layout
        memo = loopreads.LoopReads(fresh_s=60)
        ok = memo.verify(Layout({comm.layout.home!r}))
        before = memo.fresh(time.monotonic())
        subprocess.run(["mount", "-t", "tmpfs", "none", {str(spot)!r}], check=True)
        after = memo.fresh(time.monotonic())
        print(ok, before, after)
        """
    )
    r = subprocess.run(
        ["unshare", "-m", "--propagation", "private", sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True", "False"], r


class FixedVerdict:
    """A memo whose ``fresh`` always says ``fresh`` (the loop may read, or not) and that counts the
    thread's checks (``verify``)."""

    def __init__(self, fresh: bool) -> None:
        self.said = fresh
        self.verified = 0

    def fresh(self, _now: float) -> bool:
        return self.said

    def verify(self, _layout: Any) -> bool:
        self.verified += 1
        return self.said


def _ops(comm: Comm, memo: FixedVerdict, hops: list[str]) -> ops.Ops:
    async def in_thread(fn: Any, *args: Any) -> Any:
        hops.append(getattr(fn, "__name__", None) or fn.func.__name__)
        return await asyncio.to_thread(fn, *args)

    async def nothing(*_a: object) -> dict[str, Any]:
        return {}

    async def nobody_to_ask(*_a: object) -> None:
        return None

    return ops.Ops(
        layout=comm.layout,
        environ={"SOT_COMM_HOME": comm.home},
        self_host=comm.host,
        is_hub=True,
        forward=nothing,
        offer=nobody_to_ask,
        version_info=dict,
        blocking=in_thread,
        loop_reads=memo,  # type: ignore[arg-type]
    )


def _list(comm: Comm, handle: str) -> None:
    registry.ensure(comm.layout)
    doc = registry.read(comm.layout) or {}
    entry = {"root": "/w/p", "host": comm.host, "repo": "p", "last_seen": _clock.stamp()}
    registry.put(doc, handle, entry)
    registry.write_locked(comm.layout, doc)


@pytest.mark.parametrize("on_loop", [True, False])
def test_comm_file_reads_on_the_loop_and_appends_in_a_thread(tmp_path: Any, on_loop: bool) -> None:
    comm = Comm(str(tmp_path), install=False)
    _list(comm, "beta")
    memo = FixedVerdict(on_loop)
    hops: list[str] = []
    o = _ops(comm, memo, hops)

    def send(to: str, text: str) -> dict[str, Any]:
        p = payloads.comm_file_payload("alpha", to, text, broadcast=False, expires=time.time() + 10)
        return asyncio.run(o.handle(payloads.COMM_FILE, p, ops.CLIENT))

    unlisted = send("zed", "to nobody")
    assert unlisted == {"error": "no box knows that handle: zed", "code": "not_here"}
    filed = send("beta", 'a $HOME "x" \\ | y > z')
    assert filed == {"ok": True}
    assert b'a $HOME \\"x\\" \\\\ | y > z' in comm.inbox_bytes("beta")
    if on_loop:  # no thread for the unlisted handle; the append alone for the listed one
        assert (hops, memo.verified) == (["_append_step"], 0)
    else:  # every step in a thread, as before, and the thread checks whether the loop may read next time
        assert (hops, memo.verified) == (["_local_steps", "_local_steps"], 2)
