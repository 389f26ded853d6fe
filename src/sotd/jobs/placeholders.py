"""Placeholders of a ``run`` body (ocx.md O5): ``$$name$$`` expanded step by step, paths kept in bounds.

``resolve(run, base)`` expands every ``$$name$$`` of a parsed run (``sotd.jobs.spec.parse_run``) in the
order of its workspace steps, so ``$$workspace$$`` exists only after the ``directory`` step and
``$$tree$$`` only after a ``files``/``checkout`` step, and refuses a workspace path that leaves
``$$root$$`` (normalised here; the runner re-checks with ``realpath``). Pure: ``Refused`` carries the
sentence ``ended.why`` shows.

What would break it: a placeholder value containing ``$$`` or ``/`` smuggled in by the caller; ``base``
values are the caller's and are checked by ``resolve`` (``process_user`` / ``repository_name`` may not
contain ``/``, be ``.``/``..`` or be empty), or an expansion that runs twice (a value holding ``$$x$$``
would be expanded again).
"""

from __future__ import annotations

import os
import re
from dataclasses import replace

from sotd.jobs.errors import Refused
from sotd.jobs.spec import CreatedFile, Output, RunSpec, Step, is_login

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

PLACEHOLDERS = frozenset({"root", "process_user", "repository_name", "run", "workspace", "tree", "release"})
_NAME = re.compile(r"[a-z_]+")


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


def resolve(run: RunSpec, base: Mapping[str, str]) -> tuple[RunSpec, dict[str, str]]:
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
