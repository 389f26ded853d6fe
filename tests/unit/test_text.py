"""The one rule for text UTF-8 cannot carry (``sotd.text``; docs/contract.md, "Text that cannot be carried").

Issue 14 item 1: the inbox line a send writes is byte for byte the line the 0.6.6 reference (jq 1.6) writes,
for every byte string a sender can pass in argv. Three oracles: a fixture of lines made by applying jq's
rules by hand (``tests/fixtures/reference_lines/inbox_lines.txt``), an encoder written here from the rules
(hypothesis over argv bytes), and the real ``jq`` where it is installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sotd import text
from sotd.cli.comm import send
from sotd.formats import inbox

pytestmark = pytest.mark.unit

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "reference_lines", "inbox_lines.txt")
TS = "2026-01-01T00:00:00Z"

# ------------------------------------------------------------------------------ an encoder from the rules

# RFC 3629's well-formed sequences (no overlongs, no surrogates, nothing past U+10FFFF).
_WELL_FORMED = re.compile(
    rb"[\x00-\x7f]|[\xc2-\xdf][\x80-\xbf]|\xe0[\xa0-\xbf][\x80-\xbf]|[\xe1-\xec\xee\xef][\x80-\xbf]{2}"
    rb"|\xed[\x80-\x9f][\x80-\xbf]|\xf0[\x90-\xbf][\x80-\xbf]{2}|[\xf1-\xf3][\x80-\xbf]{3}"
    rb"|\xf4[\x80-\x8f][\x80-\xbf]{2}"
)


def _expected_length(lead: int) -> int:
    """jq's length for a lead byte: 0 for one that never leads (continuations, C0, C1, F5-FF)."""
    if lead < 0x80:
        return 1
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0


def rules_decode(data: bytes) -> str:
    """jq 1.6's decoding, from its rules: a byte that cannot lead is one U+FFFD; a lead whose sequence runs
    past the end takes the rest as one U+FFFD; a byte that does not continue the sequence ends it (the bytes
    before it are one U+FFFD); a whole sequence that is not well formed is one U+FFFD."""
    out = []
    i = 0
    while i < len(data):
        n = _expected_length(data[i])
        if n == 0:
            out.append("\ufffd")
            i += 1
            continue
        if i + n > len(data):
            out.append("\ufffd")
            break
        k = 1
        while k < n and 0x80 <= data[i + k] <= 0xBF:
            k += 1
        if k < n:
            out.append("\ufffd")
            i += k
            continue
        m = _WELL_FORMED.fullmatch(data[i : i + n])
        out.append(data[i : i + n].decode("utf-8") if m else "\ufffd")
        i += n
    return "".join(out)


def rules_escape(s: str) -> str:
    """jq's string escaping: ``\\"``, ``\\\\``, ``\\b\\f\\n\\r\\t``, other C0 and DEL as lowercase ``\\u00xx``."""
    named = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
    parts = []
    for c in s:
        if c in named:
            parts.append(named[c])
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            parts.append(f"\\u{ord(c):04x}")
        else:
            parts.append(c)
    return '"' + "".join(parts) + '"'


def rules_line(msg: bytes) -> bytes:
    fields = [("from", "alice"), ("to", "bob"), ("repo", "proj"), ("msg", rules_decode(msg)), ("ts", TS)]
    body = ",".join(f'"{k}":{rules_escape(v)}' for k, v in fields)
    return ("{" + body + "}\n").encode("utf-8")


def sotd_line_from_argv(words: list[bytes]) -> bytes:
    """What ``sotd comm send @bob <words>`` writes: argv as Python decodes it, through the real parser."""
    argv = ["@bob", *(os.fsdecode(w) for w in words)]
    _, target, msg = send.parse(argv)
    assert target == "bob"
    return inbox.encode_line("alice", "bob", "proj", msg, TS)


# ------------------------------------------------------------------------------------------------ tests


def fixture_cases() -> list[tuple[bytes, bytes]]:
    cases = []
    with open(FIXTURE, "rb") as f:
        for raw in f:
            if raw.startswith(b"#"):
                continue
            hx, line = raw.rstrip(b"\n").split(b"\t", 1)
            cases.append((bytes.fromhex(hx.decode()), line + b"\n"))
    return cases


