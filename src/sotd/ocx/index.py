"""The node's index: one SQLite file holding every OCX message seen in every clone it serves.

Tables:
- ``messages``: one row per (clone, file name, hash): kind, to, re, validity and reason, size, the time
  this clone first received those bytes, their ``uvid``. A name whose bytes are not its hash has an
  invalid row under the hash of the bytes it held, beside the valid row of the bytes it was first seen
  with (docs/ocx.md, "Write-once"); a newer version of a name never replaces a valid row.
- ``kept``: per clone and name, the first bytes seen under a message name that were its hash and a valid
  envelope, with both hashes Fossil may list for them, and when they were first received. The valid rows
  are made from here, so a rebuild keeps every valid row the clone no longer holds, and the node re-adds
  these bytes where a clone or its remote holds other ones.
- ``published``: files this node stored under other names (a run's outputs and logs, ``NodeClones.upload``):
  the hash stored and the node's private copy, to re-add when a clone or its remote holds other bytes.
- ``provenance``: the sender (login, address) and where that record came from (O3): ``local`` (written
  here: on a clone with a remote, until the remote's listing confirms who it holds it from),
  ``first-receipt`` (a hub's own record), ``remote HOST`` (the remote's record). A fact of history, not of
  the clone, so a rebuild keeps it.
- ``handed``: which reader was handed which message; kept across rebuilds, so a replayed file is never
  handed to a reader twice.
- ``cursors``: per clone, the highest ``uvid`` read, so each scan reads only new files.
- ``posts``: messages this node posted and whether the remote confirmed them.

Guarantee: every write is one transaction; the index never holds a row for bytes it did not hash; a row
that cannot be stored (text SQLite's UTF-8 cannot take) is stored as an invalid row saying so and the
rest go on (``unstorable_row``); a rebuild replaces a clone's rows in one transaction, so it ends with
the new rows or the old ones, never with none.
What would break it: writing a valid row from a clone's bytes rather than ``kept`` (a replaced file would
then erase it), or a primary key on ``messages`` without the hash (the invalid row would replace the valid).
"""

from __future__ import annotations

import os
import sqlite3

from sotd import _clock, text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

_MESSAGES = """CREATE TABLE IF NOT EXISTS messages(
  repo TEXT NOT NULL, name TEXT NOT NULL, hash TEXT NOT NULL,
  kind TEXT, to_login TEXT, re_hash TEXT,
  valid INTEGER NOT NULL, reason TEXT, size INTEGER NOT NULL,
  received_at REAL NOT NULL, uvid INTEGER NOT NULL,
  PRIMARY KEY(repo, name, hash));"""

_SCHEMA = (
    _MESSAGES
    + """
CREATE INDEX IF NOT EXISTS messages_hash ON messages(hash);
CREATE INDEX IF NOT EXISTS messages_re ON messages(re_hash);
CREATE INDEX IF NOT EXISTS messages_to ON messages(to_login);
CREATE TABLE IF NOT EXISTS kept(
  repo TEXT NOT NULL, name TEXT NOT NULL, hash TEXT NOT NULL, sha1 TEXT NOT NULL, sha3 TEXT NOT NULL,
  data BLOB NOT NULL, received_at REAL NOT NULL, uvid INTEGER NOT NULL,
  PRIMARY KEY(repo, name));
CREATE TABLE IF NOT EXISTS published(
  repo TEXT NOT NULL, name TEXT NOT NULL, hash TEXT NOT NULL, path TEXT NOT NULL,
  PRIMARY KEY(repo, name));
CREATE TABLE IF NOT EXISTS provenance(
  repo TEXT NOT NULL, hash TEXT NOT NULL, sender_login TEXT, sender_addr TEXT, origin TEXT NOT NULL,
  PRIMARY KEY(repo, hash));
CREATE TABLE IF NOT EXISTS handed(
  repo TEXT NOT NULL, hash TEXT NOT NULL, reader TEXT NOT NULL, at REAL NOT NULL, error TEXT,
  PRIMARY KEY(repo, hash, reader));
CREATE TABLE IF NOT EXISTS cursors(repo TEXT PRIMARY KEY, server_code TEXT, uvid INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS posts(
  repo TEXT NOT NULL, hash TEXT NOT NULL, state TEXT NOT NULL, reason TEXT, at REAL NOT NULL,
  PRIMARY KEY(repo, hash));
"""
)

