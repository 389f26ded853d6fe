"""Answers: ``{ok: true}``, a refusal ``{error, code}``, and every code the daemon answers with.

Spec: behaviour 2.1 (a refused hello), 2.3 (``comm.file``'s codes ``not_here | no_live_session |
bad_handle | file_failed``, ``agent.join``'s, ``agent.send``'s, ``unknown op``), D4, D5. Guarantee: each
code is written once, here; a refusal always carries both ``error`` (the spec's sentence) and ``code``.
Another daemon's answer (or any long value) that one of ours quotes is cut to ``QUOTE_MAX`` characters
(``cut_text``, ``quoted_answer``), so quoting never outgrows the line bound (issue 25).
What would break it: a caller spelling a code by hand (a typo is then a new code no client knows).

Pure and a leaf of ``sotd.wire`` (stdlib only; ``json`` is imported by the one function that quotes).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# the hello (behaviour 2.1, 2.2)
PROTOCOL_MISMATCH = "protocol_mismatch"
BAD_HELLO = "bad_hello"
HELLO_REQUIRED = "hello_required"
FORBIDDEN = "forbidden"
# any op
UNKNOWN_OP = "unknown_op"
INTERNAL = "internal"
BAD_REQUEST = "bad_request"
# comm.file (behaviour 2.3)
BAD_HANDLE = "bad_handle"
NOT_HERE = "not_here"
NO_LIVE_SESSION = "no_live_session"
FILE_FAILED = "file_failed"
# agent.join, agent.send, workspace.* (behaviour 2.3, D5)
HELD_BY_ROW = "held_by_row"
ROOT_TAKEN = "root_taken"
UNKNOWN_WORKSPACE = "unknown_workspace"
PERSIST_FAILED = "persist_failed"
MAIL_REQUIRES_COMM_FILE = "mail_requires_comm_file"
START_FAILED = "start_failed"

CODES = (
    PROTOCOL_MISMATCH,
    BAD_HELLO,
    HELLO_REQUIRED,
    FORBIDDEN,
    UNKNOWN_OP,
    INTERNAL,
    BAD_REQUEST,
    BAD_HANDLE,
    NOT_HERE,
    NO_LIVE_SESSION,
    FILE_FAILED,
    HELD_BY_ROW,
    ROOT_TAKEN,
    UNKNOWN_WORKSPACE,
    PERSIST_FAILED,
    MAIL_REQUIRES_COMM_FILE,
    START_FAILED,
)

OK: dict[str, Any] = {"ok": True}  # never mutated: a caller that adds keys copies it first


def ok_with(fields: dict[str, Any]) -> dict[str, Any]:
    """An ok answer that carries more: ``ok: true`` first, then ``fields`` in their order."""
    return {"ok": True, **fields}


def refusal(code: str, text: str) -> dict[str, Any]:
    """A refusal answer: the spec's sentence and its code."""
    return {"error": text, "code": code}


# Reading an answer (a client, the hub reading a linked box's answer). An answer is ok only when its
# ``ok`` is ``true``; it is a refusal only when its ``error`` is a non-empty string; anything else is
# neither, and the reader says so in its own words.


def is_ok(answer: dict[str, Any]) -> bool:
    """The answer says ``ok: true`` (no other value counts)."""
    return answer.get("ok") is True


def refusal_text(answer: dict[str, Any]) -> str | None:
    """A refusal's sentence (``error``, a non-empty string), else None."""
    error = answer.get("error")
    return error if isinstance(error, str) and error else None


HINT = "hint"  # ours, beside a refusal's ``error``: the next thing to look at (a 0.6.6 client ignores it)


def with_hint(answer: dict[str, Any], hint: str) -> dict[str, Any]:
    """``answer`` (a refusal) carrying ``hint``; unchanged when ``hint`` is empty."""
    if hint:
        answer[HINT] = hint
    return answer


def hint_of(answer: dict[str, Any]) -> str | None:
    """A refusal's ``hint`` (ours; a non-empty string), else None: printed on the send's hint line."""
    hint = answer.get(HINT)
    return hint if isinstance(hint, str) and hint else None


def code_of(answer: dict[str, Any]) -> object:
    """A refusal's ``code`` as sent (None when there is none)."""
    return answer.get("code")


def quoted(value: object) -> str:
    """A value in double quotes with JSON escaping (``""`` for empty or missing), as refusals quote it."""
    import json

    if value is None:
        value = ""
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False)


QUOTE_MAX = 4096  # characters of another daemon's answer (or any long text) one of our answers quotes


def cut_text(text: str, limit: int = QUOTE_MAX) -> str:
    """``text`` when it has at most ``limit`` characters, else its first ``limit`` and how long it was: a
    quoted answer never grows an answer of ours past the line bound (issue 25). Pure."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters in all)"


def quoted_answer(answer: object) -> str:
    """Another daemon's odd answer as one of our refusals quotes it: JSON, cut to ``QUOTE_MAX``."""
    import json

    return cut_text(json.dumps(answer, ensure_ascii=False))


def unknown_op(op: str) -> dict[str, Any]:
    """What a daemon answers for an op it does not serve (behaviour 2.3: an older daemon's answer)."""
    return refusal(UNKNOWN_OP, f"unknown op: {op}")


def internal(error: BaseException) -> dict[str, Any]:
    """What a daemon answers when serving an op failed inside it (the failure is logged beside it)."""
    return refusal(INTERNAL, f"internal error: {error}")


__all__ = [
    "CODES",
    "OK",
    "QUOTE_MAX",
    "code_of",
    "cut_text",
    "internal",
    "is_ok",
    "ok_with",
    "quoted",
    "quoted_answer",
    "refusal",
    "refusal_text",
    "unknown_op",
]
