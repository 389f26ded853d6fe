"""Every path under the comm folder, computed in one place.

File: the comm folder ``$SOT_COMM_HOME`` (default ``~/.sot-comm``) and its known entries.
Spec: seed 000 "Layout"; behaviour 6.0 and 1.13.
Guarantee: every module names a comm-folder path through ``Layout``; no other module joins path strings.
What would break it: a second place that spells a path, so two writers disagree about a file's name.
"""

from __future__ import annotations

import os

# Bytes allowed in a file-name component that we derive from outside input (row ids, lock ids).
SAFE_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")


def safe_component(s: str) -> str:
    """``s`` with every byte outside ``A-Za-z0-9._-`` made ``_`` (UTF-8 bytes, each replaced)."""
    return "".join(chr(b) if b in SAFE_BYTES else "_" for b in s.encode("utf-8", "surrogateescape"))


def comm_home(environ: dict[str, str] | os._Environ[str] | None = None) -> str:
    """``$SOT_COMM_HOME`` made absolute against the working folder, else ``$HOME/.sot-comm``."""
    env = os.environ if environ is None else environ
    home = env.get("SOT_COMM_HOME", "")
    if home:
        return os.path.abspath(home)
    base = env.get("HOME") or os.path.expanduser("~")
    return os.path.join(base, ".sot-comm")


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
        """The take's temp file; ``holder_id`` is the record with ``:`` written as ``.``."""
        return self._p(".registry.lock.tmp." + holder_id.replace(":", "."))

    def reclaim_marker(self, holder_id: str) -> str:
        return self._p(".registry.lock.reclaim." + holder_id.replace(":", "."))

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

    def self_file(self, host: str, row_id: str | None) -> str:
        """``self/<host>__<row id made safe>.txt`` for a row, ``self/<host>__nopane.txt`` outside one."""
        leaf = f"{host}__{safe_component(row_id) if row_id else 'nopane'}.txt"
        return self._p("self", leaf)

    def state(self, name: str) -> str:
        return self._p("state", name)