@pytest.mark.parametrize(("msg", "line"), fixture_cases(), ids=lambda v: v.hex() if len(v) < 8 else "line")
def test_14_1_send_writes_the_reference_line_fixture(msg: bytes, line: bytes) -> None:
    assert sotd_line_from_argv([msg]) == line
    assert rules_line(msg) == line  # the rules encoder agrees with the hand-made fixture too


def test_14_1_del_and_invalid_bytes_named_cases() -> None:
    # the two reproducers of issue 14 item 1
    assert b'"msg":"\\u007f"' in sotd_line_from_argv([b"\x7f"])
    assert '"msg":"\ufffd\ufffd"'.encode() in sotd_line_from_argv([b"\xff\xfe"])
    assert b"\\udc" not in sotd_line_from_argv([b"\xff\xfe"])


_word = st.binary(min_size=0, max_size=10).filter(lambda b: b"\0" not in b and b != b"--broadcast")


@settings(deadline=None, derandomize=True)
@given(st.lists(_word, min_size=1, max_size=4))
def test_14_1_any_argv_bytes_give_the_line_the_rules_give(words: list[bytes]) -> None:
    assert sotd_line_from_argv(words) == rules_line(b" ".join(words))


JQ = shutil.which("jq")


@pytest.mark.skipif(JQ is None, reason="jq is not installed, so the reference's own encoder cannot be run")
@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.binary(min_size=1, max_size=24).filter(lambda b: b"\0" not in b))
def test_14_1_real_jq_writes_the_same_line(tmp_path_factory: pytest.TempPathFactory, msg: bytes) -> None:
    path = os.path.join(str(tmp_path_factory.mktemp("jq")), "msg")
    with open(path, "wb") as f:
        f.write(msg)
    program = '{from:"alice",to:"bob",repo:"proj",msg:$m,ts:"' + TS + '"}'
    got = subprocess.run(
        [str(JQ), "-nc", "--rawfile", "m", path, program], capture_output=True, check=True, timeout=10
    ).stdout
    assert sotd_line_from_argv([msg]) == got


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("plain", "plain"),
        ("é😀", "é😀"),
        ("a\ud800b", "a\ufffdb"),
        ("\udcff", "\ufffd"),
        ("\ud83d\ude00", "\ufffd\ufffd"),  # two code points that are each a surrogate: not a pair in a str
        (b"\xff\xfe", "\ufffd\ufffd"),
        (b"\xe2A", "\ufffd"),
        (b"ok", "ok"),
    ],
)
def test_carry_table(value: str | bytes, want: str) -> None:
    assert text.carry(value) == want
    text.carry(value).encode("utf-8")


@pytest.mark.parametrize(
    ("value", "want"),
    [("plain", None), ("é😀", None), ("a\ud800b", "\ud800"), ("x\udfff\ud800", "\udfff"), ("\ufffd", None)],
)
def test_uncarried_is_the_first_character_carry_replaces(value: str, want: str | None) -> None:
    """One rule: ``uncarried`` finds what ``carry`` replaces (OCX refuses a message holding it)."""
    assert text.uncarried(value) == want
    assert (text.carry(value) == value) is (want is None)


def test_carry_os_decodes_the_bytes_behind_surrogate_escapes() -> None:
    assert text.carry_os(os.fsdecode(b"\xe2\x82\xac \xe2\x82")) == "€ \ufffd"
    assert text.carry_os("\ud800") == "\ufffd"


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        (r'{"a":"\ud800"}', {"a": "\ufffd"}),
        (r'{"\udfff":1}', {"\ufffd": 1}),
        (r'{"a":"\ud83d\ude00"}', {"a": "😀"}),
        (r'{"a":"\ude00\ud83d"}', {"a": "\ufffd\ufffd"}),
        (r'{"a":"\\ud800"}', {"a": "\\ud800"}),  # an escaped backslash, then letters
        (r'{"a":"\\\ud800"}', {"a": "\\\ufffd"}),
        (b'{"a":"\xff"}', {"a": "\ufffd"}),
    ],
)
def test_loads_reads_lone_surrogate_escapes_as_fffd(raw: str | bytes, want: object) -> None:
    assert text.loads(raw) == want


@settings(deadline=None, derandomize=True)
@given(
    st.recursive(
        st.text() | st.integers(), lambda c: st.lists(c) | st.dictionaries(st.text(), c), max_leaves=8
    )
)
def test_json_text_always_encodes_and_reads_back_carried(obj: object) -> None:
    import json

    out = text.json_text({"v": obj})
    out.encode("utf-8")
    assert "\x7f" not in out
    back = json.loads(out)
    assert text.json_text(back) == out  # carried once is carried


