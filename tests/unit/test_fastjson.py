"""``sotd.fastjson`` against the stdlib ``json``: the same value, the same text, or the same exception.

Random documents (plain values, and the odd ones the fast paths hand to ``json``: subclasses, tuples,
non-string keys, NaN, circular lists), random JSON texts (valid, cut short, with junk after, as bytes), and
every keyword combination the hot path uses.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sotd import fastjson

pytestmark = pytest.mark.unit


class Int(int):
    pass


class Str(str):
    pass


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),
)
plain = st.recursive(
    scalars,
    lambda kids: st.lists(kids, max_size=5) | st.dictionaries(st.text(max_size=8), kids, max_size=5),
    max_leaves=30,
)
odd_scalars = st.one_of(
    scalars,
    st.floats(),  # NaN and the infinities
    st.integers().map(Int),
    st.text().map(Str),
    st.just(object()),
    st.just(b"bytes"),
)
odd_keys = st.one_of(st.text(max_size=4), st.integers(), st.floats(), st.booleans(), st.none())
odd = st.recursive(
    odd_scalars,
    lambda kids: (
        st.lists(kids, max_size=4)
        | st.lists(kids, max_size=4).map(tuple)
        | st.dictionaries(odd_keys, kids, max_size=4)
    ),
    max_leaves=20,
)
KWARGS = [
    {},
    {"ensure_ascii": False},
    {"ensure_ascii": False, "separators": (",", ":"), "allow_nan": False},
    {"ensure_ascii": False, "indent": 2, "allow_nan": False},
    {"indent": 2},
    {"indent": 0, "sort_keys": True},
    {"indent": "\t", "ensure_ascii": False},
    {"sort_keys": True},
    {"indent": 2, "separators": (",", ": ")},
    {"indent": 2, "separators": (", ", ":")},
]


def outcome(fn, *args, **kw):  # type: ignore[no-untyped-def]
    """The value, or the exception's type and words."""
    try:
        return ("ok", fn(*args, **kw))
    except Exception as e:
        return ("raised", type(e), str(e))


def same(a: object, b: object) -> bool:
    """Equal, with NaN equal to NaN (``repr`` compares them as the text json would write)."""
    return repr(a) == repr(b)


@settings(deadline=None)
@given(plain, st.sampled_from(KWARGS))
def test_dumps_of_plain_values_is_json_dumps(doc: object, kw: dict[str, object]) -> None:
    assert fastjson.dumps(doc, **kw) == json.dumps(doc, **kw)  # type: ignore[arg-type]


@settings(deadline=None)
@given(odd, st.sampled_from(KWARGS))
def test_dumps_of_odd_values_is_json_dumps(doc: object, kw: dict[str, object]) -> None:
    assert outcome(fastjson.dumps, doc, **kw) == outcome(json.dumps, doc, **kw)


@pytest.mark.parametrize("kw", KWARGS, ids=str)
def test_dumps_of_a_circular_value_raises_as_json_does(kw: dict[str, object]) -> None:
    loop: list[object] = [1]
    loop.append(loop)
    tree: dict[str, object] = {"a": {}}
    tree["a"]["b"] = tree  # type: ignore[index]
    for doc in (loop, tree):
        got, want = outcome(fastjson.dumps, doc, **kw), outcome(json.dumps, doc, **kw)
        assert got == want
        assert want[0] == "raised"


def test_dumps_repeats_a_shared_value_as_json_does() -> None:
    shared = {"x": [1]}
    doc = {"a": shared, "b": shared, "c": [shared, shared]}
    for kw in KWARGS:
        assert fastjson.dumps(doc, **kw) == json.dumps(doc, **kw)  # type: ignore[arg-type]


texts = st.one_of(
    plain.map(json.dumps),
    plain.map(lambda d: json.dumps(d, ensure_ascii=False, indent=2)),
    st.tuples(plain.map(json.dumps), st.sampled_from(["", " ", "\n", " x", "]", "{}", "\t\r\n", "\x0c"])).map(
        "".join
    ),
    st.tuples(st.sampled_from(["", " ", "\ufeff", "\n\t"]), plain.map(json.dumps)).map("".join),
    plain.map(json.dumps).flatmap(lambda s: st.integers(0, len(s)).map(lambda n: s[:n])),
    st.sampled_from(
        ["NaN", "-Infinity", "[Infinity]", '"\\ud800"', '"\\ud83d\\ude00"', '"a\tb"', "01", "1e999"]
    ),
    st.text(max_size=20),
)


@settings(deadline=None)
@given(texts)
def test_loads_is_json_loads(text: str) -> None:
    assert same(outcome(fastjson.loads, text), outcome(json.loads, text))


@settings(deadline=None)
@given(st.one_of(texts.map(lambda s: s.encode("utf-8", "surrogatepass")), st.binary(max_size=12)))
def test_loads_of_bytes_is_json_loads(data: bytes) -> None:
    assert same(outcome(fastjson.loads, data), outcome(json.loads, data))


def _reject(name: str) -> object:
    raise ValueError(f"not JSON: {name}")


@pytest.mark.parametrize(
    "text", ['{"a": NaN}', "[1, -Infinity]", '{"a": [1, 2.5, "x"]}', '{"a": 1, "a": 2}', "[1.5e3, 10]", ""]
)
def test_loads_with_hooks_is_json_loads(text: str) -> None:
    for kw in (
        {"parse_constant": _reject},
        {"object_pairs_hook": list},
        {"object_hook": sorted},
        {"parse_float": str, "parse_int": lambda s: -int(s)},
        {"strict": False},
    ):
        assert same(outcome(fastjson.loads, text, **kw), outcome(json.loads, text, **kw))  # type: ignore[arg-type]
    assert same(outcome(fastjson.loads, '"a\tb"', strict=False), ("ok", "a\tb"))


def test_a_nan_read_back_is_a_float() -> None:
    assert math.isnan(fastjson.loads("NaN"))


BAD = [
    '{"a": 1',
    "[1, 2",
    '"abc',
    '{"a" 1}',
    "[1,]",
    '"a\tb"',
    "nul",
    "[1] x",
    "",
    "  ",
    '{"a": "\\x"}',
    "\ufeff[]",
]

FRESH = """
import sys
import sotd.fastjson as f
f.loads('[1]'); f.dumps({'a': [1]}, indent=2); f.dumps([1.5, None], separators=(',', ':'))
print('re' in sys.modules or 'json' in sys.modules)
def outcome(fn, s):
    try:
        return ('ok', fn(s))
    except Exception as e:
        return ('raised', type(e).__name__, str(e))
got = [outcome(f.loads, s) for s in BAD] + [outcome(f.loads, s.encode()) for s in BAD]
import json
want = [outcome(json.loads, s) for s in BAD] + [outcome(json.loads, s.encode()) for s in BAD]
print(got == want or (got, want))
"""


def test_in_a_process_without_json_it_imports_no_re_and_fails_as_json_does() -> None:
    """The scanner's errors need json.decoder, which a hot-path process has not imported."""
    code = f"import sys; sys.path[:0] = {sys.path!r}; BAD = {BAD!r}\n" + FRESH
    p = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert p.stdout.splitlines() == ["False", "True"], p.stdout
