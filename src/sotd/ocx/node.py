"""``NodeClones``: the OCX part of a node. Syncs its clones, fills the index, hands messages to readers.

Blocking throughout; the daemon runs ``poll_loop`` in a thread and may call ``sync_once`` on demand from
another (calls are serialized by a lock). Nothing a peer writes can crash it: a clone that fails to sync
or scan is reported in its ``CloneReport`` and the next clone goes on; a file that cannot be judged or
stored is indexed invalid saying why and the rest go on; a reader that raises is recorded.

Write-once (docs/ocx.md, "Write-once"; ``sotd.ocx.writeonce``): valid rows come from the bytes first
kept under each message name, never from a newer version of the file; after each sync the node puts its
kept bytes (and the files it stored itself) back wherever its clone or the remote holds other ones.
Senders (O3): on a clone with a remote, the remote's listing names who it holds each file from; that
replaces the node's own provisional record of writing it, so the index shows who actually posted it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import urllib.parse

from sotd import _clock, text
from sotd.ocx import envelope, fossil
from sotd.ocx.config import check_server_codes
from sotd.ocx.errors import InvalidMessage, NotDelivered, OcxError
from sotd.ocx.index import Index, IndexRow, Kept, ScanRow
from sotd.ocx.writeonce import index_sentence, other_bytes, restore_mtime

log = logging.getLogger("sotd.ocx")

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from sotd.ocx.config import CloneConfig, NodeConfig


class Delivery:
    """What a reader is handed: the message's row, its exact bytes, the clone it arrived in."""

    __slots__ = ("clone", "data", "envelope", "hash", "row", "sender", "server_code")

    def __init__(self, clone: CloneConfig, server_code: str, row: IndexRow, data: bytes) -> None:
        self.clone = clone
        self.server_code = server_code
        self.row = row
        self.data = data
        self.hash = str(row["hash"])
        self.sender = str(row["sender_login"])
        self.envelope = envelope.OcxEnvelope(
            str(row["kind"]),
            None if row["to_login"] is None else str(row["to_login"]),
            None if row["re_hash"] is None else str(row["re_hash"]),
        )

    @property
    def for_me(self) -> bool:
        """True when the message is addressed (``to``) to a login this clone acts as."""
        return self.envelope.to is not None and self.envelope.to in self.clone.logins


class PostResult:
    """A post's outcome; ``indexed`` says what the index did with it (``writeonce.index_sentence``)."""

    __slots__ = ("delivered", "hash", "indexed", "name", "reason", "repo")

    def __init__(self, repo: str, h: str, delivered: bool, reason: str | None, indexed: str = "") -> None:
        self.repo = repo
        self.hash = h
        self.name = envelope.message_name(h)
        self.delivered = delivered
        self.reason = reason
        self.indexed = indexed


class CloneReport:
    __slots__ = ("error", "handed", "new", "repo", "restored")

    def __init__(self, repo: str) -> None:
        self.repo = repo
        self.new = 0
        self.handed = 0
        self.restored = 0
        self.error: str | None = None


def scan_row(repo: str, name: str, h: str, verdict: envelope.OcxEnvelope | envelope.Invalid, *,
             data: bytes, received: float, uvid: int) -> ScanRow:  # fmt: skip
    """Pure: the index row of one judged file; a valid one carries its bytes to keep (``Kept``)."""
    if isinstance(verdict, envelope.OcxEnvelope):
        keep = Kept(name, h, sha1=envelope.hash_by_length(data, 40) or "",
                    sha3=envelope.hash_by_length(data, 64) or "", data=data, received_at=received, uvid=uvid)  # fmt: skip
        return ScanRow((repo, name, h, verdict.kind, verdict.to, verdict.re, 1, None, len(data), received, uvid),
                       keep)  # fmt: skip
    return ScanRow((repo, name, h, None, None, None, 0, verdict.reason, len(data), received, uvid))


def judged(name: str, data: bytes, policy: str | None) -> tuple[str, envelope.OcxEnvelope | envelope.Invalid]:
    """``envelope.judge``, and should it ever raise, an invalid verdict naming the error (never a stop)."""
    try:
        return envelope.judge(name, data, policy)
    except Exception as e:  # judge never raises by contract; a bug must not stop the index
        return envelope.message_hash(data, policy), envelope.Invalid(
            f"could not be judged: {type(e).__name__}"
        )


