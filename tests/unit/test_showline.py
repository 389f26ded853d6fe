"""Behaviour 1.5: how poll shows one inbox line, the 0.6.6 reference's way (issue 14 item 2).

The table is what the reference's expression gives (``JQ_PROGRAM`` over the line without its NUL bytes,
then without the NULs jq prints: the reference holds both in shell text). ``test_the_table_is_what_jq_shows``
checks every row against the real ``/usr/bin/jq`` 1.6 (the jq the reference runs on Debian 12), and
``test_any_object_shows_as_jq_shows_it`` random values.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sotd.formats.showline import show_line

pytestmark = pytest.mark.unit

JQ_PROGRAM = (
    'select(type == "object") | "[\\(.ts // "")] [\\(.from // ""):\\(.repo // "")]'
    ' \\(.msg // .message // .text // "")"'
)

SHOWN = [
    # the seed's line
    (
        b'{"from":"b","to":"a","repo":"r","msg":"hi","ts":"2026-05-29T18:04:00Z"}',
        "[2026-05-29T18:04:00Z] [b:r] hi",
    ),
    # missing, null and false fields show empty (was "[null] [null:null]")
    (b'{"to":"a","msg":"m"}', "[] [:] m"),
    (b'{"from":null,"repo":null,"ts":null,"msg":"m"}', "[] [:] m"),
    (b'{"from":false,"repo":false,"ts":false,"msg":false,"message":null,"text":"t"}', "[] [:] t"),
    (b'{"from":"","repo":"","ts":"","msg":""}', "[] [:] "),
    (b"{}", "[] [:] "),
    (b'{"ts":true,"from":0,"repo":[],"msg":true}', "[true] [0:[]] true"),  # 0 and [] are not passed over
    # msg, else message, else text; a later duplicate key wins
    (b'{"msg":"m2","message":"not this"}', "[] [:] m2"),
    (b'{"message":"m3","text":"not this"}', "[] [:] m3"),
    (b'{"msg":"dup","msg":"last"}', "[] [:] last"),
    (b'{"msg":"a\\nb"}', "[] [:] a\nb"),
    # objects and arrays: jq's compact JSON, key order kept, DEL and C0 escaped, non-ASCII raw
    (
        b'{"from":{"b":1,"a":[1,2.5]},"repo":["x",null,true],"ts":{},"msg":{"k":"v\\u007f\\"\\\\\\n\\t\\u0001\xc3\xa9"}}',
        '[{}] [{"b":1,"a":[1,2.5]}:["x",null,true]] {"k":"v\\u007f\\"\\\\\\n\\t\\u0001é"}',
    ),
    # big and odd numbers: doubles, printed as jq prints them
    (
        b'{"from":12345678901234567890,"repo":1.0,"ts":1e400,"msg":-0}',
        "[1.7976931348623157e+308] [12345678901234567000:1] -0",
    ),
    (
        b'{"from":NaN,"repo":Infinity,"ts":-Infinity,"msg":1e-5}',
        "[-1.7976931348623157e+308] [null:1.7976931348623157e+308] 1e-05",
    ),
    (
        b'{"from":123456789012345678,"repo":1e16,"ts":0.0001,"msg":[1e15,1.5e-7,5e-324,100,1E2,-1e-400]}',
        "[0.0001] [123456789012345680:1e+16] [1000000000000000,1.5e-07,5e-324,100,100,-0]",
    ),
    # NUL: removed from the line before it is parsed, and from what a string decodes to
    (b'{"from":"a\\u0000b","repo":"r","ts":"T","msg":"x\\u0000y"}', "[T] [ab:r] xy"),
    (b'{"from":"b","repo":"r","ts":"T","msg":["\\u0000"]}', '[T] [b:r] ["\\u0000"]'),
    (b'{"from":"b","repo":"r","ts":"T","msg":"x\x00y"}', "[T] [b:r] xy"),  # a raw NUL (once: not shown)
    (b'{"msg":"end"}\x00\x00', "[] [:] end"),
    (b'{"msg":"cr"}\r', "[] [:] cr"),
    # bytes that are not UTF-8 show as U+FFFD
    (b'{"msg":"\xff\xfe"}', "[] [:] \ufffd\ufffd"),
    # as deep as jq parses is shown (its stack: 256 entries, an open array 1, an open object 2)
    (b'{"msg":' + b"[" * 254 + b"1" + b"]" * 254 + b"}", "[] [:] " + "[" * 254 + "1" + "]" * 254),
    (b'{"msg":' + b'{"a":' * 126 + b"{}" + b"}" * 126 + b"}", "[] [:] " + '{"a":' * 126 + "{}" + "}" * 126),
    (
        b'{"msg":' + b"[" * 253 + b'{"a":1}' + b"]" * 253 + b"}",
        "[] [:] " + "[" * 253 + '{"a":1}' + "]" * 253,
    ),
]

NOT_SHOWN = [
    b"",
    b"   ",
    b"\x00",
    b"not json",
    b"[1,2]",
    b'"s"',
    b"12",
    b"null",
    b'{"a":1',
    b'{"msg":"raw\ttab"}',  # a raw control character inside a string: jq refuses the line
    b'{"msg":' + b"[" * 255 + b"1" + b"]" * 255 + b"}",  # deeper than jq parses
    b'{"msg":' + b'{"a":' * 127 + b"{}" + b"}" * 127 + b"}",
    b"[" * 100_000,
]


@pytest.mark.parametrize(("raw", "want"), SHOWN, ids=[f"shown-{i}" for i in range(len(SHOWN))])
def test_show_line(raw: bytes, want: str) -> None:
    assert show_line(raw) == want


@pytest.mark.parametrize("raw", NOT_SHOWN, ids=[f"skipped-{i}" for i in range(len(NOT_SHOWN))])
def test_lines_that_are_not_shown(raw: bytes) -> None:
    assert show_line(raw) is None


def _jq() -> str:
    path = shutil.which("jq")
    if path is None:
        pytest.skip("jq is not installed (scripts/setup installs it): the table is not cross-checked")
    version = subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout.strip()
    if version != "jq-1.6":
        pytest.skip(f"the reference runs jq 1.6 and this is {version}: its numbers print differently")
    return path


def _jq_shows(jq: str, raw: bytes) -> str | None:
    line = raw.replace(b"\0", b"")  # the reference holds the line in shell text
    p = subprocess.run(
        [jq, "-r", JQ_PROGRAM], input=line + b"\n", capture_output=True, check=False, timeout=10
    )
    if p.returncode != 0 or not p.stdout:
        return None
    return p.stdout.replace(b"\0", b"").decode("utf-8")[:-1]  # its output too; less jq's newline


@pytest.mark.parametrize(
    ("raw", "want"),
    SHOWN + [(raw, None) for raw in NOT_SHOWN if len(raw) < 1000],
    ids=[f"shown-{i}" for i in range(len(SHOWN))]
    + [f"skipped-{i}" for i, raw in enumerate(NOT_SHOWN) if len(raw) < 1000],
)
def test_the_table_is_what_jq_shows(raw: bytes, want: str | None) -> None:
    assert _jq_shows(_jq(), raw) == want


_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=8)
_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    _text,
)
_value = st.recursive(
    _scalar, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(_text, kids, max_size=3), max_leaves=8
)
_line = st.dictionaries(
    st.sampled_from(["ts", "from", "repo", "msg", "message", "text", "to"]) | _text, _value, max_size=6
)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(_line, st.booleans()), min_size=1, max_size=25))
def test_any_object_shows_as_jq_shows_it(lines: list[tuple[dict[str, object], bool]]) -> None:
    """Random objects, one jq run per batch (NUL-separated output; no NUL is generated)."""
    jq = _jq()
    raws = [json.dumps(obj, ensure_ascii=ascii).encode() for obj, ascii in lines]
    p = subprocess.run(
        [jq, "-j", JQ_PROGRAM + ' + "\\u0000"'],
        input=b"\n".join(raws) + b"\n",
        capture_output=True,
        check=True,
        timeout=20,
    )
    shown = p.stdout.decode("utf-8").split("\0")[:-1]
    assert [show_line(raw) for raw in raws] == shown
