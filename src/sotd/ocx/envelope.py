"""Layer 2's envelope: pure functions over the exact bytes of one message.

Format: one JSON object, UTF-8, whose top level holds ``"ocx": 2``, exactly one of ``"to"`` (a login) or
``"re"`` (the hash of the message it answers), and exactly one other key, the *kind*, whose value is the
content (spec ocx.md, decisions O2 and O4). The content is never looked at here: only the names of the
top-level keys and the values of ``ocx``, ``to`` and ``re``.

Guarantee: ``read_envelope`` never raises on any bytes; it returns an ``Envelope`` or an ``Invalid`` with
one sentence saying why. A valid message nests at most ``MAX_DEPTH`` arrays and objects and holds no text
UTF-8 cannot carry (a lone surrogate from a ``\\ud800`` escape, in any key or string at any depth: the
rule of ``sotd.text.uncarried``), so every part of it can be stored, shown and handed on as UTF-8. ``message_hash`` is Fossil's hash of the bytes (SHA1 under a ``sha1``/``auto``
hash policy, SHA3-256 otherwise), the same value Fossil stores in ``unversioned.hash``.

What would break it: re-serializing bytes before hashing them (the same message must keep one hash), or
reading the content here (layer 3's business): the depth and text checks walk the content's structure
and strings without interpreting any of it.
"""

from __future__ import annotations

import hashlib
import json

from sotd import text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

VERSION = 2
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
MESSAGE_DIR = "ocx/m/"
MESSAGE_SUFFIX = ".json"
ENVELOPE_KEYS = ("ocx", "to", "re")
MAX_LOGIN = 255
MAX_DEPTH = 64  # arrays and objects, the top-level object counted: the seed's run nests 4
TOO_DEEP = f"nested too deeply: more than {MAX_DEPTH} levels of arrays and objects"
NONCE_BYTES = 16
_HEX = frozenset("0123456789abcdef")

# Fossil's hash-policy values (config 'hash-policy'): 0 sha1, 1 auto, 2 sha3, 3 sha3-only, 4 shun-sha1.
# Unversioned content is hashed with SHA1 under 0 and 1 (checked on Fossil 2.21), with SHA3-256 otherwise.
SHA1_POLICIES = frozenset({"0", "1", "sha1", "auto", ""})


class OcxEnvelope:
    """A valid envelope: exactly one of ``to`` / ``re`` is set; ``kind`` names the content key."""

    __slots__ = ("kind", "re", "to")

    def __init__(self, kind: str, to: str | None, re: str | None) -> None:
        self.kind = kind
        self.to = to
        self.re = re

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OcxEnvelope) and (self.kind, self.to, self.re) == (
            other.kind,
            other.to,
            other.re,
        )

    def __hash__(self) -> int:
        return hash((self.kind, self.to, self.re))

    def __repr__(self) -> str:
        return f"Envelope(kind={self.kind!r}, to={self.to!r}, re={self.re!r})"


