"""The verbs' plans (issue 16 point 3): the decision part of send, spawn and despawn as pure functions,
each a table of inputs and the exact error (class, code, exit status, sentence, hint) or result.

The verbs' printed bytes are proved by tests/transcripts, tests/newcomer/test_spawn_hints.py and
tests/integration/test_rows.py; these tables pin each decision on its own.
"""

from __future__ import annotations

import pytest

from sotd import cmdtable, errors
from sotd.cli.comm import context, despawn, hints, join, leave, poll, relay, send, spawn, status, unread

pytestmark = pytest.mark.unit

OPT = hints.options("spawn")


def _shown(e: errors.SotdError | None) -> tuple[str, int, str, str | None] | None:
    return None if e is None else (e.code, e.exit_status, e.message, e.hint)


def _raised(fn, *args, **kw):  # type: ignore[no-untyped-def]
    try:
        return fn(*args, **kw)
    except errors.SotdError as e:
        return _shown(e)


@pytest.mark.parametrize(
    ("broadcast", "target", "text", "want"),
    [
        (False, "b", "hi", None),
        (True, None, "hi", None),
        (False, "b", "", ("script_usage", 1, 'usage: me @name "msg" | --broadcast "msg"', None)),
        (False, None, "hi", ("script_usage", 1, "no target; use @name or --broadcast", None)),
    ],
)
def test_send_usage_refusal(broadcast: bool, target: str | None, text: str, want: object) -> None:
    assert _shown(send.usage_refusal(broadcast, target, text, "me")) == want


@pytest.mark.parametrize(
    ("label", "broadcast", "agents", "problem", "want"),
    [
        ("@b", False, {}, None, None),
        ("@b", False, {}, "no row", ("send_failed", 1, "FAILED -> @b: no row", None)),
        (
            "@b",
            False,
            None,
            "unverified",
            ("registry_unreadable", 1, "FAILED -> @b: unverified", hints.registry_unreadable()),
        ),
        (
            "--broadcast",
            True,
            None,
            "unverified",
            (
                "registry_unreadable",
                1,
                "FAILED -> --broadcast: the registry could not be read; nothing was sent",
                hints.registry_unreadable(),
            ),
        ),
    ],
)
def test_send_refusal(
    label: str, broadcast: bool, agents: dict[str, object] | None, problem: str | None, want: object
) -> None:
    assert _shown(send.refusal(label, broadcast, agents, problem)) == want


@pytest.mark.parametrize(
    ("opts", "pos", "want"),
    [
        ({}, ["/r"], ("claude", None, None, "/r")),
        ({"agent": "codex", "account": "a-1"}, ["/r"], ("codex", "a-1", None, "/r")),
        ({}, ["n", "/r"], ("claude", None, "n", "/r")),
        (
            {"agent": "gpt"},
            ["/r"],
            ("bad_argument", 1, "ERROR: --agent must be claude or codex (got 'gpt')", OPT),
        ),
        (
            {"agent": "none"},
            ["/r"],
            (
                "bad_argument",
                1,
                "ERROR: --agent none runs a plain command: give it with --command 'argv words'",
                OPT,
            ),
        ),
        (
            {"account": "_x"},
            ["/r"],
            ("bad_argument", 1, "ERROR: --account must match ^[a-z0-9][a-z0-9_-]*$ (got '_x')", OPT),
        ),
        (
            {"account": ""},
            ["/r"],
            ("bad_argument", 1, "ERROR: --account must match ^[a-z0-9][a-z0-9_-]*$ (got '')", OPT),
        ),
        (
            {"name": "n"},
            ["m", "/r"],
            ("bad_argument", 1, "ERROR: name given both as --name and positionally — pick one", OPT),
        ),
        ({}, [], ("script_usage", 1, spawn.usage_line("me"), None)),
        ({}, ["a", "b", "c"], ("script_usage", 1, spawn.usage_line("me"), None)),
    ],
)
def test_spawn_plan_args(opts: dict[str, str], pos: list[str], want: object) -> None:
    got = _raised(spawn.plan_args, opts, pos, "me")
    if isinstance(got, spawn.SpawnArgs):
        got = (got.agent, got.account, got.name, got.path)
    assert got == want


