"""The command table: every ``sotd`` command's synopsis, summary and options, and the help made from it.

Spec: issue 13 "--help everywhere" (usage and options, exit 0, made from one table per command; an
unknown option exits 2 with the usage); D15 (the wording of usage and help is ours).
Guarantee: ``--help`` of any command prints text generated from its one entry here, so the help shown
and the options checked (``check``) can never disagree; ``sotd.cli.main`` runs ``check`` before a
command's module is imported, and only when an argument starts with ``-`` (the hot path pays nothing).
What would break it: a command whose own parser accepts an option its entry does not list (``check``
would refuse it with exit 2); a test compares each parser's option names with its entry. ``parse`` is the
one parser the verbs read their options with (spawn, despawn, join), so it takes exactly the entry's.

A leaf (standard library only), so the CLI and the daemon can both print from it. Pure functions.
"""

from __future__ import annotations

# One entry per command path ("" is ``sotd`` itself; "comm", "daemon" and "ocx" are groups whose help
# lists their members), made by ``cmd``. An option is (flag, value name or "" for a switch, help).
Opt = tuple[str, str, str]


class Entry:
    """One command: its synopsis, one-line summary, options, and ``free``: the words after the first
    positional one are text (a message), so option checking stops there. ``pinned``: the spec pins what
    this command says for an unknown option (behaviour 1.2 for join, 1.8 for leave), so ``sotd.cli.main``
    leaves that refusal to the verb's own parser (``--help`` is still answered from here)."""

    __slots__ = ("free", "options", "pinned", "summary", "synopsis")

    def __init__(
        self, synopsis: str, summary: str, options: tuple[Opt, ...], free: bool, pinned: bool = False
    ) -> None:
        self.synopsis = synopsis
        self.summary = summary
        self.options = options
        self.free = free
        self.pinned = pinned


def cmd(synopsis: str, summary: str, *options: Opt, free: bool = False, pinned: bool = False) -> Entry:
    """A table entry: ``cmd(synopsis, summary, option, ..., free=..., pinned=...)``."""
    return Entry(synopsis, summary, options, free, pinned)


_SOCKET: Opt = ("--socket", "PATH", "the daemon's socket (default: $SOT_SOCKET, else this user's default)")
_ENDPOINT: Opt = (
    "--endpoint",
    "EP",
    "the daemon to ask: unix:PATH or ssh:target[/host] (default: this box's)",
)
_JSON: Opt = ("--json", "", "print JSON for scripts")
_REPO: Opt = ("--repo", "R", "the OCX repository (its name in ocx.toml)")

