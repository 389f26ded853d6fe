"""JSON without ``re``: ``loads`` and ``dumps`` that give exactly what the stdlib ``json`` gives, cheaper to import.

Spec: issue 17 target 1 (the hot verbs within 1.6x a bare interpreter start); docs/design.md, "The hot path".
``import json`` imports ``re`` (``json.decoder``'s whitespace pattern, ``json.encoder``'s escape patterns),
and ``re`` pulls in ``enum``, ``functools`` and ``collections``: most of what a CLI verb paid beyond the
interpreter. The C scanner and encoder behind ``json`` (``_json``) need none of that, so this module drives
them itself: the scanner for ``loads``, the C encoder for compact ``dumps``, and its own indenting writer for
``dumps(indent=...)`` (the stdlib writes indented JSON in pure Python, inside ``json.encoder``). The scanner
raises its syntax errors as ``json.decoder.JSONDecodeError`` looked up in ``sys.modules`` only, so an error
there before ``json`` is imported comes out as a ``SystemError``: ``loads`` then asks ``json``.
Guarantee: for every input, the result (a value, the text, or the exception raised) is the one ``json``
would give. The fast paths take only what they can answer exactly (plain ``dict``/``list``/``str``/``int``/
``float``/``bool``/``None``, the keyword arguments listed); everything else, and every failure the stdlib
words in Python (``Expecting value``, ``Extra data``, a circular reference), is handed to ``json`` itself,
which then gives its own answer. Tested against ``json`` with hypothesis (tests/unit/test_fastjson.py).
What would break it: a fast path that answers a case it does not write exactly as ``json`` does (a subclass
of ``int`` or ``str``, a key that is not a string, a float that is NaN): those must go to ``json``.

Stdlib only, a leaf (imports nothing of ours).
"""

from __future__ import annotations

import _json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_WS = " \t\n\r"  # json.decoder's WHITESPACE: [ \t\n\r]*
_INF = float("inf")
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}
_LOADS_KW = frozenset(
    ("object_hook", "object_pairs_hook", "parse_float", "parse_int", "parse_constant", "strict")
)


class _Context:
    """What ``_json.make_scanner`` reads from a decoder: the same attributes ``json.JSONDecoder`` sets."""

    __slots__ = (
        "memo",
        "object_hook",
        "object_pairs_hook",
        "parse_constant",
        "parse_float",
        "parse_int",
        "strict",
    )

    def __init__(self, kw: dict[str, Any]) -> None:
        self.object_hook = kw.get("object_hook")
        self.object_pairs_hook = kw.get("object_pairs_hook")
        self.parse_float = kw.get("parse_float") or float
        self.parse_int = kw.get("parse_int") or int
        self.parse_constant = kw.get("parse_constant") or _CONSTANTS.__getitem__
        self.strict = kw.get("strict", True)
        self.memo: dict[str, str] = {}


_plain_scanner: Any = None


def _scanner(kw: dict[str, Any]) -> Any:
    global _plain_scanner
    if kw:
        return _json.make_scanner(_Context(kw))  # type: ignore[arg-type]
    if _plain_scanner is None:
        _plain_scanner = _json.make_scanner(_Context({}))  # type: ignore[arg-type]
    return _plain_scanner


def _stdlib_loads(s: str | bytes | bytearray, kw: dict[str, Any]) -> Any:
    import json

    return json.loads(s, **kw)


def _text_of(s: object) -> str | None:
    """The text ``json.loads`` would decode, when it is plainly UTF-8 (no BOM, no NUL in the first two
    bytes: ``json.detect_encoding`` then says utf-8); None when ``json`` must look at it itself."""
    if isinstance(s, str):
        return None if s.startswith("\ufeff") else s
    if isinstance(s, (bytes, bytearray)):
        head = bytes(s[:2])
        if head[:1] in (b"\xef", b"\xfe", b"\xff", b"\x00") or head[1:2] == b"\x00":
            return None
        try:
            return bytes(s).decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            return None
    return None


