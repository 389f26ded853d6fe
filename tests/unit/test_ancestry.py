"""sotd.ancestry: the ancestry check of behaviour 5, over fake chains and a fake /proc tree."""

from __future__ import annotations

import os

import pytest

from sotd import ancestry
from sotd.ancestry import agent_of, capsule_names_row, read_chain, row_named, verdict

pytestmark = pytest.mark.unit

# The exact texts of 5.4, written out here independently of the module.
SECOND = (
    "this process runs under {inner}, started inside {outer}'s session, so it has no comm identity — nothing "
    "was read, sent or stamped; do not retry or join: an agent that needs its own handle is started as its own row"
)
NOT_IN = (
    "this process names row {row} but is not shown to run inside that row's capsule, so it has no comm identity; "
    "nothing was read, sent or stamped; start it inside the row, or as its own row"
)
# what follows NOT_IN when the command ran inside Codex's sandbox (issue 26 item 4; not in the spec)
IN_SANDBOX = (
    ". It ran inside Codex's sandbox, which hides the row from it: send and read mail with the sotd MCP tools "
    "(send, poll), or run the script in its plain form, which Codex runs outside its sandbox: the script and its "
    "words alone, the text in single quotes (comm-send.sh @handle 'text', comm-poll.sh), with no pipe, "
    "redirection, 2>&1 or escaped quotes"
)
# the top of the PID namespace Codex 0.171.0 runs a sandboxed command in (its argv as seen there)
SANDBOX = [
    "/h/.codex/tmp/arg0-linux/codex-arg0x/codex-linux-sandbox",
    "--sandbox-policy-cwd",
    "/p",
    "--",
    "bash",
]
TRUNC = (
    "cannot read this process's ancestry in full (/proc or ps; sotd.exe ancestors on Windows), so it cannot be "
    "shown to be its session's own agent — nothing was read, sent or stamped"
)

SELF = ["/usr/bin/python3", "-m", "sotd", "comm", "send"]
SH = ["/bin/bash", "-c", "comm-send.sh @x hi"]
CLAUDE = ["claude", "--resume"]
CODEX = ["/usr/local/bin/codex"]
NODE_CLAUDE = ["node", "/usr/lib/node_modules/@anthropic-ai/claude-code/cli.js", "--resume"]
CAPS = ["sot-capsule", "supervise", "/home/u/.local/state/sot/workspaces/ws-a", "--start", "--", "claude"]
CAPS_VOYAGE = ["sot-capsule", "run", "/s/workspaces/ws-a/voyages/v1", "x"]
INIT = ["/sbin/init"]


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["claude"], "claude"),
        (["/usr/local/bin/claude", "-p", "x"], "claude"),
        (["-claude"], "claude"),
        (["CLAUDE.EXE"], "claude"),
        (["C:\\Tools\\Codex.exe"], "codex"),
        (["codex", "exec", "x"], "codex"),
        (["claude-code"], None),
        (["claudex"], None),
        (["node", "/usr/lib/node_modules/@anthropic-ai/claude-code/cli.js"], "claude"),
        (["node", "/usr/lib/node_modules/@openai/codex/bin/codex.js"], "codex"),
        (["node", "/opt/x/@openai/codex/dist/main.mjs"], "codex"),
        (["node", "--max-old-space-size=4096", "/x/claude.js"], "claude"),
        (["node", "/x/codex.cjs"], "codex"),
        (["node", "/x/claude.mjs", "--print"], "claude"),
        (["/usr/bin/node", "/home/u/bin/claude"], "claude"),
        (["node.exe", "C:\\npm\\node_modules\\@anthropic-ai\\claude-code\\cli.js"], "claude"),
        (["node", "build.js"], None),
        (["node", "--inspect"], None),
        (["node"], None),
        (["node", "/x/claude-code/cli.js"], None),
        (["node", "--claude"], None),
        (["python3", "claude.js"], None),
        ([], None),
        ([""], None),
    ],
)
def test_agent_of(argv, want):
    assert agent_of(argv) == want


