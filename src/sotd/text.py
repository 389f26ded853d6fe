"""Text that UTF-8 cannot carry, and text that reaches a terminal: the rules for every string sotd
writes, reads back or shows.

Spec: seed 000 "The inbox" (the 0.6.6 reference builds each line with jq); RFC 8259 §8.2 (a string holding
a lone surrogate is "unpredictable" for other parsers); docs/contract.md, "Text that cannot be carried".
Guarantee: ``carry`` returns a string that always encodes as UTF-8. Bytes are decoded exactly as jq 1.6
decodes them (``jvp_utf8_next``: a bad lead byte, a sequence cut short by a byte that does not continue it,
a sequence the input ends inside, an overlong form, a surrogate or a code point past U+10FFFF each become
one U+FFFD), so a sender's argv bytes become the text the reference writes for them; a ``str`` (text
decoded from JSON, where ``\\ud800`` is legal syntax) has each surrogate code point replaced by U+FFFD
(jq 1.6 reads a lone low-surrogate escape so, and refuses a whole line holding a lone high one; sotd reads
both as U+FFFD, so such a line is still shown and passed). ``json_text`` writes JSON as jq escapes it: ``\\"``, ``\\\\``, ``\\b\\f\\n\\r\\t``, the other
C0 controls and DEL as lowercase ``\\u00xx``, everything else raw UTF-8.
``uncarried`` is the test itself (the first character UTF-8 cannot carry): ``carry`` replaces what it
finds, OCX refuses a message holding one (its bytes are hashed and may not change; docs/ocx.md).
What would break it: a writer or reader that skips ``carry`` (a line with a lone surrogate then stops a
strict UTF-8 stdout: the poison line of issue 19), or decoding bytes with Python's ``replace`` (it splits
bad sequences differently from jq, so the two clients would show one line differently).

``inert`` is the one rule for text that reaches a terminal (issue 25 item 1; docs/commands.md "What
reaches a terminal"): every C0 control, DEL, every C1 control, the bidi embeddings, overrides and isolates
(U+202A-U+202E, U+2066-U+2069) and a lone surrogate (a byte that was not UTF-8) show as ``\\u`` and four
lowercase hex digits; a line of text (``lines=True``: mail, an error's lines) keeps its newlines and tabs.
Guarantee: nothing ``inert`` returns does more to a terminal than print, start a line or move to a tab
stop: it cannot overwrite a line, clear the screen, retitle a window, write a clipboard or reorder the text
beside it. What would break it: a printer that writes data to a
terminal without it (``sotd.cli.comm.common.out``/``err`` and ``sotd.cli.main`` apply it), or a second copy of
the rule that disagrees with this one.

Stdlib only; a leaf (imports nothing of ours), so formats, the CLI, the hooks and the daemon share it.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

REPLACEMENT = "\ufffd"

# jq 1.6's utf8_coding_length: 1 ASCII, 0 never valid as a lead, 255 a continuation byte, else the length.
_LEAD_LENGTH = bytes(
    [1] * 0x80 + [255] * 0x40 + [0] * 2 + [2] * 30 + [3] * 16 + [4] * 5 + [0] * 11,
)
_LEAD_BITS = (0, 0x7F, 0x1F, 0x0F, 0x07)
_FIRST_CODEPOINT = (0, 0, 0x80, 0x800, 0x10000)


def _jq_decode(data: bytes) -> str:
    """``data`` decoded as jq's ``jvp_string_copy_replace_bad`` does (see the module header)."""
    out: list[str] = []
    i, end = 0, len(data)
    while i < end:
        first = data[i]
        length = _LEAD_LENGTH[first]
        if length == 1:
            j = i + 1
            while j < end and data[j] < 0x80:
                j += 1
            out.append(data[i:j].decode("ascii"))
            i = j
            continue
        if length in (0, 255):
            out.append(REPLACEMENT)
            i += 1
            continue
        if i + length > end:
            out.append(REPLACEMENT)  # the input ends inside the sequence: jq takes the rest as one
            break
        cp = first & _LEAD_BITS[length]
        taken = length
        for k in range(1, length):
            ch = data[i + k]
            if _LEAD_LENGTH[ch] != 255:
                cp = -1
                taken = k
                break
            cp = (cp << 6) | (ch & 0x3F)
        if cp < _FIRST_CODEPOINT[length] or 0xD800 <= cp <= 0xDFFF or cp > 0x10FFFF:
            out.append(REPLACEMENT)
        else:
            out.append(chr(cp))
        i += taken
    return "".join(out)