def loads(s: str | bytes | bytearray, **kw: Any) -> Any:
    """``json.loads(s, **kw)``: the same value, or the same exception."""
    text = _text_of(s)
    if text is None or not _LOADS_KW.issuperset(kw):
        return _stdlib_loads(s, kw)
    scan = _scanner(kw)
    start = len(text) - len(text.lstrip(_WS))
    try:
        obj, end = scan(text, start)
    except StopIteration:
        return _stdlib_loads(s, kw)  # "Expecting value": json words it
    except SystemError:
        # the scanner words its errors with json.decoder's JSONDecodeError, found only in sys.modules: when
        # json was never imported it fails with no exception set, and json itself then gives the error
        return _stdlib_loads(s, kw)
    if end != len(text) and text[end:].lstrip(_WS):
        return _stdlib_loads(s, kw)  # "Extra data"
    return obj


class _Slow(Exception):
    """A value the indenting writer does not answer itself: ``json`` writes it."""


def _default(o: object) -> object:
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


def _float_text(o: float) -> str:
    if not -_INF < o < _INF:  # NaN or an infinity
        raise _Slow
    return float.__repr__(o)


def _indented(o: object, indent: str, sep: str, esc: Any, *, sort_keys: bool) -> str:
    """``o`` as ``json.dumps(o, indent=..., separators=(",", sep))`` writes it, for plain values only."""
    parts: list[str] = []
    path: set[int] = set()

    def value(v: object, level: int) -> None:
        t = type(v)
        if t is str:
            parts.append(esc(v))
        elif v is None:
            parts.append("null")
        elif v is True:
            parts.append("true")
        elif v is False:
            parts.append("false")
        elif t is int:
            parts.append(int.__repr__(v))
        elif t is float:
            parts.append(_float_text(v))  # type: ignore[arg-type]
        elif t is list:
            items: list[object] = v  # type: ignore[assignment]
            if not items:
                parts.append("[]")
                return
            enter(v)
            inner = "\n" + indent * (level + 1)
            parts.append("[")
            for i, item in enumerate(items):
                parts.append(inner if i == 0 else "," + inner)
                value(item, level + 1)
            parts.append("\n" + indent * level + "]")
            path.discard(id(v))
        elif t is dict:
            d: dict[object, object] = v  # type: ignore[assignment]
            if not d:
                parts.append("{}")
                return
            enter(v)
            keys = list(d)
            if any(type(k) is not str for k in keys):
                raise _Slow
            if sort_keys:
                keys.sort()
            inner = "\n" + indent * (level + 1)
            parts.append("{")
            for i, k in enumerate(keys):
                parts.append(inner if i == 0 else "," + inner)
                parts.append(esc(k))
                parts.append(sep)
                value(d[k], level + 1)
            parts.append("\n" + indent * level + "}")
            path.discard(id(v))
        else:
            raise _Slow

    def enter(container: object) -> None:
        if id(container) in path:
            raise _Slow  # a circular reference: json says so in its own words
        path.add(id(container))

    value(o, 0)
    return "".join(parts)


def dumps(
    obj: object,
    *,
    ensure_ascii: bool = True,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
    allow_nan: bool = True,
    **kw: Any,
) -> str:
    """``json.dumps(obj, ...)`` for these keyword arguments: the same text, or the same exception."""
    opts = dict(kw, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    opts["allow_nan"] = allow_nan
    esc = _json.encode_basestring_ascii if ensure_ascii else _json.encode_basestring
    if kw:
        return _stdlib_dumps(obj, opts)
    if indent is None:
        item_sep, key_sep = separators if separators is not None else (", ", ": ")
        if type(obj) is str:
            return str(esc(obj))
        encode = _json.make_encoder({}, _default, esc, None, key_sep, item_sep, sort_keys, False, allow_nan)
        try:
            return "".join(encode(obj, 0))
        except ValueError:
            # a circular reference or an out-of-range float: json's own words for either
            return _stdlib_dumps(obj, opts)
    if separators is not None and separators[0] != ",":
        return _stdlib_dumps(obj, opts)
    key_sep = separators[1] if separators is not None else ": "
    pad = indent if isinstance(indent, str) else " " * indent
    try:
        return _indented(obj, pad, key_sep, esc, sort_keys=sort_keys)
    except (_Slow, RecursionError):
        return _stdlib_dumps(obj, opts)


def _stdlib_dumps(obj: object, opts: dict[str, Any]) -> str:
    import json

    return json.dumps(obj, **opts)


__all__ = ["dumps", "loads"]