# An index made before ``messages`` was keyed by the hash too: its rows move into the new table.
_MIGRATE = (
    "ALTER TABLE messages RENAME TO messages_old",
    "DROP INDEX IF EXISTS messages_hash",
    "DROP INDEX IF EXISTS messages_re",
    "DROP INDEX IF EXISTS messages_to",
    _MESSAGES,
    "INSERT INTO messages SELECT * FROM messages_old",
    "DROP TABLE messages_old",
)

_INSERT = (
    "INSERT OR REPLACE INTO messages(repo, name, hash, kind, to_login, re_hash, valid, reason,"
    " size, received_at, uvid) VALUES(?,?,?,?,?,?,?,?,?,?,?)"
)
# what a failed insert can raise: SQLite's own errors, text it cannot encode, a value it cannot bind
_UNSTORABLE = (sqlite3.Error, UnicodeError, ValueError, OverflowError, TypeError)

COLUMNS = (
    "repo",
    "name",
    "hash",
    "kind",
    "to_login",
    "re_hash",
    "valid",
    "reason",
    "size",
    "received_at",
    "uvid",
    "sender_login",
    "sender_addr",
    "origin",
    "post_state",
)

_SELECT = """SELECT m.repo, m.name, m.hash, m.kind, m.to_login, m.re_hash, m.valid, m.reason, m.size,
       m.received_at, m.uvid, p.sender_login, p.sender_addr, p.origin, s.state
FROM messages m
LEFT JOIN provenance p ON p.repo = m.repo AND p.hash = m.hash
LEFT JOIN posts s ON s.repo = m.repo AND s.hash = m.hash"""


class Kept:
    """Bytes a message name was first seen with (its hash, a valid envelope): what ``kept`` holds."""

    __slots__ = ("data", "hash", "name", "received_at", "sha1", "sha3", "uvid")

    def __init__(
        self, name: str, h: str, *, sha1: str, sha3: str, data: bytes, received_at: float, uvid: int
    ) -> None:
        self.name = name
        self.hash = h
        self.sha1 = sha1
        self.sha3 = sha3
        self.data = data
        self.received_at = received_at
        self.uvid = uvid


class ScanRow:
    """One file of a clone as a scan judged it: the ``messages`` row, and for a valid one the bytes to
    keep (its row then takes the received time and ``uvid`` of the bytes first kept under its name)."""

    __slots__ = ("keep", "row")

    def __init__(self, row: tuple[object, ...], keep: Kept | None = None) -> None:
        self.row = row
        self.keep = keep


def unstorable_row(row: tuple[object, ...], error: BaseException) -> tuple[object, ...]:
    """Pure: the invalid row stored in place of ``row`` (``messages`` column order) that SQLite refused:
    every text carried (``sotd.text.carry``), the reason naming the error."""

    def t(v: object) -> str:
        return text.carry(v if isinstance(v, str) else repr(v))

    def n(v: object, default: float) -> float:
        return v if isinstance(v, int | float) and not isinstance(v, bool) and abs(v) < 2**62 else default

    repo, name, h, size, received, uvid = row[0], row[1], row[2], row[8], row[9], row[10]
    reason = text.carry(f"could not be indexed: {type(error).__name__}: {error}")[:300]
    return (t(repo), t(name), t(h), None, None, None, 0, reason, int(n(size, 0)), float(n(received, 0)),
            int(n(uvid, 0)))  # fmt: skip


class IndexRow(dict[str, object]):
    """One message as the index knows it (keys: ``COLUMNS``)."""


