"""What every ``sotd comm`` verb shares: the context of behaviour 1.1, the command's own name, and the
printers (``out``, ``err``) every line a verb shows goes through.

The context is computed once per command, reads only the environment, the working folder and the self
file, and writes nothing (so a refused or failed command has changed nothing under the comm folder).
The printers write each line inert (``sotd.text.inert``, issue 25 item 1): a control or bidi character
in mail, a registry field or a quoted word shows as its ``\\u`` escape, never reaches the terminal raw.
"""

from __future__ import annotations

import os
import stat
import sys

from sotd.errors import ContextFailed, LinkRefused, SotdError
from sotd.formats.layout import Layout

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import TextIO

NAME_MAX = 255
_BAD_LEAF = ("/", "\\", "\n", "\r", "\t")


def prog(spec_name: str, verb: str) -> str:
    """The command's name in its messages: the wrapper's when called through one (D2), else ``sotd comm <verb>``."""
    return spec_name if os.environ.get("SOT_COMM_PROG") else f"sotd comm {verb}"


def _write(stream: TextIO, text: str) -> None:
    """Write ``text`` whatever the stream's encoding: what it cannot encode is replaced, never raised, so
    no line shown (a poll's mail, a listed field) can stop a command before it saves its progress."""
    try:
        stream.write(text)
    except UnicodeEncodeError:
        enc = getattr(stream, "encoding", None) or "utf-8"
        stream.write(text.encode(enc, "replace").decode(enc, "replace"))


def shown(line: str) -> str:
    """``line`` as it may reach a terminal: ``sotd.text.inert`` for a line of text (newlines and tabs
    kept), imported only for a line that holds something it could change."""
    if line.isprintable():
        return line
    from sotd.text import inert

    return inert(line, lines=True)


def out(line: str) -> None:
    _write(sys.stdout, shown(line) + "\n")


def err(line: str) -> None:
    _write(sys.stderr, shown(line) + "\n")


def line_buffered() -> None:
    """stdout written line by line, so ``> f 2>&1`` keeps each line's place among stderr's (spawn and
    despawn, whose progress lines and errors interleave)."""
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(line_buffering=True)


def host_or_refuse(environ: Mapping[str, str]) -> str:
    """The declared host (``sysprobe.declared_host``), or a refusal when it cannot be read."""
    from sotd import sysprobe

    host = sysprobe.declared_host(environ)
    if not host:
        raise ContextFailed(
            "comm-context: could not establish this box's declared host (see the reason above); aborting "
            "rather than proceeding with an unknown identity",
            reason="sot_host: no SOT_SELF_HOST override and hostname failed -- cannot declare an identity",
        )
    return host


def handle_host(environ: Mapping[str, str]) -> str:
    """The raw short host name with its case kept (handle derivation uses this, not the declared host)."""
    if environ.get("SOT_COMM_TEST_HOST"):
        return environ["SOT_COMM_TEST_HOST"]
    name = os.uname().nodename
    return name.split(".", 1)[0] or name


def is_git_marker(path: str) -> bool:
    """Whether ``path`` (a ``.git`` entry) makes its folder a work tree, as git itself reads it.

    A folder counts when it holds ``HEAD``, ``objects`` and ``refs`` (a repository); a regular file when it
    is a ``gitdir:`` pointer to such a folder (a linked worktree or a submodule). Either must be this
    user's own, as git (2.35.2 on) refuses a repository another user owns: ``/tmp`` is anyone's to plant a
    ``.git`` in. Anything else is not one and is never opened: an empty ``.git`` folder (what Codex's
    sandbox mounts over each writable root while a command runs, so ``/tmp/.git`` came and went), a FIFO
    or a device (a read would block or never end), another user's entry; git walks past them too.
    """
    try:
        st = os.stat(path)
        if st.st_uid != os.geteuid():
            return False
        if stat.S_ISDIR(st.st_mode):
            return (
                os.path.isfile(os.path.join(path, "HEAD"))
                and os.path.isdir(os.path.join(path, "objects"))
                and os.path.isdir(os.path.join(path, "refs"))
            )
        if not stat.S_ISREG(st.st_mode):
            return False
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # swapped for a FIFO since the stat: no wait
        try:
            head = os.read(fd, 4096) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
        finally:
            os.close(fd)
    except OSError:
        return False
    if not head.startswith(b"gitdir: "):
        return False
    pointer = head[len(b"gitdir: ") :].split(b"\n", 1)[0].strip()
    if not pointer:
        return False
    target = os.path.join(os.path.dirname(path), os.fsdecode(pointer))  # a relative one is read from there
    return os.path.isfile(os.path.join(target, "HEAD"))


def raw_root(cwd: str) -> str:
    """The git work tree holding ``cwd`` (a ``.git`` that ``is_git_marker``), else ``cwd`` itself.

    Walks up like ``git rev-parse --show-toplevel`` does for an ordinary checkout, without starting git:
    a subprocess would double a send's cost (docs/design.md).
    """
    d = cwd
    while True:
        marker = os.path.join(d, ".git")
        if os.path.lexists(marker) and is_git_marker(marker):
            return d
        parent = os.path.dirname(d)
        if parent == d:
            return cwd
        d = parent


