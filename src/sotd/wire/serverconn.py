"""The server side of one daemon connection as a state machine: bytes in, what to do out. No I/O.

Spec: behaviour 2.1 (newline JSON; every connection opens with a hello; a refused hello is the answer and
the connection closes; bad bytes close that connection only), 2.2 (a peer of another OS account is refused
before any op runs), 2.3 (requests after the hello, each answered by its id and op).
Guarantee: ``ServerConnection.receive_data`` turns any bytes into the actions of ``TRANSITIONS`` (a table:
state x input -> next state, action), so a peer can never reach an op before an accepted hello, and
nothing it sends makes the machine raise: its faults come back as a ``Close`` carrying a
``RemoteProtocolError``. Our own misuse (feeding bytes after the machine closed or saw the end, answering a
request it never handed out, or twice) raises ``LocalProtocolError`` and sends nothing.
Every answer line it makes fits the 1 MiB bound (``answer_line``: a payload that would outgrow it is cut
to fit, keeping a refusal's code), so an asker always hears an answer (issue 25).
What would break it: a shell that runs a request it was not handed in a ``ServeRequest``, or that reads the
hello itself (the table would then no longer be the whole rule).

The shell (``sotd.daemon.server``) reads bytes, feeds them here, and performs the actions in order: writes
each ``Answer``'s bytes, records the ``Accepted`` peer, serves each ``ServeRequest`` and writes
``answer(env, payload)``, hands each ``Resolve`` to the request of ours that waits for it, and at ``Close``
or ``End`` stops reading. Timers (the hello wait, the idle bound) are the shell's: they need a clock.
"""

from __future__ import annotations

from sotd.errors import WireError
from sotd.wire import answers, hello
from sotd.wire.errors import LocalProtocolError, RemoteProtocolError
from sotd.wire.framing import Decoder, Envelope, encode

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# states
FOREIGN = "foreign"  # connected from another OS account: its first envelope is refused, whatever it is
AWAITING_HELLO = "awaiting_hello"
OPEN = "open"  # hello accepted: requests run, responses resolve
ENDED = "ended"  # the peer's input ended; answers to requests already handed out may still be written
CLOSED = "closed"  # closed by the protocol: nothing more is read or written

# inputs: what one envelope (or the stream) is
HELLO = "hello"  # a hello request the verdict accepts
BAD_HELLO = "bad_hello"  # a hello request the verdict refuses
REQUEST = "request"  # any other request
RESPONSE = "response"  # an answer to a request of ours (a hub's offer down a link)
EVENT = "event"
BAD_BYTES = "bad_bytes"  # bytes that are no envelope (or the end of input inside one)
END = "end"  # the end of input at an envelope boundary

# actions
FORBID = "forbid"  # answer forbidden, close
REQUIRE_HELLO = "require_hello"  # answer hello_required, close
REFUSE_HELLO = "refuse_hello"  # answer the verdict's refusal, close
ACCEPT = "accept"  # answer ok, name the peer
ANSWER_HELLO = "answer_hello"  # a second hello: answered by the verdict, the connection stays as it was
RUN = "run"
RESOLVE = "resolve"
IGNORE = "ignore"
DROP_BEFORE_HELLO = "drop_before_hello"  # close, answering nothing
DROP = "drop"  # close at once: requests in flight go unanswered
STOP = "stop"  # the end of input: stop reading

_ANY_ENVELOPE = (HELLO, BAD_HELLO, REQUEST, RESPONSE, EVENT)

TRANSITIONS: dict[tuple[str, str], tuple[str, str]] = {
    **{(FOREIGN, i): (CLOSED, FORBID) for i in _ANY_ENVELOPE},
    (FOREIGN, BAD_BYTES): (CLOSED, DROP_BEFORE_HELLO),
    (FOREIGN, END): (ENDED, STOP),
    (AWAITING_HELLO, HELLO): (OPEN, ACCEPT),
    (AWAITING_HELLO, BAD_HELLO): (CLOSED, REFUSE_HELLO),
    (AWAITING_HELLO, REQUEST): (CLOSED, REQUIRE_HELLO),
    (AWAITING_HELLO, RESPONSE): (CLOSED, REQUIRE_HELLO),
    (AWAITING_HELLO, EVENT): (CLOSED, REQUIRE_HELLO),
    (AWAITING_HELLO, BAD_BYTES): (CLOSED, DROP_BEFORE_HELLO),
    (AWAITING_HELLO, END): (ENDED, STOP),
    (OPEN, HELLO): (OPEN, ANSWER_HELLO),
    (OPEN, BAD_HELLO): (OPEN, ANSWER_HELLO),
    (OPEN, REQUEST): (OPEN, RUN),
    (OPEN, RESPONSE): (OPEN, RESOLVE),
    (OPEN, EVENT): (OPEN, IGNORE),
    (OPEN, BAD_BYTES): (CLOSED, DROP),
    (OPEN, END): (ENDED, STOP),
}  # no row for ENDED or CLOSED: input after them is our own misuse (LocalProtocolError)