# ------------------------------------------------------------------ what reaches a terminal (issue 25 item 1)

# (text, as one field, as a line of text); the attack strings of issue 25 first
INERT = [
    ("\x1b]0;TITLE\x07\x1b[2J", "\\u001b]0;TITLE\\u0007\\u001b[2J", "\\u001b]0;TITLE\\u0007\\u001b[2J"),
    ("\x1b]52;c;cHduZWQ=\x07", "\\u001b]52;c;cHduZWQ=\\u0007", "\\u001b]52;c;cHduZWQ=\\u0007"),  # OSC 52
    ("safe\r\x1b[Kforged", "safe\\u000d\\u001b[Kforged", "safe\\u000d\\u001b[Kforged"),  # CR + erase line
    ("\x9b2J", "\\u009b2J", "\\u009b2J"),  # the C1 CSI (UTF-8 0xC2 0x9B)
    ("abc\u202edcba", "abc\\u202edcba", "abc\\u202edcba"),  # RLO
    # newline and tab: kept in a line of text, escaped in a field
    ("a\nb\tc", "a\\u000ab\\u0009c", "a\nb\tc"),
    ("lone\rCR", "lone\\u000dCR", "lone\\u000dCR"),
    # every C0 but newline and tab, DEL, the C1 ends
    ("\x00\x01\x08\x0b\x0c\x1f\x7f", "\\u0000\\u0001\\u0008\\u000b\\u000c\\u001f\\u007f",
     "\\u0000\\u0001\\u0008\\u000b\\u000c\\u001f\\u007f"),
    ("\x80\x85\x9f", "\\u0080\\u0085\\u009f", "\\u0080\\u0085\\u009f"),
    # every bidi embedding, override and isolate
    ("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069",
     "\\u202a\\u202b\\u202c\\u202d\\u202e\\u2066\\u2067\\u2068\\u2069",
     "\\u202a\\u202b\\u202c\\u202d\\u202e\\u2066\\u2067\\u2068\\u2069"),
    # a byte that was not UTF-8 (argv through surrogateescape): the 8-bit CSI byte alone
    ("x\udc9by", "x\\udc9by", "x\\udc9by"),
    # kept: printable text, the bidi marks (U+200E, U+200F, U+061C), other format and space characters,
    # a literal backslash escape, text just past each range
    ("plain [2026-01-01T00:00:00Z] [b:r] hi", "plain [2026-01-01T00:00:00Z] [b:r] hi",
     "plain [2026-01-01T00:00:00Z] [b:r] hi"),
    ("\u200e\u200f\u061c\u200b\ufeff\u00a0\u2028", "\u200e\u200f\u061c\u200b\ufeff\u00a0\u2028",
     "\u200e\u200f\u061c\u200b\ufeff\u00a0\u2028"),
    ("\\u001b é 漢 😀 \xa0\u2029\u206a\u2029", "\\u001b é 漢 😀 \xa0\u2029\u206a\u2029",
     "\\u001b é 漢 😀 \xa0\u2029\u206a\u2029"),
    ("", "", ""),
]  # fmt: skip


@pytest.mark.parametrize(("raw", "field", "line"), INERT)
def test_inert_table(raw: str, field: str, line: str) -> None:
    assert text.inert(raw) == field
    assert text.inert(raw, lines=True) == line


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.text(alphabet=st.characters(codec=None, exclude_categories=())))
def test_inert_leaves_nothing_that_drives_a_terminal(raw: str) -> None:
    """Whatever the text, the result holds no C0 (but newline and tab as a line), DEL, C1, bidi override
    or isolate, or surrogate; applied twice it is the same (the escapes are printable ASCII); text holding
    none of them comes back as it is."""
    bad_field = set(range(0x20)) | {0x7F} | set(range(0x80, 0xA0)) | set(range(0x202A, 0x202F))
    bad_field |= set(range(0x2066, 0x206A)) | set(range(0xD800, 0xE000))
    for lines, bad in ((False, bad_field), (True, bad_field - {0x09, 0x0A})):
        got = text.inert(raw, lines=lines)
        assert not any(ord(c) in bad for c in got), (raw, got)
        assert text.inert(got, lines=lines) == got
        got.encode("utf-8")
        if not any(ord(c) in bad for c in raw):
            assert got == raw
