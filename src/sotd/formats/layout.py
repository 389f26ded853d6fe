"""Every path under the comm folder, computed in one place.

File: the comm folder ``$SOT_COMM_HOME`` (default ``~/.sot-comm``) and its known entries.
Spec: seed 000 "Layout"; behaviour 6.0 and 1.13.
Guarantee: every module names a comm-folder path through ``Layout``; no other module joins path strings.
A layout folder or file that is a symbolic link is refused with one sentence (``link_refused``; issue 25).
What would break it: a second place that spells a path, so two writers disagree about a file's name.
"""

from __future__ import annotations

import os
import stat

# behaviour 6.0's rule (an entry open to group or other) has its home in fsprim.
from sotd.fsprim import is_open

TYPE_CHECKING = False
if TYPE_CHECKING:
    from sotd.errors import LinkRefused

# Bytes allowed in a file-name component that we derive from outside input (row ids, lock ids).
SAFE_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")


def safe_component(s: str) -> str:
    """``s`` with every byte outside ``A-Za-z0-9._-`` made ``_`` (UTF-8 bytes, each replaced)."""
    return "".join(chr(b) if b in SAFE_BYTES else "_" for b in s.encode("utf-8", "surrogateescape"))


NAME_MAX = 255  # bytes in one file-name component (Linux, and the limit of every file system we serve)


def lock_leaf(prefix: str, holder_id: str) -> str:
    """``prefix`` + the holder id (``:`` as ``.``), clamped to ``NAME_MAX`` bytes.

    Behaviour 6.1 names a take temp or a reclaim marker after the whole holder record; a declared host of
    some 200 bytes makes that name too long for any file system (``ENAMETOOLONG``, once shown as "cannot
    remove the stale temp"). Such a name keeps its first bytes and ends in ``~`` and 16 hex digits of the
    SHA-256 of the whole id, so it stays one name per holder: every sotd process derives the same marker
    for one dead holder, and two takers never share a temp. A name that fits is exactly the reference's
    (no 0.6.6 client can name a longer one at all). The lock's own record always keeps the whole host.
    """
    leaf = prefix + holder_id.replace(":", ".")
    raw = leaf.encode("utf-8", "surrogateescape")
    if len(raw) <= NAME_MAX:
        return leaf
    import hashlib

    tail = "~" + hashlib.sha256(raw).hexdigest()[:16]
    keep = raw[: NAME_MAX - len(tail)].decode("utf-8", "ignore")  # a cut inside a character drops it
    return keep + tail


def link_refused(path: str) -> LinkRefused:
    """The refusal of a comm-folder file or layout folder at ``path`` that is a symbolic link (issue 25)."""
    from sotd.errors import LinkRefused

    return LinkRefused(
        f"{path} is a symbolic link, and sotd reads and writes nothing in the comm folder through one: "
        "replace it with a real file or folder (or remove it), then run the command again"
    )


def comm_home(environ: dict[str, str] | os._Environ[str] | None = None) -> str:
    """``$SOT_COMM_HOME`` (a relative one made absolute against ``$PWD``, behaviour 1.13), else
    ``$HOME/.sot-comm``."""
    env = os.environ if environ is None else environ
    home = env.get("SOT_COMM_HOME", "")
    if home:
        if os.path.isabs(home):
            return os.path.abspath(home)
        return os.path.normpath(os.path.join(_working_folder(env), home))
    base = env.get("HOME") or os.path.expanduser("~")
    return os.path.join(base, ".sot-comm")


def _working_folder(env: dict[str, str] | os._Environ[str]) -> str:
    """``$PWD`` when it names the working folder (it may spell it through a symlink), else ``getcwd()``."""
    pwd = env.get("PWD", "")
    try:
        cwd = os.getcwd()
    except OSError:
        if os.path.isabs(pwd):
            return pwd
        raise
    if os.path.isabs(pwd) and (pwd == cwd or os.path.realpath(pwd) == cwd):
        return pwd
    return cwd


