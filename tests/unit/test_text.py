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
from sotd.cli import send
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