TABLE: dict[str, Entry] = {
    "": cmd(
        "<command> [args]",
        "sot-comm: mail between coding-agent sessions, a daemon that files it and runs agent rows, OCX.",
        ("--version", "", "print the version"),
    ),
    "comm": cmd("<verb> [args]", "the commands sessions type (each has a comm-<verb>.sh wrapper)"),
    "comm context": cmd("", "print this session's context: host, handle, project root, comm folder"),
    "comm join": cmd(
        "[NAME] [options]",
        "take a handle in this comm folder: NAME, else $SOT_COMM_NAME, else this slot's own, else one "
        "derived from the project folder and the host",
        ("--name", "NAME", "the handle to take"),
        ("--expertise", '"a, b"', "what this session knows, shown by list"),
        ("--repin", "", "pin this slot to the handle again"),
        pinned=True,  # behaviour 1.2: `comm-join.sh: unknown option '-x' (a handle can't start …)`
    ),
    "comm leave": cmd(
        "[options]",
        "remove this session's row (never its inbox or cursor)",
        ("--name", "HANDLE", "remove another handle's row instead"),
        pinned=True,  # behaviour 1.8: the one line `usage: comm-leave.sh [--name <handle>]`, exit 1
    ),
    "comm send": cmd(
        '@name "msg" | --broadcast "msg"',
        "file one message; the answer is `filed -> @h` (exit 0) or `FAILED -> @h: <reason>` (exit 1)",
        ("--broadcast", "", "one copy to every handle this folder lists, but this one"),
        free=True,
    ),
    "comm poll": cmd("", "show the mail past the read cursor, then move the cursor"),
    "comm unread": cmd("[HANDLE]", "the number of directed unread messages (default: this session's handle)"),
    "comm list": cmd("", "who is registered in this comm folder, live or stale"),
    "comm status": cmd(
        'prompt|stop|interrupted|working|idle|blocked|done|waiting ["text"]',
        "record this session's work state (events from the hooks, states from the agent)",
        free=True,
    ),
    "comm spawn": cmd(
        "<repo-path> [options]",
        "run an agent for a project as a row of this box's daemon (started when none runs)",
        ("--name", "NAME", "the row's handle"),
        ("--agent", "claude|codex", "which agent to run"),
        ("--account", "A", "the agent account to use"),
        ("--expertise", '"a, b"', "the row's expertise"),
        ("--task", '"do X"', "the first prompt typed into the row"),
        ("--label", "L", "the row's label"),
        ("--display-label", "L", "the label shown to people"),
        _ENDPOINT,
        ("--command", "'argv words'", "run this command as the row's agent"),
    ),
    "comm despawn": cmd("<name|slug|workspace_id> [options]", "stop a row and remove it", _ENDPOINT),
    "comm install": cmd(
        "[options]",
        "put the comm-*.sh wrappers and the agent hooks into $SOT_COMM_HOME/bin",
        (
            "--agent-settings",
            "[=PATH]",
            "also register the hooks and the allow rules for sotd's mail scripts in Claude Code's "
            "settings (~/.claude/settings.json, or PATH), and put the sot-session-start skill beside it; "
            "for Codex, its hooks in $CODEX_HOME/hooks.json (~/.codex) and rules/sot-comm.rules",
        ),
        ("--skill", "", "put the sot-session-start skill into ~/.claude/skills only"),
        ("--sotd", "PATH", "the sotd the scripts and hooks run (default: this installation's own)"),
    ),
    "comm uninstall": cmd(
        "", "take out exactly what install added (wrappers, hooks, allow rules, skill); the mail stays"
    ),
    "comm hook": cmd(
        "start|stop|prompt|pre-tool|post-tool|permission",
        "the agent hooks (run by Claude Code or Codex; JSON on stdin)",
    ),
    "comm relay": cmd(
        'send @to "msg" | send --all "msg"', "the relay's send (comm-relay.sh send)", free=True
    ),
    "daemon": cmd("<command> [--socket PATH]", "this box's daemon: files mail, links boxes, runs rows"),
    "daemon run": cmd("[options]", "serve in the foreground until SIGTERM or SIGINT", _SOCKET),
    "daemon start": cmd(
        "[options]", "start one in the background (unless one answers); prints its socket", _SOCKET
    ),
    "daemon stop": cmd("[options]", "stop the daemon that the status file names", _SOCKET),
    "daemon status": cmd(
        "[options]", "ask the daemon for its version, role, links and restart request", _SOCKET
    ),
    "daemon reload": cmd(
        "[options]",
        "read hosts.toml again and apply it without dropping working links; prints what changed",
        _SOCKET,
    ),
    "daemon install": cmd(
        "[options]",
        "write a systemd user unit that runs the daemon (enabled where systemd runs for you)",
        _SOCKET,
    ),
    "daemon uninstall": cmd("[options]", "disable and remove that systemd user unit", _SOCKET),
    "doctor": cmd(
        "[options]",
        "check this box: comm folder, locks, inboxes, the daemon, hub and links, rows, hooks, identity",
        _JSON,
        ("--fix", "", "apply the fixes that are safe, printing each"),
    ),
    "stdio-bridge": cmd(
        "[options]",
        "join stdin/stdout to a daemon (what an ssh link runs on the far box)",
        ("--endpoint", "unix:<path>", "the daemon to join (default: this box's)"),
        ("--host", "<host>", "the host this end declares"),
    ),
    "mcp": cmd(
        "",
        "serve mail as MCP tools (join, send, poll, unread, list, status) on stdin/stdout, for one agent "
        "session that starts it",
    ),
    "web": cmd(
        "[options]",
        "serve this box's fleet as a live page on 127.0.0.1; prints its address with a secret",
        ("--port", "N", "the port to listen on (default: one the system picks)"),
        _SOCKET,
    ),
    "topology": cmd("relay-endpoint|path", "what hosts.toml says: the relay endpoint, or the file's path"),
    "session-socket-path": cmd(
        "<label>",
        "print the socket this box's daemon for this comm folder listens on with <label> ($SOT_SOCKET, "
        "else the default): how a 0.6.6 client finds it",
    ),
    "ocx": cmd("<command> [args]", "OCX v2 messages carried through Fossil"),
    "ocx post": cmd("FILE [options]", "post a message; prints its hash", _REPO, _JSON),
    "ocx answer": cmd(
        "HASH [options]",
        "answer a message",
        ("--kind", "K", "the answer's kind"),
        ("--body", "JSON", "the answer's body"),
        _REPO,
        _JSON,
    ),
    "ocx list": cmd(
        "[options]",
        "list messages",
        ("--to", "L", "addressed to L"),
        ("--re", "H", "answering H"),
        ("--kind", "K", "of kind K"),
        _REPO,
        _JSON,
    ),
    "ocx show": cmd("HASH [options]", "show one message", _JSON),
    "ocx answers": cmd("HASH [options]", "the answers to a message", _JSON),
    "ocx sync": cmd("[options]", "sync with the node's peers", _JSON),
    "ocx rebuild": cmd("[options]", "rebuild the index from the repositories", _REPO),
    "ocx clone": cmd("URL FILE", "clone a repository"),
    "ocx server-code": cmd(
        "REPO [options]", "print (or make) a repository's server code", ("--new", "", "make a new one")
    ),
    "ocx node": cmd(
        "[options]",
        "run the node (sync, runs) in the foreground",
        ("--once", "", "one pass, then exit"),
        ("--interval", "S", "seconds between passes"),
    ),
}

