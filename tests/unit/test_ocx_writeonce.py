"""Write-once and the index that no message stops (issue 24 items 2, 3, 6): the pure decisions
(``sotd.ocx.writeonce``, ``index.unstorable_row``, ``node.scan_row``) as tables, and the index's own rules
on a real SQLite file: a valid row is never replaced by another version of its name, a row SQLite refuses
is stored invalid saying why and the rest go on, a rebuild is one transaction, an older index is re-keyed,
and a remote's record of the sender replaces only this node's own provisional one."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Iterator

import pytest

from sotd.ocx import envelope as ev
from sotd.ocx.index import COLUMNS, Index, IndexRow, ScanRow, unstorable_row
from sotd.ocx.node import scan_row
from sotd.ocx.writeonce import index_sentence, other_bytes, restore_mtime

pytestmark = pytest.mark.unit

S1, S3, OTHER = "1" * 40, "3" * 64, "9" * 64


BOTH = (S1, S3)  # a kept message: both hashes Fossil may store for its bytes


@pytest.mark.parametrize(
    ("ours", "held", "listed", "why"),
    [
        (BOTH, (S3, 100), None, None),  # the clone holds ours; the remote lists nothing (not sent yet; a hub)
        (BOTH, (S3, 100), S3, None),
        (BOTH, (S1, 100), S1, None),  # a sha1 repository stores the same bytes under their SHA1
        (BOTH, (OTHER, 100), None, f"the clone holds other bytes (hash {OTHER})"),
        (BOTH, (None, 100), None, "the clone holds a deletion of it"),
        (BOTH, None, None, "the clone no longer holds it"),
        (BOTH, (S3, 100), OTHER, f"the remote lists other bytes (hash {OTHER})"),
        (BOTH, (S3, 100), "5" * 40, f"the remote lists other bytes (hash {'5' * 40})"),
        ((S3,), (S3, 100), "5" * 40, None),  # a published file: one hash; a SHA1 listing cannot be compared
        ((S3,), (OTHER, 100), None, f"the clone holds other bytes (hash {OTHER})"),
    ],
)
def test_other_bytes_table(
    ours: tuple[str, ...], held: tuple[str | None, int] | None, listed: str | None, why: str | None
) -> None:
    assert other_bytes(ours, held, listed) == why


@pytest.mark.parametrize(
    ("now", "held", "want"),
    [(1000.7, None, 1000), (1000.0, (S3, 10), 1000), (1000.0, (OTHER, 1000), 1001), (5.0, (None, 4102444800), 4102444801)],
)  # fmt: skip
def test_restore_mtime_is_newer_than_the_version_replaced(
    now: float, held: tuple[str | None, int] | None, want: int
) -> None:
    assert restore_mtime(now, held) == want


def row_of(**kw: object) -> IndexRow:
    base: dict[str, object] = dict.fromkeys(COLUMNS)
    base.update(kw)
    return IndexRow(base)


@pytest.mark.parametrize(
    ("row", "error", "want"),
    [
        (None, None, "ocx: H is delivered; the index did not record it yet (the next sync indexes it)"),
        (None, "ocx: boom", "ocx: H is delivered; the index did not record it yet: ocx: boom (the next sync indexes it)"),
        (row_of(valid=1, kind="stop", re_hash="R", sender_login="alice"), None,
         "ocx: H is delivered; the index recorded it as stop answering R from alice"),
        (row_of(valid=1, kind="run", to_login="lab-user"), None,
         "ocx: H is delivered; the index recorded it as run to lab-user from a sender not known yet"),
        (row_of(valid=0, reason="nested too deeply"), None,
         "ocx: H is delivered; the index recorded it as invalid: nested too deeply"),
    ],
)  # fmt: skip
def test_index_sentence_table(row: IndexRow | None, error: str | None, want: str) -> None:
    assert index_sentence("H", row, error) == want


def test_unstorable_row_carries_every_text_and_names_the_error() -> None:
    row = ("r", "ocx/m/\udcff.json", "h\ud800", "k", "t", None, 1, None, float("nan"), float("inf"), 2**70)
    got = unstorable_row(row, UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"))
    assert got == ("r", "ocx/m/\ufffd.json", "h\ufffd", None, None, None, 0,
                   "could not be indexed: UnicodeEncodeError: 'utf-8' codec can't encode character '\\ud800' in"
                   " position 0: surrogates not allowed", 0, 0.0, 0)  # fmt: skip


# --- the index on a real SQLite file ------------------------------------------------------------------


@pytest.fixture
def index(tmp_path: str) -> Index:
    return Index(os.path.join(str(tmp_path), "index.sqlite"))


def msg_row(data: bytes, uvid: int, name: str | None = None, received: float = 100.0) -> ScanRow:
    name = name or ev.message_name(hashlib.sha3_256(data).hexdigest())
    h, verdict = ev.judge(name, data, "2")
    return scan_row("hub", name, h, verdict, data=data, received=received, uvid=uvid)


def test_a_newer_version_of_a_name_never_replaces_its_valid_row(index: Index) -> None:
    real = ev.encode("ended", {"outcome": "passed"}, re="a" * 64)
    name = ev.message_name(hashlib.sha3_256(real).hexdigest())
    other = b'{"ocx": 2, "re": "' + b"a" * 64 + b'", "ended": {"outcome": "failed"}}'
    assert index.record_scan("hub", "code", [msg_row(real, 1)], 1) == []
    assert index.record_scan("hub", "code", [msg_row(other, 2, name, received=200.0)], 2) == []
    rows = sorted(index.query(repo="hub"), key=lambda r: -int(str(r["valid"])))
    assert [(r["name"], r["hash"], r["valid"]) for r in rows] == [
        (name, hashlib.sha3_256(real).hexdigest(), 1),
        (name, hashlib.sha3_256(other).hexdigest(), 0),
    ]
    assert str(rows[1]["reason"]).startswith("the name is not the hash of the bytes")
    assert [r["kind"] for r in index.answers("a" * 64)] == ["ended"]
    assert index.kept_bytes("hub", name) == real
    # the first bytes again (put back: a new uvid, a later receipt): the row keeps the first receipt
    index.record_scan("hub", "code", [msg_row(real, 3, received=300.0)], 3)
    (valid,) = [r for r in index.query(repo="hub") if r["valid"]]
    assert (valid["uvid"], valid["received_at"]) == (1, 100.0)


def test_a_row_sqlite_refuses_is_stored_invalid_and_the_rest_go_on(index: Index) -> None:
    good = ev.encode("review", {}, to="bob")
    bad = ScanRow(("hub", "ocx/m/\udcff.json", "f" * 64, None, None, None, 0, "x", 3, 1.0, 1))
    refused = index.record_scan("hub", "code", [bad, msg_row(good, 2)], 2)
    assert refused == ["could not be indexed: UnicodeEncodeError: 'utf-8' codec can't encode character "
                       "'\\udcff' in position 6: surrogates not allowed"]  # fmt: skip
    rows = {r["name"]: r for r in index.query(repo="hub")}
    assert rows["ocx/m/\ufffd.json"]["valid"] == 0 and rows["ocx/m/\ufffd.json"]["reason"] == refused[0]
    assert index.valid_count("hub") == 1 and index.cursor("hub") == (2, "code")


def test_a_rebuild_is_one_transaction(index: Index) -> None:
    index.record_scan("hub", "code", [msg_row(ev.encode("review", {}, to="bob"), 1)], 1)

    def rows() -> Iterator[ScanRow]:
        yield msg_row(ev.encode("review", {"n": 2}, to="bob"), 2)
        raise RuntimeError("a bug half-way")

    with pytest.raises(RuntimeError):
        index.record_scan("hub", "code", rows(), 2, replace=True)
    assert [r["uvid"] for r in index.query(repo="hub")] == [1]  # the old rows, all of them


def test_an_older_index_is_rekeyed_with_its_rows(tmp_path: str) -> None:
    path = os.path.join(str(tmp_path), "old.sqlite")
    db = sqlite3.connect(path)
    db.executescript(
        """CREATE TABLE messages(repo TEXT NOT NULL, name TEXT NOT NULL, hash TEXT NOT NULL, kind TEXT,
        to_login TEXT, re_hash TEXT, valid INTEGER NOT NULL, reason TEXT, size INTEGER NOT NULL,
        received_at REAL NOT NULL, uvid INTEGER NOT NULL, PRIMARY KEY(repo, name));
        CREATE INDEX messages_hash ON messages(hash);
        INSERT INTO messages VALUES('hub', 'ocx/m/x.json', 'h', 'run', 'u', NULL, 1, NULL, 3, 1.0, 1);"""
    )
    db.commit()
    db.close()
    idx = Index(path)
    pk = [c[1] for c in idx.db.execute("PRAGMA table_info(messages)").fetchall() if c[5]]
    assert pk == ["repo", "name", "hash"]
    assert [r["hash"] for r in idx.query(repo="hub")] == ["h"]
    assert {r[0] for r in idx.db.execute("SELECT name FROM sqlite_master WHERE type='index'")} >= {
        "messages_hash", "messages_re", "messages_to"}  # fmt: skip


def test_a_remote_record_replaces_only_this_nodes_own(index: Index) -> None:
    index.record_scan("hub", "code", [msg_row(ev.encode("stop", {}, re="a" * 64), 1)], 1)
    (h,) = [str(r["hash"]) for r in index.query(repo="hub")]
    index.set_provenance("hub", h, "alice", "local", "local")
    assert index.unconfirmed_senders("hub") == [h]
    index.confirm_sender("hub", h, "carol", "remote hub")  # the remote holds those bytes from carol
    (row,) = index.show(h)
    assert (row["sender_login"], row["origin"]) == ("carol", "remote hub")
    assert index.unconfirmed_senders("hub") == []
    index.confirm_sender("hub", h, "mallory", "remote hub")  # a later re-push never changes it
    assert index.show(h)[0]["sender_login"] == "carol"