class Layout:
    """The paths of one comm folder. Cheap to build; touches nothing on disk."""

    __slots__ = ("home",)

    def __init__(self, home: str) -> None:
        self.home = os.path.abspath(home)

    @classmethod
    def from_env(cls, environ: dict[str, str] | os._Environ[str] | None = None) -> Layout:
        return cls(comm_home(environ))

    def __repr__(self) -> str:
        return f"Layout({self.home!r})"

    def _p(self, *parts: str) -> str:
        return os.path.join(self.home, *parts)

    # folders
    @property
    def bin_dir(self) -> str:
        return self._p("bin")

    @property
    def inbox_dir(self) -> str:
        return self._p("inbox")

    @property
    def read_dir(self) -> str:
        return self._p("read")

    @property
    def self_dir(self) -> str:
        return self._p("self")

    @property
    def state_dir(self) -> str:
        return self._p("state")

    @property
    def probe_dir(self) -> str:
        return self._p("probe")

    # top-level files
    @property
    def version_file(self) -> str:
        return self._p("VERSION")

    @property
    def registry(self) -> str:
        return self._p("registry.json")

    @property
    def registry_tmp(self) -> str:
        return self._p("registry.json.tmp")

    def registry_skeleton(self, pid: int, n: int | str) -> str:
        return self._p(f"registry.json.new.{pid}.{n}")

    @property
    def reglock(self) -> str:
        return self._p(".registry.lock")

    def reglock_tmp(self, holder_id: str) -> str:
        """The take's temp file; ``holder_id`` is the record with ``:`` written as ``.`` (clamped, below)."""
        return self._p(lock_leaf(".registry.lock.tmp.", holder_id))

    def reclaim_marker(self, holder_id: str) -> str:
        """The reclaim marker of the holder ``holder_id`` names (clamped like the temp, below)."""
        return self._p(lock_leaf(".registry.lock.reclaim.", holder_id))

    @property
    def lock_manager(self) -> str:
        return self._p("inbox-lock-manager")

    def lock_manager_tmp(self, machine_id: str, pid: int, n: int) -> str:
        return self._p(f".inbox-lock-manager.{machine_id or 'none'}.{pid}.{n}")

    # per handle (the caller has validated the handle: it never holds '/' or '..')
    def inbox(self, handle: str) -> str:
        return self._p("inbox", handle + ".jsonl")

    def inbox_lock(self, handle: str) -> str:
        return self._p("inbox", handle + ".lock")

    def cursor(self, handle: str) -> str:
        return self._p("read", handle + ".cursor")

    def read_hint(self, handle: str) -> str:
        """The private offset hint beside the cursor (``formats/readhint.py``)."""
        return self._p("read", handle + ".offset")

    def cursor_tmp(self, handle: str, pid: int, n: int) -> str:
        """A cursor write's temp, renamed over ``read/<h>.cursor``."""
        return self._p("read", f"{handle}.cursor.tmp.{pid}.{n}")

    def self_file(self, host: str, row_id: str | None) -> str:
        """``self/<host>__<row id made safe>.txt`` for a row, ``self/<host>__nopane.txt`` outside one."""
        leaf = f"{host}__{safe_component(row_id) if row_id else 'nopane'}.txt"
        return self._p("self", leaf)

    def state(self, name: str) -> str:
        return self._p("state", name)


# ---------------------------------------------------------------------------------------------- home
# Behaviour 6.0 (modes, tightening) and 6.3 (ensure_home). Folders are made 0700 level by level (``mkdir -p``
# under umask 077) without touching the process umask, which a threaded daemon shares.

# Seams for fault tests (root may chmod anything, so a failing chmod has to be injected).
_chmod = os.chmod
_lstat = os.lstat

HOME_FOLDERS = ("inbox", "self", "read", "state")
_TOP_FILES = frozenset(("registry.json", "registry.json.tmp", "inbox-lock-manager", "gh-device-auth.json"))
_TOP_PREFIXES = (
    "registry.json.new.",
    ".registry.lock.tmp.",
    ".registry.lock.reclaim.",
    ".inbox-lock-manager.",
)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _known_top(name: str) -> bool:
    return name in _TOP_FILES or name == ".registry.lock" or name.startswith(_TOP_PREFIXES)


def _known_in(folder: str, name: str) -> bool:
    """Whether ``name`` inside the layout folder ``folder`` is one of our entries."""
    if folder == "inbox":
        return name.endswith((".jsonl", ".lock"))
    if folder == "read":
        return name.endswith((".cursor", ".offset"))
    if folder == "self":
        return name.endswith(".txt") or ".txt.tmp." in name
    return folder in ("state", "probe")  # every entry of state/ is the hooks'; probe/<handle>/ are ours


def _mkdir_private(path: str) -> None:
    """``mkdir -p`` with every level it creates 0700."""
    path = os.path.abspath(path)
    missing: list[str] = []
    p = path
    while not os.path.isdir(p):
        missing.append(p)
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            if not os.path.isdir(d):
                raise


def ensure_home(layout: Layout, environ: dict[str, str] | os._Environ[str] | None = None) -> list[str]:
    """Make the comm folder and ``inbox/``, ``self/``, ``read/``, ``state/`` (0700), then ``tighten``.

    Returns the warnings to print. ``HomeError`` when a folder cannot be made, ``LinkRefused`` when one of
    the four is a symbolic link. (The registry skeleton is ``sotd.formats.registry.ensure``, which the
    caller runs next.)
    """
    from sotd.errors import HomeError

    try:
        _mkdir_private(layout.home)  # the comm folder itself may be a link (to a mount, say)
    except OSError as e:
        raise HomeError(f"cannot create the comm folder {layout.home}: {e.strerror or e}") from e
    for f in HOME_FOLDERS:
        d = os.path.join(layout.home, f)
        try:
            _real_subfolder(d)
        except OSError as e:
            raise HomeError(f"cannot create the comm folder {d}: {e.strerror or e}") from e
    return tighten(layout, environ)


