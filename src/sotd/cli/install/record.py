"""``sotd/cli/install/record.py``: the install record and the careful file writes it vouches for.

Behaviour 1.12; issue 11 part 2 item 7. Two files in ``bin/``: ``.installed`` (the scripts' names, one a
line) and ``.installed-settings.json`` (every settings file an install changed: its bytes before, the digest
of what was written, exactly what was added; the skill and the Codex rules written). Every part's
``uninstall`` reads its own key of it. A file is written to a temp and renamed into place (a session never
runs half a script), keeping the mode it had, through a symlink to its target.

What would break it: a record entry written before the file it describes, writing a link's own path (it
becomes a regular file), or a temp renamed under the process umask (0644 becomes 0600).
"""

from __future__ import annotations

import json
import os

from sotd.errors import EXIT_FAILED, EXIT_OK
from sotd.formats.layout import Layout

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

RECORD = ".installed"


SETTINGS_RECORD = ".installed-settings.json"


def undo_each(record: dict[str, object], key: str, undo: Callable[[str, dict[str, object]], str]) -> int:
    """``undo(path, entry)`` for each file ``record[key]`` names (in the record's order), its line on
    stdout; ``EXIT_FAILED`` when one could not be changed (its ``FAILED`` line on stderr: it is left as it
    is, the others are still undone), else ``EXIT_OK``. A part's uninstall over its key of the record."""
    from sotd.cli.comm.common import err, out

    status = EXIT_OK
    files = record.get(key)
    if isinstance(files, dict):
        for path, entry in list(files.items()):
            if isinstance(path, str) and isinstance(entry, dict):
                try:
                    out(undo(path, entry))
                except OSError as e:
                    err(f"FAILED to change {path}: {e.strerror or e}; it was left as it is")
                    status = EXIT_FAILED
    return status


def write_file(path: str, text: str, mode: int) -> None:
    from sotd import fsprim

    fsprim.write_atomic(path, text.encode(), mode=mode)
    os.chmod(path, mode)


def read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def replace_keeping_mode(target: str, data: bytes, mode: int) -> None:
    """Replace ``target`` whole (temp beside it, synced, renamed) with ``mode`` set on the temp before the
    rename, whatever the umask."""
    from sotd import fsprim

    fsprim.write_atomic(target, data, tmp=f"{target}.tmp.{os.urandom(3).hex()}", mode=mode, exact_mode=True)


def link_target(path: str) -> str:
    """The file a settings path finally names: a symlink (or a chain of them) is followed, so the write
    goes to the dotfiles folder the link points into and the link itself stays."""
    return os.path.realpath(path)


def b64(data: bytes | None) -> str | None:
    import base64

    return None if data is None else base64.b64encode(data).decode()


def unb64(text: object) -> bytes | None:
    import base64

    return base64.b64decode(text) if isinstance(text, str) else None


def undo_if_untouched(path: str, target: str, data: bytes, record: dict[str, object]) -> str | None:
    """When the file still holds exactly the bytes the install wrote, put back the bytes from before it
    (or remove the file it created) and say so; None when it changed since (the caller takes out only
    the install's own entries)."""
    if not (record.get("before_known") and record.get("after_sha256") == sha256(data)):
        return None
    before = unb64(record.get("before"))
    if before is None:
        os.unlink(target)
        return f"Removed {path} (install had created it)"
    replace_keeping_mode(target, before, os.stat(target).st_mode & 0o7777)
    return f"Restored {path} to its bytes before the install"


def read_scripts_record(lay: Layout) -> set[str]:
    try:
        with open(os.path.join(lay.bin_dir, RECORD)) as f:
            names = {line.strip() for line in f}
    except OSError:
        return set()
    # a recorded name is removed only if it is a plain file name in bin/
    return {n for n in names if n and "/" not in n and n not in (".", "..")}


def _settings_record_path(lay: Layout) -> str:
    return os.path.join(lay.bin_dir, SETTINGS_RECORD)


def read_settings_record(lay: Layout) -> dict[str, object]:
    data = read_bytes(_settings_record_path(lay))
    try:
        doc = json.loads(data) if data else {}
    except ValueError:
        doc = {}
    return doc if isinstance(doc, dict) else {}


def write_settings_record(lay: Layout, doc: dict[str, object]) -> None:
    write_file(_settings_record_path(lay), json.dumps(doc, indent=2, ensure_ascii=False) + "\n", 0o600)


def entry_for(doc: dict[str, object], path: str) -> dict[str, object]:
    files = doc.setdefault("settings", {})
    assert isinstance(files, dict)
    entry = files.setdefault(path, {})
    assert isinstance(entry, dict)
    return entry


def strs(v: object) -> list[str]:
    return [x for x in v if isinstance(x, str)] if isinstance(v, list) else []


def note_made_dir(record: dict[str, object], folder: str, existed: bool) -> None:
    """Record a folder this install made (``~/.claude/skills``, ``~/.codex/rules``) in
    ``record["made_dirs"]``, so uninstall removes it again when it is empty (issue 27); one that was there
    before is never named."""
    if existed or not os.path.isdir(folder):
        return
    made = record.setdefault("made_dirs", [])
    if isinstance(made, list) and folder not in made:
        made.append(folder)


def remove_made_dir(record: dict[str, object], folder: str) -> None:
    """``folder``, when ``note_made_dir`` recorded it, removed if it is empty (``rmdir`` refuses otherwise:
    someone else's files are in it) and forgotten."""
    made = record.get("made_dirs")
    if not isinstance(made, list) or folder not in made:
        return
    try:
        os.rmdir(folder)
    except OSError:
        return  # not empty, or already gone
    made.remove(folder)
