"""The inbox line codec, bounds from the environment, the unread count, and in-process append faults."""

from __future__ import annotations

import errno
import json
import os
import stat

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sotd import handles
from sotd.errors import AppendFailed, InboxBusy
from sotd.formats import cursor, inbox
from sotd.formats.layout import Layout

pytestmark = pytest.mark.unit


# ----------------------------------------------------------------------------------------------- codec


def test_encode_line_exact_bytes() -> None:
    got = inbox.encode_line("b", "a", "proj", "hi", "2026-05-29T18:04:00Z")
    assert got == b'{"from":"b","to":"a","repo":"proj","msg":"hi","ts":"2026-05-29T18:04:00Z"}\n'


def test_encode_line_keeps_newline_escaped_and_unicode_raw() -> None:
    got = inbox.encode_line("b", "", "daemon", "one\ntwo — é", "t")
    assert got.count(b"\n") == 1 and got.endswith(b"\n")
    assert b"\\n" in got
    assert "— é".encode() in got
    assert json.loads(got)["msg"] == "one\ntwo — é"


def test_encode_line_lone_surrogate_becomes_fffd_never_an_escape() -> None:
    # issue 14 item 1 / issue 19: what sotd writes never holds a lone surrogate (RFC 8259 §8.2)
    got = inbox.encode_line("b", "a", "r", "x\ud800y", "t")
    assert got.count(b"\n") == 1
    assert b"\\ud800" not in got
    assert json.loads(got)["msg"] == "x\ufffdy"


@settings(deadline=None)
@given(st.text(), st.text(), st.text())
def test_encode_decode_roundtrip(frm: str, to: str, msg: str) -> None:
    raw = inbox.encode_line(frm, to, "r", msg, "t")
    lines = inbox.complete_lines(raw)
    assert len(lines) == 1
    obj = inbox.decode_line(lines[0])
    assert obj is not None
    assert list(obj) == ["from", "to", "repo", "msg", "ts"]
    assert (obj["from"], obj["to"], obj["msg"]) == (frm, to, msg)


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        (b"", None),
        (b"   ", None),
        (b"not json", None),
        (b"[1,2]", None),
        (b'"s"', None),
        (b"12", None),
        (b"null", None),
        (b'{"a":1', None),
        (b'{"a":1}', {"a": 1}),
        (b'{"msg":"\xff"}', {"msg": "\ufffd"}),
        (b"[" * 100_000, None),
    ],
    ids=["empty", "blank", "text", "array", "string", "number", "null", "torn", "object", "bad-utf8", "deep"],
)
def test_decode_line(raw: bytes, want: object) -> None:
    assert inbox.decode_line(raw) == want


@pytest.mark.parametrize(
    ("data", "want"),
    [
        (b"", []),
        (b"a", []),
        (b"a\n", [b"a"]),
        (b"a\nb", [b"a"]),
        (b"a\n\nb\n", [b"a", b"", b"b"]),
        (b"\n", [b""]),
        (b"a\n\0\0", [b"a"]),
    ],
)
def test_complete_lines(data: bytes, want: list[bytes]) -> None:
    assert inbox.complete_lines(data) == want


@pytest.mark.parametrize(
    ("obj", "want"),
    [
        ({"from": "b", "to": "a"}, True),
        ({"to": "a"}, True),
        ({"from": 5, "to": "a"}, True),
        ({"from": "a", "to": "a"}, False),  # self-echo
        ({"from": "b", "to": ""}, False),  # broadcast copy
        ({"from": "b", "to": "c"}, False),  # another handle
        ({"from": "b"}, False),  # no to
        ({"from": "b", "to": 7}, False),  # numeric to
        ({"from": "b", "to": ["a"]}, False),
    ],
)
def test_is_directed(obj: dict[str, object], want: bool) -> None:
    assert handles.is_directed(obj, "a") is want


# ---------------------------------------------------------------------------------------------- bounds


@pytest.mark.parametrize(
    ("value", "want"),
    [(None, 2.0), ("", 2.0), ("5", 5.0), ("0", 0.0), ("1.5", 2.0), ("-1", 2.0), ("x", 2.0), (" 7 ", 7.0)],
)
def test_inbox_wait(value: str | None, want: float) -> None:
    env = {} if value is None else {"SOT_INBOX_LOCK_WAIT_SECS": value}
    assert inbox.inbox_wait(env) == want


