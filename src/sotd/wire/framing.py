"""Envelopes and newline-delimited framing (behaviour 2.1). Pure: bytes in, envelopes out.

One JSON envelope per line, UTF-8, ``\\n``-terminated, at most 1 MiB (newline excluded):
``{"v":1,"id":<u64>,"kind":"req"|"res"|"evt","op":"<op>","rev":<u64, optional>,"payload":{…}}``.
When ``payload.blob.len`` is a non-negative integer, that many raw bytes follow the envelope's newline
(not used by comm; the decoder skips them).

Guarantee: ``Decoder.feed`` turns any bytes into envelopes or raises ``RemoteProtocolError`` (a
``WireError``: the peer's fault) — nothing else — and
never buffers more than the bound: a line longer than 1 MiB is refused as soon as it has grown past it,
even before its newline arrives. After an error the decoder stays failed (envelopes completed before the bad
line in the same feed are still returned; the error comes with the next feed).

``line_length`` and ``request_length`` measure a frame before it is sent, so the daemon can answer "too
long" in words where it builds one (issue 25) rather than fail at ``encode``.

What would break it: parsing with a lenient JSON reader (NaN, UTF-16 autodetection) or accepting a line the
other implementations would refuse.
"""

from __future__ import annotations

from sotd.errors import WireError
from sotd.text import json_text, loads
from sotd.wire.errors import RemoteProtocolError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

VERSION = 1
MAX_LINE = 1 << 20
KINDS = ("req", "res", "evt")
U64_MAX = (1 << 64) - 1


def _is_u64(x: object) -> bool:
    return type(x) is int and 0 <= x <= U64_MAX


class Envelope:
    """One decoded (or to-be-encoded) envelope."""

    __slots__ = ("id", "kind", "op", "payload", "rev", "v")

    def __init__(
        self,
        id: int,
        kind: str,
        op: str,
        payload: dict[str, Any],
        *,
        rev: int | None = None,
        v: int = VERSION,
    ) -> None:
        self.v = v
        self.id = id
        self.kind = kind
        self.op = op
        self.payload = payload
        self.rev = rev

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"v": self.v, "id": self.id, "kind": self.kind, "op": self.op}
        if self.rev is not None:
            d["rev"] = self.rev
        d["payload"] = self.payload
        return d

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Envelope):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Envelope({self.to_dict()!r})"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def validate(obj: object) -> Envelope:
    """An ``Envelope`` from a parsed JSON value, or ``RemoteProtocolError`` naming the first bad field."""
    if not isinstance(obj, dict):
        raise RemoteProtocolError(f"envelope is not a JSON object (got {type(obj).__name__})")
    v = obj.get("v")
    if type(v) is not int or v != VERSION:
        raise RemoteProtocolError(f"envelope field 'v' must be {VERSION} (got {v!r})")
    if "id" not in obj or not _is_u64(obj["id"]):
        raise RemoteProtocolError(
            f"envelope field 'id' must be an unsigned 64-bit integer (got {obj.get('id')!r})"
        )
    kind = obj.get("kind")
    if kind not in KINDS:
        raise RemoteProtocolError(f"envelope field 'kind' must be req, res or evt (got {kind!r})")
    op = obj.get("op")
    if not isinstance(op, str) or not op:
        raise RemoteProtocolError(f"envelope field 'op' must be a non-empty string (got {op!r})")
    rev = obj.get("rev")
    if rev is not None and not _is_u64(rev):
        raise RemoteProtocolError(f"envelope field 'rev' must be an unsigned 64-bit integer (got {rev!r})")
    payload = obj.get("payload")
    if not isinstance(payload, dict):
        raise RemoteProtocolError(
            f"envelope field 'payload' must be a JSON object (got {type(payload).__name__})"
        )
    return Envelope(obj["id"], kind, op, payload, rev=rev)


def decode_line(line: bytes) -> Envelope:
    """One envelope from one line (without its newline)."""
    if len(line) > MAX_LINE:
        raise RemoteProtocolError(f"envelope longer than {MAX_LINE} bytes")
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RemoteProtocolError(f"envelope is not UTF-8 ({e.reason} at byte {e.start})") from None
    try:
        # through the one rule for text (docs/contract.md): a lone surrogate escape is read as U+FFFD
        obj = loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:
        raise RemoteProtocolError(f"envelope is not JSON ({e})") from None
    return validate(obj)


def encode(env: Envelope) -> bytes:
    """The envelope's line, newline included. Refuses (``WireError``) what ``decode_line`` would refuse:
    an envelope of ours that cannot be sent is not the peer's fault, so never a ``RemoteProtocolError``."""
    d = env.to_dict()
    try:
        validate(d)
    except RemoteProtocolError as e:
        raise WireError(e.message) from None
    try:
        line = json_text(d).encode("utf-8")
    except (ValueError, TypeError) as e:
        raise WireError(f"envelope is not JSON ({e})") from None
    if len(line) > MAX_LINE:
        raise WireError(f"envelope longer than {MAX_LINE} bytes")
    return line + b"\n"