class Index:
    """The node's index file (created on first use, WAL, 10 s busy timeout)."""

    def __init__(self, path: str) -> None:
        self.path = path
        d = os.path.dirname(os.path.abspath(path))
        os.makedirs(d, exist_ok=True)
        self.db = sqlite3.connect(path, timeout=10.0, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self._migrate()
        self.db.executescript(_SCHEMA)

    def close(self) -> None:
        self.db.close()

    # --- writing -------------------------------------------------------------------------------------

    def _migrate(self) -> None:
        """Re-key an older index's ``messages`` by (clone, name, hash), in one transaction."""
        if not self._old_messages():
            return
        self.db.execute("BEGIN IMMEDIATE")
        try:
            if self._old_messages():  # looked at again under the lock: another process may have done it
                for stmt in _MIGRATE:
                    self.db.execute(stmt)
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    def _old_messages(self) -> bool:
        cols = self.db.execute("PRAGMA table_info(messages)").fetchall()
        return bool(cols) and not any(c[1] == "hash" and c[5] for c in cols)

    def cursor(self, repo: str) -> tuple[int, str | None]:
        r = self.db.execute("SELECT uvid, server_code FROM cursors WHERE repo = ?", (repo,)).fetchone()
        return (int(r[0]), r[1]) if r else (0, None)

    def record_scan(
        self, repo: str, server_code: str, rows: Iterable[ScanRow], top: int, *, replace: bool = False
    ) -> list[str]:
        """Store a scan's rows and move the clone's cursor to ``top``, in one transaction; with ``replace``
        (a rebuild) the clone's rows are dropped first. A valid row's bytes are kept unless bytes are
        already kept under its name. A row SQLite refuses is stored as ``unstorable_row``; the reasons of
        those are returned, and the rest go on."""
        refused: list[str] = []
        self.db.execute("BEGIN IMMEDIATE")
        try:
            if replace:
                self.db.execute("DELETE FROM messages WHERE repo = ?", (repo,))
                self.db.execute("DELETE FROM cursors WHERE repo = ?", (repo,))
            for sr in rows:
                row = sr.row
                if sr.keep is not None:
                    row = self._keep(repo, sr.keep, row)
                try:
                    self.db.execute(_INSERT, row)
                except _UNSTORABLE as e:
                    stand_in = unstorable_row(row, e)
                    refused.append(str(stand_in[7]))
                    try:
                        self.db.execute(_INSERT, stand_in)
                    except _UNSTORABLE:
                        pass  # nothing of it can be stored; the reason is returned all the same
            self.db.execute(
                "INSERT INTO cursors(repo, server_code, uvid) VALUES(?,?,?) ON CONFLICT(repo) DO UPDATE "
                "SET server_code = excluded.server_code, uvid = max(uvid, excluded.uvid)",
                (repo, server_code, top),
            )
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return refused

    def _keep(self, repo: str, k: Kept, row: tuple[object, ...]) -> tuple[object, ...]:
        """Keep ``k`` unless bytes are kept under its name; ``row`` with the first kept bytes' received
        time and ``uvid`` (the same name and hash: the same bytes)."""
        self.db.execute(
            "INSERT OR IGNORE INTO kept(repo, name, hash, sha1, sha3, data, received_at, uvid) "
            "VALUES(?,?,?,?,?,?,?,?)",
            (repo, k.name, k.hash, k.sha1, k.sha3, k.data, k.received_at, k.uvid),
        )
        r = self.db.execute(
            "SELECT hash, received_at, uvid FROM kept WHERE repo = ? AND name = ?", (repo, k.name)
        ).fetchone()
        if r is None or r[0] != k.hash:
            return row
        return (*row[:9], float(r[1]), int(r[2]))

    def kept(self, repo: str, *, data: bool = True) -> list[Kept]:
        """Every message kept for clone ``repo`` (``data=False``: without the bytes, for comparisons)."""
        col = "data" if data else "x''"
        rows = self.db.execute(
            f"SELECT name, hash, sha1, sha3, {col}, received_at, uvid FROM kept WHERE repo = ? "  # noqa: S608
            "ORDER BY uvid",  # constant SQL: col is one of two literals
            (repo,),
        ).fetchall()
        return [
            Kept(
                str(r[0]),
                str(r[1]),
                sha1=str(r[2]),
                sha3=str(r[3]),
                data=bytes(r[4]),
                received_at=float(r[5]),
                uvid=int(r[6]),
            )
            for r in rows
        ]

    def kept_bytes(self, repo: str, name: str) -> bytes | None:
        r = self.db.execute("SELECT data FROM kept WHERE repo = ? AND name = ?", (repo, name)).fetchone()
        return None if r is None else bytes(r[0])

    def set_published(self, repo: str, name: str, h: str, path: str) -> None:
        """Record that this node stored ``path`` (its private copy) as ``name`` in ``repo`` with hash ``h``."""
        self.db.execute(
            "INSERT OR REPLACE INTO published(repo, name, hash, path) VALUES(?,?,?,?)", (repo, name, h, path)
        )

    def drop_published(self, repo: str, name: str) -> None:
        self.db.execute("DELETE FROM published WHERE repo = ? AND name = ?", (repo, name))

    def published(self, repo: str) -> list[tuple[str, str, str]]:
        """(name, hash, private copy) of every file this node stored in ``repo`` under a name of its own."""
        rows = self.db.execute(
            "SELECT name, hash, path FROM published WHERE repo = ? ORDER BY name", (repo,)
        ).fetchall()
        return [(str(r[0]), str(r[1]), str(r[2])) for r in rows]

    def set_provenance(self, repo: str, h: str, login: str | None, addr: str | None, origin: str) -> None:
        """Record the first-receipt sender of ``h`` unless one is already known (first receipt wins)."""
        self.db.execute(
            "INSERT INTO provenance(repo, hash, sender_login, sender_addr, origin) VALUES(?,?,?,?,?) "
            "ON CONFLICT(repo, hash) DO UPDATE SET sender_login = excluded.sender_login, "
            "sender_addr = excluded.sender_addr, origin = excluded.origin "
            "WHERE provenance.sender_login IS NULL",
            (repo, h, login, addr, origin),
        )

    def unconfirmed_senders(self, repo: str) -> list[str]:
        """Hashes of ``repo``'s messages whose sender a remote's listing may still give: none known yet, or
        only this node's own record of writing it (``local``), which the listing confirms or corrects."""
        rows = self.db.execute(
            "SELECT DISTINCT m.hash FROM messages m LEFT JOIN provenance p ON p.repo = m.repo AND p.hash = m.hash "
            "WHERE m.repo = ? AND (p.sender_login IS NULL OR p.origin = 'local')",
            (repo,),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def confirm_sender(self, repo: str, h: str, login: str, origin: str) -> None:
        """The remote's record of who pushed ``h``: it replaces none or a ``local`` one, never another."""
        self.db.execute(
            "INSERT INTO provenance(repo, hash, sender_login, sender_addr, origin) VALUES(?,?,?,NULL,?) "
            "ON CONFLICT(repo, hash) DO UPDATE SET sender_login = excluded.sender_login, "
            "sender_addr = NULL, origin = excluded.origin "
            "WHERE provenance.sender_login IS NULL OR provenance.origin = 'local'",
            (repo, h, login, origin),
        )

    def set_post(self, repo: str, h: str, state: str, reason: str | None) -> None:
        self.db.execute(
            "INSERT INTO posts(repo, hash, state, reason, at) VALUES(?,?,?,?,?) ON CONFLICT(repo, hash) "
            "DO UPDATE SET state = excluded.state, reason = excluded.reason, at = excluded.at",
            (repo, h, state, reason, _clock.now()),
        )

    def undelivered(self, repo: str) -> list[str]:
        rows = self.db.execute(
            "SELECT hash FROM posts WHERE repo = ? AND state != 'delivered' ORDER BY at", (repo,)
        ).fetchall()
        return [str(r[0]) for r in rows]

    def post_state(self, repo: str, h: str) -> tuple[str, str | None] | None:
        r = self.db.execute(
            "SELECT state, reason FROM posts WHERE repo = ? AND hash = ?", (repo, h)
        ).fetchone()
        return (str(r[0]), r[1]) if r else None

    # --- hand-off ------------------------------------------------------------------------------------

    def to_hand(self, repo: str, kind: str, reader: str) -> list[IndexRow]:
        """Valid messages of ``kind`` in ``repo`` with a known sender that ``reader`` has not been handed."""
        return self._rows(  # constant SQL, values bound
            _SELECT  # noqa: S608
            + " WHERE m.repo = ? AND m.kind = ? AND m.valid = 1 AND p.sender_login IS NOT NULL "
            "AND NOT EXISTS (SELECT 1 FROM handed h WHERE h.repo = m.repo AND h.hash = m.hash AND h.reader = ?) "
            "ORDER BY m.received_at, m.uvid",
            (repo, kind, reader),
        )

    def mark_handed(self, repo: str, h: str, reader: str, error: str | None) -> bool:
        """Record the hand-off; False when it was already recorded (then the reader must not be called)."""
        cur = self.db.execute(
            "INSERT OR IGNORE INTO handed(repo, hash, reader, at, error) VALUES(?,?,?,?,?)",
            (repo, h, reader, _clock.now(), error),
        )
        return cur.rowcount == 1

    def set_hand_error(self, repo: str, h: str, reader: str, error: str) -> None:
        self.db.execute(
            "UPDATE handed SET error = ? WHERE repo = ? AND hash = ? AND reader = ?", (error, repo, h, reader)
        )

    def handed_count(self, repo: str, h: str, reader: str) -> int:
        r = self.db.execute(
            "SELECT count(*) FROM handed WHERE repo = ? AND hash = ? AND reader = ?", (repo, h, reader)
        ).fetchone()
        return int(r[0])

    # --- queries -------------------------------------------------------------------------------------

    def _rows(self, sql: str, args: tuple[object, ...] = ()) -> list[IndexRow]:
        return [IndexRow(zip(COLUMNS, r, strict=True)) for r in self.db.execute(sql, args).fetchall()]

    def show(self, h: str) -> list[IndexRow]:
        """Every row of the bytes whose hash is ``h`` (per clone: the valid row first, then the same bytes
        under a name that is not their hash)."""
        return self._rows(_SELECT + " WHERE m.hash = ? ORDER BY m.repo, m.valid DESC, m.name", (h,))

    def row(self, repo: str, name: str, h: str) -> IndexRow | None:
        """The row of the bytes hashing to ``h`` under ``name`` in clone ``repo``, if indexed."""
        got = self._rows(_SELECT + " WHERE m.repo = ? AND m.name = ? AND m.hash = ?", (repo, name, h))
        return got[0] if got else None

    def valid_count(self, repo: str | None = None) -> int:
        r = self.db.execute(
            "SELECT count(*) FROM messages WHERE valid = 1 AND (? IS NULL OR repo = ?)", (repo, repo)
        ).fetchone()
        return int(r[0])

    def answers(self, h: str) -> list[IndexRow]:
        """Every valid answer to ``h``, in the order received."""
        return self._rows(
            _SELECT + " WHERE m.re_hash = ? AND m.valid = 1 ORDER BY m.received_at, m.uvid, m.repo", (h,)
        )

    def addressed(self, login: str) -> list[IndexRow]:
        """Everything addressed to ``login``."""
        return self.query(to=login)

    def query(
        self,
        *,
        to: str | None = None,
        re: str | None = None,
        kind: str | None = None,
        repo: str | None = None,
    ) -> list[IndexRow]:
        where: list[str] = []
        args: list[object] = []
        for col, v in (("m.to_login", to), ("m.re_hash", re), ("m.kind", kind), ("m.repo", repo)):
            if v is not None:
                where.append(f"{col} = ?")
                args.append(v)
        sql = _SELECT + (" WHERE " + " AND ".join(where) if where else "")
        return self._rows(sql + " ORDER BY m.received_at, m.uvid, m.repo", tuple(args))

    def snapshot(self, repo: str) -> list[tuple[object, ...]]:
        """Every message row of ``repo`` as plain tuples (tests compare a rebuild with this)."""
        rows = self._rows(_SELECT + " WHERE m.repo = ? ORDER BY m.name, m.hash", (repo,))
        return [tuple(r.values()) for r in rows]