class Invalid:
    """An invalid verdict: the message is indexed with ``reason`` and never acted on."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Invalid) and self.reason == other.reason

    def __hash__(self) -> int:
        return hash(self.reason)

    def __repr__(self) -> str:
        return f"Invalid({self.reason!r})"


def is_hash(s: object) -> bool:
    """True for a Fossil artifact hash as OCX writes it: 40 or 64 lower-case hex digits."""
    return isinstance(s, str) and len(s) in (40, 64) and all(c in _HEX for c in s)


def is_login(s: object) -> bool:
    """True for a plausible Fossil login: 1-255 characters, no whitespace or control characters."""
    return (
        isinstance(s, str) and 0 < len(s) <= MAX_LOGIN and all(c.isprintable() and not c.isspace() for c in s)
    )


class _Pairs:
    """``object_pairs_hook`` that remembers whether the most recently built object repeated a key.

    The decoder builds inner objects before outer ones, so after ``loads`` the last call is the top level.
    """

    __slots__ = ("last_dup",)

    def __init__(self) -> None:
        self.last_dup: str | None = None

    def __call__(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        d: dict[str, Any] = {}
        self.last_dup = None
        for k, v in pairs:
            if k in d and self.last_dup is None:
                self.last_dup = k
            d[k] = v
        return d


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def read_envelope(data: bytes) -> OcxEnvelope | Invalid:
    """The envelope of ``data``, or why it is not one. Never raises; never reads the content."""
    if len(data) > MAX_MESSAGE_BYTES:
        return Invalid(f"too large: {len(data)} bytes; the limit is {MAX_MESSAGE_BYTES} bytes")
    if data.startswith(b"\xef\xbb\xbf"):
        return Invalid("not JSON: starts with a byte-order mark")
    try:
        decoded = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return Invalid(f"not UTF-8: invalid byte at offset {e.start}")
    hook = _Pairs()
    try:
        doc = json.loads(decoded, object_pairs_hook=hook, parse_constant=_no_constant)
    except RecursionError:
        return Invalid(TOO_DEEP)
    except json.JSONDecodeError as e:
        return Invalid(f"not JSON: {e.msg} at line {e.lineno} column {e.colno}")
    except ValueError as e:
        return Invalid(f"not JSON: {e}"[:300])
    uncarriable = _uncarriable(doc, decoded)
    if uncarriable is not None:
        return Invalid(uncarriable)
    if not isinstance(doc, dict):
        return Invalid(f"not a JSON object: the top level is {_json_type(doc)}")
    if hook.last_dup is not None:
        return Invalid(f"the key {json.dumps(hook.last_dup)} appears twice at the top level")
    if "ocx" not in doc:
        return Invalid('no "ocx" key')
    version = doc["ocx"]
    if type(version) is not int or version != VERSION:
        return Invalid(f'"ocx" is {json.dumps(version)[:40]}, not {VERSION}')
    has_to, has_re = "to" in doc, "re" in doc
    if has_to and has_re:
        return Invalid('both "to" and "re": a message either asks a login or answers a message')
    if not has_to and not has_re:
        return Invalid('neither "to" nor "re"')
    to = doc.get("to")
    re = doc.get("re")
    if has_to and not is_login(to):
        return Invalid('"to" is not a login (a non-empty string without spaces, at most 255 characters)')
    if has_re and not is_hash(re):
        return Invalid('"re" is not a hash (40 or 64 lower-case hex digits)')
    kinds = [k for k in doc if k not in ENVELOPE_KEYS]
    if not kinds:
        return Invalid("no content key")
    if len(kinds) > 1:
        shown = ", ".join(json.dumps(k) for k in kinds[:5])
        return Invalid(f"{len(kinds)} content keys ({shown}); a message has exactly one")
    kind = kinds[0]
    if not kind:
        return Invalid("the content key is empty")
    return OcxEnvelope(kind, to if has_to else None, re if has_re else None)


def _uncarriable(doc: object, raw: str) -> str | None:
    """Why the parsed ``doc`` (from the JSON text ``raw``) cannot be carried, or None: nesting deeper than
    ``MAX_DEPTH``, or a key or string holding text UTF-8 cannot carry (``text.uncarried``). The first met
    in document order is named. Walked without recursion, and only when ``raw`` could hold either (more
    than ``MAX_DEPTH`` brackets; a ``\\uD…`` escape, the only way JSON text that is UTF-8 makes one)."""
    deep = raw.count("[") + raw.count("{") > MAX_DEPTH
    if not deep and "\\ud" not in raw and "\\uD" not in raw:
        return None
    # (is a key, value, depth, where): ``where`` is a linked pair (parent's where, key or index), rendered
    # only on failure; each object's keys are met in order, each before its value
    todo: list[tuple[bool, object, int, tuple[object, object] | None]] = [(False, doc, 1, None)]
    while todo:
        is_key, v, depth, where = todo.pop()
        if isinstance(v, str):
            bad = text.uncarried(v)
            if bad is None:
                continue
            if is_key:
                return (
                    f"text UTF-8 cannot carry: a key of {_path(where)} holds a lone surrogate "
                    f"(U+{ord(bad):04X}): {json.dumps(v)[:60]}"
                )
            return f"text UTF-8 cannot carry: the string at {_path(where)} holds a lone surrogate (U+{ord(bad):04X})"
        if isinstance(v, dict | list):
            if depth > MAX_DEPTH:
                return TOO_DEEP
            items = list(v.items()) if isinstance(v, dict) else list(enumerate(v))
            for k, x in reversed(items):
                todo.append((False, x, depth + 1, (where, k)))
                if isinstance(k, str):
                    todo.append((True, k, depth, where))
    return None


def _path(where: tuple[object, object] | None) -> str:
    """``$`` then ``["key"]`` or ``[index]`` per level (keys as JSON, cut at 40 characters), at most 200."""
    parts: list[str] = []
    while where is not None:
        parent, k = where
        parts.append(f"[{k}]" if isinstance(k, int) else f"[{json.dumps(k)[:40]}]")
        where = parent  # type: ignore[assignment]
    return ("$" + "".join(reversed(parts)))[:200]


def _json_type(v: object) -> str:
    if isinstance(v, list):
        return "an array"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    return "a number"


def algorithm_for_policy(policy: str | None) -> str:
    """``sha1`` or ``sha3-256``: the hash Fossil gives unversioned content under ``policy``."""
    return "sha1" if (policy or "").strip().lower() in SHA1_POLICIES else "sha3-256"


def message_hash(data: bytes, policy: str | None = "2") -> str:
    """Fossil's hash of ``data`` under the repository's hash policy (see ``algorithm_for_policy``)."""
    if algorithm_for_policy(policy) == "sha1":
        return hashlib.sha1(data, usedforsecurity=False).hexdigest()
    return hashlib.sha3_256(data).hexdigest()


def hash_by_length(data: bytes, length: int) -> str | None:
    """The hash of ``data`` by the algorithm a hash of ``length`` hex digits names, else None."""
    if length == 40:
        return hashlib.sha1(data, usedforsecurity=False).hexdigest()
    if length == 64:
        return hashlib.sha3_256(data).hexdigest()
    return None


def message_name(h: str) -> str:
    """The unversioned file name of the message whose hash is ``h``: ``ocx/m/<h>.json``."""
    return f"{MESSAGE_DIR}{h}{MESSAGE_SUFFIX}"


def hash_from_name(name: str) -> str | None:
    """The hash a message file's name claims, or None when ``name`` is not ``ocx/m/<hash>.json``."""
    if not (name.startswith(MESSAGE_DIR) and name.endswith(MESSAGE_SUFFIX)):
        return None
    h = name[len(MESSAGE_DIR) : -len(MESSAGE_SUFFIX)]
    return h if is_hash(h) else None


