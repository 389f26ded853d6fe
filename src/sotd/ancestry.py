"""The identity check (behaviour 5): may this process act as a comm handle?

A process acts as a handle only if at most one agent (claude, codex) lies between it and its row's capsule,
or the top of its process tree when outside a row; a process whose identity names a row must also run
inside that row's capsule; an ancestry that cannot be read in full is refused.

Shape: ``read_chain`` is the only I/O on /proc (root injectable for fake trees; the stat line is read and
split by ``sotd.sysprobe``), ``row_named`` reads the environment, ``verdict`` is pure, ``check`` glues them. Return codes follow ``sot_require_agent``:
0 ok, 1 a second agent, 2 truncated ancestry or not inside the named row's capsule.

What would break it: recognising a capsule or agent by anything but argv (a renamed binary passes), or
reading past a truncation as if the chain were whole.
"""

from __future__ import annotations

import os

from sotd import sysprobe

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

MAX_RECORDS = 64
AGENTS = ("claude", "codex")
CAPSULE = "sot-capsule"

_NODE_PACKAGES = (("@anthropic-ai/claude-code", "claude"), ("@openai/codex", "codex"))
_SCRIPT_EXTS = (".js", ".mjs", ".cjs")

TEXT_SECOND_AGENT = (
    "this process runs under {inner}, started inside {outer}'s session, so it has no comm identity — "
    "nothing was read, sent or stamped; do not retry or join: an agent that needs its own handle is "
    "started as its own row"
)
TEXT_NOT_IN_CAPSULE = (
    "this process names row {row} but is not shown to run inside that row's capsule, so it has no comm "
    "identity; nothing was read, sent or stamped; start it inside the row, or as its own row"
)
# Not in the spec (5.4's sentence stays first and whole): what follows it when the command ran inside
# Codex's sandbox, which runs a command in a PID namespace of its own whose first process is
# ``codex-linux-sandbox`` (seen on 0.171.0), so no capsule can be seen from there. It names the cause and
# the two ways that work: the MCP tools (Codex's own child, outside the sandbox), or the plain form that
# Codex's rules let run outside it.
TEXT_CODEX_SANDBOX = (
    ". It ran inside Codex's sandbox, which hides the row from it: send and read mail with the sotd MCP "
    "tools (send, poll), or run the script in its plain form, which Codex runs outside its sandbox: the "
    "script and its words alone, the text in single quotes (comm-send.sh @handle 'text', comm-poll.sh), "
    "with no pipe, redirection, 2>&1 or escaped quotes"
)
SANDBOXES = ("codex-linux-sandbox",)  # argv[0] names of an agent's sandbox launcher

TEXT_TRUNCATED = (
    "cannot read this process's ancestry in full (/proc or ps; sotd.exe ancestors on Windows), so it "
    "cannot be shown to be its session's own agent — nothing was read, sent or stamped"
)


# --------------------------------------------------------------------------------------------- walking


def _read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def read_chain(pid: int | None = None, proc: str = "/proc") -> tuple[list[list[str]], bool]:
    """argv records nearest-first from ``pid`` (default: this process) up to the top; and ``truncated``.

    The walk ends after the record whose parent pid is <= 1. Unreadable stat or cmdline, an empty cmdline,
    a non-numeric ppid, or a chain of 64 records or more make it truncated (the records read so far are
    still returned: a capsule among them is still honoured).
    """
    cur = os.getpid() if pid is None else pid
    records: list[list[str]] = []
    while True:
        if len(records) >= MAX_RECORDS:
            return records, True
        base = os.path.join(proc, str(cur))
        stat = sysprobe.stat_bytes(cur, proc)
        cmdline = _read_bytes(os.path.join(base, "cmdline"))
        if stat is None or not cmdline:
            return records, True
        if cmdline.endswith(b"\0"):
            cmdline = cmdline[:-1]
        records.append([a.decode("utf-8", "surrogateescape") for a in cmdline.split(b"\0")])
        fields = sysprobe.split_stat(stat)
        ppid = None if fields is None else sysprobe.ppid_in(fields[1])
        if ppid is None:
            return records, True
        if ppid <= 1:
            if len(records) >= MAX_RECORDS:
                return records, True
            return records, False
        cur = ppid