@pytest.mark.parametrize(
    ("opts", "want"),
    [
        ({}, "proj"),
        ({"label": "proj-2"}, "proj-2"),
        ({"label": "other", "display-label": "Shown"}, "Shown"),
        (
            {"label": "proj-"},
            (
                "bad_argument",
                1,
                "ERROR: --label 'proj-' must be the repo folder's name 'proj' or 'proj-<suffix>' (use "
                "--display-label to show another label)",
                None,
            ),
        ),
    ],
)
def test_spawn_plan_label(opts: dict[str, str], want: object) -> None:
    assert _raised(spawn.plan_label, opts, "proj") == want


@pytest.mark.parametrize(
    ("opts", "want"),
    [
        ({}, None),
        ({"command": "sh -c 'sleep 1'"}, ["sh", "-c", "sleep 1"]),
        ({"command": "  "}, ("bad_argument", 1, "ERROR: --command is empty", OPT)),
        (
            {"command": "sh 'x"},
            ("bad_argument", 1, "ERROR: --command is not a list of shell words: No closing quotation", OPT),
        ),
    ],
)
def test_spawn_plan_command(opts: dict[str, str], want: object) -> None:
    assert _raised(spawn.plan_command, opts) == want


def test_spawn_workspace_taken() -> None:
    row = {"project_root": "/r", "label": "l", "slug": "s", "workspace_id": "w1"}
    assert spawn.workspace_taken([{"project_root": "/q"}, "junk"], "/r") is None
    e = spawn.workspace_taken([row], "/r")
    assert _shown(e) == (
        "spawn_failed",
        1,
        "ERROR: /r already has a workspace: 'l' (slug 's', id w1); nothing was spawned.",
        "  One root = one workspace: for a second agent on this repo, make a git worktree "
        "(git worktree add ../<repo>-wt-<short>) and spawn that.",
    )


@pytest.mark.parametrize(
    ("phase", "late", "want"),
    [
        ("ready", True, spawn.READY),
        ("booting", False, spawn.WAIT),
        ("booting", True, "timeout"),
        ("unknown", True, "timeout"),
        *[(p, False, "phase") for p in spawn.FAILED_PHASES],
    ],
)
def test_spawn_phase_verdict(phase: str, late: bool, want: str) -> None:
    assert spawn.phase_verdict(phase, past_deadline=late) == want


def test_spawn_phase_of_and_the_reply_command() -> None:
    listed = {"workspaces": [{"workspace_id": "a", "phase": "booting"}, "junk"]}
    assert spawn.phase_of(listed, "a") == "booting"
    assert spawn.phase_of(listed, "b") == "gone"
    assert spawn.phase_of({}, "a") == "gone"
    assert spawn.remote_send_command({"send_command": "/far/bin/comm-send.sh"}) == "/far/bin/comm-send.sh"
    assert spawn.remote_send_command({"send_command": ""}) == "comm-send.sh"
    assert spawn.remote_send_command(None) == "comm-send.sh"
    assert spawn.task_text("boss", "fix it", "cs") == (
        "Task from @boss: fix it — reply to @boss via cs when done or blocked (say what you found or what you need)."
    )


@pytest.mark.parametrize(
    ("listed", "phase", "waiting"),
    [
        (
            {"workspaces": [{"workspace_id": "a", "phase": "starting", "waiting_on": "no cursor"}]},
            "starting",
            "no cursor",
        ),
        ({"workspaces": [{"workspace_id": "a", "phase": "starting"}]}, "starting", ""),  # an older daemon
        ({"workspaces": [{"workspace_id": "a", "phase": "ready", "waiting_on": ["no"]}]}, "ready", ""),
        ({"workspaces": [{"workspace_id": "a", "phase": 3, "waiting_on": 7}]}, "3", ""),
        # a far daemon's escapes and newlines are shown inert, on one line
        (
            {"workspaces": [{"workspace_id": "a", "phase": "st\x1b[2Jart", "waiting_on": "a\nb\x07"}]},
            "st\\u001b[2Jart",
            "a\\u000ab\\u0007",
        ),
        (
            {"workspaces": [{"workspace_id": "a", "phase": "p" * 300, "waiting_on": "w" * 300}]},
            "p" * 200,
            "w" * 200,
        ),
        ({"workspaces": 5}, "gone", ""),  # not a list: no row
        ({"workspaces": "a"}, "gone", ""),
        ({"workspaces": [["a"], None, {"workspace_id": "b"}]}, "gone", ""),
    ],
)
def test_spawn_reads_a_far_daemons_workspace_list_as_data(
    listed: dict[str, object], phase: str, waiting: str
) -> None:
    assert (spawn.phase_of(listed, "a"), spawn.waiting_of(listed, "a")) == (phase, waiting)