@pytest.mark.parametrize(
    ("argv", "row", "want"),
    [
        (CAPS, "ws-a", True),
        (CAPS_VOYAGE, "ws-a", True),
        (["sot-capsule", "run", "C:\\s\\workspaces\\ws-a\\voyages\\v1"], "ws-a", True),
        (["sot-capsule", "supervise", "C:\\s\\workspaces\\ws-a"], "ws-a", True),
        (["/usr/bin/python3", "/home/u/.local/bin/sot-capsule", "run", "/s/workspaces/ws-a"], "ws-a", True),
        (["SOT-CAPSULE.exe", "/s/workspaces/ws-a"], "ws-a", True),
        (["sot-capsule", "supervise", "/s/workspaces/ws-ab"], "ws-a", False),
        (["sot-capsule", "run", "/s/workspaces/ws-ab/voyages/v"], "ws-a", False),
        (["sot-capsule", "supervise", "/s/workspaces/ws-a/"], "ws-a", False),
        (["sot-capsule", "supervise", "/s/workspaces/ws-a/x"], "ws-a", False),
        (["sot-capsule", "supervise", "/s/workspaces/ws-b"], "ws-a", False),
        (["sot-capsule"], "ws-a", False),
        (["sot-capsule", "--", "/s/workspaces/ws-a"], "ws-a", False),
        (["sot-capsule", "supervise", "--start", "--", "claude", "/s/workspaces/ws-a"], "ws-a", False),
        (["sot-capsule", "run", "workspaces/ws-a"], "ws-a", False),
        (["claude", "/s/workspaces/ws-a"], "ws-a", False),
    ],
)
def test_capsule_names_row(argv, row, want):
    assert capsule_names_row(argv, row) is want


@pytest.mark.parametrize(
    ("env", "host", "want"),
    [
        ({}, "box", None),
        ({"SOT_WORKSPACE_ID": "ws-a"}, "box", "ws-a"),
        ({"SOT_WORKSPACE_ID": ""}, "box", None),
        ({"SOT_COMM_SELF_FILE": "/c/self/box__ws-b.txt", "SOT_WORKSPACE_ID": "ws-a"}, "box", "ws-b"),
        ({"SOT_COMM_SELF_FILE": "/c/self/box__nopane.txt", "SOT_WORKSPACE_ID": "ws-a"}, "box", None),
        ({"SOT_COMM_SELF_FILE": "/c/self/handle.txt", "SOT_WORKSPACE_ID": "ws-a"}, "box", None),
        ({"SOT_COMM_SELF_FILE": "/c/self/box__ws-b.json"}, "box", None),
        ({"SOT_COMM_SELF_FILE": "/c/self/box__.txt"}, "box", None),
        ({"SOT_COMM_SELF_FILE": "/c/self/my__box__ws-c.txt"}, "my__box", "ws-c"),
        ({"SOT_COMM_SELF_FILE": "/c/self/box__ws__c.txt"}, "box", "ws__c"),
        ({"SOT_COMM_SELF_FILE": "/c/self/other__ws__c.txt"}, "box", "ws__c"),
        ({"SOT_COMM_SELF_FILE": "C:\\c\\self\\box__ws-d.txt"}, "box", "ws-d"),
        ({"SOT_COMM_SELF_FILE": "", "SOT_WORKSPACE_ID": "ws-a"}, "box", "ws-a"),
    ],
)
def test_row_named(env, host, want):
    assert row_named(env, "/c", host) == want