HELP_OPT: Opt = ("-h, --help", "", "show this help and exit")


def members(path: str) -> list[str]:
    """The commands one word below ``path`` (a group's members), in table order."""
    depth = len(path.split()) + 1 if path else 1
    prefix = f"{path} " if path else ""
    return [k for k in TABLE if k.startswith(prefix) and k and len(k.split()) == depth]


def flags(path: str) -> list[str]:
    """The option names of ``path`` (``--agent-settings`` for ``--agent-settings[=PATH]``)."""
    return [flag for flag, _value, _help in TABLE[path].options]


def name_of(path: str, prog: str = "") -> str:
    """What the user typed for ``path``: the wrapper's name when one ran us (``$SOT_COMM_PROG``)."""
    return prog if prog and path.startswith("comm ") else f"sotd {path}".rstrip()


def _shown(opt: Opt) -> str:
    flag, value, _help = opt
    return flag + value if value.startswith("[") else f"{flag} {value}".rstrip()


def usage(path: str, prog: str = "") -> str:
    """``usage: <name> <synopsis>``, the synopsis's ``[options]`` spelled out from the entry's options."""
    entry = TABLE[path]
    synopsis, opts = entry.synopsis, entry.options
    if "[options]" in synopsis:
        synopsis = synopsis.replace("[options]", " ".join(f"[{_shown(o)}]" for o in opts))
    return f"usage: {name_of(path, prog)} {synopsis}".rstrip()


def usages(group: str) -> str:
    """One usage line per member of ``group`` (what a wrong command line of that group is shown)."""
    return "\n".join(usage(k) for k in members(group))


