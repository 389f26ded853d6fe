"""Behaviour 1.5: how poll shows one inbox line, the 0.6.6 reference's way (issues 14 item 2, 28 item 2).

The table is what the reference's reading gives: the line held in shell text (without its NUL bytes),
``jq -e 'type == "object"'``, then each field through its own ``jq -r`` in a command substitution (no
NULs, no trailing newlines; ``from`` without carriage returns) and ``printf '[%s] [%s:%s] %s\\n'``.
``_reference_shows`` models the shell's part here, from that description, and runs the real
``/usr/bin/jq`` 1.6 (the jq the reference runs on Debian 12) for jq's part: one run a line printing the
same four values ``jq -r`` prints one by one. ``test_the_table_is_what_jq_shows`` checks every row so, and
``test_any_object_shows_as_jq_shows_it`` random objects.
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


def _nested(depth: int, leaf: str, key: str | None = None) -> str:
    """``jq -r`` of ``depth`` nested arrays (or objects under ``key``) around ``leaf``: a level a line."""
    text = leaf
    for _ in range(depth):
        inner = text.replace("\n", "\n  ")
        text = "[\n  " + inner + "\n]" if key is None else "{\n  " + json.dumps(key) + ": " + inner + "\n}"
    return text


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
        '[{}] [{\n  "b": 1,\n  "a": [\n    1,\n    2.5\n  ]\n}:[\n  "x",\n  null,\n  true\n]] '
        '{\n  "k": "v\\u007f\\"\\\\\\n\\t\\u0001é"\n}',
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
        "[0.0001] [123456789012345680:1e+16] [\n  1000000000000000,\n  1.5e-07,\n  5e-324,\n  100,\n  100,\n  -0\n]",
    ),
    # NUL: removed from the line before it is parsed, and from what a string decodes to
    (b'{"from":"a\\u0000b","repo":"r","ts":"T","msg":"x\\u0000y"}', "[T] [ab:r] xy"),
    (b'{"from":"b","repo":"r","ts":"T","msg":["\\u0000"]}', '[T] [b:r] [\n  "\\u0000"\n]'),
    (b'{"from":"b","repo":"r","ts":"T","msg":"x\x00y"}', "[T] [b:r] xy"),  # a raw NUL (once: not shown)
    (b'{"msg":"end"}\x00\x00', "[] [:] end"),
    (b'{"msg":"cr"}\r', "[] [:] cr"),
    # bytes that are not UTF-8 show as U+FFFD
    (b'{"msg":"\xff\xfe"}', "[] [:] \ufffd\ufffd"),
    # as deep as jq parses is shown (its stack: 256 entries, an open array 1, an open object 2)
    (b'{"msg":' + b"[" * 254 + b"1" + b"]" * 254 + b"}", "[] [:] " + _nested(254, "1")),
    (b'{"msg":' + b'{"a":' * 126 + b"{}" + b"}" * 126 + b"}", "[] [:] " + _nested(126, "{}", "a")),
    (b'{"msg":' + b"[" * 253 + b'{"a":1}' + b"]" * 253 + b"}", "[] [:] " + _nested(253, '{\n  "a": 1\n}')),
    # issue 28 item 2: a field's trailing newlines go (the command substitution), its other ones stay
    (b'{"from":"b","repo":"r","ts":"T","msg":"end\\n"}', "[T] [b:r] end"),
    (b'{"msg":"end\\n\\n\\n"}', "[] [:] end"),
    (b'{"msg":"\\n"}', "[] [:] "),
    (b'{"msg":"a\\n\\nb\\n"}', "[] [:] a\n\nb"),
    (b'{"msg":"end\\n\\u0000\\n","ts":"T\\n","repo":"r\\n\\n"}', "[T] [:r] end"),
    (b'{"msg":"\\nlead"}', "[] [:] \nlead"),
    # a message that is a JSON object or array: jq's indented JSON, over several lines
    (
        b'{"from":"b","repo":"r","ts":"T","msg":{"k":"v","n":[1,{}]}}',
        '[T] [b:r] {\n  "k": "v",\n  "n": [\n    1,\n    {}\n  ]\n}',
    ),
    (b'{"msg":{}}', "[] [:] {}"),
    (b'{"msg":[]}', "[] [:] []"),
    (b'{"text":[["x"]]}', '[] [:] [\n  [\n    "x"\n  ]\n]'),
    (b'{"ts":{"at":1e400},"msg":"m"}', '[{\n  "at": 1.7976931348623157e+308\n}] [:] m'),
    # a ts of 1e400 (issue 28 item 2): jq 1.6 prints the largest double
    (b'{"from":"b","repo":"r","ts":1e400,"msg":"m"}', "[1.7976931348623157e+308] [b:r] m"),
    (b'{"ts":-1e400,"msg":"m"}', "[-1.7976931348623157e+308] [:] m"),
    # white space only: jq 1.6's -e check passes it (no value, exit 0), so four empty fields
    (b"   ", "[] [:] "),
    (b"\t\r", "[] [:] "),
    (b" \x00 ", "[] [:] "),
    # from is read as an identifier: without its carriage returns (repo and msg keep theirs)
    (b'{"from":"a\\rb\\r","repo":"r\\r","msg":"m\\r"}', "[] [ab:r\r] m\r"),
]

NOT_SHOWN = [
    b"",
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


# The reference's four jq -r runs over one line, as one jq run: each field as ``jq -r`` prints it, with a
# SEP line between them and an END line after the fourth (marks no field can hold). A line that is not an
# object prints NOT_OBJECT instead (the reference's ``jq -e 'type == "object"'`` check fails), and a line
# that does not parse makes jq exit 2.
SEP, END, NOT_OBJECT = "\u0000sotd-field\u0000", "\u0000sotd-end\u0000", "\u0000sotd-not-an-object\u0000"
FIELDS = (
    f'(.ts // ""), {json.dumps(SEP)}, (.from // ""), {json.dumps(SEP)}, (.repo // ""), {json.dumps(SEP)}, '
    f'(.msg // .message // .text // ""), {json.dumps(END)}'
)
ONE_LINE = f'if type == "object" then {FIELDS} else {json.dumps(NOT_OBJECT)} end'


def _records(out: bytes) -> list[list[bytes]]:
    """jq's output for FIELDS: per line, what ``jq -r`` printed for each of the four fields."""
    return [r.split(SEP.encode() + b"\n") for r in out.split(END.encode() + b"\n")[:-1]]