CASES = [
    # (id, chain nearest-first, truncated, row, rc, text)
    ("plain shell, no agent", [SELF, SH, INIT], False, None, 0, None),
    ("one agent to the top", [SELF, SH, CLAUDE, SH], False, None, 0, None),
    ("one node-hosted agent", [SELF, SH, NODE_CLAUDE], False, None, 0, None),
    (
        "claude under codex",
        [SELF, SH, CLAUDE, SH, CODEX],
        False,
        None,
        1,
        SECOND.format(inner="claude", outer="codex"),
    ),
    (
        "codex exec inside claude inside codex: inner nearest, outer farthest",
        [SELF, ["codex", "exec", "x"], CLAUDE, CODEX],
        False,
        None,
        1,
        SECOND.format(inner="codex", outer="codex"),
    ),
    (
        "claude -p inside claude",
        [SELF, ["claude", "-p", "x"], SH, CLAUDE],
        False,
        None,
        1,
        SECOND.format(inner="claude", outer="claude"),
    ),
    (
        "node host + native child with the same args count once",
        [SELF, SH, ["/home/u/.claude/local/claude", "--resume"], NODE_CLAUDE],
        False,
        None,
        0,
        None,
    ),
    (
        "node host + native child with different args: two layers",
        [SELF, ["claude", "--resume", "x"], NODE_CLAUDE],
        False,
        None,
        1,
        SECOND.format(inner="claude", outer="claude"),
    ),
    (
        "newline vs space in args: two layers",
        [SELF, ["claude", "a\nb"], ["node", "/x/claude.js", "a b"]],
        False,
        None,
        1,
        SECOND.format(inner="claude", outer="claude"),
    ),
    (
        "node then native: same args but the native is the parent: two layers",
        [SELF, NODE_CLAUDE, ["claude", "--resume"]],
        False,
        None,
        1,
        SECOND.format(inner="claude", outer="claude"),
    ),
    (
        "node host over a native codex with the same args: different agents, two layers",
        [SELF, ["codex", "--resume"], ["node", "/x/claude.js", "--resume"]],
        False,
        None,
        1,
        SECOND.format(inner="codex", outer="claude"),
    ),
    (
        "not adjacent: a shell between the native child and the node host",
        [SELF, ["claude", "--resume"], SH, NODE_CLAUDE],
        False,
        None,
        1,
        SECOND.format(inner="claude", outer="claude"),
    ),
    ("node build.js is not an agent", [SELF, ["node", "build.js"], CLAUDE], False, None, 0, None),
    ("node --inspect is not an agent", [SELF, ["node", "--inspect"], CLAUDE], False, None, 0, None),
    ("walk stops at the capsule, no row", [SELF, CLAUDE, CAPS, CODEX], False, None, 0, None),
    ("inside its row's capsule", [SELF, SH, CLAUDE, CAPS], False, "ws-a", 0, None),
    ("inside its row's capsule (voyage)", [SELF, CLAUDE, CAPS_VOYAGE, CLAUDE], False, "ws-a", 0, None),
    (
        "two agents below the capsule",
        [SELF, CODEX, CLAUDE, CAPS],
        False,
        "ws-a",
        1,
        SECOND.format(inner="codex", outer="claude"),
    ),
    (
        "layers judged before the row test",
        [SELF, CODEX, CLAUDE, INIT],
        False,
        "ws-a",
        1,
        SECOND.format(inner="codex", outer="claude"),
    ),
    (
        "layers judged before truncation",
        [SELF, CODEX, CLAUDE],
        True,
        None,
        1,
        SECOND.format(inner="codex", outer="claude"),
    ),
    (
        "row named, walk reached the top",
        [SELF, SH, CLAUDE, INIT],
        False,
        "ws-a",
        2,
        NOT_IN.format(row="ws-a"),
    ),
    (
        "row named, another row's capsule",
        [SELF, CLAUDE, ["sot-capsule", "supervise", "/s/workspaces/ws-b"]],
        False,
        "ws-a",
        2,
        NOT_IN.format(row="ws-a"),
    ),
    (
        "row named, prefix id does not match",
        [SELF, CLAUDE, ["sot-capsule", "supervise", "/s/workspaces/ws-ab"]],
        False,
        "ws-a",
        2,
        NOT_IN.format(row="ws-a"),
    ),
    (
        "row named, capsule with no args",
        [SELF, CLAUDE, ["sot-capsule"]],
        False,
        "ws-a",
        2,
        NOT_IN.format(row="ws-a"),
    ),
    (
        "row named, id only after --",
        [SELF, CLAUDE, ["sot-capsule", "run", "--", "/s/workspaces/ws-a"]],
        False,
        "ws-a",
        2,
        NOT_IN.format(row="ws-a"),
    ),
    (
        "row named, moved to claude's background daemon (bg-spare, systemd --user between)",
        [SELF, SH, ["claude", "bg-spare"], ["/usr/lib/systemd/systemd", "--user"], INIT],
        False,
        "ws-a",
        2,
        NOT_IN.format(row="ws-a"),
    ),
    (
        "row named, one background claude under systemd --user",
        [SELF, SH, ["claude", "bg-pty-host"], ["/usr/lib/systemd/systemd", "--user"]],
        False,
        "ws-a",
        2,
        NOT_IN.format(row="ws-a"),
    ),
    ("truncated, no row", [SELF, SH], True, None, 2, TRUNC),
    ("truncated, row named", [SELF, CLAUDE], True, "ws-a", 2, TRUNC),
    ("truncated with nothing read", [], True, None, 2, TRUNC),
    ("capsule reached before the truncation is fine", [SELF, CLAUDE, CAPS], True, "ws-a", 0, None),
    ("capsule reached before the truncation, no row", [SELF, CLAUDE, CAPS], True, None, 0, None),
    (
        "python-hosted capsule script",
        [SELF, CLAUDE, ["/usr/bin/python3.11", "/u/bin/sot-capsule", "supervise", "/s/workspaces/ws-a"]],
        False,
        "ws-a",
        0,
        None,
    ),
]


