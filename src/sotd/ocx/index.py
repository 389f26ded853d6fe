"""The node's index: one SQLite file holding every OCX message seen in every clone it serves.

Tables:
- ``messages``: one row per (clone, file name): hash, kind, to, re, validity and reason, size, the time
  this clone received it, the file's ``uvid`` in the clone. Rebuilt from the clone at will.
- ``provenance``: the sender (login, address) recorded at first receipt (O3). It is a fact of history,
  not of the clone, so a rebuild keeps it.
- ``handed``: which reader was handed which message; kept across rebuilds, so a replayed file is never
  handed to a reader twice.
- ``cursors``: per clone, the highest ``uvid`` read, so each scan reads only new files.
- ``posts``: messages this node posted and whether the remote confirmed them.

Guarantee: every write is one transaction; the index never holds a row for bytes it did not hash.
"""

from __future__ import annotations

import os
import sqlite3

from sotd import _clock

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages(
  repo TEXT NOT NULL, name TEXT NOT NULL, hash TEXT NOT NULL,
  kind TEXT, to_login TEXT, re_hash TEXT,
  valid INTEGER NOT NULL, reason TEXT, size INTEGER NOT NULL,
  received_at REAL NOT NULL, uvid INTEGER NOT NULL,
  PRIMARY KEY(repo, name));
CREATE INDEX IF NOT EXISTS messages_hash ON messages(hash);
CREATE INDEX IF NOT EXISTS messages_re ON messages(re_hash);
CREATE INDEX IF NOT EXISTS messages_to ON messages(to_login);
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
        self.db.executescript(_SCHEMA)

    def close(self) -> None:
        self.db.close()

    # --- writing -------------------------------------------------------------------------------------

    def cursor(self, repo: str) -> tuple[int, str | None]:
        r = self.db.execute("SELECT uvid, server_code FROM cursors WHERE repo = ?", (repo,)).fetchone()
        return (int(r[0]), r[1]) if r else (0, None)

    def add_messages(self, repo: str, server_code: str, rows: Iterable[tuple[object, ...]], top: int) -> None:
        """Insert message rows (in ``messages`` column order) and move the clone's cursor to ``top``."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.db.executemany(
                "INSERT OR REPLACE INTO messages(repo, name, hash, kind, to_login, re_hash, valid, reason,"
                " size, received_at, uvid) VALUES(?,?,?,?,?,?,?,?,?,?,?)",
                rows,
            )
            self.db.execute(
                "INSERT INTO cursors(repo, server_code, uvid) VALUES(?,?,?) ON CONFLICT(repo) DO UPDATE "
                "SET server_code = excluded.server_code, uvid = max(uvid, excluded.uvid)",
                (repo, server_code, top),
            )
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    def set_provenance(self, repo: str, h: str, login: str | None, addr: str | None, origin: str) -> None:
        """Record the first-receipt sender of ``h`` unless one is already known (first receipt wins)."""
        self.db.execute(
            "INSERT INTO provenance(repo, hash, sender_login, sender_addr, origin) VALUES(?,?,?,?,?) "
            "ON CONFLICT(repo, hash) DO UPDATE SET sender_login = excluded.sender_login, "
            "sender_addr = excluded.sender_addr, origin = excluded.origin "
            "WHERE provenance.sender_login IS NULL",
            (repo, h, login, addr, origin),
        )

    def has_sender(self, repo: str, h: str) -> bool:
        r = self.db.execute(
            "SELECT 1 FROM provenance WHERE repo = ? AND hash = ? AND sender_login IS NOT NULL", (repo, h)
        ).fetchone()
        return r is not None

    def unknown_senders(self, repo: str) -> list[str]:
        rows = self.db.execute(
            "SELECT m.hash FROM messages m LEFT JOIN provenance p ON p.repo = m.repo AND p.hash = m.hash "
            "WHERE m.repo = ? AND p.sender_login IS NULL",
            (repo,),
        ).fetchall()
        return [str(r[0]) for r in rows]

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

    def forget_clone(self, repo: str) -> None:
        """Drop what a rebuild re-derives (messages, cursor); keep provenance, hand-offs and posts."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.db.execute("DELETE FROM messages WHERE repo = ?", (repo,))
            self.db.execute("DELETE FROM cursors WHERE repo = ?", (repo,))
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

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
        """Every row of the message whose hash is ``h`` (one per clone holding it)."""
        return self._rows(_SELECT + " WHERE m.hash = ? ORDER BY m.repo", (h,))

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
        return [tuple(r.values()) for r in self._rows(_SELECT + " WHERE m.repo = ? ORDER BY m.name", (repo,))]
