"""Layer 2's envelope: table tests, the seed's examples and their answers byte for byte."""

from __future__ import annotations

import glob
import hashlib
import json
import os

import pytest

from sotd.ocx import envelope as ev
from sotd.ocx.envelope import Invalid, OcxEnvelope

pytestmark = pytest.mark.unit

SEED_DIR = os.path.join(os.path.dirname(__file__), "..", "ocx", "seed002")
H64 = "a" * 64
H40 = "b" * 40


def seed(name: str) -> bytes:
    with open(os.path.join(SEED_DIR, name + ".json"), "rb") as f:
        return f.read()


CASES: list[tuple[str, bytes, OcxEnvelope | Invalid]] = [
    ("to", b'{"ocx": 2, "to": "lab-user", "run": {}}', OcxEnvelope("run", "lab-user", None)),
    ("re 64", b'{"ocx": 2, "re": "' + H64.encode() + b'", "stop": {}}', OcxEnvelope("stop", None, H64)),
    ("re 40", b'{"ocx": 2, "re": "' + H40.encode() + b'", "ended": 1}', OcxEnvelope("ended", None, H40)),
    ("key order free", b'{"run": [], "to": "u", "ocx": 2}', OcxEnvelope("run", "u", None)),
    ("unknown kind", b'{"ocx":2,"to":"r","review":{"x":1}}', OcxEnvelope("review", "r", None)),
    ("content never read", b'{"ocx": 2, "to": "u", "run": {"a": 1, "a": 2}}', OcxEnvelope("run", "u", None)),
    ("not json", b"hello", Invalid("not JSON: Expecting value at line 1 column 1")),
    ("empty", b"", Invalid("not JSON: Expecting value at line 1 column 1")),
    ("not utf-8", b'{"ocx": 2, "to": "\xff", "run": 1}', Invalid("not UTF-8: invalid byte at offset 18")),
    ("bom", b'\xef\xbb\xbf{"ocx": 2}', Invalid("not JSON: starts with a byte-order mark")),
    ("array", b"[1, 2]", Invalid("not a JSON object: the top level is an array")),
    ("string", b'"x"', Invalid("not a JSON object: the top level is a string")),
    ("nan", b'{"ocx": 2, "to": "u", "run": NaN}', Invalid("not JSON: NaN is not JSON")),
    (
        "trailing garbage",
        b'{"ocx": 2, "to": "u", "run": 1} x',
        Invalid("not JSON: Extra data at line 1 column 33"),
    ),
    ("no ocx", b'{"to": "u", "run": 1}', Invalid('no "ocx" key')),
    ("ocx 1", b'{"ocx": 1, "to": "u", "run": 1}', Invalid('"ocx" is 1, not 2')),
    ("ocx 2.0", b'{"ocx": 2.0, "to": "u", "run": 1}', Invalid('"ocx" is 2.0, not 2')),
    ("ocx true", b'{"ocx": true, "to": "u", "run": 1}', Invalid('"ocx" is true, not 2')),
    ("ocx string", b'{"ocx": "2", "to": "u", "run": 1}', Invalid('"ocx" is "2", not 2')),
    (
        "both to and re",
        b'{"ocx": 2, "to": "u", "re": "' + H64.encode() + b'", "run": 1}',
        Invalid('both "to" and "re": a message either asks a login or answers a message'),
    ),
    ("neither to nor re", b'{"ocx": 2, "run": 1}', Invalid('neither "to" nor "re"')),
    (
        "to not a login",
        b'{"ocx": 2, "to": "a b", "run": 1}',
        Invalid('"to" is not a login (a non-empty string without spaces, at most 255 characters)'),
    ),
    (
        "to empty",
        b'{"ocx": 2, "to": "", "run": 1}',
        Invalid('"to" is not a login (a non-empty string without spaces, at most 255 characters)'),
    ),
    (
        "re upper case",
        b'{"ocx": 2, "re": "' + H64.upper().encode() + b'", "stop": {}}',
        Invalid('"re" is not a hash (40 or 64 lower-case hex digits)'),
    ),
    (
        "re placeholder",
        b'{"ocx": 2, "re": "RUN-HASH", "stop": {}}',
        Invalid('"re" is not a hash (40 or 64 lower-case hex digits)'),
    ),
    ("no content", b'{"ocx": 2, "to": "u"}', Invalid("no content key")),
    (
        "two content keys",
        b'{"ocx": 2, "to": "u", "run": {}, "stop": {}}',
        Invalid('2 content keys ("run", "stop"); a message has exactly one'),
    ),
    (
        "duplicate top-level key",
        b'{"ocx": 2, "to": "u", "to": "v", "run": {}}',
        Invalid('the key "to" appears twice at the top level'),
    ),
    ("empty kind", b'{"ocx": 2, "to": "u", "": {}}', Invalid("the content key is empty")),
]


@pytest.mark.parametrize(("label", "data", "want"), CASES, ids=[c[0] for c in CASES])
def test_read_envelope_table(label: str, data: bytes, want: OcxEnvelope | Invalid) -> None:
    assert ev.read_envelope(data) == want


