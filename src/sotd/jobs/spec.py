"""The ``run`` body (ocx.md 1.2-1.6): parse, expand placeholders, check against the node policy.

Everything here is pure: JSON-shaped values in, frozen value objects out, or ``Refused`` whose message is
the one sentence ``ended.why`` carries. Three stages, in this order:

1. ``parse_run(body)`` checks shapes and types of every field (templates are kept as written);
2. ``resolve(run, base)`` expands every ``$$name$$`` (O5) step by step, so ``$$workspace$$`` exists only
   after the ``directory`` step and ``$$tree$$`` only after a ``files``/``checkout`` step, and refuses a
   workspace path that leaves ``$$root$$`` (normalised here; the runner re-checks with ``realpath``);
3. ``check(resolved, policy)`` answers the node policy: a refusal reason, or ``None``.
   ``cap_limits(limits, policy)`` then lowers limits to the node's maxima (never refuses).

Guarantee: a run that passes all three names only paths, ids, capabilities and limits the node allows.
What would break it: a placeholder value containing ``$$`` or ``/`` smuggled in by the caller; ``base``
values are the caller's and are checked by ``resolve`` (``process_user`` / ``repository_name`` may not
contain ``/``, be ``.``/``..`` or be empty).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace

from sotd.jobs.errors import PolicyError, Refused

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

PLACEHOLDERS = frozenset({"root", "process_user", "repository_name", "run", "workspace", "tree", "release"})
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
_NAME = re.compile(r"[a-z_]+")
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
# What a node's policy caps when it names no maximum (issue 18: each of these limits has a default).
DEFAULT_MAXIMA: Mapping[str, str] = {"memory": "4G", "tmp_size": "512M", "disk": "8G"}


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
class Run:
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


def _capability(v: object, what: str) -> str:
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
        _capability(c, f"{w}linux_capabilities[{i}]")
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


def parse_run(body: object) -> Run:
    """The whole ``run`` body, or ``Refused`` naming the first bad field."""
    d = _obj(body, "run", ("clone", "objective", "workspace", "sandbox", "limits", "process"),
             ("clone", "objective", "workspace", "sandbox", "process"))  # fmt: skip
    clone = d["clone"]
    if not isinstance(clone, str) or not _HEX40.fullmatch(clone):
        raise Refused("run.clone must be a server-code (40 lower-case hex digits)")
    return Run(
        clone=clone,
        objective=_str(d["objective"], "run.objective", empty=True),
        workspace=parse_steps(d["workspace"]),
        sandbox=parse_sandbox(d["sandbox"]),
        limits=parse_limits(d.get("limits")),
        process=parse_process(d["process"]),
    )


# ------------------------------------------------------------------------------------------ placeholders


def expand(template: str, values: Mapping[str, str]) -> str:
    """``template`` with each ``$$name$$`` replaced by ``values[name]`` (one pass, never recursive).

    ``$$$$`` is the escape for a literal ``$$`` (``sh -c 'echo $$$$'`` prints the shell's pid). Refuses
    an unclosed ``$$``, a name not in O5's list, and a known name that has no value yet.
    """
    parts = template.split("$$")
    if len(parts) % 2 == 0:
        raise Refused(f"unclosed placeholder in {template!r}")
    out = []
    for i, p in enumerate(parts):
        if i % 2 == 0:
            out.append(p)
        elif p == "":
            out.append("$$")  # the escape: $$$$ is a literal $$ (a shell's pid, say)
        elif not _NAME.fullmatch(p) or p not in PLACEHOLDERS:
            raise Refused(f"unknown placeholder $${p}$$ in {template!r}")
        elif p not in values:
            raise Refused(f"placeholder $${p}$$ has no value where it is used, in {template!r}")
        else:
            out.append(values[p])
    return "".join(out)


def inside(path: str, top: str) -> bool:
    """True when normalised absolute ``path`` is ``top`` or below it (pure; no symlinks followed)."""
    p, t = os.path.normpath(path), os.path.normpath(top)
    return p == t or p.startswith(t.rstrip("/") + "/")


def _expand_path(template: str, values: Mapping[str, str], what: str) -> str:
    p = expand(template, values)
    if not p.startswith("/"):
        raise Refused(f"{what} is not an absolute path after expansion: {p!r}")
    return os.path.normpath(p)


def resolve(run: Run, base: Mapping[str, str]) -> tuple[Run, dict[str, str]]:
    """Expand every placeholder of ``run``; return the resolved run and the values (``started.values``).

    ``base`` gives ``root``, ``repository_name``, ``run`` and optionally ``release``; ``process_user`` is
    ``run.process.user``. Workspace step paths and ``unversioned_files`` must stay inside the workspace
    (and so inside ``$$root$$``).
    """
    values = {k: v for k, v in base.items() if k in PLACEHOLDERS and k not in ("workspace", "tree")}
    values["process_user"] = run.process.user
    for k in ("root", "repository_name", "run"):
        if not values.get(k):
            raise Refused(f"the node gave no value for $${k}$$")
    for k in ("process_user", "repository_name", "run"):
        if not is_login(values[k]) or "$$" in values[k]:
            raise Refused(f"$${k}$$ cannot be used in a path: {values[k]!r}")
    for k, v in values.items():
        if "$$" in v or (k in ("root", "release") and not v.startswith("/")):
            raise Refused(f"the node's value for $${k}$$ is not usable: {v!r}")
    root = os.path.normpath(values["root"])
    steps: list[Step] = []
    for i, s in enumerate(run.workspace):
        what = f"run.workspace[{i}]"
        if s.kind == "directory":
            assert s.at is not None
            at = _expand_path(s.at, values, what + ".at")
            if not inside(at, root) or at == root:
                raise Refused(f"{what}.at leaves $$root$$ ({root}): {at}")
            values["workspace"] = at
            steps.append(replace(s, at=at))
        elif s.into is not None:
            into = _expand_path(s.into, values, what + ".into")
            if not inside(into, values["workspace"]) or into == values["workspace"]:
                raise Refused(f"{what}.into must be below $$workspace$$: {into}")
            if s.kind in ("files", "checkout"):
                values["tree"] = into
            steps.append(replace(s, into=into))
        else:
            steps.append(s)
    sb, pr = run.sandbox, run.process

    def paths(ps: tuple[str, ...], what: str) -> tuple[str, ...]:
        return tuple(_expand_path(p, values, f"{what}[{i}]") for i, p in enumerate(ps))

    def opt(p: str | None, what: str) -> str | None:
        return None if p is None else _expand_path(p, values, what)

    sandbox = replace(
        sb,
        proc=opt(sb.proc, "run.sandbox.proc"),
        dev=opt(sb.dev, "run.sandbox.dev"),
        tmp=opt(sb.tmp, "run.sandbox.tmp"),
        read_only=paths(sb.read_only, "run.sandbox.read_only"),
        read_write=paths(sb.read_write, "run.sandbox.read_write"),
        homes=paths(sb.homes, "run.sandbox.homes"),
        created_files=tuple(
            CreatedFile(
                _expand_path(c.path, values, f"run.sandbox.created_files[{i}].path"),
                expand(c.content, values),
                c.mode,
            )
            for i, c in enumerate(sb.created_files)
        ),
    )
    outs = []
    for i, o in enumerate(pr.unversioned_files):
        at = _expand_path(o.at, values, f"run.process.unversioned_files[{i}].at")
        if not inside(at, values["workspace"]) or at == values["workspace"]:
            raise Refused(f"run.process.unversioned_files[{i}].at must be below $$workspace$$: {at}")
        outs.append(Output(at, o.as_))
    process = replace(
        pr,
        command=tuple(expand(a, values) for a in pr.command),
        env={k: expand(v, values) for k, v in pr.env.items()},
        cwd=opt(pr.cwd, "run.process.cwd") or values["workspace"],
        unversioned_files=tuple(outs),
    )
    return replace(run, workspace=tuple(steps), sandbox=sandbox, process=process), values


# ---------------------------------------------------------------------------------------------- policy


@dataclass(frozen=True)
class Policy:
    """What this node allows (the ``[jobs.policy]`` table; see docs/jobs.md). Paths may use placeholders
    (``$$workspace$$``, ``$$release$$``, ``$$root$$``), expanded with the run's values before comparing."""

    users: frozenset[str] = frozenset()
    uids: tuple[tuple[int, int], ...] = ()
    gids: tuple[tuple[int, int], ...] = ()
    capabilities: frozenset[str] = frozenset()
    network: bool = False
    sessions: bool = False
    user_namespaces: bool = False  # may a sandbox make user namespaces of its own (bwrap --disable-userns)
    seccomp: bool = True  # the seccomp filter (sotd.jobs.seccomp) on every sandbox
    read_only: tuple[str, ...] = ()
    read_write: tuple[str, ...] = ("$$workspace$$",)
    homes: tuple[str, ...] = ()
    created_files: tuple[str, ...] = ()
    limits: Limits = field(default_factory=Limits)


def _ranges(v: object, what: str) -> tuple[tuple[int, int], ...]:
    if not isinstance(v, list):
        raise PolicyError(f"{what} must be a list of ids or 'LOW-HIGH' ranges")
    out = []
    for x in v:
        if isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= MAX_ID:
            out.append((x, x))
        elif isinstance(x, str) and re.fullmatch(r"[0-9]+-[0-9]+", x):
            lo, hi = (int(n) for n in x.split("-"))
            if lo > hi or hi > MAX_ID:
                raise PolicyError(f"{what} has an empty or too large range {x!r}")
            out.append((lo, hi))
        else:
            raise PolicyError(f"{what} has a bad entry {x!r}")
    return tuple(out)


def parse_policy(table: Mapping[str, object]) -> Policy:
    """The ``[jobs.policy]`` table (already read with ``tomllib``) as a ``Policy``, or ``PolicyError``."""
    keys = {
        "users",
        "uids",
        "gids",
        "capabilities",
        "network",
        "sessions",
        "user_namespaces",
        "seccomp",
        "read_only",
        "read_write",
        "homes",
        "created_files",
        "limits",
    }
    for k in table:
        if k not in keys:
            raise PolicyError(f"jobs.policy has an unknown key {k!r}")

    def strs(k: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
        v = table.get(k, list(default))
        if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
            raise PolicyError(f"jobs.policy.{k} must be a list of strings")
        return tuple(v)

    def flag(k: str, default: bool = False) -> bool:
        v = table.get(k, default)
        if not isinstance(v, bool):
            raise PolicyError(f"jobs.policy.{k} must be true or false")
        return v

    lim_table = table.get("limits", {})
    if isinstance(lim_table, dict):
        lim_table = {**DEFAULT_MAXIMA, **lim_table}
    try:
        caps = frozenset(_capability(c, "jobs.policy.capabilities") for c in strs("capabilities"))
        limits = parse_limits(lim_table)
    except Refused as e:
        raise PolicyError(e.message.replace("run.limits", "jobs.policy.limits")) from None
    return Policy(
        users=frozenset(strs("users")),
        uids=_ranges(table.get("uids", []), "jobs.policy.uids"),
        gids=_ranges(table.get("gids", []), "jobs.policy.gids"),
        capabilities=caps,
        network=flag("network"),
        sessions=flag("sessions"),
        user_namespaces=flag("user_namespaces"),
        seccomp=flag("seccomp", True),
        read_only=strs("read_only"),
        read_write=strs("read_write", ("$$workspace$$",)),
        homes=strs("homes"),
        created_files=strs("created_files"),
        limits=limits,
    )


def load_policy(path: str) -> Policy:
    """Read ``[jobs.policy]`` from the TOML file ``path`` (an absent table allows nothing)."""
    import tomllib

    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise PolicyError(f"cannot read the jobs policy {path}: {e}") from None
    jobs = doc.get("jobs", {})
    table = jobs.get("policy", {}) if isinstance(jobs, dict) else None
    if not isinstance(table, dict):
        raise PolicyError(f"{path}: [jobs.policy] must be a table")
    return parse_policy(table)


def _in_ranges(n: int, ranges: tuple[tuple[int, int], ...]) -> bool:
    return any(lo <= n <= hi for lo, hi in ranges)


def _allowed(path: str, prefixes: tuple[str, ...], values: Mapping[str, str]) -> bool:
    for p in prefixes:
        try:
            top = expand(p, values)
        except Refused:
            continue  # a policy entry naming a value this run lacks allows nothing for it
        if top.startswith("/") and inside(path, top):
            return True
    return False


def check(run: Run, policy: Policy, values: Mapping[str, str] | None = None) -> str | None:
    """Why ``policy`` refuses the resolved ``run``, or ``None`` when it allows it.

    ``values`` (from ``resolve``) expand placeholders in the policy's paths.
    """
    vals = values or {}
    sb, pr = run.sandbox, run.process
    if "*" not in policy.users and pr.user not in policy.users:
        return f"this node does not run processes as the login {pr.user!r}"
    if not _in_ranges(sb.uid, policy.uids):
        return f"this node does not run sandboxes as uid {sb.uid}"
    if not _in_ranges(sb.gid, policy.gids):
        return f"this node does not run sandboxes as gid {sb.gid}"
    extra = [c for c in sb.capabilities if c not in policy.capabilities]
    if extra:
        return f"this node does not grant the capabilities {', '.join(extra)}"
    if sb.network and not policy.network:
        return "this node does not give sandboxes network access"
    if pr.session and not policy.sessions:
        return "this node does not run sessions"
    why = foreign_root_bind(run, vals)
    if why:
        return why
    for p in sb.read_only:
        if not _allowed(p, policy.read_only, vals) and not _allowed(p, policy.read_write, vals):
            return f"this node does not bind {p} read-only into sandboxes"
    for p in sb.read_write:
        if not _allowed(p, policy.read_write, vals):
            return f"this node does not bind {p} read-write into sandboxes"
    for p in sb.homes:
        if not _allowed(p, policy.homes, vals):
            return f"this node does not bring the home entry {p} into sandboxes"
    for c in sb.created_files:
        if not _allowed(c.path, policy.created_files, vals):
            return f"this node does not create {c.path} in sandboxes"
    return None


def foreign_root_bind(run: Run, values: Mapping[str, str]) -> str | None:
    """Why a bind of ``run`` reaches into ``$$root$$`` beyond the run's own workspace (where other runs'
    workspaces live), or ``None``. A bind that holds ``$$root$$`` (``/``, say) counts too."""
    root, ws = values.get("root"), values.get("workspace")
    if not root:
        return None
    root = os.path.normpath(root)
    for p in (*run.sandbox.read_only, *run.sandbox.read_write, *run.sandbox.homes):
        if inside(root, p) or (inside(p, root) and not (ws and inside(p, ws))):
            return f"this node binds nothing of $$root$$ ({root}) into a sandbox but the run's own workspace: {p}"
    return None


def cap_limits(limits: Limits, policy: Policy) -> Limits:
    """Each limit lowered to the node's maximum; a limit the run leaves out gets the maximum (if any)."""
    mx = policy.limits
    out: dict[str, int | None] = {}
    text = dict(limits.text)
    for k in LIMIT_NAMES:
        asked, cap = getattr(limits, k), getattr(mx, k)
        if cap is not None and (asked is None or asked > cap):
            out[k] = cap
            text[k] = mx.text[k]
        else:
            out[k] = asked
    return Limits(text=text, **out)