def _real_subfolder(path: str) -> None:
    """A layout folder made 0700 when missing; ``LinkRefused`` when it is a symbolic link (behaviour 6.0:
    never through a symlinked layout). One lstat, the stat it replaces."""
    try:
        st = _lstat(path)
    except FileNotFoundError:
        try:
            os.mkdir(path, 0o700)
            return
        except FileExistsError:
            st = _lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise link_refused(path)
    if not stat.S_ISDIR(st.st_mode):
        raise FileExistsError(17, "a file that is not a folder is there", path)


def _refusal(home: str, environ: dict[str, str] | os._Environ[str] | None) -> str | None:
    real = os.path.realpath(home)
    if real == os.path.realpath("/"):
        return "the root folder"
    env = os.environ if environ is None else environ
    user_home = env.get("HOME") or os.path.expanduser("~")
    if user_home and real == os.path.realpath(user_home):
        return "the home folder"
    if os.path.lexists(os.path.join(home, ".git")):
        return "a git checkout"
    return None


class _Tightener:
    __slots__ = ("leftovers",)

    def __init__(self) -> None:
        self.leftovers: list[tuple[str, int]] = []

    def entry(self, dir_fd: int | None, name: str, shown: str) -> None:
        """``chmod go-rwx`` one entry (never a symlink); a vanished entry is nothing."""
        try:
            st = _lstat(name, dir_fd=dir_fd)
        except FileNotFoundError:
            return
        except OSError:
            return
        if stat.S_ISLNK(st.st_mode) or not is_open(st.st_mode):
            return
        perm = st.st_mode & 0o7777
        try:
            _chmod(name, perm & ~0o077, dir_fd=dir_fd)
        except FileNotFoundError:
            return
        except OSError:
            pass
        try:
            after = _lstat(name, dir_fd=dir_fd).st_mode
        except OSError:
            return
        if is_open(after) and not stat.S_ISLNK(after):
            self.leftovers.append((shown, after & 0o7777))

    def folder(self, dir_fd: int, name: str, shown: str, kind: str) -> None:
        """A layout folder: its known entries, then itself; never through a symlink."""
        try:
            st = _lstat(name, dir_fd=dir_fd)
        except OSError:
            return
        if stat.S_ISLNK(st.st_mode):
            return
        if not stat.S_ISDIR(st.st_mode):
            self.entry(dir_fd, name, shown)
            return
        try:
            fd = os.open(name, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=dir_fd)
        except OSError:
            self.entry(dir_fd, name, shown)
            return
        try:
            try:
                names = os.listdir(fd)
            except OSError:
                names = []
            for child in sorted(names):
                if not _known_in(kind, child):
                    continue
                child_shown = os.path.join(shown, child)
                if kind in ("state", "probe"):
                    try:
                        cst = _lstat(child, dir_fd=fd)
                    except OSError:
                        continue
                    if stat.S_ISDIR(cst.st_mode) and kind == "state":
                        self.folder(fd, child, child_shown, "state")
                        continue
                    if kind == "probe" and not stat.S_ISDIR(cst.st_mode):
                        continue
                self.entry(fd, child, child_shown)
        finally:
            os.close(fd)
        self.entry(dir_fd, name, shown)


def tighten(layout: Layout, environ: dict[str, str] | os._Environ[str] | None = None) -> list[str]:
    """Behaviour 6.0: when the comm folder is open to group/other, ``chmod go-rwx`` its known entries
    (never unknown files, ``bin/``, ``VERSION`` or anything through a symlinked layout folder), the folder
    itself last. Returns the warnings (a refusal, or one line per entry still open)."""
    home = layout.home
    try:
        st = os.stat(home)
    except OSError:
        return []
    if not is_open(st.st_mode):
        return []
    why = _refusal(home, environ)
    if why is not None:
        return [f"WARNING: the comm folder {home} is {why}, so its permissions were not changed"]
    t = _Tightener()
    try:
        fd = os.open(home, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    except OSError:
        fd = -1
    if fd >= 0:
        try:
            try:
                names = os.listdir(fd)
            except OSError:
                names = []
            for name in sorted(names):
                shown = os.path.join(home, name)
                if name in HOME_FOLDERS or name == "probe":
                    t.folder(fd, name, shown, name)
                elif _known_top(name):
                    t.entry(fd, name, shown)
        finally:
            os.close(fd)
    t.entry(None, os.path.realpath(home), home)
    return [
        f"WARNING: the comm folder {home} could not be made private: {shown} is still {mode:o}"
        for shown, mode in t.leftovers
    ]