def line_length(env: Envelope) -> int:
    """The bytes of ``env``'s line, newline excluded (``WireError`` when it is not JSON). Pure."""
    try:
        return len(json_text(env.to_dict()).encode("utf-8"))
    except (ValueError, TypeError) as e:
        raise WireError(f"envelope is not JSON ({e})") from None


def request_length(op: str, payload: dict[str, Any]) -> int:
    """The bytes of the line a request of ours would be, measured with the widest id, so a frame the
    daemon builds (an offer, a forward: the sender's frame plus ``forwarded`` and ``expires``) is checked
    against ``MAX_LINE`` where it is built, whatever id it is later sent with. Pure."""
    return line_length(Envelope(U64_MAX, "req", op, payload))


_HEAD = b'{"v":1,"id":'


class PreparedRequest:
    """A request of ours encoded once and sent with many ids: an offer of one frame to many linked boxes
    pays one JSON encoding, not one per box (issue 27's scale). ``line(rid)`` is byte for byte what
    ``encode(Envelope(rid, "req", op, payload))`` gives; ``widest`` is ``request_length(op, payload)``.
    Built, it refuses (``WireError``) what ``encode`` refuses but the length: the caller checks ``widest``
    against ``MAX_LINE`` and says why in its own words (``hub.prepared_frame``)."""

    __slots__ = ("tail", "widest")

    def __init__(self, op: str, payload: dict[str, Any]) -> None:
        d = Envelope(0, "req", op, payload).to_dict()
        try:
            validate(d)
        except RemoteProtocolError as e:
            raise WireError(e.message) from None
        try:
            text = json_text(d).encode("utf-8")
        except (ValueError, TypeError) as e:
            raise WireError(f"envelope is not JSON ({e})") from None
        # compact JSON of a dict in insertion order: the id's digits follow the head, then ``,"kind"…``
        assert text.startswith(_HEAD + b"0,"), text[:40]
        self.tail = text[len(_HEAD) + 1 :] + b"\n"
        self.widest = len(_HEAD) + len(str(U64_MAX)) + len(self.tail) - 1

    def line(self, rid: int) -> bytes:
        """The request's line with id ``rid`` (an unsigned 64-bit integer), newline included."""
        if not _is_u64(rid):
            raise WireError(f"envelope field 'id' must be an unsigned 64-bit integer (got {rid!r})")
        line = b"".join((_HEAD, str(rid).encode("ascii"), self.tail))
        if len(line) - 1 > MAX_LINE:
            raise WireError(f"envelope longer than {MAX_LINE} bytes")
        return line


def _blob_len(env: Envelope) -> int:
    blob = env.payload.get("blob")
    if isinstance(blob, dict):
        n = blob.get("len")
        if type(n) is int and n > 0:
            return n
    return 0


class Decoder:
    """Feed bytes, get envelopes. Blank lines are skipped; a bad line raises ``RemoteProtocolError`` (and sticks)."""

    __slots__ = ("_blob_left", "_buf", "_failed", "max_line")

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self.max_line = max_line
        self._buf = bytearray()
        self._blob_left = 0
        self._failed: RemoteProtocolError | None = None

    def _fail(self, err: RemoteProtocolError, out: list[Envelope]) -> list[Envelope]:
        self._failed = err
        self._buf.clear()
        if out:
            return out
        raise err

    @property
    def failed(self) -> RemoteProtocolError | None:
        return self._failed

    def feed(self, data: bytes) -> list[Envelope]:
        """Envelopes completed by ``data``, in order.

        A bad line raises ``RemoteProtocolError``; if envelopes were completed earlier in the same ``data`` they are
        returned first and the error is raised by the next ``feed`` (``feed(b"")`` flushes it).
        """
        if self._failed is not None:
            raise RemoteProtocolError(self._failed.message)
        out: list[Envelope] = []
        pos = 0
        n = len(data)
        while pos < n:
            if self._blob_left:
                take = min(self._blob_left, n - pos)
                self._blob_left -= take
                pos += take
                continue
            nl = data.find(b"\n", pos)
            if nl < 0:
                self._buf += data[pos:]
                if len(self._buf) > self.max_line:
                    err = RemoteProtocolError(f"envelope longer than {self.max_line} bytes (no newline yet)")
                    return self._fail(err, out)
                break
            self._buf += data[pos:nl]
            pos = nl + 1
            line = bytes(self._buf)
            self._buf.clear()
            if len(line) > self.max_line:
                return self._fail(RemoteProtocolError(f"envelope longer than {self.max_line} bytes"), out)
            if not line.strip():
                continue
            try:
                env = decode_line(line)
            except RemoteProtocolError as e:
                return self._fail(e, out)
            out.append(env)
            self._blob_left = _blob_len(env)
        return out

    @property
    def pending(self) -> int:
        """Bytes of an unfinished line held (0 at a line boundary)."""
        return len(self._buf)