def carry(value: str | bytes) -> str:
    """``value`` as text UTF-8 can carry (the rule in the module header; bytes are decoded like jq).

    Text that came from the OS (argv, a path, the environment: surrogate escapes for bytes that were not
    UTF-8) is carried from its bytes: ``carry_os``.
    """
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return _jq_decode(value)
    if uncarried(value) is None:
        return value
    return "".join(REPLACEMENT if _is_surrogate(c) else c for c in value)


def _is_surrogate(c: str) -> bool:
    return 0xD800 <= ord(c) <= 0xDFFF


def uncarried(value: str) -> str | None:
    """The first character of ``value`` UTF-8 cannot carry (a surrogate code point), or None.

    The one test behind every use of the rule: ``carry`` replaces what it finds, and OCX (whose messages
    are hashed bytes that may not be changed) refuses a message holding one (``sotd.ocx.envelope``).
    """
    if value.isascii():
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        return value[e.start]
    return None


def carry_os(text: str) -> str:
    """Text that came from the OS (argv, a path, the environment), carried from its bytes: surrogate
    escapes stand for bytes that were not UTF-8, and those bytes are decoded as jq decodes them."""
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return carry(text)  # a surrogate no OS decoding makes: not from the OS after all
    return carry(data)


# A JSON escape of a surrogate: a whole pair (kept: it is one code point), a lone half (made U+FFFD), or an
# escaped backslash (kept, so ``\\\\ud800`` -- a backslash, then letters -- is left alone).
_SURROGATE_ESCAPE = (
    r"(\\\\)|(\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})|\\u[dD][89a-fA-F][0-9a-fA-F]{2}"
)


def _lone_escape_to_fffd(m: Any) -> str:
    return str(m.group(0)) if m.group(1) or m.group(2) else "\\ufffd"


def loads(data: str | bytes, **kwargs: Any) -> Any:
    """JSON read through the rule: the text carried, and each ``\\u`` escape of a lone surrogate read as
    U+FFFD, so no string in the result holds a code point UTF-8 cannot encode. ``kwargs`` go to
    ``json.loads``; errors are its own (``ValueError``, ``RecursionError``)."""
    from sotd import fastjson as json  # json's own results, without importing re (sotd/fastjson.py)

    text = carry(data)
    if "\\ud" in text or "\\uD" in text:  # only a \\uD... escape can be a surrogate's
        import re

        text = re.sub(_SURROGATE_ESCAPE, _lone_escape_to_fffd, text)
    return json.loads(text, **kwargs)


def json_text(obj: Any, *, indent: int | None = None) -> str:
    """``obj`` as JSON, escaped as jq writes it; compact (``,`` and ``:``) unless ``indent`` is given.

    A string holding a surrogate is written with U+FFFD in its place, so the result always encodes as UTF-8.
    """
    from sotd import fastjson as json

    if indent is None:
        text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    else:
        text = json.dumps(obj, ensure_ascii=False, indent=indent, allow_nan=False)
    # Unescaped output holds each string's surrogates as they are: carrying the text carries every string.
    text = carry(text)
    # DEL can only stand inside a string here, where jq writes it as an escape (json escapes only C0).
    return text.replace("\x7f", "\\u007f")


# ------------------------------------------------------------------------------ what reaches a terminal

_CONTROL_POINTS = (*range(0x20), 0x7F, *range(0x80, 0xA0))  # C0, DEL, C1
_BIDI_POINTS = (*range(0x202A, 0x202F), *range(0x2066, 0x206A))  # LRE RLE PDF LRO RLO, LRI RLI FSI PDI
_FIELD_ESCAPES = {cp: f"\\u{cp:04x}" for cp in (*_CONTROL_POINTS, *_BIDI_POINTS)}
_LINES_ESCAPES = {cp: e for cp, e in _FIELD_ESCAPES.items() if cp not in (0x09, 0x0A)}


def inert(text: str, *, lines: bool = False) -> str:
    """``text`` as it may reach a terminal: C0 and C1 controls, DEL, bidi embeddings, overrides and
    isolates, and lone surrogates as ``\\u00xx``/``\\u202e``/``\\udc9b``; with ``lines`` (mail text, an
    error's lines) newline and tab stay as they are. Text with none of them is returned as it is."""
    if text.isprintable():  # no Cc, Cf or Cs character at all: nothing below can apply
        return text
    shown = text.translate(_LINES_ESCAPES if lines else _FIELD_ESCAPES)
    if not shown.isascii():
        try:
            shown.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: a byte of argv or a path that was not UTF-8
            shown = "".join(f"\\u{ord(c):04x}" if 0xD800 <= ord(c) <= 0xDFFF else c for c in shown)
    return shown
