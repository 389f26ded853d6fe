"""The read cursor: how far a reader has been shown its inbox.

File: ``read/<h>.cursor``: ``<count> <crc>-<len>`` with no trailing newline, or ``0``.
Spec: seed 000 "The read cursor"; behaviour 6.6 (and 1.5/1.6 for who reads and writes it).
Guarantee: a reader never skips a complete line. The count says how many lines were shown; the hash of the
last shown line (POSIX cksum of its bytes without newlines and NULs) notices when that line was cut back by a
failed append after an unlocked reader counted it, and the reader then steps back one line, so the next
line written at that position is shown. A hashed count exactly one past the end is the end (the same cut-back
seen from the other side, with the same note); any other count past the end restarts at 0.
Never through a link (issue 25): the cursor (and ``read/``) is read with ``O_NOFOLLOW``; a link is
``LinkRefused``, so poll stops before it would replace it.
What would break it: writing the hash of a re-read instead of the bytes the reader showed, writing the cursor
before the batch was shown, or a non-atomic write (a torn cursor reads as 0 and re-shows everything, which is
safe, but a torn count could skip).
"""

from __future__ import annotations

import errno
import os

from sotd import fsprim
from sotd.errors import CursorFailed, SotdError
from sotd.formats.cksum import cksum

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from sotd.formats.layout import Layout

_DIGITS = frozenset("0123456789")
# A count longer than this many digits is past the end of any inbox (and int() of a huge digit string
# is refused by Python's int-parsing limit, so it is never attempted).
_MAX_COUNT_DIGITS = 18
_seq = 0


def step_back_note(handle: str) -> str:
    """The note printed when the last line a reader counted was cut back."""
    return f"note: the last line read from @{handle}'s inbox was cut back; reading from the line before it"


def line_hash(line: bytes) -> str:
    """``<crc>-<len>`` of ``line`` with every ``\\n`` and NUL byte removed first."""
    kept = line.replace(b"\n", b"").replace(b"\0", b"")
    return f"{cksum(kept)}-{len(kept)}"


def encode(count: int, last_line: bytes | None) -> str:
    """The cursor text: ``0`` for no lines, else ``<count> <hash of last_line>`` (bare count without it)."""
    if count <= 0:
        return "0"
    if last_line is None:
        return str(count)
    return f"{count} {line_hash(last_line)}"


def _legacy_offset(stamp: str, lines: list[bytes]) -> int:
    """The old timestamp cursor: the index of the first non-empty line stamped after ``stamp``.

    Mirrors ``jq``'s ordering: an array or object ``ts`` sorts after every string, so it is a boundary;
    a null, number, boolean or missing ``ts``, and a line that is not a JSON object, are passed over.
    """
    import json

    for i, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw.decode("utf-8", "replace"))
        except (ValueError, RecursionError):
            continue
        if not isinstance(obj, dict):
            continue
        ts = obj.get("ts")
        if isinstance(ts, (list, dict)):
            return i
        if isinstance(ts, str) and ts > stamp:
            return i
    return len(lines)


def offset(
    cursor_text: str,
    lines: list[bytes],
    handle: str,
    note: Callable[[str], None] | None = None,
) -> int:
    """How many of ``lines`` (the inbox's complete lines, newlines removed) the reader has been shown.

    Every rule of behaviour 6.6; never writes anything. ``note`` receives the step-back note.
    """
    total = len(lines)
    text = cursor_text.rstrip("\n")
    if not text:
        return 0
    head, _sep, hash_part = text.partition(" ")
    if head and all(ch in _DIGITS for ch in head):
        digits = head.lstrip("0")
        hashed = bool(hash_part)
        if len(digits) > _MAX_COUNT_DIGITS:
            return 0
        count = int(digits) if digits else 0
        if count > total:
            if count == total + 1 and hashed:
                # The end: the line this reader counted last was cut back after it was counted, a step
                # back like any other, and the reader is told, as the 0.6.6 reference tells it whatever
                # the hash (issue 28 item 3; poll then leaves the cursor as it is until a line follows).
                if note is not None:
                    note(step_back_note(handle))
                return total
            return 0
        if count > 0 and hashed and line_hash(lines[count - 1]) != hash_part:
            if note is not None:
                note(step_back_note(handle))
            return count - 1
        return count
    # Legacy timestamp cursor (e.g. 2026-01-01T00:00:01Z): compared whole, as a string.
    result = _legacy_offset(text, lines)
    return result if result <= total else 0


def read(layout: Layout, handle: str) -> str:
    """The cursor file's text ("" when there is none). Undecodable bytes survive as surrogate escapes."""
    path = layout.cursor(handle)
    try:
        data = fsprim.read_nofollow(path, 1 << 20, real_folder=True)
    except FileNotFoundError:
        return ""
    except fsprim.LinkedPath as e:
        raise _linked(e) from None
    except OSError as e:
        raise CursorFailed(f"the read cursor {path} could not be read: {e.strerror or e}") from e
    return data.decode("utf-8", "surrogateescape")


def _linked(e: fsprim.LinkedPath) -> SotdError:
    from sotd.formats.layout import link_refused

    return link_refused(str(e.filename))


def _tmp_path(layout: Layout, handle: str) -> str:
    global _seq
    _seq += 1
    return layout.cursor_tmp(handle, os.getpid(), _seq)


def write(layout: Layout, handle: str, count: int, last_line: bytes | None) -> None:
    """Replace ``read/<h>.cursor`` atomically: a 0600 temp in the same folder, synced, renamed over it."""
    path = layout.cursor(handle)
    data = encode(count, last_line).encode("ascii")
    tmp = _tmp_path(layout, handle)
    try:
        try:
            fsprim.write_atomic(path, data, tmp=tmp, sync_folder=False, real_folder=True)
        except fsprim.AtomicStepError as e:
            if e.step != "write" or e.errno != errno.ENOENT:
                raise
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            fsprim.write_atomic(path, data, tmp=tmp, sync_folder=False, real_folder=True)
    except fsprim.LinkedPath as e:
        raise _linked(e) from None
    except OSError as e:
        raise CursorFailed(f"the read cursor {path} could not be written: {e.strerror or e}") from e