def classify(env: Envelope) -> str:
    """The input one envelope is."""
    if env.kind == "req":
        if env.op == hello.HELLO_OP:
            return HELLO if hello.hello_verdict(env.payload) is None else BAD_HELLO
        return REQUEST
    return RESPONSE if env.kind == "res" else EVENT


# ----------------------------------------------------------------------------------------- actions


class Answer:
    """Bytes to write: an answer the machine made itself (to a hello, or a refusal)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class Accepted:
    """The hello was accepted: who the peer is."""

    __slots__ = ("peer",)

    def __init__(self, peer: hello.Peer) -> None:
        self.peer = peer


class ServeRequest:
    """A request to serve; its answer's bytes come from ``ServerConnection.answer``."""

    __slots__ = ("env",)

    def __init__(self, env: Envelope) -> None:
        self.env = env


class Resolve:
    """A response to one of our own requests down this connection."""

    __slots__ = ("env",)

    def __init__(self, env: Envelope) -> None:
        self.env = env


class Close:
    """The connection ends now, for the peer's fault ``error``; ``log`` says so (``level``: warning or info)."""

    __slots__ = ("error", "level", "log")

    def __init__(self, error: RemoteProtocolError, log: str, level: str = "warning") -> None:
        self.error = error
        self.log = log
        self.level = level


class End:
    """The peer's input ended at an envelope boundary; requests already handed out may still answer."""

    __slots__ = ()


if TYPE_CHECKING:
    Action = Answer | Accepted | ServeRequest | Resolve | Close | End


def _describe(action: object) -> tuple[object, ...]:
    """An action as a plain tuple (``repr`` and tests)."""
    if isinstance(action, Answer):
        return ("answer", action.data)
    if isinstance(action, Accepted):
        p = action.peer
        return ("accepted", p.role, p.host, p.name, p.client_id)
    if isinstance(action, ServeRequest):
        return ("run", action.env.id, action.env.op)
    if isinstance(action, Resolve):
        return ("resolve", action.env.id, action.env.op)
    if isinstance(action, Close):
        return ("close", action.error.code, action.log, action.level)
    return ("end",)


def describe(actions: list[Action]) -> list[tuple[object, ...]]:
    return [_describe(a) for a in actions]


# ------------------------------------------------------------------------------------------ machine


