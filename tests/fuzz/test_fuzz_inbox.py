"""Fuzz: inbox lines, cursors and a send's argv, against the contract (issue 19 part 4).

Oracle: no traceback, exit codes from the documented set, stdout UTF-8 however the lines were made; a poll
shows every line past the cursor that is a JSON object (no acknowledged line lost), leaves its cursor past
every whole line it read (a second poll shows nothing, ``unread`` is 0), and a send that said ``filed``
appended exactly the line the 0.6.6 reference writes for its argv bytes.
"""

from __future__ import annotations

import os

from hypothesis import given
from hypothesis import strategies as st

from sotd.formats import cursor, inbox, showline
from sotd.text import inert
from tests.fuzz.conftest import Cases, fuzz
from tests.fuzz.kit import (
    VERB_CODES,
    Box,
    as_json,
    holds_to_contract,
    json_value,
    nasty_text,
    run_proc,
)
from tests.unit.test_text import rules_decode

field = st.one_of(nasty_text, json_value)


@st.composite
def inbox_line(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["record", "record", "record", "json", "bytes", "blank"]))
    if kind == "record":
        obj = {
            k: draw(field)
            for k in draw(st.lists(st.sampled_from(["from", "to", "repo", "msg", "ts", "text"]), unique=True))
        }
        if draw(st.booleans()):
            obj["to"] = draw(st.sampled_from(["alpha", "", "beta"]))
        return as_json(obj, ascii_escapes=draw(st.booleans()))
    if kind == "json":
        return as_json(draw(json_value))
    if kind == "bytes":
        return draw(st.binary(max_size=30)).replace(b"\n", b"")
    return b""


@st.composite
def inbox_bytes(draw: st.DrawFn) -> bytes:
    lines = draw(st.lists(inbox_line(), max_size=6))
    data = b"".join(x + b"\n" for x in lines)
    if draw(st.booleans()):
        data += draw(st.binary(max_size=12)).replace(b"\n", b"")  # a torn tail a dead writer left
    return data


cursor_text = st.one_of(
    st.none(),
    st.text(max_size=20),
    st.builds(lambda n, s: f"{n} {s}", st.integers(-2, 9), st.sampled_from(["", "1-1", "0-0", "x"])),
)


def poll_holds_to_contract(box: Box, data: bytes, text: str | None, hint: bytes | None = None) -> None:
    box.reset()
    box.put_inbox("alpha", data)
    if text is not None:
        with open(box.layout.cursor("alpha"), "wb") as f:
            f.write(text.encode("utf-8", "surrogateescape"))
    if hint is not None:  # any bytes as the private read hint: trusted only if it checks out
        from sotd.formats import readhint

        ino = str(os.stat(box.layout.inbox("alpha")).st_ino).encode()
        own = str(readhint._text_sum(cursor.read(box.layout, "alpha"))).encode()
        with open(box.layout.read_hint("alpha"), "wb") as f:
            f.write(hint.replace(b"<ino>", ino).replace(b"<sum>", own))
    lines = inbox.complete_lines(data)
    start = cursor.offset(cursor.read(box.layout, "alpha"), lines, "alpha", lambda _w: None)
    r = box.cli("alpha", "poll")
    holds_to_contract(r, VERB_CODES)
    assert r.code == 0, r
    # every line past the cursor that poll's display shows, once (the display itself: showline.show_line)
    shown = [inert(t, lines=True) for t in map(showline.show_line, lines[start:]) if t is not None]
    assert r.text == ("".join(x + "\n" for x in shown) if shown else "No new messages.\n"), r
    if start < len(lines):  # past every whole line; an empty batch writes no cursor (issue 28 item 3)
        assert cursor.read(box.layout, "alpha").startswith(f"{len(lines)} "), r
    again = box.cli("alpha", "poll")
    holds_to_contract(again, VERB_CODES)
    assert again.text in ("No new messages.\n", "No messages.\n"), again
    unread = box.cli("alpha", "unread")
    holds_to_contract(unread, VERB_CODES)
    assert unread.text.strip() == "0", unread