def test_spawn_remote_root_and_endpoint() -> None:
    assert spawn.remote_root("/a/b/../c", "ssh:far") == "/a/c"
    assert _raised(spawn.remote_root, "proj", "ssh:far") == (
        "bad_argument",
        1,
        "ERROR: a spawn on another box (ssh:far) needs the repo's absolute path on that box (got 'proj')",
        OPT,
    )
    assert spawn.names_remote({"endpoint": "ssh:far"}, {}) == "ssh:far"
    assert spawn.names_remote({}, {"SOT_SPAWN_ENDPOINT": "ssh:x"}) == "ssh:x"
    assert spawn.names_remote({"endpoint": "unix:/s"}, {"SOT_SPAWN_ENDPOINT": "ssh:x"}) == ""


DESPAWN_USAGE = (
    "script_usage",
    1,
    "usage: me <name|slug|workspace_id> [--endpoint ssh:target[/host]|unix:PATH]",
    None,
)


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["a"], ("", "a")),
        (["a", "--endpoint", "ssh:x"], ("ssh:x", "a")),
        (["--endpoint=unix:/s", "a"], ("unix:/s", "a")),
        ([], DESPAWN_USAGE),
        ([""], DESPAWN_USAGE),
        (["a", "b"], DESPAWN_USAGE),
        (["a", "--endpoint"], DESPAWN_USAGE),  # a dangling --endpoint is a second word
        (["--endpoint"], DESPAWN_USAGE),  # (before the one parser it was taken for the row's name)
    ],
)
def test_despawn_parse(argv: list[str], want: object) -> None:
    assert _raised(despawn.parse, argv, "me") == want


def test_despawn_finds_the_row() -> None:
    assert despawn.row_of_entry({"workspace_id": "w"}, "h") == ("w", "h")
    assert despawn.row_of_entry({"workspace_id": ""}, "h") == (None, "h")
    assert despawn.row_of_entry(None, "h") == (None, None)
    spaces: list[object] = [
        "junk",
        {"slug": "s", "workspace_id": "w1", "agent_name": "a1"},
        {"label": "L", "workspace_id": "w2", "handle": "h2"},
    ]
    assert despawn.row_in_list(spaces, "s") == ("w1", "a1")
    assert despawn.row_in_list(spaces, "L") == ("w2", "h2")
    assert despawn.row_in_list(spaces, "w2") == ("w2", "h2")
    assert despawn.row_in_list(spaces, "x") == (None, None)


@pytest.mark.parametrize(
    ("listed", "bare", "hint"),
    [
        (True, True, "  @h is only a registry entry here; remove it with comm-leave.sh --name h"),
        (True, False, hints.rows()),
        (False, True, "SILENT"),
    ],
)
def test_despawn_unresolved(listed: bool, bare: bool, hint: str) -> None:
    e = despawn.unresolved("h", "unix:/s", "why", listed=listed, bare_entry_here=bare, silent="SILENT")
    assert _shown(e) == (
        "despawn_failed",
        1,
        "FAILED: comm-despawn could not resolve 'h' to a workspace via unix:/s: why; nothing was despawned.",
        hint,
    )


@pytest.mark.parametrize(
    ("named", "env", "slot", "want"),
    [
        ("a", {"SOT_COMM_NAME": "b"}, "c", "a"),
        (None, {"SOT_COMM_NAME": "b"}, "c", "b"),
        (None, {"SOT_COMM_NAME": ""}, "c", "c"),
        (None, {}, "", None),
        ("", {"SOT_COMM_NAME": "b"}, "c", "c"),  # an empty NAME is no name: the slot's own
    ],
)
def test_join_chosen_name(named: str | None, env: dict[str, str], slot: str, want: str | None) -> None:
    assert join.chosen_name(named, env, slot) == want


def test_join_expertise_and_refusals() -> None:
    assert join.expertise_of(" a, ,b ,") == ["a", "b"]
    assert join.expertise_of("") == []
    e = join.slot_refused("the slot names proj-x", "me", "proj", "")
    assert (e.code, e.exit_status, e.reason) == ("slot_refused", 3, "the slot names proj-x")
    assert e.message.startswith(
        "me: REFUSING to put a 'proj' identity in that slot — it is keyed by this shell's"
    )
    assert "$SOT_WORKSPACE_ID ('unset')" in e.message and e.message.endswith("re-run with --repin.")
    assert join.tier1_warning("p-h", "p").splitlines() == [
        "*** WARNING: joined as '@p-h', but '@p' (this project's bare handle) is held by a live session of "
        "another project.",
        "*** Mail sent to @p will not reach you. If '@p' should be yours, recover it with:",
        "***   comm-leave.sh --name p-h; comm-join.sh --name p",
    ]


