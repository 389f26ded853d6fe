"""The self file: a session's handle between commands.

File: ``self/<host>__<row>.txt``, ``self/<host>__nopane.txt`` or a pinned ``$SOT_COMM_SELF_FILE``; three lines
``<handle>`` / ``repo=<folder name>`` / ``root=<canonical root>``, each ending in ``\\n``.
Spec: seed 000 "The self file"; behaviour 6.7 and 1.1/1.2 (how context and join use it).
Guarantee: a self file names a handle only to a process in the root it records (a file without ``root=``
names nobody), it is replaced whole (``<file>.tmp.XXXXXX`` then a rename), and a row's slot holding another
project's identity is not overwritten without ``--repin`` — checked before a join writes anything and
again just before its rename (``write_guarded``), so a claim that lands while the join runs is kept.
What would break it: adopting a handle from a file whose root differs, or writing the slot in place.
Never through a link (issue 25): a slot or a ``self/`` folder that is a symbolic link is refused
(``LinkRefused``) on every read and before every write; nothing is read from or written to its target.
"""

from __future__ import annotations

import os

from sotd import fsprim
from sotd.errors import SelfFileError, SlotClaimed
from sotd.handles import is_valid, validate

TYPE_CHECKING = False
if TYPE_CHECKING:
    from sotd.errors import LinkRefused


class SelfRecord:
    """The parsed lines: the handle line, and ``repo``/``root`` (``None`` when the line is missing)."""

    __slots__ = ("handle", "repo", "root")

    def __init__(self, handle: str, repo: str | None, root: str | None) -> None:
        self.handle = handle
        self.repo = repo
        self.root = root

    def __repr__(self) -> str:
        return f"SelfRecord({self.handle!r}, repo={self.repo!r}, root={self.root!r})"


def format_record(handle: str, repo: str, root: str) -> bytes:
    """The three lines of a self file."""
    return f"{handle}\nrepo={repo}\nroot={root}\n".encode("utf-8", "surrogateescape")


def parse(data: bytes) -> SelfRecord | None:
    """The lines of a self file, or ``None`` when it is not one: a handle line, then ``repo=`` (optional
    only for a legacy one-line file), then ``root=``; nothing else after them but an empty line."""
    try:
        text = data.decode("utf-8", "surrogateescape")
    except ValueError:  # pragma: no cover - surrogateescape never fails
        return None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines or len(lines) > 3:
        return None
    handle = lines[0]
    repo: str | None = None
    root: str | None = None
    if len(lines) >= 2:
        if not lines[1].startswith("repo="):
            return None
        repo = lines[1][5:]
    if len(lines) == 3:
        if not lines[2].startswith("root="):
            return None
        root = lines[2][5:]
    return SelfRecord(handle, repo, root)


def _refused(path: str) -> LinkRefused:
    """A self file (or its folder) that is a symbolic link: never read or written through (issue 25)."""
    from sotd.formats.layout import link_refused

    return link_refused(path)


def _read(path: str) -> bytes | None:
    """The file's bytes; None when it is missing or unreadable. A link (the file or its folder) is refused."""
    try:
        return fsprim.read_nofollow(path, 1 << 16, real_folder=True)
    except fsprim.LinkedPath as e:
        raise _refused(str(e.filename)) from None
    except OSError:
        return None


def refuse_links(path: str) -> None:
    """``LinkRefused`` when the slot or its folder is a symbolic link: join checks it before it writes
    anything, and each write again (a rename would replace a link, its target untouched, but a slot that
    is a link is a mistake to name, not to paper over)."""
    for p in (os.path.dirname(path) or ".", path):
        if fsprim.is_link(p):
            raise _refused(p)


def read_record(path: str) -> SelfRecord | None:
    """The parsed file at ``path``, ``None`` when it is missing, unreadable or not a self file."""
    data = _read(path)
    return None if data is None else parse(data)


def read_handle(path: str, root: str, repo: str | None = None) -> str | None:
    """The handle the file names for a process in ``root`` (6.7), else ``None``.

    Named only when the handle is valid and ``root=`` is present, non-empty and equal to ``root``; when
    ``repo`` is given, a ``repo=`` line that differs discards the file too.
    """
    rec = read_record(path)
    if rec is None or not rec.root or rec.root != root:
        return None
    if repo is not None and rec.repo is not None and rec.repo != repo:
        return None
    return rec.handle if is_valid(rec.handle) else None


def write(path: str, handle: str, repo: str, root: str) -> None:
    """Replace the self file whole via ``<file>.tmp.XXXXXX`` and a rename; ``SelfFileError`` on failure
    (the temp removed, the original untouched)."""
    validate(handle)
    for what, v in (("repo", repo), ("root", root)):
        if "\n" in v or "\r" in v:
            raise SelfFileError(f"could not write the self file '{path}': its {what} holds a line break")
    refuse_links(path)
    try:
        fsprim.write_atomic(path, format_record(handle, repo, root), mode=0o600)
    except OSError as e:
        raise SelfFileError(f"could not write the self file '{path}': {e.strerror or e}") from e


def write_guarded(path: str, handle: str, repo: str, root: str) -> None:
    """``write``, with the slot guard run again just before the rename (a join's compare-and-swap).

    The new bytes go to ``<file>.tmp.XXXXXX`` and are synced; then the slot is read once more, and if it
    now names a handle for another project the temp is removed and ``SlotClaimed`` is raised with the
    guard's refusal as its message; otherwise the temp is renamed
    over the slot. The window left is the one between that read and ``rename(2)``: a writer that does not
    run this guard (an older script, a hand edit) can still land in it.
    """
    validate(handle)
    for what, v in (("repo", repo), ("root", root)):
        if "\n" in v or "\r" in v:
            raise SelfFileError(f"could not write the self file '{path}': its {what} holds a line break")
    refuse_links(path)

    def claimed_since() -> None:
        refusal = guard(path, repo, root)
        if refusal:
            raise SlotClaimed(refusal)

    try:
        fsprim.write_atomic(path, format_record(handle, repo, root), mode=0o600, before_rename=claimed_since)
    except OSError as e:
        raise SelfFileError(f"could not write the self file '{path}': {e.strerror or e}") from e


def guard(path: str, repo: str, root: str, *, exempt: bool = False) -> str | None:
    """The refusal of 6.7 when the slot already names a handle for another project, else ``None``.

    Another project: a different ``root=`` (present, even empty), or for a legacy file without ``root=``
    a different ``repo=``. ``exempt`` (the shared ``nopane`` slot, or ``--repin``) never refuses.
    """
    if exempt:
        return None
    rec = read_record(path)
    if rec is None or not is_valid(rec.handle):
        return None
    if rec.root is not None:
        if rec.root == root:
            return None
        claimed = f"root='{rec.root}'"
    elif rec.repo is not None:
        if rec.repo == repo:
            return None
        claimed = f"repo='{rec.repo}'"
    else:
        return None
    return (
        f"the identity slot '{path}' already names @{rec.handle}, claimed for {claimed}\n"
        f"REFUSING to write a '{repo}' identity (root='{root}') over it: the slot belongs to that project's "
        "session; re-run with --repin if it really is this project's now"
    )


def slot_is_nopane(path: str) -> bool:
    """True for the shared ``<host>__nopane.txt`` slot (exempt from the guard)."""
    return os.path.basename(path).endswith("__nopane.txt")
