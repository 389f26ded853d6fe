"""A reader's private, self-validating hint: the byte where the cursor's last line ends.

File: ``read/<h>.offset`` (ours alone; other clients never read it, and losing it costs one full scan).
Spec: none; the cursor ``read/<h>.cursor`` keeps exactly the format of behaviour 6.6. The hint only lets a
reader start at the cursor's byte offset instead of counting lines from byte 0, so ``poll``, ``unread``
and the Stop hook cost the same at a million lines as at a thousand.
Guarantee: a reader that uses a hint sees exactly the lines a full scan would show it.
What would break it: trusting a hint without checking that it was written for this cursor text, for this
inode, and that the bytes it points at are still one whole line whose hash is the cursor's. Any doubt
falls back to the full scan (which applies the cursor's step-back rules).
Beside a 0.6.6 reader, which moves the cursor and never touches this file, that check is the whole
rule: a hint is trusted only while it agrees with the cursor on disk (docs/contract.md, issue 14).
"""

from __future__ import annotations

import os

from sotd import fsprim
from sotd.errors import InboxUnreadable
from sotd.formats import cksum, cursor

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from sotd.formats.layout import Layout

MAGIC = "sotd-offset-hint 1"
_CHUNK = 1 << 20


class View:
    """The complete lines of an inbox that a reader needs: those after ``base`` already-counted lines.

    ``last_line`` is line ``base`` (1-based) when ``base`` > 0, read back from the file to check the hint.
    ``end`` is the byte offset just past the last complete line; ``inode`` identifies the file.
    """

    __slots__ = ("base", "end", "inode", "last_line", "lines")

    def __init__(self, base: int, lines: list[bytes], last_line: bytes | None, end: int, inode: int) -> None:
        self.base = base
        self.lines = lines
        self.last_line = last_line
        self.end = end
        self.inode = inode

    @property
    def total(self) -> int:
        return self.base + len(self.lines)

    def line(self, n: int) -> bytes | None:
        """Line ``n`` (1-based) when this view holds it."""
        if n > self.base:
            return self.lines[n - self.base - 1]
        return self.last_line if n == self.base else None

    def shown(self, cursor_text: str, handle: str, note: Callable[[str], None] | None = None) -> int:
        """How many lines the reader has been shown, so where its unread mail starts: the hint's ``base``
        when it checked out (the cursor was already judged), else ``cursor.offset`` over every line
        (behaviour 6.6; ``note`` gets its step-back note)."""
        if self.base:
            return self.base
        return cursor.offset(cursor_text, self.lines, handle, note)


def _text_sum(text: str) -> int:
    return cksum.cksum(text.encode("utf-8", "surrogateescape"))


def encode(cursor_text: str, count: int, start: int, end: int, inode: int) -> str:
    return f"{MAGIC} {count} {start} {end} {inode} {_text_sum(cursor_text)}\n"


def parse(text: str) -> tuple[int, int, int, int, int] | None:
    """(count, start, end, inode, cursor sum), or None for anything that is not a hint."""
    if not text.startswith(MAGIC + " ") or not text.endswith("\n"):
        return None
    parts = text[len(MAGIC) + 1 : -1].split(" ")
    if len(parts) != 5 or not all(p.isdigit() and len(p) <= 20 for p in parts):
        return None
    count, start, end, inode, csum = (int(p) for p in parts)
    if count < 1 or not start < end:
        return None
    return count, start, end, inode, csum


def _read_text(path: str) -> str:
    """The hint's text; "" when there is none, or it cannot be read, or it (or ``read/``) is a link: a
    cache is never followed through one (the next hint written replaces the link, its target untouched)."""
    try:
        return fsprim.read_nofollow(path, 256, real_folder=True).decode("ascii", "replace")
    except OSError:
        return ""


def _pread_all(fd: int, offset: int, size: int) -> bytes:
    chunks = []
    while size > 0:
        b = os.pread(fd, min(size, _CHUNK), offset)
        if not b:
            break
        chunks.append(b)
        offset += len(b)
        size -= len(b)
    return b"".join(chunks)


def _complete(data: bytes, base_offset: int) -> tuple[list[bytes], int]:
    cut = data.rfind(b"\n") + 1
    lines = data[: cut - 1].split(b"\n") if cut else []
    return lines, base_offset + cut


def read(layout: Layout, handle: str, cursor_text: str) -> View | None:
    """The view of ``inbox/<h>.jsonl`` this cursor needs; None when there is no inbox file.

    Starts at the hint's offset when the hint checks out, else reads the whole file (base 0).
    """
    path = layout.inbox(handle)
    try:
        fd = fsprim.open_nofollow(path, os.O_RDONLY, real_folder=True)
    except FileNotFoundError:
        return None
    except fsprim.LinkedPath as e:
        from sotd.formats.layout import link_refused

        raise link_refused(str(e.filename)) from None
    except OSError as e:
        raise InboxUnreadable(f"the inbox for @{handle} could not be read: {e.strerror}") from e
    try:
        st = os.fstat(fd)
        hint = parse(_read_text(layout.read_hint(handle))) if cursor_text else None
        if hint is not None:
            count, start, end, inode, csum = hint
            head, _, h = cursor_text.rstrip("\n").partition(" ")
            if (
                inode == st.st_ino
                and end <= st.st_size
                and csum == _text_sum(cursor_text)
                and head == str(count)
                and h
            ):
                # the line and the byte before it: a whole line starts right after a newline (or at 0)
                lead = 1 if start > 0 else 0
                got = os.pread(fd, end - start + lead, start - lead)
                last = got[lead:]
                if (
                    len(got) == end - start + lead
                    and (not lead or got[:1] == b"\n")
                    and last.endswith(b"\n")
                    and last.count(b"\n") == 1
                    and cursor.line_hash(last[:-1]) == h
                ):
                    lines, stop = _complete(_pread_all(fd, end, st.st_size - end), end)
                    return View(count, lines, last[:-1], stop, st.st_ino)
        lines, stop = _complete(_pread_all(fd, 0, st.st_size), 0)
        return View(0, lines, None, stop, st.st_ino)
    except OSError as e:
        raise InboxUnreadable(f"the inbox for @{handle} could not be read: {e.strerror}") from e
    finally:
        os.close(fd)


def write(layout: Layout, handle: str, cursor_text: str, view: View, count: int | None = None) -> None:
    """Record where line ``count`` (default: the view's last) ends, for ``cursor_text`` whose count it is.

    Best effort, never synced: a torn or lost hint only costs the next reader a full scan.
    """
    n = view.total if count is None else count
    last = view.line(n)
    path = layout.read_hint(handle)
    if n == 0 or last is None:
        if count is None:
            fsprim.unlink_quiet(path)
        return
    if n == view.total:
        end = view.end
    elif view.base == 0:
        end = sum(len(x) for x in view.lines[:n]) + n  # each line and its newline
    else:
        return
    start = end - len(last) - 1
    data = encode(cursor_text, n, start, end, view.inode).encode("ascii")
    try:  # a hint is a cache: not synced, and a failed write only leaves no hint
        fsprim.write_atomic(
            path, data, tmp=f"{path}.tmp.{os.getpid()}", sync=False, sync_folder=False, real_folder=True
        )
    except OSError:
        pass