def check_name(name: str, data: bytes) -> str | None:
    """None when ``name`` is ``ocx/m/<hash of data>.json``, else why not (one sentence).

    The algorithm is the one the name's length gives (40: SHA1, 64: SHA3-256), so a message keeps its
    name in repositories whose hash policies differ.
    """
    claimed = hash_from_name(name)
    if claimed is None:
        return f"the name {name!r} is not ocx/m/<hash>.json with a 40- or 64-digit lower-case hex hash"
    actual = hash_by_length(data, len(claimed))
    if actual != claimed:
        return f"the name is not the hash of the bytes: the bytes hash to {actual}"
    return None


def encode(kind: str, body: object, *, to: str | None = None, re: str | None = None) -> bytes:
    """The bytes OCX writes: ``json.dumps`` defaults, no trailing newline (decision O2).

    Keys in the order ``ocx``, ``to`` or ``re``, kind. Raises ValueError for an envelope that
    ``read_envelope`` would refuse.
    """
    if (to is None) == (re is None):
        raise ValueError('exactly one of "to" and "re" must be given')
    if kind in ENVELOPE_KEYS or not kind:
        raise ValueError(f"{kind!r} cannot be a content key")
    if to is not None and not is_login(to):
        raise ValueError(f"{to!r} is not a login")
    if re is not None and not is_hash(re):
        raise ValueError(f"{re!r} is not a hash (40 or 64 lower-case hex digits)")
    doc: dict[str, object] = {"ocx": VERSION}
    if to is not None:
        doc["to"] = to
    else:
        doc["re"] = re
    doc[kind] = body
    return json.dumps(doc).encode("utf-8")


def with_nonce(data: bytes, nonce: bytes) -> bytes:
    """``data`` then ``nonce`` written as JSON whitespace, one byte per bit (0 a space, 1 a tab, high bit
    first): the same JSON value with bytes, and so a hash, that no one knows before the sender posts them.

    Seed 002's envelope has no room for a nonce field (O4: exactly one content key) and the content is
    layer 3's (a ``run`` refuses unknown fields), so the nonce rides in the whitespace JSON allows after
    the value, which every JSON reader skips (docs/ocx.md, "Whose bytes"). ``nonce`` is fresh randomness.
    """
    bits = "".join(f"{b:08b}" for b in nonce)
    return data + bits.replace("0", " ").replace("1", "\t").encode("ascii")


def encode_answer(re: str, kind: str, body: object) -> bytes:
    """``{"ocx": 2, "re": re, kind: body}`` as OCX writes it."""
    return encode(kind, body, re=re)


def judge(name: str, data: bytes, policy: str | None) -> tuple[str, OcxEnvelope | Invalid]:
    """A received file's hash and verdict: the name must be its hash, then the envelope must be valid.

    The hash is the one the name claims when the name is right, else the repository policy's hash.
    """
    bad_name = check_name(name, data)
    if bad_name is not None:
        return message_hash(data, policy), Invalid(bad_name)
    claimed = hash_from_name(name)
    assert claimed is not None
    return claimed, read_envelope(data)