# ------------------------------------------------------------------------------------------ recognising


def _basename(arg: str) -> str:
    return arg.replace("\\", "/").rsplit("/", 1)[-1]


def _name(arg0: str) -> str:
    """Basename of argv[0], leading ``-`` removed (login shells), lower-cased, ``.exe`` removed."""
    name = _basename(arg0).lstrip("-").lower()
    if name.endswith(".exe"):
        name = name[:-4]
    return name


def _is_python(name: str) -> bool:
    if not name.startswith("python"):
        return False
    rest = name[6:]
    return all(c.isdigit() or c == "." for c in rest)


def _node_agent(argv: list[str]) -> tuple[str, int] | None:
    """For a node host: the agent its first agent-naming non-option argument names, and that index."""
    for i in range(1, len(argv)):
        arg = argv[i]
        if arg.startswith("-"):
            continue
        path = arg.replace("\\", "/")
        low = path.lower()
        for pkg, agent in _NODE_PACKAGES:
            if pkg in low:
                return agent, i
        base = _basename(low)
        for ext in _SCRIPT_EXTS:
            if base.endswith(ext):
                base = base[: -len(ext)]
                break
        if base in AGENTS:
            return base, i
    return None


def agent_of(argv: list[str]) -> str | None:
    """``"claude"``/``"codex"`` when this argv record is an agent (native or hosted by node), else None."""
    if not argv:
        return None
    name = _name(argv[0])
    if name in AGENTS:
        return name
    if name == "node":
        found = _node_agent(argv)
        return found[0] if found else None
    return None


def nearest_agent(chain: list[list[str]]) -> str | None:
    """The agent (``"claude"``/``"codex"``) nearest this process in ``chain`` (``read_chain``'s records,
    nearest first), None when no record is one. Pure."""
    for argv in chain:
        agent = agent_of(argv)
        if agent is not None:
            return agent
    return None


def _agent_args(argv: list[str]) -> tuple[str, bool, list[str]] | None:
    """(agent, hosted_by_node, the arguments the agent received) or None."""
    if not argv:
        return None
    name = _name(argv[0])
    if name in AGENTS:
        return name, False, argv[1:]
    if name == "node":
        found = _node_agent(argv)
        if found is not None:
            return found[0], True, argv[found[1] + 1 :]
    return None


def capsule_args(argv: list[str]) -> list[str] | None:
    """The capsule's arguments when this record is ``sot-capsule`` (or a python running it), else None."""
    if not argv:
        return None
    name = _name(argv[0])
    if name == CAPSULE:
        return argv[1:]
    if _is_python(name) and len(argv) >= 2 and _name(argv[1]) == CAPSULE:
        return argv[2:]
    return None


def is_capsule(argv: list[str]) -> bool:
    return capsule_args(argv) is not None


def capsule_names_row(argv: list[str], row: str) -> bool:
    """True when the capsule record ``argv`` names ``row``: an argument before any ``--`` (backslashes read
    as slashes) ending in ``/workspaces/<row>`` or containing ``/workspaces/<row>/voyages/``."""
    args = capsule_args(argv)
    if args is None or not row:
        return False
    tail = "/workspaces/" + row
    inner = tail + "/voyages/"
    for arg in args:
        if arg == "--":
            break
        path = arg.replace("\\", "/")
        if path.endswith(tail) or inner in path:
            return True
    return False


def row_named(
    environ: Mapping[str, str], comm_home: str | None = None, declared_host: str | None = None
) -> str | None:
    """The row this process's identity names, or None.

    A pinned ``SOT_COMM_SELF_FILE`` wins: its leaf ``<host>__<id>.txt`` names ``<id>`` (with several ``__``
    the declared host prefix is stripped when it matches, else the text after the first ``__``); ``nopane``
    or a leaf of another form names no row. Without a pinned file: ``$SOT_WORKSPACE_ID``. ``comm_home`` is
    accepted for symmetry with the callers and not consulted: the leaf alone decides.
    """
    del comm_home
    pinned = environ.get("SOT_COMM_SELF_FILE", "")
    if pinned:
        leaf = _basename(pinned)
        if not leaf.endswith(".txt"):
            return None
        stem = leaf[:-4]
        if "__" not in stem:
            return None
        if stem.count("__") > 1 and declared_host and stem.startswith(declared_host + "__"):
            rid = stem[len(declared_host) + 2 :]
        else:
            rid = stem.split("__", 1)[1]
        if not rid or rid == "nopane":
            return None
        return rid
    return environ.get("SOT_WORKSPACE_ID") or None


