"""How ``poll`` shows one inbox line: ``[<ts>] [<from>:<repo>] <msg>``, as the 0.6.6 reference shows it.

File: the complete lines of ``inbox/<h>.jsonl`` (read only; this module never writes anything).
Spec: behaviour 1.5 (the shape, msg = ``.msg`` else ``.message`` else ``.text`` else empty; a line that
is not a JSON object is skipped); seed 000 "The read cursor" (the reference holds a line without its NUL
bytes). The reference (jq 1.6, Debian 12's) reads each of the four fields with its own ``jq -r`` run in a
shell command substitution, ``$(… | jq -r '.ts // ""')`` and so on (msg: ``.msg // .message // .text //
""``), and prints them with ``printf '[%s] [%s:%s] %s\\n'``; it reads ``from`` as an identifier, through a
filter that drops every carriage return. Every rule below is that reading's, checked against
``/usr/bin/jq`` run the same way in ``tests/unit/test_showline.py`` (issue 28 item 2):

- ``//`` passes over a missing key, ``null`` and ``false``: such a field shows empty.
- A string shows raw; anything else as ``jq -r`` prints it: an object or an array as jq's indented JSON
  (two spaces a level, ``"key": value``, one member a line, ``{}`` and ``[]`` when empty), so a message
  that is a JSON object shows over several lines; numbers are doubles printed the way jq prints them
  (``1.0`` is ``1``, ``12345678901234567890`` is ``12345678901234567000``, ``1e400`` and ``Infinity``
  are ``1.7976931348623157e+308``, ``NaN`` is ``null`` yet is not passed over), and inside strings ``"``,
  ``\\``, ``\\b\\f\\n\\r\\t`` and every other C0 byte and DEL are escaped.
- The command substitution drops every NUL byte and then every trailing newline of a field, so
  ``"end\\n"`` shows as ``] end`` and one newline.
- NUL bytes are removed from the line before it is parsed (shell text cannot hold them). A line left
  empty is passed over; a line of JSON white space only (spaces, tabs, carriage returns) shows as
  ``[] [:] ``: jq 1.6 finds no value there, and its ``-e`` check then exits 0 as for an object.
- A line nested deeper than jq's parser takes (256 stack entries: an array 1, an object 2) is not shown.

Guarantee: two clients sharing one comm folder show one line alike, whatever its fields hold.
What would break it: showing Python's ``repr``/``json.dumps`` of a value (``None``, ``1.0``, ``Infinity``,
an unescaped DEL, ``", "`` separators), keeping a field's trailing newlines, or parsing integers exactly
where jq parses doubles.
Text UTF-8 cannot carry (bytes that are not UTF-8, lone surrogates) is read through ``sotd.text.loads``,
the one printable-text rule (docs/contract.md); poll then makes what it prints inert (``sotd.text.inert``).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

DBL_MAX = 1.7976931348623157e308
JQ_SPACE = b" \t\r"  # JSON white space a line can hold (its newline is the line's end)
EMPTY_FIELDS = "[] [:] "
JQ_MAX_DEPTH = 256  # jq 1.6's parser stack (see _too_deep)


def show_line(raw: bytes) -> str | None:
    """The text poll shows for one complete inbox line (no newline), or None when it shows nothing."""
    from sotd import text as carried

    held = raw.replace(b"\0", b"")
    if not held:
        return None  # an empty line is passed over
    if not held.strip(JQ_SPACE):
        # only JSON white space: jq 1.6 finds no value in it, and ``jq -e`` then exits 0, so the
        # reference takes it for an object and shows four empty fields
        return EMPTY_FIELDS
    try:
        # read through the carrying rule (docs/contract.md): bytes decoded as jq decodes them, a lone
        # surrogate escape read as U+FFFD, so what is shown always encodes
        obj = carried.loads(held, parse_int=float, parse_float=float, parse_constant=_constant)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict) or _too_deep(obj):
        return None
    msg: object = None
    for key in ("msg", "message", "text"):
        msg = obj.get(key)
        if _truthy(msg):
            break
    frm = _field(obj.get("from")).replace("\r", "")  # an identifier: the reference drops every CR
    return f"[{_field(obj.get('ts'))}] [{frm}:{_field(obj.get('repo'))}] {_field(msg)}"


def _constant(name: str) -> float:
    # jq 1.6 reads NaN as a number that prints as null, and ±Infinity as ±DBL_MAX
    return {"NaN": float("nan"), "Infinity": DBL_MAX, "-Infinity": -DBL_MAX}[name]


def _truthy(v: object) -> bool:
    return v is not None and v is not False


def _field(v: object) -> str:
    """``$(… | jq -r '.f // ""')``: empty for missing/null/false, a string raw, anything else as ``jq -r``
    prints it (``_pretty``); then without NULs and without trailing newlines (the command substitution)."""
    if not _truthy(v):
        return ""
    shown = v if isinstance(v, str) else _pretty(v, "")
    return shown.replace("\0", "").rstrip("\n")


def _too_deep(obj: Any) -> bool:
    """jq 1.6's parser refuses to open a container while its stack holds 256 entries: one per open
    array and two per open object (the object and the key whose value is being read)."""
    stack = [(obj, 0)]
    while stack:
        v, below = stack.pop()
        if below >= JQ_MAX_DEPTH:
            return True
        if isinstance(v, dict):
            stack.extend((k, below + 2) for k in v.values() if isinstance(k, (dict, list)))
        else:
            stack.extend((k, below + 1) for k in v if isinstance(k, (dict, list)))
    return False


def _pretty(v: Any, indent: str) -> str:
    """``v`` as ``jq -r`` (jq 1.6, no ``-c``) prints it, less its last newline: a scalar as ``_tojson``,
    a container over lines, each member two spaces in from ``indent``."""
    if isinstance(v, list):
        if not v:
            return "[]"
        inner = indent + "  "
        return "[\n" + ",\n".join(inner + _pretty(x, inner) for x in v) + "\n" + indent + "]"
    if isinstance(v, dict):
        if not v:
            return "{}"
        inner = indent + "  "
        members = (f"{inner}{_jq_string(k)}: {_pretty(x, inner)}" for k, x in v.items())
        return "{\n" + ",\n".join(members) + "\n" + indent + "}"
    return _tojson(v)


def _tojson(v: Any) -> str:
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, float):
        return jq_number(v)
    if isinstance(v, str):
        return _jq_string(v)
    if isinstance(v, list):
        return "[" + ",".join(_tojson(x) for x in v) + "]"
    return "{" + ",".join(f"{_jq_string(k)}:{_tojson(x)}" for k, x in v.items()) + "}"


_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _jq_string(s: str) -> str:
    out = []
    for ch in s:
        esc = _SHORT.get(ch)
        if esc is not None:
            out.append(esc)
        elif ch < " " or ch == "\x7f":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def jq_number(x: float) -> str:
    """A double as jq 1.6 prints it: the shortest digits that read back, in fixed notation unless the
    decimal exponent is below -4 or more than 15 places past the digits (then ``<d>[.<ddd>]e±XX``)."""
    import math  # here, not at the top: a .so load that a poll showing no numbers need not pay (issue 17)

    if math.isnan(x):
        return "null"
    if math.isinf(x):
        x = DBL_MAX if x > 0 else -DBL_MAX
    r = repr(x)
    sign = "-" if r.startswith("-") else ""
    if x == 0:
        return sign + "0"
    mant, _, exp = r.lstrip("-").partition("e")
    whole, _, frac = mant.partition(".")
    digits = whole + frac
    point = len(whole) + (int(exp) if exp else 0)  # the decimal point sits after this many digits
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    n = len(digits)
    if point <= -4 or point > n + 15:
        e = point - 1
        body = digits[0] + ("." + digits[1:] if n > 1 else "")
        return f"{sign}{body}e{'-' if e < 0 else '+'}{abs(e):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= n:
        return sign + digits + "0" * (point - n)
    return f"{sign}{digits[:point]}.{digits[point:]}"