class ServerConnection:
    """The server side of one connection. ``receive_data(b"")`` says the input ended."""

    __slots__ = ("_decoder", "_handed", "host", "own_uid", "peer", "peer_uid", "state", "version")

    def __init__(self, *, host: str, version: str, own_uid: int, peer_uid: int | None) -> None:
        self.host = host  # this daemon's declared host, named in a hello's answer
        self.version = version
        self.own_uid = own_uid
        self.peer_uid = peer_uid  # None when the OS cannot say (then the socket's folder is the guard)
        self.state = FOREIGN if peer_uid is not None and peer_uid != own_uid else AWAITING_HELLO
        self.peer: hello.Peer | None = None
        self._decoder = Decoder()
        self._handed: dict[int, int] = {}  # request id -> requests with that id handed out, unanswered

    def receive_data(self, data: bytes) -> list[Action]:
        """The actions ``data`` causes, in order (``b""``: the end of input)."""
        if (self.state, END) not in TRANSITIONS:
            raise LocalProtocolError(f"bytes fed to a connection that is {self.state}")
        out: list[Action] = []
        if not data:
            if self._decoder.pending:
                err = RemoteProtocolError("the connection ended inside an envelope")
                self._step(BAD_BYTES, None, err, out)
            else:
                self._step(END, None, None, out)
            return out
        try:
            envs = self._decoder.feed(data)
        except RemoteProtocolError as e:
            self._step(BAD_BYTES, None, e, out)
            return out
        # a bad line after good ones in the same bytes: the good ones act now, the error at the next feed
        for env in envs:
            if self.state in (ENDED, CLOSED):
                break  # closed by an earlier envelope of these bytes: the rest is never read
            self._step(classify(env), env, None, out)
        return out

    def answer(self, env: Envelope, payload: dict[str, Any]) -> bytes:
        """The bytes answering request ``env`` (handed out in a ``ServeRequest``) with ``payload``.

        ``LocalProtocolError`` for a request never handed out or already answered; a payload too long for
        the line bound is cut to fit (``answer_line``); ``WireError`` only for one no envelope can carry
        even so (not JSON, an op name past the bound).
        """
        left = self._handed.get(env.id, 0)
        if left <= 0:
            raise LocalProtocolError(f"answer to request {env.id} ({env.op}), which is not awaiting one")
        if left == 1:
            del self._handed[env.id]
        else:
            self._handed[env.id] = left - 1
        return _response(env, payload)

    # ------------------------------------------------------------------------------------------ steps

    def _step(
        self, got: str, env: Envelope | None, err: RemoteProtocolError | None, out: list[Action]
    ) -> None:
        before = self.state
        self.state, action = TRANSITIONS[(before, got)]
        if action == STOP:
            out.append(End())
        elif action in (DROP, DROP_BEFORE_HELLO):
            assert err is not None
            where = " before hello" if action == DROP_BEFORE_HELLO else ""
            out.append(Close(err, f"closed: malformed input{where}: {err.message}"))
        else:
            assert env is not None
            self._envelope(action, env, out)

    def _envelope(self, action: str, env: Envelope, out: list[Action]) -> None:
        if action == RUN:
            self._handed[env.id] = self._handed.get(env.id, 0) + 1
            out.append(ServeRequest(env))
        elif action == RESOLVE:
            out.append(Resolve(env))
        elif action == ACCEPT:
            out.append(Answer(_response(env, hello.hello_ok(self.host, self.version))))
            self.peer = hello.Peer.of(env.payload)
            out.append(Accepted(self.peer))
        elif action == ANSWER_HELLO:
            verdict = hello.hello_verdict(env.payload)
            said = hello.hello_ok(self.host, self.version) if verdict is None else answers.refusal(*verdict)
            out.append(Answer(_response(env, said)))
        elif action == FORBID:
            assert self.peer_uid is not None
            text = hello.foreign_uid_text(self.own_uid, self.peer_uid)
            self._refuse(env, RemoteProtocolError(text, code=answers.FORBIDDEN), out, log=(
                f"refused a hello from uid {self.peer_uid} (this daemon serves uid {self.own_uid})"
            ))  # fmt: skip
        elif action == REQUIRE_HELLO:
            err = RemoteProtocolError(hello.HELLO_REQUIRED_TEXT, code=answers.HELLO_REQUIRED)
            self._refuse(env, err, out, log=f"closed: first envelope was {env.kind} {env.op}, not hello")
        elif action == REFUSE_HELLO:
            verdict = hello.hello_verdict(env.payload)
            assert verdict is not None
            code, text = verdict
            self._refuse(
                env, RemoteProtocolError(text, code=code), out, log=f"refused hello: {text}", level="info"
            )
        # IGNORE: an event from a client means nothing to a daemon

    def _refuse(
        self, env: Envelope, err: RemoteProtocolError, out: list[Action], *, log: str, level: str = "warning"
    ) -> None:
        try:
            out.append(Answer(_response(env, err.answer())))
        except WireError:
            pass  # an op name so long that its echo cannot be framed: the connection closes unanswered
        out.append(Close(err, log, level))


def fitted_answer(payload: dict[str, Any], why: str) -> dict[str, Any]:
    """What is said instead of an answer too long for the line bound (``why``): a refusal keeps its code
    and the start of its sentence (``answers.cut_text``); anything else is an ``internal`` refusal saying
    it could not be sent. Pure."""
    text = answers.refusal_text(payload)
    code = answers.code_of(payload)
    if text is not None and isinstance(code, str) and code:
        return answers.refusal(code, answers.cut_text(text))
    return answers.refusal(answers.INTERNAL, f"the answer could not be sent: {answers.cut_text(why)}")


def answer_line(rid: int, op: str, payload: dict[str, Any]) -> bytes:
    """The answer line (kind ``res``) to request ``rid`` of ``op``, always within the line bound when the
    op's name is: a payload that would outgrow it (a refusal quoting a long value, an answer relayed from
    another daemon) is cut to fit (``fitted_answer``), so the asker always hears an answer (issue 25)."""
    try:
        return encode(Envelope(rid, "res", op, payload))
    except WireError as e:
        return encode(Envelope(rid, "res", op, fitted_answer(payload, e.message)))


def _response(env: Envelope, payload: dict[str, Any]) -> bytes:
    """The answer line to ``env``: its id and op, kind ``res``."""
    return answer_line(env.id, env.op, payload)


__all__ = [
    "TRANSITIONS",
    "Accepted",
    "Answer",
    "Close",
    "End",
    "Resolve",
    "ServeRequest",
    "ServerConnection",
    "answer_line",
    "classify",
    "describe",
]