@pytest.mark.parametrize(("value", "want"), [(None, 3.0), ("4", 4.0), ("bad", 3.0), ("2.5", 3.0)])
def test_read_wait(value: str | None, want: float) -> None:
    env = {} if value is None else {"SOT_INBOX_READ_WAIT_SECS": value}
    assert inbox.read_wait(env) == want


# ---------------------------------------------------------------------------------------------- unread


def _l(frm: object, to: object) -> bytes:
    return json.dumps({"from": frm, "to": to, "msg": "x", "ts": "t"}).encode()


def test_unread_counts_directed_lines_past_the_cursor() -> None:
    lines = [_l("b", "a"), _l("a", "a"), _l("b", ""), _l("b", "c"), b"junk", _l("c", "a"), _l(1, "a")]
    data = b"\n".join(lines) + b"\n" + _l("b", "a")[:10]  # a torn tail never counts

    def unread(cursor_text: str) -> int:
        complete = inbox.complete_lines(data)
        return inbox.count_directed(complete[cursor.offset(cursor_text, complete, "a", None) :], "a")

    assert unread("") == 3
    assert unread(cursor.encode(1, lines[0])) == 2
    assert unread(cursor.encode(7, lines[6])) == 0
    assert unread("99") == 3  # past the end reads from 0
    assert inbox.count_directed([], "a") == 0


# ----------------------------------------------------------------------------------- append in-process


@pytest.fixture
def lay(tmp_path: os.PathLike[str]) -> Layout:
    lay = Layout(str(tmp_path))
    os.makedirs(lay.inbox_dir)
    return lay


def _read(lay: Layout, h: str = "a") -> bytes:
    with open(lay.inbox(h), "rb") as f:
        return f.read()


def _put(lay: Layout, data: bytes, h: str = "a") -> None:
    with open(lay.inbox(h), "wb") as f:
        f.write(data)


def test_append_creates_0600_files(lay: Layout) -> None:
    inbox.append(lay, "a", b'{"n":1}\n', nfs=False, bound=2)
    inbox.append(lay, "a", b'{"n":2}', nfs=True, bound=2)  # newline added
    assert _read(lay) == b'{"n":1}\n{"n":2}\n'
    assert stat.S_IMODE(os.stat(lay.inbox("a")).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(lay.inbox_lock("a")).st_mode) == 0o600


@pytest.mark.parametrize(
    ("before", "after_cut"),
    [
        (b'{"n":1}\n{"n":2', b'{"n":1}\n'),
        (b'{"n":2', b""),
        (b"\0\0\0\0", b""),
        (b'{"n":1}\n\0\0\0', b'{"n":1}\n'),
        (b'{"n":1}\n' + b"x" * 10_000, b'{"n":1}\n'),  # longer than one 4096-byte block
        (b"x" * 9000, b""),
        (b'{"n":1}\n', b'{"n":1}\n'),
    ],
    ids=["torn", "torn-only", "nul-only", "nul-tail", "long-tail", "long-no-newline", "clean"],
)
def test_tail_cut(lay: Layout, before: bytes, after_cut: bytes) -> None:
    _put(lay, before)
    notes: list[str] = []
    inbox.append(lay, "a", b"L\n", nfs=False, bound=2, note=notes.append)
    assert _read(lay) == after_cut + b"L\n"
    cut = len(before) - len(after_cut)
    want = [f"note: cut {cut} bytes of an unterminated line a dead writer left in @a's inbox"] if cut else []
    assert notes == want


def test_tail_cut_daemon_wording(lay: Layout) -> None:
    _put(lay, b"xyz")
    notes: list[str] = []
    inbox.append(lay, "a", b"L\n", nfs=False, bound=2, note=notes.append, daemon=True)
    assert notes == [f"cut 3 bytes of an unterminated line a dead writer left in {lay.inbox('a')}"]


def _fail_with(err: int):  # type: ignore[no-untyped-def]
    def f(*_a: object) -> int:
        raise OSError(err, os.strerror(err))

    return f