class NodeClones:
    """The clones of one configuration, their index, and the readers registered by kind."""

    def __init__(self, config: NodeConfig, index: Index | None = None) -> None:
        self.config = config
        self.index = index if index is not None else Index(config.index)
        self._readers: dict[str, list[tuple[str, Callable[[Delivery], None]]]] = {}
        self._lock = threading.RLock()
        self._cannot_restore: set[tuple[str, str]] = set()  # (clone, name) already logged as not put back

    def close(self) -> None:
        self.index.close()

    # --- configuration checks ------------------------------------------------------------------------

    def server_codes(self) -> dict[str, str]:
        """Each clone's server-code, after checking every file is a Fossil repository and O12."""
        codes = {c.name: fossil.repo_info(c.repository).server_code for c in self.config.clones}
        check_server_codes(codes)
        return codes

    # --- readers -------------------------------------------------------------------------------------

    def register(self, kind: str, reader: Callable[[Delivery], None], name: str | None = None) -> None:
        """Hand every valid message of ``kind`` (with a known sender) to ``reader``, once per message.

        ``name`` identifies the reader in the hand-off record (default: its qualified name); a reader
        registered under the same name after a restart is not handed what it was handed before.
        """
        rid = name or f"{getattr(reader, '__module__', '?')}.{getattr(reader, '__qualname__', repr(reader))}"
        self._readers.setdefault(kind, []).append((rid, reader))

    def hand_off(self, clone: CloneConfig, server_code: str) -> int:
        handed = 0
        for kind, readers in self._readers.items():
            for rid, reader in readers:
                for row in self.index.to_hand(clone.name, kind, rid):
                    if not self.index.mark_handed(clone.name, str(row["hash"]), rid, None):
                        continue
                    try:
                        data = self.message_bytes(clone, str(row["name"]))
                        reader(Delivery(clone, server_code, row, data))
                    except Exception as e:  # a reader's failure is recorded, never fatal
                        self.index.set_hand_error(
                            clone.name, str(row["hash"]), rid, f"{type(e).__name__}: {e}"
                        )
                    handed += 1
        return handed

    def message_bytes(self, clone: CloneConfig, name: str) -> bytes:
        """The valid bytes of the message ``name`` in ``clone``: those kept when first seen, whatever the
        clone holds now; else the clone's (empty when it cannot be read)."""
        kept = self.index.kept_bytes(clone.name, name)
        if kept is not None:
            return kept
        r = fossil.read_message(clone.repository, name)
        return r.data if r is not None else b""

    def row_bytes(self, row: IndexRow) -> bytes | None:
        """The bytes an index row is about: a valid row's kept bytes; an invalid row's bytes while its
        clone still holds them under its name (None once it holds other ones, or none)."""
        repo, name, h = str(row["repo"]), str(row["name"]), str(row["hash"])
        if row["valid"]:
            kept = self.index.kept_bytes(repo, name)
            if kept is not None:
                return kept
        got = fossil.read_message(self.config.clone(repo).repository, name)
        if got is None or envelope.hash_by_length(got.data, len(h)) != h:
            return None
        return got.data

    def thread(self, root: str, repo: str) -> dict[str, tuple[str, str, str, str]]:
        """Every valid message of clone ``repo`` answering ``root`` or an answer of it, read under the
        node's lock: hash -> (kind, sender login or "", the hash it answers, file name), in received order
        (each answer after what it answers)."""
        out: dict[str, tuple[str, str, str, str]] = {}
        todo = [root]
        with self._lock:
            while todo:
                h = todo.pop(0)
                for row in self.index.answers(h):
                    if row["repo"] != repo or str(row["hash"]) in out:
                        continue
                    k = str(row["hash"])
                    out[k] = (str(row["kind"]), str(row["sender_login"] or ""), h, str(row["name"]))
                    todo.append(k)
        return out

    # --- scanning ------------------------------------------------------------------------------------

    def scan(self, clone: CloneConfig, listing: dict[str, tuple[str, str | None]] | None = None) -> int:
        """Index the clone's new ``ocx/`` message files; record senders; returns how many files were new."""
        info = fossil.repo_info(clone.repository)
        after, _ = self.index.cursor(clone.name)
        rows, top = self._judge(clone, fossil.read_messages(clone.repository, after), info.hash_policy, after)
        self._record(clone, info.server_code, rows, top, replace=False)
        if listing is not None:
            self._senders_from(clone, listing)
        return len(rows)

    def _judge(
        self, clone: CloneConfig, uv: list[fossil.UvRow], policy: str | None, top: int
    ) -> tuple[list[ScanRow], int]:
        """The rows of ``uv`` (each file judged: name, then envelope), the highest ``uvid``; a right-named
        file's first-receipt sender recorded on the way (a misnamed one's is nobody's: its bytes may copy
        another's message)."""
        out: list[ScanRow] = []
        for r in uv:
            name = text.carry_os(r.name)  # a name that is not UTF-8 is stored as text UTF-8 carries
            h, verdict = judged(r.name, r.data, policy)
            received = r.rcv_time if r.rcv_time is not None else float(r.mtime)
            out.append(scan_row(clone.name, name, h, verdict, data=r.data, received=received, uvid=r.uvid))
            top = max(top, r.uvid)
            if h != envelope.hash_from_name(r.name):
                continue
            login = None if r.rcv_login is None else text.carry_os(r.rcv_login)
            addr = None if r.rcv_addr is None else text.carry_os(r.rcv_addr)
            if r.rcv_addr == fossil.LOCAL_ADD:
                self.index.set_provenance(clone.name, h, login, "local", "local")
            elif clone.url is None:  # a hub: this clone is where the message was first received
                self.index.set_provenance(clone.name, h, login, addr, "first-receipt")
        return out, top

    def _record(self, clone: CloneConfig, code: str, rows: list[ScanRow], top: int, *, replace: bool) -> None:
        for why in self.index.record_scan(clone.name, code, rows, top, replace=replace):
            log.warning("ocx: %s: a file was indexed as invalid: %s", clone.name, why)

    def _senders_from(self, clone: CloneConfig, listing: dict[str, tuple[str, str | None]]) -> None:
        """Each message's sender as the remote records it, where none is known or only this node's own
        record of writing it (the remote holds it from whoever pushed those bytes first)."""
        host = urllib.parse.urlsplit(clone.url or "").hostname or ""
        for h in self.index.unconfirmed_senders(clone.name):
            got = listing.get(envelope.message_name(h))
            if got and got[1] and self._same_bytes(clone, h, got[0]):
                self.index.confirm_sender(clone.name, h, text.carry(got[1]), f"remote {host}")

    def _same_bytes(self, clone: CloneConfig, h: str, remote_hash: str) -> bool:
        """True when the remote's file named for ``h`` holds the bytes this node holds under that name.

        Fossil lists the hash it stored, by the remote's hash policy: usually ``h`` itself, but a 64-digit
        (SHA3) name in a repository whose policy is ``sha1`` is stored with its SHA1, so then the node's
        bytes (those kept, else the clone's) are hashed the remote's way.
        """
        if remote_hash == h:
            return True
        if len(remote_hash) == len(h):
            return False
        name = envelope.message_name(h)
        data = self.index.kept_bytes(clone.name, name)
        if data is None:
            row = fossil.read_message(clone.repository, name)
            data = row.data if row is not None else None
        return data is not None and envelope.hash_by_length(data, len(remote_hash)) == remote_hash

    def rebuild(self, repo: str | None = None) -> None:
        """Index the messages of ``repo`` (or every clone) again, from the clone and the kept bytes, in one
        transaction per clone: the valid rows of kept bytes stay though the clone holds other ones now."""
        with self._lock:
            for c in self.config.clones:
                if repo is None or c.name == repo:
                    info = fossil.repo_info(c.repository)
                    rows, top = self._judge(c, fossil.read_messages(c.repository, 0), info.hash_policy, 0)
                    rows += self._kept_rows(c, {(sr.row[1], sr.row[2]) for sr in rows}, info.hash_policy)
                    self._record(c, info.server_code, rows, top, replace=True)

    def _kept_rows(
        self, clone: CloneConfig, have: set[tuple[object, object]], policy: str | None
    ) -> list[ScanRow]:
        """The rows of the messages kept for ``clone`` that ``have`` (name, hash) lacks, judged again."""
        out = []
        for k in self.index.kept(clone.name):
            if (k.name, k.hash) not in have:
                h, verdict = judged(k.name, k.data, policy)
                out.append(
                    scan_row(clone.name, k.name, h, verdict, data=k.data, received=k.received_at, uvid=k.uvid)
                )
        return out

    # --- write-once ----------------------------------------------------------------------------------

    def _warn_once(self, key: tuple[str, str], msg: str, *args: object) -> None:
        """Log a name that cannot be put back once per process, not at every sync."""
        if key not in self._cannot_restore:
            self._cannot_restore.add(key)
            log.warning(msg, *args)

    def restore(self, clone: CloneConfig, listing: dict[str, tuple[str, str | None]] | None) -> int:
        """Put back into the clone every kept message and every file this node stored itself wherever the
        clone or the remote holds other bytes under its name (``writeonce.other_bytes``), dated newer than
        the version replaced; the next sync carries them to the remote. Returns how many were put back."""
        held = fossil.uv_state(clone.repository)
        now = _clock.now()

        def listed(name: str) -> str | None:
            got = listing.get(name) if listing is not None else None
            return got[0] if got else None

        put = 0
        for k in self.index.kept(clone.name, data=False):
            why = other_bytes((k.sha1, k.sha3), held.get(k.name), listed(k.name))
            if why is None:
                continue
            data = self.index.kept_bytes(clone.name, k.name) or b""
            try:
                fossil.uv_add(
                    clone.repository, k.name, data, clone.login, mtime=restore_mtime(now, held.get(k.name))
                )
            except OcxError as e:
                self._warn_once((clone.name, k.name), "ocx: %s: %s: %s; cannot put its first bytes back: %s",
                                clone.name, k.name, why, e.message)  # fmt: skip
                continue
            log.warning("ocx: %s: %s: %s; its first valid bytes are put back", clone.name, k.name, why)
            put += 1
        for name, h, path in self.index.published(clone.name):
            why = other_bytes((h,), held.get(name), listed(name))
            if why is None:
                continue
            if fossil.file_hash(path, len(h)) != h:
                self._warn_once((clone.name, name), "ocx: %s: %s: %s; this node's copy %s is gone or changed: "
                                "not put back", clone.name, name, why, path)  # fmt: skip
                continue
            try:
                fossil.uv_add_file(
                    clone.repository, name, path, clone.login, mtime=restore_mtime(now, held.get(name))
                )
            except OcxError as e:
                self._warn_once((clone.name, name), "ocx: %s: %s: %s; cannot put it back: %s", clone.name, name,
                                why, e.message)  # fmt: skip
                continue
            log.warning("ocx: %s: %s: %s; this node's bytes are put back", clone.name, name, why)
            put += 1
        return put

    # --- syncing -------------------------------------------------------------------------------------

    def _password(self, clone: CloneConfig) -> str | None:
        if clone.password_file:
            try:
                with open(clone.password_file, encoding="utf-8") as f:
                    return f.read().strip()
            except OSError as e:
                raise OcxError(
                    f"ocx: cannot read the password file {clone.password_file}: {e.strerror}"
                ) from None
        if clone.url:
            pw = urllib.parse.urlsplit(clone.url).password
            return urllib.parse.unquote(pw) if pw else None
        return None

    def _sync_clone(self, clone: CloneConfig) -> dict[str, tuple[str, str | None]] | None:
        """Push and pull the clone's unversioned files; the remote's listing after (None: a hub)."""
        if clone.url is None:
            return None
        if fossil.is_ssh(clone.url):  # ssh keys, no password: always name the URL (and the ssh command)
            fossil.uv_sync(clone.repository, clone.url)
            return fossil.remote_listing(clone.url)
        pw = self._password(clone)
        fossil.uv_sync(clone.repository, self._remote(clone, pw))
        return fossil.remote_listing(clone.url, pw)

    def _remote(self, clone: CloneConfig, pw: str | None) -> str | None:
        """The URL a sync of an http(s) clone names (``None``: the one the clone saved, with its password).
        A password in it reaches fossil through ``--args`` (``fossil.run``), never a command line."""
        assert clone.url is not None
        if clone.password_file:
            return fossil.sync_url(clone.url, pw)
        if pw is None and fossil.same_remote(fossil.repo_info(clone.repository).last_sync_url, clone.url):
            return None  # fossil uses the URL and the password the clone saved
        return clone.url

    def pull_checkins(self, repo: str) -> None:
        """``fossil pull`` for the clone ``repo``: its check-ins as the remote has them now (a hub, with no
        URL, is the remote: nothing to do). Raises ``OcxError`` when the pull fails."""
        clone = self.config.clone(repo)
        if clone.url is None:
            return
        if fossil.is_ssh(clone.url):
            args = [
                "pull",
                clone.url,
                "--once",
                "-R",
                clone.repository,
                "--ssh-command",
                fossil.ssh_command(),
            ]
        else:
            url = self._remote(clone, self._password(clone))
            args = ["pull", *([url, "--once"] if url else []), "-R", clone.repository]
        with self._lock:  # one writer of the clone at a time: runs pull while the poll loop syncs
            fossil.run(args, timeout=300.0)

    def _confirm(self, clone: CloneConfig, listing: dict[str, tuple[str, str | None]] | None) -> None:
        for h in self.index.undelivered(clone.name):
            state, reason = self._delivery_state(clone, h, listing)
            self.index.set_post(clone.name, h, state, reason)

    def _delivery_state(
        self, clone: CloneConfig, h: str, listing: dict[str, tuple[str, str | None]] | None
    ) -> tuple[str, str | None]:
        if clone.url is None:
            return "delivered", None  # a hub: the file is where others sync from
        if listing is None:
            return "pending", "the remote could not be listed"
        got = listing.get(envelope.message_name(h))
        if got and self._same_bytes(clone, h, got[0]):
            return "delivered", None
        name = envelope.message_name(h)
        if fossil.is_ssh(clone.url):
            return "not_delivered", (
                f"the remote {fossil.redact_password(clone.url)} does not list {name} after the push; "
                "the far side of the ssh link did not store it (does its fossil command grant write-"
                "unversioned, y?)"
            )
        user = urllib.parse.unquote(urllib.parse.urlsplit(clone.url).username or "") or clone.login
        return "not_delivered", (
            f"the remote {fossil.bare_url(clone.url)} does not list {name} after the push; "
            f"the login {user!r} may lack the write-unversioned capability (y)"
        )

    def sync_once(self) -> list[CloneReport]:
        """Sync every clone once: push and pull, confirm posts, index new files, hand them to readers."""
        with self._lock:
            reports = []
            try:
                codes = self.server_codes()
            except OcxError as e:
                r = CloneReport("*")
                r.error = e.message
                return [r]
            for clone in self.config.clones:
                rep = CloneReport(clone.name)
                listing = self._sync_and_confirm(
                    clone, rep, any_failure=True
                )  # never let one clone stop the others
                try:  # what the clone holds is indexed and handed even when its remote failed
                    rep.new = self.scan(clone, listing)
                    rep.restored = self.restore(clone, listing)
                    if rep.restored:  # (the files put back are not counted as new: their rows stand)
                        self._carry_restored(clone, rep)
                    rep.handed = self.hand_off(clone, codes[clone.name])
                except OcxError as e:
                    rep.error = rep.error or e.message
                except Exception as e:
                    rep.error = rep.error or f"ocx: {type(e).__name__}: {e}"
                reports.append(rep)
            return reports

    def _carry_restored(self, clone: CloneConfig, rep: CloneReport) -> None:
        """After ``restore``: sync the clone again (when it has a remote that answered) so what was put
        back reaches the remote now, then index it; a failure is reported, never raised."""
        listing = self._sync_and_confirm(clone, rep) if clone.url is not None and rep.error is None else None
        self.scan(clone, listing)

    def _sync_and_confirm(
        self, clone: CloneConfig, rep: CloneReport, *, any_failure: bool = False
    ) -> dict[str, tuple[str, str | None]] | None:
        """Sync ``clone`` and confirm its posts: the remote's listing (None without one, or when the sync
        failed); a failure is ``rep.error`` (an ``OcxError``'s sentence, or with ``any_failure`` any
        exception's name and text), never raised. A listing had before the confirm failed is kept."""
        listing = None
        try:
            listing = self._sync_clone(clone)
            self._confirm(clone, listing)
        except OcxError as e:
            rep.error = e.message
        except Exception as e:
            if not any_failure:
                raise
            rep.error = f"ocx: {type(e).__name__}: {e}"
        return listing

    def upload(self, repo: str, name: str, path: str) -> str | None:
        """Store the file ``path`` as the unversioned file ``name`` in the clone ``repo`` (not synced yet;
        see ``push``); the hash Fossil stored."""
        clone = self.config.clone(repo)
        with self._lock:
            fossil.uv_add_file(clone.repository, name, path, clone.login)
            stored = fossil.uv_hash(clone.repository, name)
            if stored is not None:  # kept: put back if another version replaces it (``restore``)
                self.index.set_published(clone.name, name, stored, path)
            return stored

    def remove_upload(self, repo: str, name: str) -> None:
        """Take the unversioned file ``name`` out of the clone ``repo`` again (before it is pushed)."""
        clone = self.config.clone(repo)
        with self._lock:
            self.index.drop_published(clone.name, name)
            fossil.run(["uv", "rm", name, "-R", clone.repository])

    def push(self, repo: str) -> CloneReport:
        """Sync the clone ``repo`` now (after ``upload``), confirm posts and index; never raises for a peer."""
        clone = self.config.clone(repo)
        rep = CloneReport(clone.name)
        with self._lock:
            listing = self._sync_and_confirm(clone, rep)
            try:
                rep.new = self.scan(clone, listing)
            except OcxError as e:
                rep.error = rep.error or e.message
        return rep

    def poll_loop(self, stop: threading.Event, interval: float | None = None) -> None:
        """Call ``sync_once`` every ``interval`` seconds (default: the configuration's) until ``stop``."""
        period = self.config.interval if interval is None else interval
        while not stop.is_set():
            self.sync_once()
            stop.wait(period)

    # --- writing -------------------------------------------------------------------------------------

    def post(self, repo: str, data: bytes, *, sync: bool = True) -> PostResult:
        """Write ``data`` as a message into the clone ``repo``, sync it and confirm it on the remote."""
        verdict = envelope.read_envelope(data)
        if isinstance(verdict, envelope.Invalid):
            raise InvalidMessage(f"ocx: not posted: {verdict.reason}")
        clone = self.config.clone(repo)
        with self._lock:
            self.server_codes()
            info = fossil.repo_info(clone.repository)
            h = envelope.message_hash(data, info.hash_policy)
            name = envelope.message_name(h)
            fossil.uv_add(clone.repository, name, data, clone.login)
            row = fossil.read_message(clone.repository, name)
            stored = row.hash if row is not None else None
            if stored != h:
                raise OcxError(
                    f"ocx: fossil stored {name} with the hash {stored}, not {h}; "
                    "the repository's hash policy is not the one OCX read"
                )
            self.index.set_provenance(clone.name, h, clone.login, "local", "local")
            if self.index.post_state(clone.name, h) != ("delivered", None):
                self.index.set_post(clone.name, h, "pending", None)
            if not sync:
                return PostResult(clone.name, h, False, "not synced yet", self._indexed(clone, h, None))
            try:
                listing = self._sync_clone(clone)
            except OcxError:
                # the message stays in the clone and in the index as pending; a later sync sends it
                with contextlib.suppress(Exception):
                    self.scan(clone)
                raise
            state, reason = self._delivery_state(clone, h, listing)
            if state != "delivered":  # one more round: a concurrent sync may have raced the first
                listing = self._sync_clone(clone)
                state, reason = self._delivery_state(clone, h, listing)
            self.index.set_post(clone.name, h, state, reason)
            return PostResult(clone.name, h, state == "delivered", reason, self._indexed(clone, h, listing))

    def _indexed(self, clone: CloneConfig, h: str, listing: dict[str, tuple[str, str | None]] | None) -> str:
        """Scan the clone after a post and say what the index did with ``h``; never raises: the message is
        in the clone (delivered, or pending), and what any other file does to the scan is only reported."""
        error = None
        try:
            self.scan(clone, listing)
        except Exception as e:  # the post stands; the sentence says why the index has no row yet
            error = e.message if isinstance(e, OcxError) else f"{type(e).__name__}: {e}"
        try:
            row = self.index.row(clone.name, envelope.message_name(h), h)
        except Exception as e:
            row, error = None, error or f"{type(e).__name__}: {e}"
        return index_sentence(h, row, error)

    def answer(
        self, repo: str, re: str, kind: str, body: object, *, nonce: bytes | None = None
    ) -> PostResult:
        """Write ``{"ocx": 2, "re": re, kind: body}`` into ``repo`` and sync it (see ``post``); with
        ``nonce``, bytes of its own (``envelope.with_nonce``: ``sotd ocx answer``)."""
        try:
            data = envelope.encode_answer(re, kind, body)
        except (ValueError, TypeError) as e:
            raise InvalidMessage(f"ocx: cannot answer: {e}") from None
        return self.post(repo, data if nonce is None else envelope.with_nonce(data, nonce))


def require_delivered(result: PostResult) -> PostResult:
    """``result``, or NotDelivered naming the hash and the reason."""
    if not result.delivered:
        raise NotDelivered(f"ocx: {result.hash} was not delivered: {result.reason}")
    return result