def test_too_large_is_refused_without_parsing() -> None:
    data = b'{"ocx": 2, "to": "u", "run": "' + b"x" * (10 * 1024 * 1024) + b'"}'
    got = ev.read_envelope(data)
    assert got == Invalid(f"too large: {len(data)} bytes; the limit is {ev.MAX_MESSAGE_BYTES} bytes")


def test_deep_nesting_is_invalid_not_a_crash() -> None:
    data = b'{"ocx": 2, "to": "u", "run": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    assert ev.read_envelope(data) == Invalid(ev.TOO_DEEP)


def nest(levels: int) -> bytes:
    """A message nesting ``levels`` arrays and objects in all, the top-level object counted."""
    inner = levels - 1
    return b'{"ocx": 2, "to": "u", "run": ' + b"[" * inner + b"]" * inner + b"}"


@pytest.mark.parametrize(
    ("levels", "valid"), [(2, True), (ev.MAX_DEPTH, True), (ev.MAX_DEPTH + 1, False), (1500, False)]
)
def test_the_nesting_limit_is_max_depth_levels(levels: int, valid: bool) -> None:
    """One sentence for every message past the limit: walked (65 levels) or past the parser's stack."""
    assert ev.MAX_DEPTH == 64
    got = ev.read_envelope(nest(levels))
    assert got == (OcxEnvelope("run", "u", None) if valid else Invalid(ev.TOO_DEEP))
    assert ev.TOO_DEEP == "nested too deeply: more than 64 levels of arrays and objects"


LONE: list[tuple[str, bytes, str]] = [
    ("the issue's key", b'{"ocx": 2, "to": "alice", "\\ud800": 1}',
     'text UTF-8 cannot carry: a key of $ holds a lone surrogate (U+D800): "\\ud800"'),
    ("a value", b'{"ocx": 2, "to": "alice", "run": "a\\udfffb"}',
     "text UTF-8 cannot carry: the string at $[\"run\"] holds a lone surrogate (U+DFFF)"),
    ("nested key", b'{"ocx": 2, "to": "u", "run": {"x": [{"\\udc00k": 1}]}}',
     'text UTF-8 cannot carry: a key of $["run"]["x"][0] holds a lone surrogate (U+DC00): "\\udc00k"'),
    ("nested value", b'{"ocx": 2, "re": "' + H64.encode() + b'", "ended": {"a": [1, ["\\uD834"]]}}',
     'text UTF-8 cannot carry: the string at $["ended"]["a"][1][0] holds a lone surrogate (U+D834)'),
    ("the login", b'{"ocx": 2, "to": "\\ud800", "run": 1}',
     'text UTF-8 cannot carry: the string at $["to"] holds a lone surrogate (U+D800)'),
    ("the first in document order", b'{"ocx": 2, "to": "u", "run": ["\\udc01", {"\\ud802": 1}]}',
     'text UTF-8 cannot carry: the string at $["run"][0] holds a lone surrogate (U+DC01)'),
]  # fmt: skip


@pytest.mark.parametrize(("label", "data", "why"), LONE, ids=[c[0] for c in LONE])
def test_text_utf8_cannot_carry_is_invalid_with_its_place(label: str, data: bytes, why: str) -> None:
    """The comm folder's rule (``sotd.text.uncarried``): a lone surrogate anywhere makes the message
    invalid, named with where it is; the reason itself is plain ASCII (it goes in the index as text)."""
    got = ev.read_envelope(data)
    assert got == Invalid(why)
    assert isinstance(got, Invalid)
    got.reason.encode("ascii")


def test_a_surrogate_pair_is_one_character_and_valid() -> None:
    data = b'{"ocx": 2, "to": "u", "run": {"\\ud83d\\ude00": "\\uD83D\\uDE00"}}'
    assert ev.read_envelope(data) == OcxEnvelope("run", "u", None)
    assert ev.read_envelope(b'{"ocx": 2, "to": "u", "run": "\\\\ud800"}') == OcxEnvelope("run", "u", None)


@pytest.mark.parametrize(
    ("nonce", "tail"),
    [
        (b"\x00", b" " * 8),
        (b"\xff", b"\t" * 8),
        (b"\xa5", b"\t \t  \t \t"),
        (b"\x01\x80", b" " * 7 + b"\t\t" + b" " * 7),
    ],
)
def test_with_nonce_writes_bits_as_whitespace(nonce: bytes, tail: bytes) -> None:
    data = ev.encode("stop", {}, re=H64)
    assert ev.with_nonce(data, nonce) == data + tail


def test_with_nonce_keeps_the_value_and_changes_the_hash() -> None:
    data = ev.encode("stop", {}, re=H64)
    a, b = ev.with_nonce(data, b"\x01" * ev.NONCE_BYTES), ev.with_nonce(data, b"\x02" * ev.NONCE_BYTES)
    assert len(a) == len(data) + 8 * ev.NONCE_BYTES
    assert (
        ev.read_envelope(a) == ev.read_envelope(b) == ev.read_envelope(data) == OcxEnvelope("stop", None, H64)
    )
    assert json.loads(a) == json.loads(data)
    assert len({ev.message_hash(data), ev.message_hash(a), ev.message_hash(b)}) == 3