@pytest.mark.parametrize(
    ("seam", "err", "text"),
    [
        ("_write", errno.ENOSPC, "No space left on device"),
        ("_write", errno.EFBIG, "File too large"),
        ("_fsync", errno.EIO, "Input/output error"),
        ("_fsync", errno.ENOSPC, "No space left on device"),
    ],
)
def test_failure_rolls_back_byte_identical(
    lay: Layout, monkeypatch: pytest.MonkeyPatch, seam: str, err: int, text: str
) -> None:
    _put(lay, b'{"n":1}\n')
    monkeypatch.setattr(inbox, seam, _fail_with(err))
    with pytest.raises(AppendFailed) as ei:
        inbox.append(lay, "a", b'{"n":2}\n', nfs=False, bound=2)
    assert ei.value.message == f"the append failed: {text}"
    assert _read(lay) == b'{"n":1}\n'


def test_failure_after_tail_cut_rolls_back_to_after_the_cut(
    lay: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    _put(lay, b'{"n":1}\n{"n":')
    monkeypatch.setattr(inbox, "_fsync", _fail_with(errno.EIO))
    with pytest.raises(AppendFailed):
        inbox.append(lay, "a", b'{"n":2}\n', nfs=False, bound=2, note=lambda _s: None)
    assert _read(lay) == b'{"n":1}\n'


def test_short_write_then_error_rolls_back(lay: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    _put(lay, b'{"n":1}\n')
    calls: list[int] = []

    def short(fd: int, data: bytes) -> int:
        calls.append(len(data))
        if len(calls) == 1:
            return os.write(fd, bytes(data[:3]))  # a real partial line
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(inbox, "_write", short)
    with pytest.raises(AppendFailed, match=r"^the append failed: No space left on device$"):
        inbox.append(lay, "a", b'{"n":2}\n', nfs=False, bound=2)
    assert _read(lay) == b'{"n":1}\n'


def test_short_writes_are_completed(lay: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inbox, "_write", lambda fd, data: os.write(fd, bytes(data[:2])))
    inbox.append(lay, "a", b'{"n":123}\n', nfs=False, bound=2)
    assert _read(lay) == b'{"n":123}\n'


def test_zero_write_is_a_failure(lay: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    _put(lay, b'{"n":1}\n')
    monkeypatch.setattr(inbox, "_write", lambda fd, data: 0)
    with pytest.raises(AppendFailed, match=r"^the append failed: short write \(0 of 8 bytes\)$"):
        inbox.append(lay, "a", b'{"n":2}\n', nfs=False, bound=2)
    assert _read(lay) == b'{"n":1}\n'


def test_rollback_failure_is_said(lay: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    _put(lay, b'{"n":1}\n')
    monkeypatch.setattr(inbox, "_fsync", _fail_with(errno.EIO))
    monkeypatch.setattr(inbox, "_ftruncate", _fail_with(errno.EIO))
    with pytest.raises(AppendFailed) as ei:
        inbox.append(lay, "a", b'{"n":2}\n', nfs=False, bound=2)
    assert ei.value.message == (
        "the append failed: Input/output error; the rollback failed too (Input/output error), "
        "so the line may still be in @a's inbox"
    )
    assert _read(lay) == b'{"n":1}\n{"n":2}\n'


def test_eio_after_a_stall_is_a_lost_lock(lay: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    _put(lay, b'{"n":1}\n')
    clock = [100.0]
    monkeypatch.setattr(inbox, "_monotonic", lambda: clock[0])

    def stalled_fsync(fd: int) -> None:
        clock[0] += inbox.STALL_SECS + 5
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(inbox, "_fsync", stalled_fsync)
    with pytest.raises(AppendFailed) as ei:
        inbox.append(lay, "a", b'{"n":2}\n', nfs=False, bound=2)
    assert ei.value.message == (
        "the append failed: the inbox lock for @a was lost while the append stalled (Input/output error)"
    )
    assert _read(lay) == b'{"n":1}\n'


def test_lost_lock_with_a_grown_inbox_does_not_cut_another_writers_line(
    lay: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    _put(lay, b'{"n":1}\n')
    clock = [100.0]
    monkeypatch.setattr(inbox, "_monotonic", lambda: clock[0])

    def stalled_fsync(fd: int) -> None:
        clock[0] += inbox.STALL_SECS + 5
        with open(lay.inbox("a"), "ab") as other:  # another writer got the lost lock meanwhile
            other.write(b'{"n":3}\n')
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(inbox, "_fsync", stalled_fsync)
    with pytest.raises(AppendFailed, match="the inbox grew meanwhile"):
        inbox.append(lay, "a", b'{"n":2}\n', nfs=False, bound=2)
    assert _read(lay) == b'{"n":1}\n{"n":2}\n{"n":3}\n'


def test_a_stall_before_the_write_writes_nothing(lay: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past STALL_SECS between the lock and the write, no write starts (an NFS client re-takes an expired
    lock by itself on reconnect: tests/nfs, the partition point)."""
    _put(lay, b'{"n":1}\n')
    times = iter([100.0, 100.0 + inbox.STALL_SECS + 1])
    monkeypatch.setattr(inbox, "_monotonic", lambda: next(times))
    with pytest.raises(AppendFailed) as ei:
        inbox.append(lay, "a", b'{"n":2}\n', nfs=False, bound=2)
    assert ei.value.message == (
        "the append failed: the inbox lock for @a may have been lost while the append stalled before its "
        "write; nothing was appended"
    )
    assert _read(lay) == b'{"n":1}\n'


def test_a_stalled_write_whose_inbox_grew_is_not_trusted_to_the_relocked_lock(
    lay: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock re-asserts fine after the stall (the NFS client re-took it), but another writer appended
    meanwhile: FAILED, and nothing is cut."""
    _put(lay, b'{"n":1}\n')
    clock = [100.0]
    monkeypatch.setattr(inbox, "_monotonic", lambda: clock[0])

    def stalled_fsync(fd: int) -> None:
        clock[0] += inbox.STALL_SECS + 5
        with open(lay.inbox("a"), "ab") as other:
            other.write(b'{"n":3}\n')

    monkeypatch.setattr(inbox, "_fsync", stalled_fsync)
    with pytest.raises(AppendFailed, match="the inbox grew meanwhile"):
        inbox.append(lay, "a", b'{"n":2}\n', nfs=False, bound=2)
    assert _read(lay) == b'{"n":1}\n{"n":2}\n{"n":3}\n'


def test_unopenable_inbox(lay: Layout) -> None:
    os.makedirs(lay.inbox("a"))
    with pytest.raises(AppendFailed, match=r"^the append failed: Is a directory$"):
        inbox.append(lay, "a", b"x\n", nfs=False, bound=2)


def test_no_inbox_folder(tmp_path: os.PathLike[str]) -> None:
    lay = Layout(str(tmp_path))
    with pytest.raises(AppendFailed, match=r"^the append failed: No such file or directory$"):
        inbox.append(lay, "a", b"x\n", nfs=False, bound=2)


# -------------------------------------------------------------------------------------- reader in-process


def test_read_all(lay: Layout) -> None:
    assert inbox.read_all(lay, "a") is None
    _put(lay, b"x\n")
    assert inbox.read_all(lay, "a") == b"x\n"
    with inbox.ReadLock(lay, "a", nfs=False, bound=1, warn=print):
        assert inbox.read_all(lay, "a") == b"x\n"


def test_read_lock_cannot_open_warns_and_reads(lay: Layout) -> None:
    os.makedirs(lay.inbox_lock("a"))  # a folder cannot be opened read-write
    warned: list[str] = []
    with inbox.ReadLock(lay, "a", nfs=False, bound=1, warn=warned.append) as rl:
        assert not rl.locked
    assert warned == [
        "WARNING: the inbox lock for @a failed (cannot open its lock file) — reading without it; "
        "a line may show twice, none is lost"
    ]


def test_read_lock_flock_fault_warns(lay: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    import fcntl

    def bad_flock(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", bad_flock)
    warned: list[str] = []
    with inbox.ReadLock(lay, "a", nfs=False, bound=1, warn=warned.append) as rl:
        assert not rl.locked
    assert warned == [
        f"WARNING: the inbox lock for @a failed ({errno.ENOLCK}: No locks available) — reading without it; "
        "a line may show twice, none is lost"
    ]
    assert inbox.lock_fault_warning("a", 5, "") == (
        "WARNING: the inbox lock for @a failed (code 5) — reading without it; a line may show twice, none is lost"
    )


def test_texts() -> None:
    assert inbox.busy_text("a", 2.0) == "the inbox lock for @a was held for 2s — nothing was appended"
    assert (
        inbox.read_busy_text("a")
        == "the inbox for @a is being written — nothing was read; run comm-poll.sh again"
    )
    assert InboxBusy("x").exit_status == 75