@pytest.mark.parametrize(
    ("path", "argv", "opts", "words", "missing"),
    [
        ("comm spawn", ["/r", "--name", "n", "--task=do it"], {"name": "n", "task": "do it"}, ["/r"], ""),
        ("comm spawn", ["--name", "--agent"], {"name": "--agent"}, [], ""),  # a value is the next word
        ("comm spawn", ["/r", "--agent"], {}, ["/r"], "--agent"),
        ("comm spawn", ["--name=a", "--name=b"], {"name": "b"}, [], ""),  # the later one wins
        ("comm join", ["x", "--repin", "-h"], {"repin": "", "help": ""}, ["x"], ""),
        ("comm join", ["--repin=1", "-"], {}, ["--repin=1", "-"], ""),  # a switch takes no value
        ("comm despawn", ["w", "--endpoint", "ssh:f"], {"endpoint": "ssh:f"}, ["w"], ""),
        ("comm despawn", ["--", "--endpoint"], {}, ["--"], "--endpoint"),
    ],
)
def test_the_one_parser(
    path: str, argv: list[str], opts: dict[str, str], words: list[str], missing: str
) -> None:
    parsed = cmdtable.parse(path, argv)
    assert (parsed.opts, parsed.words, parsed.missing) == (opts, words, missing)


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["a", "--name", "b"], ("b", False)),
        (["--name", "b", "a"], ("usage", 2, "me: unexpected argument 'a' (see --help)", None)),
        (["a", "b"], ("usage", 2, "me: unexpected argument 'b' (see --help)", None)),
        (["-x"], ("usage", 2, "me: unknown option '-x' (a handle can't start with '-'; see --help)", None)),
        (["a", "b", "--name"], ("usage", 2, "me: unexpected argument 'b' (see --help)", None)),
        (["--expertise"], ("usage", 2, "me: --expertise needs a value (see --help)", None)),
        (["--repin", "--name=z"], ("z", True)),
    ],
)
def test_join_parse(argv: list[str], want: object) -> None:
    got = _raised(join.parse, argv, "me")
    if isinstance(got, join._Opts):
        got = (got.name, got.repin)
    assert got == want


def _show(raw: bytes) -> str | None:
    return None if raw.startswith(b"#") else raw.decode()


@pytest.mark.parametrize(
    ("new", "want"),
    [
        ([], ["No new messages."]),
        ([b"#hidden"], ["No new messages."]),
        ([b"a", b"#hidden", b"b"], ["a", "b"]),
    ],
)
def test_poll_shown_lines(new: list[bytes], want: list[str]) -> None:
    assert poll.shown_lines(new, _show) == want


@pytest.mark.parametrize(
    ("new_text", "old_text", "base", "total", "batch", "want"),
    [
        ("3 h", "1 g", 0, 3, 2, "cursor"),
        ("3 h", "2 wrong", 0, 3, 1, "cursor"),  # a step back, then line 3 shown
        ("3 h", "3 h", 0, 3, 0, "hint"),
        ("3 h", "3 h", 2, 3, 0, ""),
        ("0", "0", 0, 0, 0, ""),
        # nothing past the cursor: it stands as it is (the reference writes only after a batch; issue 28)
        ("3 h", "4 h", 0, 3, 0, ""),  # a hashed count one past the end
        ("3 h", "3", 0, 3, 0, ""),  # a bare count
        ("3 h", "2026-01-01T00:00:09Z", 0, 3, 0, ""),  # a legacy stamp past every line
    ],
)
def test_poll_cursor_writes(
    new_text: str, old_text: str, base: int, total: int, batch: int, want: str
) -> None:
    assert poll.cursor_writes(new_text, old_text, base, total, batch) == want