def help_text(path: str, prog: str = "") -> str:
    """Usage, summary, options (``-h, --help`` last) and, for a group, its members."""
    entry = TABLE[path]
    synopsis, opts = entry.synopsis, entry.options
    lines = [usage(path, prog), "", entry.summary]
    below = members(path)
    if below:
        width = max(len(k.split()[-1]) for k in below)
        lines += ["", "commands:" if not path else f"{path} commands:"]
        for k in below:
            lines.append(f"  {k.split()[-1]:<{width}}  {TABLE[k].summary}")
        lines += [
            "",
            f"`{name_of(path, prog)} {synopsis.split()[0]} --help` shows each one's options",
        ]
    shown = [(_shown(o), o[2]) for o in (*opts, HELP_OPT)]
    width = max(len(left) for left, _ in shown)
    lines += ["", "options:"]
    lines += [f"  {left:<{width}}  {text}" for left, text in shown]
    return "\n".join(lines) + "\n"


HELP = "help"
BAD = "bad"


def check(path: str, argv: list[str]) -> tuple[str, str]:
    """(``HELP``, "") when help is asked; (``BAD``, the problem) for an option ``path`` does not have;
    ("", "") otherwise. Options are checked up to ``--``, and for a ``free`` command up to its first
    positional word (the rest is text). A value-taking option's next word is its value."""
    opts, free = TABLE[path].options, TABLE[path].free
    valued = {flag for flag, value, _ in opts if value and not value.startswith("[")}
    known = {flag for flag, _, _ in opts}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            break
        if a in ("-h", "--help"):
            return HELP, ""
        if a.startswith("--") or (len(a) > 1 and a[0] == "-" and a[1].isalpha()):
            name = a.split("=", 1)[0]
            if name not in known:
                return BAD, f"unknown option '{name}'"
            if name in valued and "=" not in a:
                i += 1  # its value, whatever it looks like
        elif free:
            break
        i += 1
    return "", ""


class Parsed:
    """One command line read against its entry: the options given (flag without its dashes -> value; a
    switch's value is ""), the other words in order, and the value-taking option left without a value."""

    __slots__ = ("missing", "opts", "seq", "words")

    def __init__(self) -> None:
        self.opts: dict[str, str] = {}
        self.words: list[str] = []
        self.seq: list[tuple[str, str]] = []  # (option name or "" for a word, value) in command-line order
        self.missing = ""  # e.g. "--name" for ``join --name``: the verb says it in its own words


def parse(path: str, argv: list[str]) -> Parsed:
    """Read ``argv`` with ``path``'s options: ``--flag value`` or ``--flag=value`` for a value-taking one,
    ``--flag`` for a switch, ``-h``/``--help`` as the switch ``help``; any other word (an unknown option
    included: ``check`` refused those first) is kept in ``words``. A later option replaces an earlier one.
    Pure; the verbs decide what the words mean and say what is wrong in their own words."""
    opts = TABLE[path].options
    valued = {flag for flag, value, _ in opts if value and not value.startswith("[")}
    switches = {flag for flag, value, _ in opts if not value}
    parsed = Parsed()
    i = 0
    while i < len(argv):
        a = argv[i]
        flag, eq, value = a.partition("=")
        if flag in valued:
            if not eq:
                if i + 1 >= len(argv):
                    parsed.missing = a
                    break
                i += 1
                value = argv[i]
            parsed.opts[flag[2:]] = value
            parsed.seq.append((flag[2:], value))
        elif a in switches:
            parsed.opts[a[2:]] = ""
            parsed.seq.append((a[2:], ""))
        elif a in ("-h", "--help"):
            parsed.opts["help"] = ""
            parsed.seq.append(("help", ""))
        else:
            parsed.words.append(a)
            parsed.seq.append(("", a))
        i += 1
    return parsed
