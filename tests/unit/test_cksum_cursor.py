"""POSIX cksum and the read cursor (behaviour 6.6): vectors, /usr/bin/cksum cross-check, every offset rule."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sotd.errors import FormatError
from sotd.formats import cursor
from sotd.formats.cksum import cksum
from sotd.formats.layout import Layout

pytestmark = pytest.mark.unit

CKSUM = shutil.which("cksum") or "/usr/bin/cksum"


# ----------------------------------------------------------------------------------------------- vectors

SPEC_VECTORS = [
    (b"", "4294967295-0"),
    (b"a", "1220704766-1"),
    (b"ab", "2072780115-2"),
    (b'{"from":"b","to":"a","msg":"x"}', "3902411541-31"),
    (b"a\0\n", "1220704766-1"),
]


@pytest.mark.parametrize(("line", "want"), SPEC_VECTORS)
def test_spec_vectors(line: bytes, want: str) -> None:
    assert cursor.line_hash(line) == want


NOTES_VALUES = [
    (b"", 4294967295),
    (b"a", 1220704766),
    (b"abc", 1219131554),
    (b"123456789", 930766865),
    (b"hello\n", 3015617425),
    (b"\x00\xff\x00\xff\x00\xff", 393418200),
]


@pytest.mark.parametrize(("data", "want"), NOTES_VALUES)
def test_testing_notes_values(data: bytes, want: int) -> None:
    assert cksum(data) == want


def _system_cksum(data: bytes) -> int:
    out = subprocess.run([CKSUM], input=data, capture_output=True, check=True).stdout
    return int(out.split()[0])


@pytest.mark.skipif(not os.path.exists(CKSUM), reason="no cksum binary")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=3000))
def test_matches_system_cksum(data: bytes) -> None:
    assert cksum(data) == _system_cksum(data)


@pytest.mark.skipif(not os.path.exists(CKSUM), reason="no cksum binary")
def test_matches_system_cksum_on_long_input() -> None:
    data = os.urandom(70_000)  # length needs three length bytes
    assert cksum(data) == _system_cksum(data)


def test_written_out_table_is_the_built_one() -> None:
    """The CRC table is a literal (no work at import, issue 17); it must be what the polynomial gives."""
    from sotd.formats import cksum as mod

    assert mod._build_table() == mod._TABLE


def test_line_hash_drops_every_newline_and_nul() -> None:
    assert cursor.line_hash(b"\0a\nb\0") == cursor.line_hash(b"ab")
    assert cursor.line_hash(b"x\r") != cursor.line_hash(b"x")  # CR is kept


# ------------------------------------------------------------------------------------------------ encode


def test_encode() -> None:
    assert cursor.encode(0, None) == "0"
    assert cursor.encode(0, b"whatever") == "0"
    assert cursor.encode(3, b"a") == "3 1220704766-1"
    assert cursor.encode(2, None) == "2"


# ------------------------------------------------------------------------------------------------ offset


def _line(n: int, ts: object = "2026-01-01T00:00:00Z") -> bytes:
    return json.dumps({"from": "b", "to": "a", "msg": f"m{n}", "ts": ts}).encode()


L = [_line(i, f"2026-01-01T00:00:0{i}Z") for i in range(1, 5)]  # 4 lines, stamped :01 .. :04
H = [cursor.line_hash(x) for x in L]
STEP = cursor.step_back_note("a")

# (rule, cursor text, lines, expected offset, expect the step-back note)
OFFSET_RULES = [
    ("missing or empty cursor is 0", "", L, 0, False),
    ("only newlines is 0", "\n\n", L, 0, False),
    ("zero", "0", L, 0, False),
    ("zero with a hash", "0 123-4", L, 0, False),
    ("hashed count that matches", f"2 {H[1]}", L, 2, False),
    ("trailing newlines are dropped", f"2 {H[1]}\n\n", L, 2, False),
    ("hashed count at the end", f"4 {H[3]}", L, 4, False),
    ("hash mismatch steps back one line", f"2 {H[0]}", L, 1, True),
    ("hash mismatch on the first line steps back to 0", "1 1-1", L, 0, True),
    # the reference notes it whatever the hash, the last line's own included (issue 28 item 3)
    ("hashed count one past the end is the end, and a step back", f"5 {H[3]}", L, 4, True),
    ("hashed count one past the end whose hash does not match is a step back", "5 9-9", L, 4, True),
    ("bare count one past the end is 0", "5", L, 0, False),
    ("hashed count two past the end is 0", f"6 {H[3]}", L, 0, False),
    ("bare count past the end is 0", "99", L, 0, False),
    ("bare count trusted", "3", L, 3, False),
    ("bare count with a trailing space trusted", "3 ", L, 3, False),
    ("leading zeros", f"002 {H[1]}", L, 2, False),
    ("huge count is past the end", "9" * 5000 + " 1-1", L, 0, False),
    ("hashed count one past an empty inbox is 0 lines, a step back", "1 1-1", [], 0, True),
    ("legacy stamp before every line", "2026-01-01T00:00:00Z", L, 0, False),
    ("legacy stamp equal to line 2 reads from line 3", "2026-01-01T00:00:02Z", L, 2, False),
    ("legacy stamp after every line is the end", "2027-01-01T00:00:00Z", L, 4, False),
    ("legacy stamp with a trailing newline", "2026-01-01T00:00:02Z\n", L, 2, False),
    ("legacy on an empty inbox", "2026-01-01T00:00:02Z", [], 0, False),
    ("legacy: garbage is compared as a string", "zzz", L, 4, False),
    ("negative is not a count", "-1", L, 0, False),
]

_LEGACY = "2026-01-01T00:00:05Z"
LEGACY_MIXED = [
    b"",  # empty: passed
    b"not json",  # unparseable: passed
    _line(0, None),  # null ts: passed
    _line(0, 12),  # number: passed
    _line(0, True),  # bool: passed
    json.dumps({"from": "b"}).encode(),  # missing ts: passed
    b'"2030-01-01T00:00:00Z"',  # not an object: passed
    _line(0, "2026-01-01T00:00:04Z"),  # earlier string: passed
    _line(0, ["x"]),  # array: a boundary
    _line(0, "2030-01-01T00:00:00Z"),
]
OFFSET_RULES += [
    (
        "legacy: null/number/bool/missing/unparseable passed, array is a boundary",
        _LEGACY,
        LEGACY_MIXED,
        8,
        False,
    ),
    ("legacy: object ts is a boundary", _LEGACY, [_line(0, None), _line(0, {"a": 1})], 1, False),
    ("legacy: later string ts is the boundary", _LEGACY, [*LEGACY_MIXED[:8], LEGACY_MIXED[9]], 8, False),
]


@pytest.mark.parametrize(
    ("rule", "text", "lines", "want", "noted"), OFFSET_RULES, ids=[r[0] for r in OFFSET_RULES]
)
def test_offset_rules(rule: str, text: str, lines: list[bytes], want: int, noted: bool) -> None:
    notes: list[str] = []
    assert cursor.offset(text, lines, "a", notes.append) == want, rule
    assert notes == ([STEP] if noted else [])


def test_step_back_note_text() -> None:
    assert STEP == "note: the last line read from @a's inbox was cut back; reading from the line before it"


def test_offset_without_note_callback() -> None:
    assert cursor.offset(f"2 {H[0]}", L, "a", None) == 1


@pytest.mark.parametrize(
    "last", [b'{"msg":"x\0y"}', b'{"msg":"x"}\r', b"", b"\0\0"], ids=["nul", "cr", "empty", "only-nul"]
)
def test_odd_last_line_is_never_stepped_back_over(last: bytes) -> None:
    lines = [L[0], last]
    text = cursor.encode(2, last)
    assert cursor.offset(text, lines, "a", None) == 2
    assert cursor.offset(text, [*lines, L[1]], "a", None) == 2


def test_cut_back_then_new_line_at_same_position_is_read() -> None:
    # An unlocked reader counted line 2 (in flight), the append was rolled back, another line took its place.
    seen = [L[0], L[1]]
    text = cursor.encode(2, seen[-1])
    now = [L[0], L[2]]
    assert cursor.offset(text, now, "a", None) == 1


def test_cut_back_seen_from_the_end() -> None:
    # The line counted was cut and nothing replaced it yet: hashed count one past the end -> the end.
    text = cursor.encode(2, L[1])
    notes: list[str] = []
    assert cursor.offset(text, [L[0]], "a", notes.append) == 1
    assert notes == [STEP]  # the reader is owed the note, as for every other step back (issue 14)


@settings(deadline=None)
@given(
    st.binary(max_size=80), st.lists(st.binary(max_size=20).map(lambda b: b.replace(b"\n", b"")), max_size=6)
)
def test_any_cursor_bytes_give_an_int(raw: bytes, lines: list[bytes]) -> None:
    text = raw.decode("utf-8", "surrogateescape")
    try:
        got = cursor.offset(text, lines, "a", lambda _s: None)
    except FormatError:
        return
    assert isinstance(got, int)
    assert 0 <= got <= len(lines)


@settings(deadline=None)
@given(st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), min_size=1, max_size=8))
def test_written_cursor_reads_back_as_its_count(lines: list[bytes]) -> None:
    for k in range(len(lines) + 1):
        text = cursor.encode(k, lines[k - 1] if k else None)
        assert cursor.offset(text, lines, "a", None) == k


# ------------------------------------------------------------------------------------------------- files


def test_read_missing_is_empty(tmp_path: os.PathLike[str]) -> None:
    lay = Layout(str(tmp_path))
    assert cursor.read(lay, "a") == ""


def test_write_then_read(tmp_path: os.PathLike[str]) -> None:
    lay = Layout(str(tmp_path))
    cursor.write(lay, "a", 3, b"a")  # read/ is made when missing
    assert cursor.read(lay, "a") == "3 1220704766-1"
    with open(lay.cursor("a"), "rb") as f:
        assert f.read() == b"3 1220704766-1"  # no newline
    assert stat.S_IMODE(os.stat(lay.cursor("a")).st_mode) == 0o600
    cursor.write(lay, "a", 0, None)
    assert cursor.read(lay, "a") == "0"
    assert sorted(os.listdir(lay.read_dir)) == ["a.cursor"]  # no temp left


def test_write_failure_leaves_old_cursor_and_no_temp(tmp_path: os.PathLike[str]) -> None:
    lay = Layout(str(tmp_path))
    cursor.write(lay, "a", 1, b"a")
    os.makedirs(lay.cursor("b"))  # a folder where the cursor should be: rename fails
    with pytest.raises(Exception, match="could not be written"):
        cursor.write(lay, "b", 1, b"a")
    assert sorted(os.listdir(lay.read_dir)) == ["a.cursor", "b.cursor"]
    assert cursor.read(lay, "a") == "1 1220704766-1"


def test_read_undecodable_bytes(tmp_path: os.PathLike[str]) -> None:
    lay = Layout(str(tmp_path))
    os.makedirs(lay.read_dir)
    with open(lay.cursor("a"), "wb") as f:
        f.write(b"\xff\xfe2")
    text = cursor.read(lay, "a")
    assert cursor.offset(text, L, "a", None) in range(len(L) + 1)