@pytest.mark.parametrize(
    ("argv", "joined", "want"),
    [
        ([], "a", "a"),
        (["b"], "a", "b"),
        (["b"], "", "b"),
        ([], "", ("not_joined", errors.NotJoined.exit_status, "Not joined — run comm-join.sh first.", None)),
        (
            ["b", "c"],
            "a",
            ("script_usage", 1, cmdtable.usage("comm unread", ""), None),
        ),
    ],
)
def test_unread_asked_handle(argv: list[str], joined: str, want: object) -> None:
    assert _raised(unread.asked_handle, argv, joined, "") == want


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        ([], None),
        (["--name=b"], "b"),
        (["--name", "b"], "b"),
        (["--name="], ("script_usage", 1, "--name= needs a handle", None)),
        (["--name", ""], ("script_usage", 1, "--name= needs a handle", None)),
        (["--name"], ("script_usage", 1, "usage: me [--name <handle>]", None)),
        (["b"], ("script_usage", 1, "usage: me [--name <handle>]", None)),
    ],
)
def test_leave_parse(argv: list[str], want: object) -> None:
    assert _raised(leave.parse, argv, "me") == want


def test_leave_removed_row_takes_only_that_row() -> None:
    agents: dict[str, object] = {"a": {}, "b": {}}
    assert leave.removed_row(agents, "a") is True
    assert agents == {"b": {}}
    assert leave.removed_row(agents, "a") is False
    assert agents == {"b": {}}


@pytest.mark.parametrize(
    ("other", "removed", "want"),
    [
        (True, True, "Removed @b from the registry (row only; comm-despawn.sh does full teardown)."),
        (True, False, "@b not in registry — nothing to do."),
        (False, True, "Left sot-comm (@b removed)."),
        (False, False, "Not joined — nothing to do."),
    ],
)
def test_leave_said(other: bool, removed: bool, want: str) -> None:
    assert leave.said("b", other, removed) == want


STATUS_VERBS = "prompt|stop|interrupted|working|idle|blocked|done|waiting"


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["idle"], "idle"),
        (["blocked", "on", "b"], "blocked"),
        ([], ("usage", errors.EXIT_USAGE, f'usage: me <{STATUS_VERBS}> ["text"]', None)),
        (["nap"], ("usage", errors.EXIT_USAGE, f"me: invalid verb 'nap' (want {STATUS_VERBS})", None)),
    ],
)
def test_status_parse(argv: list[str], want: object) -> None:
    assert _raised(status.parse, argv, "me") == want


def test_status_discard_sentence() -> None:
    tail = " -- stamp discarded; run it from the session's project root"
    assert status.discard_sentence("me", "a", "/p") == "me: no registry row for 'a' from cwd /p" + tail
    assert (
        status.discard_sentence("me", "", "/p")
        == "me: no registry row for '<no identity>' from cwd /p" + tail
    )


@pytest.mark.parametrize(
    ("event", "missing", "problem", "want"),
    [
        (False, False, None, None),
        (True, False, None, None),
        (True, True, None, None),
        (False, True, None, ("stamp_discarded", errors.StampDiscarded.exit_status, "gone", None)),
        (False, False, "no", ("state_refused", errors.EXIT_USAGE, "no", None)),
        (True, False, "no", ("state_refused", errors.EXIT_USAGE, "no", None)),
    ],
)
def test_status_refusal(event: bool, missing: bool, problem: str | None, want: object) -> None:
    assert _shown(status.refusal(event, missing, problem, "gone")) == want


def test_context_eval_lines() -> None:
    items = [("A", ""), ("B", "/x/y-z_1.2"), ("C", "a b"), ("D", "it's")]
    assert context.eval_lines(items) == ["A=", "B=/x/y-z_1.2", "C='a b'", "D='it'\"'\"'s'"]


RELAY = 'usage: comm-relay.sh send @to "msg" | --all "msg"'


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["send", "@b", "hi", "@c"], ["@b", "hi @c"]),
        (["send", "hi", "--all", "@c"], ["--broadcast", "hi @c"]),
        ([], ("script_usage", 1, f"{RELAY} | bridge", None)),
        (["bridge"], ("script_usage", 1, f"{RELAY} | bridge", None)),
        (["send", "hi"], ("script_usage", 1, f"{RELAY}  (no recipient)", None)),
        (["send"], ("script_usage", 1, f"{RELAY}  (no recipient)", None)),
        (["send", "@b"], ("script_usage", 1, f"{RELAY}  (empty message)", None)),
        (["send", "--all"], ("script_usage", 1, f"{RELAY}  (empty message)", None)),
    ],
)
def test_relay_send_argv(argv: list[str], want: object) -> None:
    assert _raised(relay.send_argv, argv) == want
