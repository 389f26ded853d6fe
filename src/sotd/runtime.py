"""Where this user's daemon lives on this box: its socket, and the files beside it.

A leaf module (stdlib only, no I/O at import) so the daemon and the CLI compute one path from one rule.
Spec: behaviour 2.2 ("Local daemon endpoint", user isolation: the socket sits in a private folder;
``sotd session-socket-path <label>`` answers this rule, so a 0.6.6 client finds the same daemon).
What would break it: a second place that spells the socket path, so ``sotd comm`` dials where no daemon is.
The default socket follows the comm folder (``socket_leaf``; issue 27 item 5): one daemon per comm folder
by default, the default folder keeping its earlier path.

The socket's folder is checked before anything is written in it (issue 25, problem 3: without
``XDG_RUNTIME_DIR`` the default ``/tmp/sotd-<uid>/`` can be made first by another account, with links in
it). ``prepare_socket_folder`` walks every level of the folder's path (and of its real path, when a level is
a link root owns): each must be root's or this account's, a real folder (a link only when root's), and not
writable by group or other unless root's and sticky (``/tmp``); the socket's own folder must be this
account's and private (made 0700, or tightened when it is ours and open). Missing levels are made 0700,
one at a time, and judged again after the ``mkdir``. ``level_fault`` is the pure rule; a refusal is
``SocketFolderRefused``, whose sentence names the level, why, and a working alternative
(``SOT_SOCKET`` in the comm folder's ``state/``, which the same rule accepts); nothing is written
anywhere first. What would break it: writing the log, the start lock or the status file before the check,
or opening them through a link (they are opened with ``O_NOFOLLOW`` too).
"""

from __future__ import annotations

import os

# This box's declared host has one home, ``sysprobe.declared_host``; the daemon and the CLI's routing call it
# by this name (an import, not a copy).
from sotd.sysprobe import declared_host as self_host

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from sotd.errors import SocketFolderRefused

SOCKET_NAME = "sotd.sock"

__all__ = [
    "REFUSAL_START",
    "SOCKET_NAME",
    "comm_folders",
    "default_socket",
    "fallback_socket",
    "is_folder_refusal",
    "level_fault",
    "log_path",
    "prepare_socket_folder",
    "rows_state_dir",
    "rows_tmux_socket",
    "self_host",
    "socket_leaf",
    "socket_path",
    "status_path",
]


def socket_leaf(label: str, folder: str, default_folder: str) -> str:
    """The default socket's folder name for ``label`` and a comm folder: ``sotd-<label>`` for the default
    comm folder, ``sotd-<label>-<8 hex of SHA-256 of its real path>`` for any other (both real paths).
    Pure. One daemon per comm folder by default (issue 27 item 5): a second ``SOT_COMM_HOME`` gets its own
    socket, hence its own daemon; the default folder keeps the path every earlier install, systemd unit
    (``--socket`` is written into it) and guide names."""
    if folder == default_folder:
        return f"sotd-{label}"
    import hashlib  # only for a comm folder that is not the default

    return f"sotd-{label}-{hashlib.sha256(os.fsencode(folder)).hexdigest()[:8]}"


def comm_folders(environ: Mapping[str, str]) -> tuple[str, str]:
    """The real paths of this environment's comm folder and of the default one (``$HOME/.sot-comm``)."""
    from sotd.formats.layout import comm_home

    env = dict(environ)
    default = comm_home({k: v for k, v in env.items() if k != "SOT_COMM_HOME"})
    return os.path.realpath(comm_home(env)), os.path.realpath(default)


def default_socket(environ: Mapping[str, str], label: str | None = None) -> str:
    """Where this user's daemon for this comm folder listens when ``$SOT_SOCKET`` is unset (a private 0700
    folder): ``$XDG_RUNTIME_DIR`` (else ``/tmp/sotd-<uid>``) / ``socket_leaf`` / ``sotd.sock``. ``label``:
    ``$SOT_BACKEND_LABEL`` (else ``sot``) unless given (``sotd session-socket-path <label>``)."""
    label = label or environ.get("SOT_BACKEND_LABEL") or "sot"
    base = environ.get("XDG_RUNTIME_DIR") or f"/tmp/sotd-{os.geteuid()}"
    folder, default = comm_folders(environ)
    return os.path.join(base, socket_leaf(label, folder, default), SOCKET_NAME)


def socket_path(environ: Mapping[str, str], explicit: str | None = None) -> str:
    """The socket a daemon serves: ``explicit`` (``--socket``), else ``$SOT_SOCKET``, else the default."""
    return explicit or environ.get("SOT_SOCKET") or default_socket(environ)


def status_path(socket: str) -> str:
    """The status file beside ``socket`` (same private folder)."""
    return os.path.join(os.path.dirname(socket), os.path.basename(socket) + ".status.json")


def rows_state_dir(environ: Mapping[str, str], socket: str) -> str:
    """The daemon's state folder (its row records and its tmux server): ``$SOTD_STATE_DIR``, else
    ``<socket folder>/state`` (docs/rows.md, "Where things live"). The daemon's rows and ``sotd web`` (which
    reads the rows' screens) both call this."""
    explicit = environ.get("SOTD_STATE_DIR", "")
    if explicit:
        return os.path.abspath(explicit)
    return os.path.join(os.path.dirname(os.path.abspath(socket)), "state")


