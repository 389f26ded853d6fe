"""Issue 19's reproducers: text UTF-8 cannot carry never stops a reader (docs/contract.md, "Text that cannot
be carried"). Each test is one crash the bad-input campaign found, run through the real ``sotd`` as a
subprocess (and a real daemon for ``comm.file``); each failed before the rule was applied.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest

from sotd import _clock
from sotd.formats import cursor
from tests.conftest import SOTD, Comm, Session
from tests.integration.test_daemon import HELLO, Daemon, folder, live, put_agents, raw, read_lines
from tests.integration.test_stop_hook import SID, blocked, stop_json

pytestmark = pytest.mark.integration

POISON = r"\ud800"  # a lone surrogate, as a JSON escape: legal syntax, no UTF-8 for it


def poison_line(field: str, to: str = "alpha") -> bytes:
    fields = {"from": "beta", "to": to, "repo": "r", "msg": "poison", "ts": "2026-01-01T00:00:01Z"}
    body = ",".join(f'"{k}":"{POISON if k == field else v}"' for k, v in fields.items())
    return ("{" + body + "}\n").encode()


def good_line(msg: str, to: str = "alpha") -> bytes:
    obj = {"from": "beta", "to": to, "repo": "r", "msg": msg, "ts": "2026-01-01T00:00:02Z"}
    return (json.dumps(obj, separators=(",", ":")) + "\n").encode()


def append(comm: Comm, handle: str, data: bytes) -> None:
    with open(comm.layout.inbox(handle), "ab") as f:
        f.write(data)


@pytest.fixture
def ab(comm: Comm) -> tuple[Comm, Session, Session]:
    a, b = comm.session("alpha"), comm.session("beta")
    assert a.run("join", "--name", "alpha").code == 0
    assert b.run("join", "--name", "beta").code == 0
    return comm, a, b


def no_traceback(r: Any) -> None:
    assert "Traceback" not in r.err and "Error:" not in r.err, r


# ---------------------------------------------------------------------------- the poison line in an inbox


@pytest.mark.parametrize("field", ["msg", "from", "repo", "ts"])
def test_19_poison_line_does_not_wedge_poll(ab, field: str) -> None:
    """A lone-surrogate escape in any field: poll shows every line (U+FFFD in its place), exits 0 and
    moves its cursor past all three; the next poll shows nothing; unread is 0."""
    comm, a, _ = ab
    append(comm, "alpha", good_line("before") + poison_line(field) + good_line("after"))
    r = a.run("poll", env={"PYTHONIOENCODING": "utf-8"})
    no_traceback(r)
    assert r.code == 0, r
    assert len(r.out_lines) == 3 and "before" in r.out_lines[0] and "after" in r.out_lines[2]
    assert "\ufffd" in r.out_lines[1]
    assert cursor.read(comm.layout, "alpha").startswith("3 ")
    again = a.run("poll")
    assert (again.code, again.out) == (0, "No new messages.\n"), again
    assert a.run("unread").out.strip() == "0"


def test_19_poll_shows_and_advances_on_any_stdout_encoding(ab) -> None:
    """Even a stdout that cannot encode the mail (ASCII) never stops a poll before its cursor is written."""
    comm, a, _ = ab
    append(comm, "alpha", good_line("caf\u00e9 \u2014 ok") + poison_line("msg"))
    r = a.run("poll", env={"PYTHONIOENCODING": "ascii"})
    no_traceback(r)
    assert r.code == 0 and len(r.out_lines) == 2, r
    assert cursor.read(comm.layout, "alpha").startswith("2 ")


def test_19_non_utf8_send_bytes_reach_a_strict_utf8_poll(ab) -> None:
    """Bytes that are not UTF-8 in a send's words: filed as U+FFFD (as the reference's jq writes them), so
    the recipient's poll under ``PYTHONIOENCODING=utf-8`` shows them and moves its cursor."""
    comm, a, b = ab
    p = subprocess.run(
        [SOTD.encode(), b"comm", b"send", b"@alpha", b"caf\xe9 \xff\xfe end"],
        env=b.env,
        cwd=b.root,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 0, p
    data = comm.inbox_bytes("alpha")
    assert '"msg":"caf\ufffd \ufffd\ufffd end"'.encode() in data
    assert b"\\udc" not in data
    r = a.run("poll", env={"PYTHONIOENCODING": "utf-8"})
    no_traceback(r)
    assert r.code == 0 and r.out_lines[0].endswith("caf\ufffd \ufffd\ufffd end"), r
    assert cursor.read(comm.layout, "alpha").startswith("1 ")


# --------------------------------------------------------------------------------------- the registry


def registry_with(comm: Comm, text: bytes) -> None:
    with open(comm.layout.registry, "wb") as f:
        f.write(text)


@pytest.mark.parametrize("where", ["key", "value"])
def test_19_registry_lone_surrogate_does_not_break_list_or_join(comm: Comm, where: str) -> None:
    """A registry key or value holding a lone-surrogate escape: ``list`` and ``join`` exit 0 (join is not
    reported failed after writing); what sotd writes back holds U+FFFD, never the escape."""
    stamp = _clock.stamp()
    key = f"x{POISON}" if where == "key" else "other"
    summary = POISON if where == "value" else "fine"
    registry_with(
        comm,
        (
            '{"protocol_version": 1, "agents": {"' + key + '": {"host": "testhost", "last_seen": "'
            f'{stamp}", "root": "/nowhere", "summary": "{summary}"' + "}}}\n"
        ).encode(),
    )
    a = comm.session("alpha")
    r = a.run("list", env={"PYTHONIOENCODING": "utf-8"})
    no_traceback(r)
    assert r.code == 0, r
    j = a.run("join", "--name", "alpha", env={"PYTHONIOENCODING": "utf-8"})
    no_traceback(j)
    assert j.code == 0, j
    with open(comm.layout.registry, "rb") as f:
        data = f.read()
    assert b"\\ud800" not in data and "\ufffd".encode() in data
    assert "alpha" in json.loads(data)["agents"]
    r = a.run("list", env={"PYTHONIOENCODING": "utf-8"})
    assert r.code == 0 and "alpha" in r.out, r


# --------------------------------------------------------------------------------------------- the hooks


def test_19_stop_hook_stores_carried_text_and_list_still_works(ab) -> None:
    """``last_assistant_message`` holding a lone surrogate: the SITREP summary is stored with U+FFFD."""
    comm, a, _ = ab
    doc = json.loads(stop_json(a))
    body = json.dumps(doc)[:-1] + ', "last_assistant_message": "SITREP: shipped ' + POISON + '"}'
    r = a.run("status-idle", stdin=body)
    no_traceback(r)
    assert r.code == 0, r
    with open(comm.layout.registry, "rb") as f:
        data = f.read()
    assert b"\\ud800" not in data
    assert json.loads(data)["agents"]["alpha"]["summary"] == "shipped \ufffd"
    assert a.run("list", env={"PYTHONIOENCODING": "utf-8"}).code == 0


def test_19_permission_hook_stores_carried_command(ab) -> None:
    comm, a, _ = ab
    body = (
        '{"session_id": "s", "hook_event_name": "PermissionRequest", "tool_name": "Bash", '
        '"tool_input": {"command": "rm ' + POISON + '"}}'
    )
    r = a.run("hook", "permission", stdin=body, wrapper=False)
    no_traceback(r)
    with open(comm.layout.registry, "rb") as f:
        data = f.read()
    assert b"\\ud800" not in data
    assert "permission for Bash: rm \ufffd" in data.decode()
    assert a.run("list", env={"PYTHONIOENCODING": "utf-8"}).code == 0


def test_19_deeply_nested_hook_json_still_runs_the_mail_gate(ab) -> None:
    """About 1,000 levels of valid JSON on the Stop hook's stdin: the mail gate still holds the turn."""
    _, a, b = ab
    assert b.run("send", "@alpha", "hello").code == 0
    deep = '{"session_id": "' + SID + '", "x": ' + "[" * 1000 + "]" * 1000 + "}"
    r = a.run("status-idle", stdin=deep)
    assert r.code == 0 and blocked(r), r
    assert "deeper than 64 levels" in r.err  # the reason is logged


def test_19_lone_surrogate_session_id_still_runs_the_mail_gate(ab) -> None:
    _, a, b = ab
    assert b.run("send", "@alpha", "hello").code == 0
    body = '{"session_id": "' + POISON + '", "hook_event_name": "Stop", "stop_hook_active": false}'
    r = a.run("status-idle", stdin=body)
    no_traceback(r)
    assert r.code == 0 and blocked(r), r


# -------------------------------------------------------------------------------------------- the daemon


def test_19_daemon_comm_file_carries_a_lone_surrogate(tmp_path: Any, daemons: list[Daemon]) -> None:
    """``comm.file`` whose text holds ``\\ud800``: filed as U+FFFD (never the escape); poll shows it."""
    work = str(tmp_path)
    lay = folder(work, "comm")
    put_agents(lay, alice=live())
    d = Daemon(work, "a", lay.home, "testhost")
    daemons.append(d)
    s = raw(d.sock)
    try:
        s.sendall(
            (json.dumps({"v": 1, "id": 1, "kind": "req", "op": "hello", "payload": HELLO}) + "\n").encode()
            + b'{"v":1,"id":2,"kind":"req","op":"comm.file","payload":{"from":"x","to":"alice","text":"a'
            + POISON.encode()
            + b'b"}}\n'
        )
        answers = read_lines(s, 2)
    finally:
        s.close()
    assert answers[1]["payload"] == {"ok": True}, answers
    with open(lay.inbox("alice"), "rb") as f:
        data = f.read()
    assert b"\\ud800" not in data
    assert '"msg":"a\ufffdb"'.encode() in data
    assert os.path.getsize(lay.inbox("alice")) == len(data)


# ------------------------------------------------------------------------- the Stop hook's last resort


@pytest.fixture
def box(tmp_path: Any) -> Any:
    from tests.fuzz.kit import Box

    b = Box(str(tmp_path))
    b.put_inbox("alpha", good_line("waiting"))
    return b


def _boom(*_a: object, **_k: object) -> None:
    raise RuntimeError("an injected fault")


def test_19_a_stop_hook_that_fails_still_runs_the_mail_gate(
    box: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Injected: the Stop hook raises before its mail gate (in process, so the fault can be placed). It logs
    the fault and still holds the turn for the waiting mail."""
    from sotd.cli.comm.hooks import stop as stop_hook

    monkeypatch.setattr(stop_hook, "_registry_row", _boom)
    r = box.cli("alpha", "hook", "stop", stdin=b"{}", SOT_COMM_NUDGES="off")
    assert r.code == 0 and r.tb is None, r
    assert b"sot-comm hook stop: RuntimeError: an injected fault" in r.err
    assert json.loads(r.out)["decision"] == "block", r


def test_19_a_stop_hook_that_cannot_check_mail_says_why(box: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from sotd.cli.comm.hooks import stop as stop_hook

    monkeypatch.setattr(stop_hook, "_registry_row", _boom)
    monkeypatch.setattr(stop_hook, "mail_gate", _boom)
    r = box.cli("alpha", "hook", "stop", stdin=b"{}", SOT_COMM_NUDGES="off")
    assert r.code == 0 and r.tb is None, r
    assert json.loads(r.out) == {
        "systemMessage": "sot-comm: the Stop hook could not check this session's mail (RuntimeError: an "
        "injected fault); run comm-poll.sh to check by hand"
    }