class Context:
    """Behaviour 1.1's keys, computed from the environment and the working folder."""

    __slots__ = (
        "environ",
        "handle_host",
        "host",
        "layout",
        "name",
        "project_root",
        "repo",
        "self_file",
        "self_pinned",
        "workspace_id",
    )

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.environ = env
        self.layout = Layout.from_env(dict(env))
        self.host = host_or_refuse(env)
        self.handle_host = handle_host(env)
        self.workspace_id = env.get("SOT_WORKSPACE_ID", "")
        try:
            here: str | None = os.getcwd()
        except OSError:
            here = None  # the working folder was removed: only $PWD names it, and it cannot be resolved
        cwd = env.get("PWD") or here or ""
        if here is not None and os.path.realpath(cwd) != os.path.realpath(here):
            cwd = here
        raw = raw_root(cwd) if cwd else "."
        self.repo = os.path.basename(raw.rstrip("/")) or "/"
        try:
            self.project_root = os.path.realpath(raw, strict=True)
        except OSError as e:
            raise ContextFailed(
                f"comm-context: could not establish a canonical project root for '{raw}' — see the reason "
                "above; aborting rather than proceeding with an unknown identity",
                reason=f"sot_canonical_path: could not resolve a canonical path for '{raw}' ({e.strerror})",
            ) from None
        pinned = env.get("SOT_COMM_SELF_FILE", "")
        self.self_pinned = bool(pinned)
        if pinned:
            self.self_file = os.path.abspath(pinned)
        else:
            leaf_host_ok = self.host and not any(c in self.host for c in _BAD_LEAF)
            path = self.layout.self_file(self.host, self.workspace_id or None)
            if not leaf_host_ok or len(os.path.basename(path).encode()) > NAME_MAX:
                raise ContextFailed(
                    f"comm-context: aborting before any write: no self slot can be named for host '{self.host}'"
                )
            self.self_file = path
            self._migrate_legacy_slot()
        self.name = self._name_from_self_file()

    def _migrate_legacy_slot(self) -> None:
        """Move a slot keyed by the raw host (its case kept) to the declared host's slot (behaviour 1.1).

        Only when the registry row of the handle it names proves it (same root), never over a populated
        slot; a failed publication keeps the legacy slot.
        """
        legacy = self.layout.self_file(self.handle_host, self.workspace_id or None)
        if legacy == self.self_file or os.path.exists(self.self_file) or not os.path.exists(legacy):
            return
        from sotd.formats import registry, selffile

        handle = selffile.read_handle(legacy, self.project_root, self.repo)
        if not handle:
            return
        try:
            doc = registry.read(self.layout)
        except SotdError:
            return
        row = registry.agents_of(doc).get(handle) if doc else None
        if not isinstance(row, dict) or row.get("root") != self.project_root:
            return
        try:
            selffile.write(self.self_file, handle, self.repo, self.project_root)
        except SotdError:
            return
        try:
            os.unlink(legacy)
        except OSError:
            pass

    def _name_from_self_file(self) -> str:
        from sotd.formats import selffile

        try:
            return selffile.read_handle(self.self_file, self.project_root, self.repo) or ""
        except LinkRefused:
            raise  # a linked slot is said, never read as "not joined"
        except SotdError:
            return ""

    @property
    def is_nopane(self) -> bool:
        return os.path.basename(self.self_file).endswith("__nopane.txt")

    def items(self) -> list[tuple[str, str]]:
        lay = self.layout
        return [
            ("HOST", self.host),
            ("HANDLE_HOST", self.handle_host),
            ("WORKSPACE_ID", self.workspace_id),
            ("REPO", self.repo),
            ("PROJECT_ROOT", self.project_root),
            ("NAME", self.name),
            ("SELF_FILE", self.self_file),
            ("COMM_HOME", lay.home),
            ("REGISTRY", lay.registry),
            ("INBOX_DIR", lay.inbox_dir),
            ("READ_DIR", lay.read_dir),
        ]


def check_ancestry(environ: Mapping[str, str] | None = None) -> str | None:
    """The identity check of behaviour 5: None when this process may act as its handle, else why not."""
    from sotd import ancestry

    status, why = ancestry.check(dict(os.environ if environ is None else environ))
    return why if status else None


def enter(me: str) -> Context:
    """The start of a verb that reads or writes the comm folder: the identity check (a refusal raised as
    ``<me>: <why>``), then the context, with the folder made or tightened (its warnings printed)."""
    why = check_ancestry()
    if why:
        from sotd.errors import IdentityRefused

        raise IdentityRefused(f"{me}: {why}")
    return open_context()


def open_context() -> Context:
    """This process's context, with the comm folder made or tightened (its warnings printed)."""
    ctx = Context()
    from sotd.formats import layout as layout_mod

    for w in layout_mod.ensure_home(ctx.layout):
        err(w)
    return ctx