def _substituted(printed: bytes) -> str:
    """What ``$(…)`` keeps of what jq printed: no NUL, no trailing newline."""
    return printed.replace(b"\0", b"").decode("utf-8").rstrip("\n")


def _shown(fields: list[bytes]) -> str:
    """The reference's ``printf '[%s] [%s:%s] %s\\n'`` of the four fields (``from`` without its CRs), less
    its newline."""
    ts, frm, repo, msg = (_substituted(x) for x in fields)
    return f"[{ts}] [{frm.replace(chr(13), '')}:{repo}] {msg}"


def _reference_shows(raw: bytes) -> str | None:
    """What the reference shows for one inbox line, with the real jq: the line as shell text holds it
    (no NULs; an empty one is passed over), checked and read by jq as the reference reads it."""
    line = raw.replace(b"\0", b"")
    if not line:
        return None
    p = subprocess.run([_jq(), "-r", ONE_LINE], input=line, capture_output=True, check=False, timeout=20)
    if p.returncode != 0 or p.stdout.startswith(NOT_OBJECT.encode()):
        return None
    if not p.stdout:  # no value at all (white space): -e passed it, and each field printed nothing
        return _shown([b""] * 4)
    (record,) = _records(p.stdout)
    return _shown(record)


TABLE = SHOWN + [(raw, None) for raw in NOT_SHOWN if len(raw) < 1000]


@pytest.mark.parametrize(("raw", "want"), TABLE, ids=[f"row-{i}" for i in range(len(TABLE))])
def test_the_table_is_what_jq_shows(raw: bytes, want: str | None) -> None:
    assert _reference_shows(raw) == want


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
    """Random objects, one jq run per batch."""
    jq = _jq()
    raws = [json.dumps(obj, ensure_ascii=ascii).encode() for obj, ascii in lines]
    p = subprocess.run(
        [jq, "-r", FIELDS], input=b"\n".join(raws) + b"\n", capture_output=True, check=True, timeout=20
    )
    shown = [_shown(record) for record in _records(p.stdout)]
    assert [show_line(raw) for raw in raws] == shown
