"""The ``run`` body (ocx.md 1.2-1.6): its value objects and ``parse_run``, which checks every field.

Everything here is pure: JSON-shaped values in, frozen value objects out, or ``Refused`` whose message is
the one sentence ``ended.why`` carries. A run goes through three stages, in this order:

1. ``parse_run(body)`` (here) checks shapes and types of every field (templates are kept as written);
2. ``sotd.jobs.placeholders.resolve(run, base)`` expands every ``$$name$$`` (O5) step by step;
3. ``sotd.jobs.nodepolicy.check(resolved, policy)`` answers the node policy: a refusal reason, or
   ``None``; ``nodepolicy.cap_limits(limits, policy)`` then lowers limits to the node's maxima.

Guarantee: a run that passes all three names only paths, ids, capabilities and limits the node allows.
What would break it here: a field read without its type checked (a later stage would trust a string that
is a list), or a template altered while parsing (``resolve`` must see it as written).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sotd.jobs.errors import Refused

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

STEP_KINDS = ("directory", "files", "password", "clone", "checkout")
DELIVERIES = ("start", "new", "none")

# Every capability name Linux knows (capability.h, up to CAP_CHECKPOINT_RESTORE).
CAPABILITIES = frozenset(
    "CAP_" + n
    for n in [
        "CHOWN",
        "DAC_OVERRIDE",
        "DAC_READ_SEARCH",
        "FOWNER",
        "FSETID",
        "KILL",
        "SETGID",
        "SETUID",
        "SETPCAP",
        "LINUX_IMMUTABLE",
        "NET_BIND_SERVICE",
        "NET_BROADCAST",
        "NET_ADMIN",
        "NET_RAW",
        "IPC_LOCK",
        "IPC_OWNER",
        "SYS_MODULE",
        "SYS_RAWIO",
        "SYS_CHROOT",
        "SYS_PTRACE",
        "SYS_PACCT",
        "SYS_ADMIN",
        "SYS_BOOT",
        "SYS_NICE",
        "SYS_RESOURCE",
        "SYS_TIME",
        "SYS_TTY_CONFIG",
        "MKNOD",
        "LEASE",
        "AUDIT_WRITE",
        "AUDIT_CONTROL",
        "SETFCAP",
        "MAC_OVERRIDE",
        "MAC_ADMIN",
        "SYSLOG",
        "WAKE_ALARM",
        "BLOCK_SUSPEND",
        "AUDIT_READ",
        "PERFMON",
        "BPF",
        "CHECKPOINT_RESTORE",
    ]
)

_HEX40 = re.compile(r"[0-9a-f]{40}")
_DURATION = re.compile(r"([0-9]+)([smhd]?)")
_SIZE = re.compile(r"([0-9]+)([KMGT]?)")
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_BYTES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
MAX_ID = (1 << 32) - 2  # (uid_t)-1 is "no change" to the kernel


# ---------------------------------------------------------------------------------------------- values


@dataclass(frozen=True)
class Step:
    """One workspace step (ocx.md 1.3). ``at`` for directory, ``of`` for files/checkout, ``into`` for
    files/clone/checkout; the others are ``None``."""

    kind: str
    at: str | None = None
    of: str | None = None
    into: str | None = None


@dataclass(frozen=True)
class CreatedFile:
    """A file written into the sandbox at start with ``--ro-bind-data`` (``path`` inside, ``content``)."""

    path: str
    content: str
    mode: int = 0o444


@dataclass(frozen=True)
class Sandbox:
    """``run.sandbox`` (ocx.md 1.4). Absent booleans take the safe value; absent mounts are not made."""

    uid: int
    gid: int
    capabilities: tuple[str, ...] = ()
    network: bool = False
    isolate_terminal: bool = True
    ends_with_parent: bool = True
    proc: str | None = None
    dev: str | None = None
    tmp: str | None = None
    read_only: tuple[str, ...] = ()
    read_write: tuple[str, ...] = ()
    homes: tuple[str, ...] = ()
    created_files: tuple[CreatedFile, ...] = ()


@dataclass(frozen=True)
class Limits:
    """``run.limits`` (ocx.md 1.5) in seconds and bytes; ``text`` keeps each as written, for ``started``."""

    wall: int | None = None
    cpu: int | None = None
    processes: int | None = None
    file_size: int | None = None
    memory: int | None = None
    tmp_size: int | None = None
    disk: int | None = None
    text: Mapping[str, str | int] = field(default_factory=dict)

    def report(self) -> dict[str, str | int]:
        """``started.limits``: each applied limit as written (or as the node's maximum was written)."""
        return {k: self.text[k] for k in LIMIT_NAMES if getattr(self, k) is not None}


LIMIT_NAMES = ("wall", "cpu", "processes", "file_size", "memory", "tmp_size", "disk")
SIZE_LIMITS = ("file_size", "memory", "tmp_size", "disk")


@dataclass(frozen=True)
class Output:
    """One ``process.unversioned_files`` entry: the file ``at`` in the workspace, stored ``as``."""

    at: str
    as_: str


@dataclass(frozen=True)
class Process:
    """``run.process`` (ocx.md 1.6)."""

    user: str
    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    verdict: bool = False
    unversioned_files: tuple[Output, ...] = ()
    session: bool = False
    hears: tuple[str, ...] = ()
    deliveries: str | None = None


@dataclass(frozen=True)
class RunSpec:
    """A whole ``run`` body. After ``resolve`` every string holds no placeholder."""

    clone: str
    objective: str
    workspace: tuple[Step, ...]
    sandbox: Sandbox
    limits: Limits
    process: Process


# ------------------------------------------------------------------------------------------------ units


def parse_duration(v: object, what: str) -> int:
    """Seconds from ``90``, ``"90"``, ``"90s"``, ``"5m"``, ``"1h"``, ``"2d"`` (O8); refuses anything else."""
    if isinstance(v, int) and not isinstance(v, bool):
        if v <= 0:
            raise Refused(f"{what} must be positive, not {v}")
        return v
    if isinstance(v, str):
        m = _DURATION.fullmatch(v)
        if m and int(m.group(1)) > 0:
            return int(m.group(1)) * _SECONDS[m.group(2)]
    raise Refused(f"{what} must be a positive number of seconds or a count with s/m/h/d, not {v!r}")


def parse_size(v: object, what: str) -> int:
    """Bytes from ``1024``, ``"512K"``, ``"2G"`` (binary units, O8); refuses anything else."""
    if isinstance(v, int) and not isinstance(v, bool):
        if v <= 0:
            raise Refused(f"{what} must be positive, not {v}")
        return v
    if isinstance(v, str):
        m = _SIZE.fullmatch(v)
        if m and int(m.group(1)) > 0:
            return int(m.group(1)) * _BYTES[m.group(2)]
    raise Refused(f"{what} must be a positive number of bytes or a count with K/M/G/T, not {v!r}")


# ---------------------------------------------------------------------------------------------- parsing


def _obj(v: object, what: str, allowed: Sequence[str], required: Sequence[str] = ()) -> Mapping[str, object]:
    if not isinstance(v, dict):
        raise Refused(f"{what} must be an object")
    for k in v:
        if k not in allowed:
            raise Refused(f"{what} has an unknown field {k!r}")
    for k in required:
        if k not in v:
            raise Refused(f"{what} lacks the field {k!r}")
    return v


def _str(v: object, what: str, *, empty: bool = False) -> str:
    if not isinstance(v, str) or (not v and not empty) or "\0" in v:
        raise Refused(f"{what} must be a {'' if empty else 'non-empty '}string")
    return v


def _bool(v: object, what: str) -> bool:
    if not isinstance(v, bool):
        raise Refused(f"{what} must be true or false")
    return v


def _id(v: object, what: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= MAX_ID:
        raise Refused(f"{what} must be an integer from 0 to {MAX_ID}")
    return v


def _list(v: object, what: str) -> list[object]:
    if not isinstance(v, list):
        raise Refused(f"{what} must be a list")
    return v


def _path(v: object, what: str) -> str:
    s = _str(v, what)
    if not (s.startswith("/") or s.startswith("$$")):
        raise Refused(f"{what} must be an absolute path, not {s!r}")
    return s


def is_login(s: object) -> bool:
    """A Fossil login we accept: 1-64 printable characters, no ``/``, no spaces, not ``.``/``..``."""
    return (
        isinstance(s, str)
        and 0 < len(s) <= 64
        and s not in (".", "..")
        and all(c.isprintable() and c not in "/ \\" for c in s)
    )


def _login(v: object, what: str) -> str:
    if not is_login(v):
        raise Refused(f"{what} must be a login (1-64 printable characters, no '/' or spaces), not {v!r}")
    assert isinstance(v, str)
    return v


def parse_steps(v: object) -> tuple[Step, ...]:
    """``run.workspace``: ``directory`` first and once; each other kind at most once; ``clone`` after
    ``password``; ``checkout`` after ``clone``."""
    items = _list(v, "run.workspace")
    steps: list[Step] = []
    seen: set[str] = set()
    for i, raw in enumerate(items):
        what = f"run.workspace[{i}]"
        if not isinstance(raw, dict):
            raise Refused(f"{what} must be an object")
        kind = raw.get("step")
        if kind not in STEP_KINDS:
            raise Refused(f"{what}.step must be one of {', '.join(STEP_KINDS)}, not {kind!r}")
        assert isinstance(kind, str)
        if kind in seen:
            raise Refused(f"{what}: the step {kind!r} appears twice")
        if (i == 0) != (kind == "directory"):
            raise Refused(f"{what}: the first step, and only it, must be 'directory'")
        if kind == "clone" and "password" not in seen:
            raise Refused(f"{what}: 'clone' needs a 'password' step before it")
        if kind == "checkout" and "clone" not in seen:
            raise Refused(f"{what}: 'checkout' needs a 'clone' step before it")
        seen.add(kind)
        if kind == "directory":
            d = _obj(raw, what, ("step", "at"), ("at",))
            steps.append(Step(kind, at=_path(d["at"], f"{what}.at")))
        elif kind == "password":
            _obj(raw, what, ("step",))
            steps.append(Step(kind))
        elif kind == "clone":
            d = _obj(raw, what, ("step", "into"), ("into",))
            steps.append(Step(kind, into=_path(d["into"], f"{what}.into")))
        else:  # files, checkout
            d = _obj(raw, what, ("step", "of", "into"), ("of", "into"))
            of = _str(d["of"], f"{what}.of")
            if of.startswith("-") or any(c.isspace() for c in of):
                raise Refused(f"{what}.of must name a check-in (no leading '-', no spaces), not {of!r}")
            steps.append(Step(kind, of=of, into=_path(d["into"], f"{what}.into")))
    if not steps:
        raise Refused("run.workspace must start with a 'directory' step")
    return tuple(steps)


def parse_capability(v: object, what: str) -> str:
    s = _str(v, what).upper()
    if not s.startswith("CAP_"):
        s = "CAP_" + s
    if s not in CAPABILITIES:
        raise Refused(f"{what} is not a Linux capability: {v!r}")
    return s


def parse_sandbox(v: object) -> Sandbox:
    """``run.sandbox``; ``uid`` and ``gid`` are required, every other field has a safe default."""
    keys = [
        "uid",
        "gid",
        "linux_capabilities",
        "network",
        "isolate_terminal",
        "ends_with_parent",
        "proc",
        "dev",
        "tmp",
        "read_only",
        "read_write",
        "homes",
        "created_files",
    ]
    d = _obj(v, "run.sandbox", keys, ("uid", "gid"))
    w = "run.sandbox."
    caps = tuple(
        parse_capability(c, f"{w}linux_capabilities[{i}]")
        for i, c in enumerate(_list(d.get("linux_capabilities", []), w + "linux_capabilities"))
    )
    created: list[CreatedFile] = []
    for i, c in enumerate(_list(d.get("created_files", []), w + "created_files")):
        cw = f"{w}created_files[{i}]"
        cd = _obj(c, cw, ("path", "content", "mode"), ("path", "content"))
        mode = cd.get("mode", 0o444)
        if isinstance(mode, str) and re.fullmatch(r"0?[0-7]{3,4}", mode):
            mode = int(mode, 8)
        if not isinstance(mode, int) or isinstance(mode, bool) or not 0 <= mode <= 0o7777:
            raise Refused(f"{cw}.mode must be an octal string such as '0644'")
        created.append(
            CreatedFile(
                _path(cd["path"], cw + ".path"), _str(cd["content"], cw + ".content", empty=True), mode
            )
        )

    def opt_path(k: str) -> str | None:
        return None if d.get(k) is None else _path(d[k], w + k)

    def paths(k: str) -> tuple[str, ...]:
        return tuple(_path(p, f"{w}{k}[{i}]") for i, p in enumerate(_list(d.get(k, []), w + k)))

    return Sandbox(
        uid=_id(d["uid"], w + "uid"),
        gid=_id(d["gid"], w + "gid"),
        capabilities=tuple(dict.fromkeys(caps)),
        network=_bool(d.get("network", False), w + "network"),
        isolate_terminal=_bool(d.get("isolate_terminal", True), w + "isolate_terminal"),
        ends_with_parent=_bool(d.get("ends_with_parent", True), w + "ends_with_parent"),
        proc=opt_path("proc"),
        dev=opt_path("dev"),
        tmp=opt_path("tmp"),
        read_only=paths("read_only"),
        read_write=paths("read_write"),
        homes=paths("homes"),
        created_files=tuple(created),
    )


def parse_limits(v: object) -> Limits:
    """``run.limits``: any subset of wall, cpu (durations), processes (count), file_size, memory, tmp_size,
    disk (sizes)."""
    d = _obj({} if v is None else v, "run.limits", LIMIT_NAMES)
    text: dict[str, str | int] = {}
    for k, x in d.items():
        if not isinstance(x, str | int) or isinstance(x, bool):
            raise Refused(f"run.limits.{k} must be a number or a string with a unit")
        text[k] = x
    procs = d.get("processes")
    if procs is not None and (not isinstance(procs, int) or isinstance(procs, bool) or procs <= 0):
        raise Refused(f"run.limits.processes must be a positive integer, not {procs!r}")
    return Limits(
        wall=None if d.get("wall") is None else parse_duration(d["wall"], "run.limits.wall"),
        cpu=None if d.get("cpu") is None else parse_duration(d["cpu"], "run.limits.cpu"),
        processes=procs if isinstance(procs, int) else None,
        text=text,
        **{k: None if d.get(k) is None else parse_size(d[k], f"run.limits.{k}") for k in SIZE_LIMITS},
    )


# Unversioned names OCX itself writes: messages (ocx/m/), logs (ocx/logs/), outputs (ocx/out/), and any
# later ocx/ name. A run's ``as`` may name none of them; outputs are stored below ``ocx/out/<RUN-HASH>/``.
RESERVED_PREFIXES = ("ocx/",)
MAX_OUTPUT_NAME = 200


def output_name_refusal(name: str) -> str | None:
    """Why ``name`` cannot be an ``unversioned_files[].as``, or ``None``: a relative name of non-empty
    segments (no ``.``/``..``, no backslash or control character), at most 200 characters, outside every
    name OCX writes itself (``RESERVED_PREFIXES``)."""
    if len(name) > MAX_OUTPUT_NAME:
        return f"must be at most {MAX_OUTPUT_NAME} characters"
    if name.startswith("/") or any(seg in ("", ".", "..") for seg in name.split("/")):
        return "must be a relative name of non-empty segments without '.' or '..'"
    if any(not c.isprintable() or c == "\\" for c in name):
        return "must hold no backslash or control character"
    for prefix in RESERVED_PREFIXES:
        if name == prefix.rstrip("/") or name.startswith(prefix):
            return f"may not name anything under {prefix!r} (the names OCX itself writes)"
    return None


def output_name(run_hash: str, as_: str) -> str:
    """The unversioned name a run's output ``as_`` is stored under: ``ocx/out/<RUN-HASH>/<as>``, a prefix
    the node chooses per run, so no run overwrites another's outputs, logs or messages."""
    return f"ocx/out/{run_hash}/{as_}"


def parse_process(v: object) -> Process:
    """``run.process``; ``user`` and ``command`` are required."""
    keys = ["user", "command", "env", "cwd", "verdict", "unversioned_files", "session", "hears", "deliveries"]
    d = _obj(v, "run.process", keys, ("user", "command"))
    w = "run.process."
    cmd = tuple(
        _str(a, f"{w}command[{i}]", empty=True) for i, a in enumerate(_list(d["command"], w + "command"))
    )
    if not cmd or not cmd[0]:
        raise Refused(f"{w}command must be a non-empty list whose first item names a program")
    env_raw = d.get("env", {})
    if not isinstance(env_raw, dict):
        raise Refused(f"{w}env must be an object of strings")
    env: dict[str, str] = {}
    for k, x in env_raw.items():
        if not k or "=" in k or "\0" in k:
            raise Refused(f"{w}env has a bad variable name {k!r}")
        env[k] = _str(x, f"{w}env.{k}", empty=True)
    outs: list[Output] = []
    for i, o in enumerate(_list(d.get("unversioned_files", []), w + "unversioned_files")):
        ow = f"{w}unversioned_files[{i}]"
        od = _obj(o, ow, ("at", "as"), ("at", "as"))
        name = _str(od["as"], ow + ".as")
        why = output_name_refusal(name)
        if why:
            raise Refused(f"{ow}.as {why}, not {name!r}")
        outs.append(Output(_path(od["at"], ow + ".at"), name))
    session = _bool(d.get("session", False), w + "session")
    hears = tuple(_login(h, f"{w}hears[{i}]") for i, h in enumerate(_list(d.get("hears", []), w + "hears")))
    deliveries = d.get("deliveries")
    if deliveries is not None and deliveries not in DELIVERIES:
        raise Refused(f"{w}deliveries must be one of {', '.join(DELIVERIES)}, not {deliveries!r}")
    if not session and (hears or deliveries is not None):
        raise Refused(f"{w}hears and {w}deliveries need session: true")
    return Process(
        user=_login(d["user"], w + "user"),
        command=cmd,
        env=env,
        cwd=None if d.get("cwd") is None else _path(d["cwd"], w + "cwd"),
        verdict=_bool(d.get("verdict", False), w + "verdict"),
        unversioned_files=tuple(outs),
        session=session,
        hears=hears,
        deliveries=deliveries if isinstance(deliveries, str) else ("start" if session else None),
    )


def parse_run(body: object) -> RunSpec:
    """The whole ``run`` body, or ``Refused`` naming the first bad field."""
    d = _obj(body, "run", ("clone", "objective", "workspace", "sandbox", "limits", "process"),
             ("clone", "objective", "workspace", "sandbox", "process"))  # fmt: skip
    clone = d["clone"]
    if not isinstance(clone, str) or not _HEX40.fullmatch(clone):
        raise Refused("run.clone must be a server-code (40 lower-case hex digits)")
    return RunSpec(
        clone=clone,
        objective=_str(d["objective"], "run.objective", empty=True),
        workspace=parse_steps(d["workspace"]),
        sandbox=parse_sandbox(d["sandbox"]),
        limits=parse_limits(d.get("limits")),
        process=parse_process(d["process"]),
    )
