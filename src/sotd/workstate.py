"""Work-state facts and their reduction (behaviour 4.3, 1.9, decision D3). Pure: no I/O, no clock.

A registry entry carries facts (``floor``/``floor_prompt``, ``question``/``question_prompt``, ``waiting``,
``done``, ``note``, and [0.7.0] ``dialog``/``dialog_prompt``); an event or declaration changes the facts,
then the reduction derives ``state`` and ``summary``, then ``status_at = last_seen = now``. The caller runs
``validate`` first and ``apply`` inside one locked read-decide-write of the registry.

What would break it: touching a field this writer does not own (a join writes the whole entry; every other
writer only its own fields), or reducing in another priority order than 4.3's.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

EVENTS = ("prompt", "stop", "interrupted")
DECLARATIONS = ("working", "idle", "blocked", "done", "waiting")
VERBS = EVENTS + DECLARATIONS
# Set by an agent's permission hook (D3), never typed as a comm-status verb.
HOOK_VERBS = ("dialog",)
LEGACY_KEYS = ("turn_origin", "sticky", "sticky_at")
STATES = ("blocked", "working", "waiting", "done", "idle")

_MACHINE_PREFIXES = (
    "[SYSTEM NOTIFICATION",
    "[relay] from",
    "[sot-comm] ",
    "Another Claude session sent a message",
    "Stop hook feedback:",
)
_MACHINE_MARKERS = ("<task-notification>", "<teammate-message", "<agent-message", "<cross-session-message")


def has_text(value: object) -> bool:
    """Text that counts: a string that is not empty and not newlines only."""
    return isinstance(value, str) and value.strip("\n") != ""


def usage(prog: str = "comm-status.sh") -> str:
    return f'usage: {prog} <{"|".join(VERBS)}> ["text"]'


def validate(
    verb: str | None, text: str | None, entry: dict[str, Any] | None, prog: str = "comm-status.sh"
) -> str | None:
    """The exact refusal (exit 2, nothing written) for this command line, or None when it may proceed.

    ``verb`` None or empty: usage. Unknown verb: invalid verb. ``blocked``/``waiting`` without text (empty
    or newline-only counts as none) when the entry's fact does not already hold text: needs its text.
    """
    if not verb:
        return usage(prog)
    if verb not in VERBS:
        return f"{prog}: invalid verb '{verb}' (want {'|'.join(VERBS)})"
    if verb in ("blocked", "waiting") and not has_text(text):
        fact = "question" if verb == "blocked" else "waiting"
        if not has_text((entry or {}).get(fact)):
            return f"{prog}: {verb} needs its text -- stamp discarded"
    return None


def _classify_bracket(prompt: str) -> bool:
    """``[x:y] …``: a bracketed ``x:y`` tag (both sides non-empty, no spaces) followed by a space."""
    if not prompt.startswith("["):
        return False
    close = prompt.find("]")
    if close < 0 or prompt[close + 1 : close + 2] != " ":
        return False
    tag = prompt[1:close]
    left, sep, right = tag.partition(":")
    if not sep or not left or not right:
        return False
    return not any(c.isspace() for c in tag)


def classify_origin(prompt_text: str) -> str:
    """``"machine"`` for a prompt a machine typed (UserPromptSubmit rule of 4.3), else ``"user"``."""
    if prompt_text.startswith(_MACHINE_PREFIXES):
        return "machine"
    if _classify_bracket(prompt_text):
        return "machine"
    if any(m in prompt_text for m in _MACHINE_MARKERS):
        return "machine"
    return "user"


def reduce(entry: dict[str, Any]) -> tuple[str, str]:
    """(state, summary) by priority: dialog, question without floor, floor, waiting, done, idle."""
    note = entry.get("note")
    note_s = note if isinstance(note, str) else ""
    if has_text(entry.get("dialog")):
        return "blocked", str(entry["dialog"])
    floor = entry.get("floor")
    if entry.get("question") and not floor:
        return "blocked", str(entry["question"])
    if floor:
        return "working", note_s
    if entry.get("waiting"):
        return "waiting", str(entry["waiting"])
    if entry.get("done") is True:
        return "done", note_s
    return "idle", note_s


def _drop(entry: dict[str, Any], *keys: str) -> None:
    for k in keys:
        entry.pop(k, None)


def _set_note(entry: dict[str, Any], text: str | None) -> None:
    if text is None:
        return
    if text == "":
        entry.pop("note", None)
    else:
        entry["note"] = text


def apply(
    entry: dict[str, Any],
    verb: str,
    *,
    text: str | None,
    origin: str,
    prompt_id: str,
    now_stamp: str,
) -> dict[str, Any]:
    """A new entry: ``verb`` applied to ``entry``'s facts, reduced, and stamped ``status_at = last_seen``.

    ``text`` None means "omitted" (keeps the prior note or fact text); ``""`` clears the note. ``origin``
    is ``user`` or ``machine`` (for ``prompt``); ``prompt_id`` is the turn id. ``interrupted`` with an
    empty id is a no-op (the caller writes nothing; an unchanged copy is returned). Unknown verbs raise
    ``ValueError`` (``validate`` refuses them first).
    """
    out = dict(entry)
    if verb == "interrupted" and not prompt_id:
        return out
    _drop(out, *LEGACY_KEYS)
    given = has_text(text)
    if verb == "prompt":
        out["floor"] = origin
        out["floor_prompt"] = prompt_id
        _drop(out, "dialog", "dialog_prompt")
        if origin == "user":
            _drop(out, "question", "question_prompt", "done")
    elif verb == "stop":
        if out.get("floor") == "user" and not out.get("question") and not out.get("waiting"):
            out["done"] = True
        _drop(out, "floor", "floor_prompt", "stop_at", "dialog", "dialog_prompt")
    elif verb == "interrupted":
        if out.get("floor_prompt") == prompt_id:
            _drop(out, "floor", "floor_prompt")
        if out.get("question_prompt") == prompt_id:
            _drop(out, "question", "question_prompt")
        if out.get("dialog_prompt") == prompt_id:
            _drop(out, "dialog", "dialog_prompt")
    elif verb == "blocked":
        if given:
            out["question"] = text
            out.pop("note", None)
        out["question_prompt"] = prompt_id
    elif verb == "waiting":
        if given:
            out["waiting"] = text
            out.pop("note", None)
        _drop(out, "question", "question_prompt")
    elif verb == "done":
        _set_note(out, text)
        out["done"] = True
        _drop(out, "question", "question_prompt", "waiting")
    elif verb in ("working", "idle"):
        _set_note(out, text)
        _drop(out, "question", "question_prompt", "waiting", "done")
    elif verb == "dialog":
        if given:
            out["dialog"] = text
            out["dialog_prompt"] = prompt_id
        else:
            _drop(out, "dialog", "dialog_prompt")
    else:
        raise ValueError(f"not a work-state verb: {verb!r}")
    state, summary = reduce(out)
    out["state"] = state
    out["summary"] = summary
    out["status_at"] = now_stamp
    out["last_seen"] = now_stamp
    return out