# --- the seed's examples, byte for byte -------------------------------------------------------------


def test_seed_fixtures_match_the_seed_file() -> None:
    """The fixtures are the seed's blocks exactly (checked when the seed is on this machine)."""
    found = glob.glob("/work/shared/seeds/002_*.txt")
    if not found:
        pytest.skip("the seed file is not on this machine")
    with open(found[0], "rb") as f:
        text = f.read()
    for name in ("run-build", "run-session", "started", "stop", "ended", "review", "reviewed"):
        assert seed(name) in text, name


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("run-build", OcxEnvelope("run", "LAB-USER", None)),
        ("run-session", OcxEnvelope("run", "AGENT-CLONE-USER", None)),
        ("review", OcxEnvelope("review", "REVIEWER-USER", None)),
    ],
)
def test_seed_requests(name: str, want: OcxEnvelope) -> None:
    data = seed(name)
    assert ev.read_envelope(data) == want
    h = ev.message_hash(data)
    assert h == hashlib.sha3_256(data).hexdigest()
    assert ev.check_name(ev.message_name(h), data) is None


@pytest.mark.parametrize(
    ("name", "request_name", "kind", "body"),
    [
        ("started", "run-session", "started", {"values": {"workspace": "..."}, "limits": {"wall": "8h"}}),
        ("stop", "run-session", "stop", {}),
        ("ended", "run-session", "ended", {"outcome": "stopped"}),
        ("reviewed", "review", "reviewed", {"verdict": "pass", "note": "ONE LINE"}),
    ],
)
def test_seed_answers_byte_for_byte(name: str, request_name: str, kind: str, body: object) -> None:
    """``encode_answer`` writes exactly the seed's answer, with the placeholder hash made real."""
    line = seed(name)
    placeholder = b"RUN-HASH" if request_name.startswith("run") else b"REVIEW-REQUEST-HASH"
    assert placeholder in line
    assert isinstance(ev.read_envelope(line), Invalid)  # as printed, the placeholder is not a hash
    re = ev.message_hash(seed(request_name))
    real = line.replace(placeholder, re.encode())
    assert ev.encode_answer(re, kind, body) == real
    assert ev.read_envelope(real) == OcxEnvelope(kind, None, re)
    sha1_re = ev.message_hash(seed(request_name), "0")
    assert len(sha1_re) == 40
    assert ev.encode_answer(sha1_re, kind, body) == line.replace(placeholder, sha1_re.encode())


# --- hashes and names --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "algo"),
    [("0", "sha1"), ("1", "sha1"), (None, "sha1"), ("2", "sha3-256"), ("3", "sha3-256"), ("4", "sha3-256")],
)
def test_hash_policy(policy: str | None, algo: str) -> None:
    assert ev.algorithm_for_policy(policy) == algo
    want = hashlib.sha1(b"x").hexdigest() if algo == "sha1" else hashlib.sha3_256(b"x").hexdigest()
    assert ev.message_hash(b"x", policy) == want


def test_check_name() -> None:
    data = b'{"ocx": 2, "to": "u", "run": 1}'
    h3 = hashlib.sha3_256(data).hexdigest()
    h1 = hashlib.sha1(data).hexdigest()
    assert ev.check_name(f"ocx/m/{h3}.json", data) is None
    assert ev.check_name(f"ocx/m/{h1}.json", data) is None
    assert ev.check_name(f"ocx/m/{h3}.json", data + b" ") == (
        f"the name is not the hash of the bytes: the bytes hash to {hashlib.sha3_256(data + b' ').hexdigest()}"
    )
    assert "is not ocx/m/<hash>.json" in (ev.check_name("ocx/m/x.json", data) or "")
    assert "is not ocx/m/<hash>.json" in (ev.check_name(f"ocx/n/{h3}.json", data) or "")
    assert "is not ocx/m/<hash>.json" in (ev.check_name(f"ocx/m/{h3.upper()}.json", data) or "")


def test_judge_hash_of_a_misnamed_file_is_the_policy_hash() -> None:
    data = b'{"ocx": 2, "to": "u", "run": 1}'
    h, verdict = ev.judge("ocx/m/" + "0" * 64 + ".json", data, "2")
    assert h == hashlib.sha3_256(data).hexdigest()
    assert isinstance(verdict, Invalid)
    h, verdict = ev.judge(ev.message_name(hashlib.sha1(data).hexdigest()), data, "2")
    assert h == hashlib.sha1(data).hexdigest()
    assert verdict == OcxEnvelope("run", "u", None)


def test_encode_is_json_dumps_without_newline() -> None:
    assert (
        ev.encode("run", {"a": [1]}, to="u") == json.dumps({"ocx": 2, "to": "u", "run": {"a": [1]}}).encode()
    )
    with pytest.raises(ValueError):
        ev.encode("run", {}, to="u", re=H64)
    with pytest.raises(ValueError):
        ev.encode("run", {})
    with pytest.raises(ValueError):
        ev.encode("to", {}, re=H64)
    with pytest.raises(ValueError):
        ev.encode_answer("RUN-HASH", "stop", {})