@pytest.mark.parametrize(
    ("chain", "truncated", "row", "rc", "text"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_verdict(chain, truncated, row, rc, text):
    assert verdict(chain, truncated, row) == (rc, text)


def test_codex_says_it_sandboxed_the_command_on_macos():
    assert verdict([SELF, SH, INIT], False, "ws-a", sandboxed=True) == (
        2,
        NOT_IN.format(row="ws-a") + IN_SANDBOX,
    )
    assert verdict([SELF, SH, INIT], False, None, sandboxed=True) == (0, None)


def test_texts_match_the_module_constants():
    assert ancestry.TEXT_SECOND_AGENT.format(inner="a", outer="b") == SECOND.format(inner="a", outer="b")
    assert ancestry.TEXT_NOT_IN_CAPSULE.format(row="r") == NOT_IN.format(row="r")
    assert ancestry.TEXT_TRUNCATED == TRUNC


# ------------------------------------------------------------------------------------------ fake /proc


def make_proc(root, procs):
    """procs: {pid: (ppid or raw stat tail, argv or raw cmdline bytes or None)}; None argv = no cmdline file."""
    for pid, (ppid, argv) in procs.items():
        d = os.path.join(root, str(pid))
        os.makedirs(d)
        comm = os.path.basename(argv[0]) if isinstance(argv, list) and argv else "x"
        stat = (
            ppid if isinstance(ppid, bytes) else f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194560".encode()
        )
        with open(os.path.join(d, "stat"), "wb") as f:
            f.write(stat)
        if argv is not None:
            data = argv if isinstance(argv, bytes) else b"".join(a.encode() + b"\0" for a in argv)
            with open(os.path.join(d, "cmdline"), "wb") as f:
                f.write(data)
    return str(root)


def test_read_chain_walks_to_the_top(tmp_path):
    root = make_proc(tmp_path, {30: (20, SELF), 20: (10, SH), 10: (1, CLAUDE)})
    assert read_chain(30, root) == ([SELF, SH, CLAUDE], False)


def test_read_chain_ends_at_ppid_zero(tmp_path):
    root = make_proc(tmp_path, {30: (0, SELF)})
    assert read_chain(30, root) == ([SELF], False)


def test_read_chain_ppid_after_the_last_paren(tmp_path):
    # A process name may hold ") S 1 " itself: the ppid is counted after the LAST ')'.
    stat = b"30 (evil) S 1 (x) S 20 30 30 0 -1"
    root = make_proc(tmp_path, {30: (stat, SELF), 20: (1, CLAUDE)})
    assert read_chain(30, root) == ([SELF, CLAUDE], False)


def test_read_chain_keeps_newlines_distinct_from_spaces(tmp_path):
    root = make_proc(tmp_path, {30: (20, ["claude", "a\nb"]), 20: (1, ["node", "/x/claude.js", "a b"])})
    chain, truncated = read_chain(30, root)
    assert chain == [["claude", "a\nb"], ["node", "/x/claude.js", "a b"]] and not truncated
    assert verdict(chain, truncated, None)[0] == 1


def test_read_chain_cmdline_without_trailing_nul_and_empty_args(tmp_path):
    root = make_proc(tmp_path, {30: (1, b"claude\0\0x")})
    assert read_chain(30, root) == ([["claude", "", "x"]], False)


@pytest.mark.parametrize(
    "procs",
    [
        {30: (20, SELF)},  # parent missing
        {30: (20, SELF), 20: (1, None)},  # no cmdline
        {30: (20, SELF), 20: (1, b"")},  # empty cmdline (kernel thread, zombie)
        {30: (b"30 (x) S abc 1 1", SELF)},  # non-numeric ppid
        {30: (b"30 (x) S -5 1 1", SELF)},  # non-numeric (signed) ppid
        {30: (b"30 x S 20", SELF)},  # no ')'
        {30: (b"30 (x) S", SELF)},  # no ppid field
    ],
)
def test_read_chain_truncated(tmp_path, procs):
    chain, truncated = read_chain(30, make_proc(tmp_path, procs))
    assert truncated is True
    assert chain in ([], [SELF])


def test_read_chain_unreadable_start(tmp_path):
    assert read_chain(30, str(tmp_path)) == ([], True)


def test_read_chain_sixty_three_records_is_whole(tmp_path):
    procs = {100 + i: (100 + i + 1 if i < 62 else 1, SH) for i in range(63)}
    chain, truncated = read_chain(100, make_proc(tmp_path, procs))
    assert len(chain) == 63 and not truncated


def test_read_chain_sixty_four_records_is_truncated(tmp_path):
    procs = {100 + i: (100 + i + 1 if i < 63 else 1, SH) for i in range(64)}
    chain, truncated = read_chain(100, make_proc(tmp_path, procs))
    assert len(chain) == 64 and truncated


def test_read_chain_a_loop_is_truncated_not_endless(tmp_path):
    root = make_proc(tmp_path, {30: (20, SELF), 20: (30, SH)})
    chain, truncated = read_chain(30, root)
    assert truncated and len(chain) == 64


def test_capsule_before_truncation_through_proc(tmp_path):
    root = make_proc(tmp_path, {30: (20, SELF), 20: (10, CLAUDE), 10: (5, CAPS)})  # 5 is unreadable
    chain, truncated = read_chain(30, root)
    assert truncated and verdict(chain, truncated, "ws-a") == (0, None)


def test_check_uses_environment_and_proc(tmp_path):
    root = make_proc(tmp_path, {30: (20, SELF), 20: (10, CLAUDE), 10: (1, CAPS)})
    assert ancestry.check({"SOT_WORKSPACE_ID": "ws-a"}, pid=30, proc=root) == (0, None)
    assert ancestry.check({"SOT_WORKSPACE_ID": "ws-b"}, pid=30, proc=root) == (2, NOT_IN.format(row="ws-b"))
    pinned = {"SOT_COMM_SELF_FILE": "/c/self/box__ws-b.txt", "SOT_WORKSPACE_ID": "ws-a"}
    assert ancestry.check(pinned, pid=30, proc=root) == (2, NOT_IN.format(row="ws-b"))
    several = {"SOT_COMM_SELF_FILE": "/c/self/my__box__ws-a.txt", "SOT_SELF_HOST": "my__box"}
    assert ancestry.check(several, pid=30, proc=root) == (0, None)


def test_check_inside_codexs_sandbox_reads_the_namespaces_first_process(tmp_path):
    """The walk ends below pid 1 (the sandbox's launcher there), so ``check`` reads pid 1 itself."""
    root = make_proc(
        tmp_path, {5: (2, SELF), 2: (0, ["/bin/bash", "-c", "comm-poll.sh | tail -5"]), 1: (0, SANDBOX)}
    )
    assert ancestry.check({"SOT_WORKSPACE_ID": "ws-a"}, pid=5, proc=root) == (
        2,
        NOT_IN.format(row="ws-a") + IN_SANDBOX,
    )
    assert ancestry.check({}, pid=5, proc=root) == (0, None)
    plain = make_proc(tmp_path / "plain", {5: (1, SELF), 1: (0, INIT)})
    assert ancestry.check({"SOT_WORKSPACE_ID": "ws-a"}, pid=5, proc=plain) == (2, NOT_IN.format(row="ws-a"))
    mac = {"SOT_WORKSPACE_ID": "ws-a", "CODEX_SANDBOX": "seatbelt"}
    assert ancestry.check(mac, pid=5, proc=plain) == (2, NOT_IN.format(row="ws-a") + IN_SANDBOX)


def test_check_on_this_process_reads_real_proc():
    chain, _ = read_chain()
    with open("/proc/self/cmdline", "rb") as f:
        own = f.read().rstrip(b"\0").decode("utf-8", "surrogateescape").split("\0")
    assert chain[0] == own
    rc, text = ancestry.check({})
    assert (rc == 0) is (text is None)