# ------------------------------------------------------------------------------------------------ verdict


def is_sandbox_launcher(argv: list[str]) -> bool:
    """Whether ``argv`` is Codex's sandbox launcher, the first process of the PID namespace Codex runs a
    sandboxed command in. Pure."""
    return bool(argv) and _name(argv[0]) in SANDBOXES


def in_codex_sandbox(environ: Mapping[str, str], proc: str = "/proc") -> bool:
    """Whether this process runs inside Codex's sandbox: the first process of its PID namespace (pid 1,
    which the walk never reads: it ends at the record whose parent is pid 1) is Codex's launcher, or
    Codex said so (``CODEX_SANDBOX=seatbelt`` on macOS)."""
    if environ.get("CODEX_SANDBOX"):
        return True
    cmdline = _read_bytes(os.path.join(proc, "1", "cmdline"))
    if not cmdline:
        return False
    return is_sandbox_launcher([a.decode("utf-8", "surrogateescape") for a in cmdline.split(b"\0")])


def verdict(
    chain: list[list[str]], truncated: bool, row: str | None, *, sandboxed: bool = False
) -> tuple[int, str | None]:
    """Judge a chain (nearest first). Pure.

    Layers are counted up to the capsule (or the end of what was read); a node host directly above its
    native child of the same agent with the same arguments is one layer. More than one layer -> 1. Then a
    capsule reached decides by the row test; without one, a truncated chain -> 2, a named row -> 2 (its
    text followed by ``TEXT_CODEX_SANDBOX`` when ``sandboxed``: the process runs inside Codex's sandbox).
    """
    layers: list[str] = []
    prev: tuple[str, bool, list[str]] | None = None
    capsule: list[str] | None = None
    for rec in chain:
        if is_capsule(rec):
            capsule = rec
            break
        cur = _agent_args(rec)
        if cur is not None:
            merged = prev is not None and cur[1] and not prev[1] and cur[0] == prev[0] and cur[2] == prev[2]
            if not merged:
                layers.append(cur[0])
        prev = cur
    if len(layers) > 1:
        return 1, TEXT_SECOND_AGENT.format(inner=layers[0], outer=layers[-1])
    if capsule is not None:
        if row is None or capsule_names_row(capsule, row):
            return 0, None
        return 2, TEXT_NOT_IN_CAPSULE.format(row=row)
    if truncated:
        return 2, TEXT_TRUNCATED
    if row is not None:
        note = TEXT_CODEX_SANDBOX if sandboxed else ""
        return 2, TEXT_NOT_IN_CAPSULE.format(row=row) + note
    return 0, None


def check(
    environ: Mapping[str, str] | None = None, *, pid: int | None = None, proc: str = "/proc"
) -> tuple[int, str | None]:
    """Run the identity check for this process (or ``pid``): ``(0, None)`` or ``(1|2, why)``.

    The walk starts at the current process itself: it is ``python``/``sotd`` (never an agent), so counting
    it changes nothing, and starting there means no record between us and the first agent is skipped.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    host = None
    pinned = env.get("SOT_COMM_SELF_FILE", "")
    if pinned and _basename(pinned).count("__") > 1:
        host = sysprobe.declared_host(env)
    row = row_named(env, None, host)
    chain, truncated = read_chain(pid, proc)
    rc, why = verdict(chain, truncated, row)
    # pid 1 is read only for a row's refusal: the one a sandbox explains
    if row is not None and why == TEXT_NOT_IN_CAPSULE.format(row=row) and in_codex_sandbox(env, proc):
        return verdict(chain, truncated, row, sandboxed=True)
    return rc, why
