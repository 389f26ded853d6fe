"""The pure decisions behind the SessionStart hook, the private self file, the nudge switch and the settings
merge (issue 11 part 2 items 1, 2, 4, 5, 7), as tables."""

from __future__ import annotations

import copy
import os

import pytest

from sotd import ancestry, rowargv
from sotd.cli.comm import sessionstart
from sotd.cli.comm.hooks import shared
from sotd.cli.comm.hooks import stop as stop_hook
from sotd.cli.install import settings as install
from sotd.cli.install import skill

pytestmark = pytest.mark.unit

BIN = "/home/u/.sot-comm/bin"


@pytest.mark.parametrize(
    ("sid", "leaf"),
    [
        ("5c2f1e0a-7d3b-4f7e-9a51-0c1d2e3f4a5b", "session-5c2f1e0a-7d3b-4f7e-9a51-0c1d2e3f4a5b.txt"),
        ("a/b", "session-a_b.txt"),
        ("x__y___z", "session-x_y_z.txt"),  # no "__": such a leaf would name a row
        ("é", "session-_.txt"),
        ("a" * 300, "session-" + "a" * 200 + ".txt"),
    ],
)
def test_session_leaf(sid: str, leaf: str) -> None:
    got = shared.session_leaf(sid)
    assert got == leaf
    assert ancestry.row_named({"SOT_COMM_SELF_FILE": "/c/self/" + got}) is None


@pytest.mark.parametrize(
    ("env", "sid", "slot"),
    [
        ({}, "s1", "/c/self/session-s1.txt"),
        ({"SOT_WORKSPACE_ID": "nopane"}, "s1", "/c/self/session-s1.txt"),
        ({"SOT_WORKSPACE_ID": "w7"}, "s1", None),  # a row: its own slot
        ({"SOT_COMM_SELF_FILE": "/mine.txt"}, "s1", None),  # a launcher pinned one
        ({}, "", None),  # no session id: nothing to name it by
        ({}, "..", None),
    ],
)
def test_private_slot(env: dict[str, str], sid: str, slot: str | None) -> None:
    assert shared.private_slot(env, sid, "/c/self") == slot


@pytest.mark.parametrize(
    ("slot", "path", "lines"),
    [
        ("/c/self/session-s.txt", "/usr/bin", ["export SOT_COMM_SELF_FILE='/c/self/session-s.txt'", f"export PATH='{BIN}':\"$PATH\""]),
        ("/c/it's.txt", f"{BIN}:/usr/bin", ["export SOT_COMM_SELF_FILE='/c/it'\\''s.txt'"]),
        (None, f"/usr/bin:{BIN}", []),
    ],
)  # fmt: skip
def test_env_file_lines(slot: str | None, path: str, lines: list[str]) -> None:
    assert sessionstart.env_file_lines(slot, BIN, path) == lines


def test_start_text_is_a_few_lines_naming_handle_commands_markers_and_skill() -> None:
    text = sessionstart.start_text("r1", cmd_dir="", skill=True, where=" (proj on box)")
    lines = text.splitlines()
    assert (
        lines[0]
        == "sot-comm: this session is @r1 (proj on box) — other agent sessions reach it by that handle."
    )
    assert len(lines) == 5
    assert "comm-poll.sh" in lines[1] and 'comm-send.sh @handle "text"' in lines[1]
    assert "SITREP-QUESTION:" in lines[3]
    assert "the sot-session-start skill" in lines[4]
    no_skill = sessionstart.start_text("r1", cmd_dir=BIN, skill=False)
    assert "skill" not in no_skill and f"{BIN}/comm-poll.sh" in no_skill
    failed = sessionstart.start_text(None, cmd_dir="", skill=False, problem=["why 1", "why 2"])
    assert failed.splitlines() == [
        "sot-comm: this session could not join at its start:",
        "  why 1",
        "  why 2",
        "Mail to it is not read until it joins; join by hand with comm-join.sh --name NAME.",
    ]


@pytest.mark.parametrize(
    ("agent", "tools", "last"),
    [
        (None, True, None),
        ("claude", True, None),
        ("codex", True, "- Codex runs a command its rules do not read as plain words inside its sandbox, where the "
         "mail scripts have no identity: use the sotd MCP tools (send, poll), or keep the scripts in their plain "
         "form, the text in single quotes (comm-send.sh @handle 'text', comm-poll.sh), with no pipe, "
         "redirection, 2>&1 or escaped quotes."),
        ("codex", False, "- Codex runs a command its rules do not read as plain words inside its sandbox, where "
         "the mail scripts have no identity: keep the scripts in their plain form, the text in single quotes "
         "(comm-send.sh @handle 'text', comm-poll.sh), with no pipe, redirection, 2>&1 or escaped quotes."),
    ],
)  # fmt: skip
def test_a_codex_session_is_told_what_its_sandbox_refuses_and_what_to_use(
    agent: str | None, tools: bool, last: str | None
) -> None:
    lines = sessionstart.start_text("r1", cmd_dir="", skill=False, tools=tools, agent=agent).splitlines()
    assert len(lines) == 4 + tools + (last is not None)
    if last is not None:
        assert lines[-1] == last