def rows_tmux_socket(state: str) -> str:
    """The socket of the rows' private tmux server in the state folder ``state``."""
    return os.path.join(state, "tmux", "tmux.sock")


def log_path(socket: str) -> str:
    """The log file beside ``socket``."""
    return os.path.join(os.path.dirname(socket), os.path.basename(socket) + ".log")


# ------------------------------------------------------------------------------------ the socket's folder

REFUSAL_START = "refusing the daemon's socket folder "
_SUN_PATH_MAX = 107  # bytes in a Unix socket's path (Linux sun_path, less its NUL)
_STICKY = 0o1000


def level_fault(mode: int, owner: int, uid: int, *, socket_folder: bool) -> str | None:
    """Why one level of the socket's folder path cannot be trusted (``mode``/``owner`` of its lstat),
    else None. Pure. Root's levels are trusted as far as who may replace them; a link is followed only
    when root's; ``socket_folder``: the socket's own folder, which must be this account's and private."""
    import stat

    if stat.S_ISLNK(mode):
        return None if owner == 0 and not socket_folder else "it is a symbolic link"
    if not stat.S_ISDIR(mode):
        return "it is not a folder"
    if socket_folder:
        if owner != uid:
            return f"it belongs to uid {owner}, not to this account (uid {uid})"
        if mode & 0o077:
            return f"it is open to group or other (mode {mode & 0o7777:04o})"
        return None
    if owner not in (0, uid):
        return f"it belongs to uid {owner}, not to this account (uid {uid})"
    if mode & 0o022 and not (owner == 0 and mode & _STICKY):
        return f"other accounts can write in it (mode {mode & 0o7777:04o})"
    return None


def _levels(folder: str) -> list[str]:
    out = [folder]
    while True:
        parent = os.path.dirname(out[-1])
        if parent == out[-1]:
            break
        out.append(parent)
    return out[::-1]  # "/" first


def fallback_socket(environ: Mapping[str, str]) -> str:
    """The socket a refusal offers instead: ``<comm folder>/state/run-<host>-<label>/sotd.sock`` (the comm
    folder's real path; one per box and label, in a folder this account owns)."""
    from sotd.formats.layout import Layout, safe_component

    home = os.path.realpath(Layout.from_env(dict(environ)).home)
    label = environ.get("SOT_BACKEND_LABEL") or "sot"
    leaf = safe_component(f"run-{self_host(environ) or 'box'}-{label}")
    return os.path.join(home, "state", leaf, SOCKET_NAME)


def _refusal(level: str, why: str, environ: Mapping[str, str]) -> SocketFolderRefused:
    from sotd.errors import SocketFolderRefused

    alt = fallback_socket(environ)
    if len(os.fsencode(alt)) <= _SUN_PATH_MAX:
        instead = f"set SOT_SOCKET={alt} for every sotd command on this box (sotd makes that folder private)"
    else:
        instead = "set SOT_SOCKET to a socket path in a private folder of yours, or XDG_RUNTIME_DIR to such a folder"
    return SocketFolderRefused(
        f"{REFUSAL_START}{level}: {why}, so another account could plant or swap files in it and nothing was "
        f"written there; {instead}"
    )


def is_folder_refusal(text: str) -> bool:
    """Whether ``text`` (a failed start's last words) is this refusal (no log was written to look at)."""
    return text.startswith(REFUSAL_START)


def prepare_socket_folder(sock: str, environ: Mapping[str, str]) -> None:
    """Check and make the folder of ``sock`` by the rule in the module header, before anything is written
    in it: ``SocketFolderRefused`` when a level fails or cannot be made (nothing written anywhere)."""
    from sotd.errors import SocketFolderRefused

    uid = os.geteuid()
    folder = os.path.dirname(os.path.abspath(sock))
    walks = [_levels(folder)]
    for walk in walks:  # the lexical path, then (after a link root owns) the real one
        for level in walk:
            last = level == walk[-1]
            try:
                st = _lstat_or_make(level)
                if last and st.st_uid == uid and not _is_link(st.st_mode) and st.st_mode & 0o077:
                    os.chmod(level, 0o700)  # ours and open: tightened, as the daemon always did
                    st = os.lstat(level)
            except OSError as e:
                raise SocketFolderRefused(
                    f"{REFUSAL_START}{level}: it cannot be made or read ({e.strerror or e}); set SOT_SOCKET "
                    "to a socket path in a private folder of yours"
                ) from None
            fault = level_fault(st.st_mode, st.st_uid, uid, socket_folder=last)
            if fault is not None:
                raise _refusal(level, fault, environ)
            if _is_link(st.st_mode) and len(walks) == 1:
                real = os.path.realpath(folder)
                if real != folder:
                    walks.append(_levels(real))


def _lstat_or_make(level: str) -> os.stat_result:
    """The level's lstat, after making it 0700 when it is missing (judged like any other after that)."""
    try:
        return os.lstat(level)
    except FileNotFoundError:
        pass
    try:
        os.mkdir(level, 0o700)
    except FileExistsError:
        pass
    return os.lstat(level)


def _is_link(mode: int) -> bool:
    import stat

    return stat.S_ISLNK(mode)