@fuzz(400)
@given(data=inbox_bytes())
def test_fuzz_any_inbox_lines_poll_shows_all_and_advances(box: Box, cases: Cases, data: bytes) -> None:
    cases.one()
    poll_holds_to_contract(box, data, None)


hint_bytes = st.one_of(
    st.none(),
    st.binary(max_size=60),
    st.builds(
        lambda a, b, c, d, e: f"sotd-offset-hint 1 {a} {b} {c} {d} {e}\n".encode(),
        st.integers(-1, 9),
        st.integers(-1, 400),
        st.integers(-1, 400),
        st.one_of(st.just("<ino>"), st.integers(0, 2**32)),  # the inbox's own inode, or another
        st.one_of(st.just("<sum>"), st.integers(0, 2**32)),  # the cursor text's own sum, or another
    ),
)


@fuzz(250)
@given(data=inbox_bytes(), text=cursor_text, hint=hint_bytes)
def test_fuzz_any_cursor_over_any_inbox(
    box: Box, cases: Cases, data: bytes, text: str | None, hint: bytes | None
) -> None:
    cases.one()
    poll_holds_to_contract(box, data, text, hint)


word = st.binary(min_size=1, max_size=10).filter(lambda b: b"\0" not in b and not b.startswith(b"-"))


@fuzz(300)
@given(words=st.lists(word, min_size=1, max_size=3))
def test_fuzz_argv_bytes_in_process_file_the_reference_line(
    box: Box, cases: Cases, words: list[bytes]
) -> None:
    """A send's words as Python decodes argv: filed exactly once, the msg as the reference's jq makes it."""
    cases.one()
    box.reset()
    r = box.cli("alpha", "send", "@beta", *(os.fsdecode(w) for w in words))
    holds_to_contract(r, VERB_CODES)
    assert r.code == 0 and r.text == "  filed -> @beta\n", r
    lines = inbox.complete_lines(box.inbox("beta"))
    assert len(lines) == 1
    obj = inbox.decode_line(lines[0])
    assert obj is not None and obj["msg"] == rules_decode(b" ".join(words))


@fuzz(40)
@given(words=st.lists(word, min_size=1, max_size=3), verb=st.sampled_from([b"send", b"poll"]))
def test_fuzz_real_argv_bytes_send_then_strict_poll(
    box: Box, cases: Cases, words: list[bytes], verb: bytes
) -> None:
    """The real process: byte argv to ``sotd comm send``, then the recipient's poll under
    ``PYTHONIOENCODING=utf-8`` shows the line and moves its cursor (the issue's stuck-cursor case)."""
    cases.one()
    box.reset()
    r = run_proc([b"comm", b"send", b"@beta", *words], box.env("alpha"), box.root("alpha"))
    holds_to_contract(r, {0})
    lines = inbox.complete_lines(box.inbox("beta"))
    obj = inbox.decode_line(lines[0]) if len(lines) == 1 else None
    assert obj is not None and obj["msg"] == rules_decode(b" ".join(words)), lines
    p = run_proc([b"comm", b"poll"], box.env("beta"), box.root("beta"))
    holds_to_contract(p, {0})
    assert p.text == inert(showline.show_line(lines[0]) or "", lines=True) + "\n", p
    assert cursor.read(box.layout, "beta").startswith("1 ")
    if verb == b"poll":
        q = run_proc([b"comm", b"poll"], box.env("beta"), box.root("beta"))
        assert q.text == "No new messages.\n", q


@fuzz(300)
@given(
    verb=st.sampled_from(["join", "send", "poll", "unread", "list", "status", "context", "leave"]),
    args=st.lists(
        st.one_of(nasty_text, st.sampled_from(["--name", "@beta", "--broadcast", "--repin", "-x"])),
        max_size=4,
    ),
)
def test_fuzz_any_argv_text_to_any_verb(box: Box, cases: Cases, verb: str, args: list[str]) -> None:
    """Any words to any everyday verb: an answer from the documented set, never a traceback."""
    cases.one()
    box.reset()
    r = box.cli("alpha", verb, *args)
    holds_to_contract(r, VERB_CODES)