@pytest.mark.parametrize(
    ("env_switch", "setting", "in_row", "active", "on"),
    [
        ("", "rows", True, False, True),  # a row: on by default
        ("", "rows", False, False, False),  # outside a row: off by default
        ("", "on", False, False, True),  # ... unless the config file says on
        ("", "on", True, True, False),  # never inside a stop_hook_active continuation
        ("", "rows", True, True, False),
        ("off", "on", True, False, False),  # SOT_COMM_NUDGES=off stands them down
        ("on", "rows", False, False, False),  # the environment cannot switch them on outside a row
        ("", "off", True, False, False),  # nudges = off: nowhere
    ],
)
def test_nudges_apply(env_switch: str, setting: str, in_row: bool, active: bool, on: bool) -> None:
    assert (
        stop_hook.nudges_apply(env_switch=env_switch, setting=setting, in_row=in_row, stop_hook_active=active)
        is on
    )


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (None, "rows"),
        ("", "rows"),
        ("nudges = on\n", "on"),
        ("  nudges=OFF  # everywhere\n", "off"),
        ("# nudges = on\n", "rows"),
        ("nudges = sometimes\n", "rows"),
        ("nudges = on\nnudges = off\n", "off"),  # the last line wins
        ("other = on\n", "rows"),
    ],
)
def test_hook_setting(tmp_path: object, text: str | None, value: str) -> None:
    path = os.path.join(str(tmp_path), "hooks.conf")
    if text is not None:
        with open(path, "w") as f:
            f.write(text)
    assert stop_hook.hook_setting(path, "nudges", stop_hook.NUDGE_SETTINGS) == value


def test_allow_rules_cover_the_mail_wrappers_in_every_form_and_nothing_else() -> None:
    rules = install.allow_rules(BIN, "/home/u")
    assert rules[:3] == [
        "Bash(comm-send.sh:*)",
        f"Bash({BIN}/comm-send.sh:*)",
        "Bash(~/.sot-comm/bin/comm-send.sh:*)",
    ]
    assert len(rules) == 3 * len(install.ALLOWED)
    assert not [r for r in rules if any(w in r for w in ("spawn", "despawn", "relay", "hook"))]
    assert all(r.startswith("Bash(") and r.endswith(":*)") for r in rules)
    assert "Bash(~/" not in " ".join(install.allow_rules("/srv/comm/bin", "/home/u"))


def test_merge_then_remove_gives_back_the_document() -> None:
    user = {
        "permissions": {"allow": ["Bash(ls:*)"], "deny": ["Bash(rm:*)"]},
        "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "/mine.sh"}]}]},
        "model": "x",
    }
    doc = copy.deepcopy(user)
    done = install.merge_claude_settings(doc, BIN, allow=install.allow_rules(BIN))
    assert install.changed(done)
    assert doc["hooks"]["SessionStart"] == [
        {"hooks": [{"type": "command", "command": f"'{BIN}/comm-session-start.sh'"}]}
    ]
    again = copy.deepcopy(doc)
    assert not install.changed(install.merge_claude_settings(again, BIN, allow=install.allow_rules(BIN)))
    assert again == doc  # idempotent
    assert install.remove_from_settings(doc, done)
    assert doc == user


def test_a_merge_into_an_empty_document_is_removed_whole() -> None:
    doc: dict[str, object] = {}
    done = install.merge_claude_settings(doc, BIN, allow=install.allow_rules(BIN))
    assert install.remove_from_settings(doc, done)
    assert doc == {}


def test_remove_keeps_what_others_added_since() -> None:
    doc: dict[str, object] = {}
    done = install.merge_claude_settings(doc, BIN, allow=["Bash(comm-poll.sh:*)"])
    doc["permissions"]["allow"].append("Bash(make:*)")  # type: ignore[index]
    doc["hooks"]["Stop"][0]["hooks"].append({"type": "command", "command": "/mine.sh"})  # type: ignore[index]
    install.remove_from_settings(doc, done)
    assert doc == {
        "permissions": {"allow": ["Bash(make:*)"]},
        "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "/mine.sh"}]}]},
    }


@pytest.mark.parametrize(
    ("argv", "has_file", "out"),
    [
        (["claude"], True, ["claude", "--settings", f"{BIN}/claude-settings.json"]),
        (["/opt/x/node_modules/.bin/claude", "--model", "m"], True, ["/opt/x/node_modules/.bin/claude", "--model", "m", "--settings", f"{BIN}/claude-settings.json"]),
        (["claude", "--settings", "/mine.json"], True, ["claude", "--settings", "/mine.json"]),
        (["codex"], True, ["codex", "-c", f'shell_environment_policy.set.PATH="{BIN}:{os.defpath}"',
                           rowargv.CODEX_FIRST_PROMPT]),
        (["codex", "--model", "m"], True, ["codex", "--model", "m"]),
        (["python3", "-m", "sotd.demo.scripted_agent"], True, ["python3", "-m", "sotd.demo.scripted_agent"]),
        (["claude"], False, ["claude"]),
    ],
)  # fmt: skip
def test_row_argv(monkeypatch: pytest.MonkeyPatch, argv: list[str], has_file: bool, out: list[str]) -> None:
    monkeypatch.setattr(install.os.path, "isfile", lambda p: has_file and p == f"{BIN}/claude-settings.json")
    assert rowargv.row_argv(argv, BIN) == out


def test_the_skill_covers_join_send_poll_leave_recovery_and_the_conventions() -> None:
    text = skill.skill_text(BIN)
    head, _, body = text.partition("\n---\n")
    assert head.startswith("---\nname: sot-session-start\ndescription: ")
    assert skill.SKILL_MARK in body
    for needed in (
        "comm-join.sh --name",
        'comm-send.sh @name "text"',
        "comm-poll.sh",
        "comm-leave.sh",
        "## Recovery recipe: when the handle is lost",
        "Do **not** run a bare `comm-join.sh`",
        "**Domain expertise.**",
        "`[design]`, `[question]`, `[breaks]`",
        "Do not declare `[consensus]` in a thread until someone",
        "SITREP-WAITING:",
        BIN,
    ):
        assert needed in body, needed
