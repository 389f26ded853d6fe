"""The bubblewrap command line of a resolved sandbox (ocx.md 1.4, decision O7).

``bwrap_argv(sandbox, process, ...)`` is pure: a resolved ``Sandbox`` and ``Process`` in, the exact argv
out, starting with the privilege drop::

    setpriv --reuid=U --regid=G --clear-groups -- bwrap --unshare-user --uid U --gid G ... -- COMMAND

Why ``setpriv`` first: bwrap's ``--uid`` is only the in-namespace id; run as root, the process would stay
root outside (ocx.md 1.4, tested). Dropping first makes the uid map ``U U 1``, so files land as ``U``.
Capabilities: always ``--cap-drop ALL`` before any ``--cap-add`` (a bare ``--cap-add`` as root keeps
almost all). Mount order: proc, dev, tmp, then binds from the shallowest path down (a parent bind never
hides a child bind), then the merged-/usr symlinks, then created files.

Binds given in ``bind_fds`` become ``--bind-fd``/``--ro-bind-fd`` (bwrap mounts the checked descriptor,
never the path again); nested user namespaces are off (``--disable-userns``) unless the policy allows
them; ``--size`` bounds
the tmpfs; ``--seccomp`` loads the filter.

Guarantee: nothing of the host is visible but what the run names; the environment is exactly
``process.env``. What would break it: passing an unresolved run (placeholders still in paths) -- the
runner resolves and checks first -- or a bind left without its descriptor (then bwrap resolves the path).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from sotd.jobs.spec import Process, Sandbox

BWRAP = "/usr/bin/bwrap"
SETPRIV = "/usr/bin/setpriv"
# Debian's merged /usr: the ELF interpreter is /lib64/ld-linux-x86-64.so.2, so exec fails without these.
MERGED_USR = {"/bin": "usr/bin", "/lib": "usr/lib", "/lib64": "usr/lib64", "/sbin": "usr/sbin"}


def host_usr_links() -> dict[str, str]:
    """The merged-/usr symlinks this host really has (``/bin -> usr/bin`` ...), read from ``/``."""
    out = {}
    for name in MERGED_USR:
        try:
            target = os.readlink(name)
        except OSError:
            continue
        if target.lstrip("/").startswith("usr/"):
            out[name] = target
    return out


def drop_argv(uid: int, gid: int, setpriv: str = SETPRIV) -> list[str]:
    """Drop to ``uid``/``gid`` with no supplementary groups before bwrap starts."""
    return [setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"]


def _depth(p: str) -> int:
    return 0 if p == "/" else p.rstrip("/").count("/")


def bwrap_argv(
    sandbox: Sandbox,
    process: Process,
    *,
    usr_links: Mapping[str, str] = MERGED_USR,
    data_fds: Sequence[int] = (),
    status_fd: int | None = None,
    bind_fds: Mapping[str, int] | None = None,
    tmp_size: int | None = None,
    seccomp_fd: int | None = None,
    slots: list[tuple[int, str]] | None = None,
    user_namespaces: bool = False,
    bwrap: str = BWRAP,
    setpriv: str = SETPRIV,
) -> list[str]:
    """The full argv (privilege drop + bwrap + command) for a resolved sandbox and process.

    ``usr_links``: the host's merged-/usr symlinks (``host_usr_links()``); each is recreated inside when
    ``/usr`` is bound, and an explicit bind of such a link is replaced by the symlink (same content).
    ``data_fds``: one readable fd per ``created_files`` entry, in order. ``status_fd``: bwrap writes its
    JSON status (child pid, then exit code) there, so a restarted node can learn how an adopted run ended.
    ``bind_fds``: bind source -> a descriptor opened without following links (``paths.open_nofollow``);
    such a bind becomes ``--bind-fd FD DEST`` / ``--ro-bind-fd FD DEST``, so bwrap mounts exactly what
    was checked and never resolves the source path again. ``tmp_size``: ``--size`` of the sandbox's
    tmpfs (``limits.tmp_size``). ``seccomp_fd``: the filter (``sotd.jobs.seccomp.program``) for
    ``--seccomp``. Nested user namespaces are off (``--disable-userns``) unless ``user_namespaces`` (the
    policy's ``user_namespaces = true``). ``slots``, when given,
    receives ``(argv index, source)`` of each bind descriptor and ``(index, "")`` of the seccomp one, so
    a launcher can open them later (``sotd.jobs.launch``).
    """
    sb = sandbox
    if len(data_fds) != len(sb.created_files):
        raise ValueError("bwrap_argv needs one data fd per created file")
    a = [*drop_argv(sb.uid, sb.gid, setpriv), bwrap]
    a += ["--unshare-user", *([] if user_namespaces else ["--disable-userns"])]
    a += ["--uid", str(sb.uid), "--gid", str(sb.gid)]
    a += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not sb.network:
        a += ["--unshare-net"]
    a += ["--cap-drop", "ALL"]
    for cap in sb.capabilities:
        a += ["--cap-add", cap]
    if sb.isolate_terminal:
        a += ["--new-session"]
    if sb.ends_with_parent:
        a += ["--die-with-parent"]
    if sb.proc is not None:
        a += ["--proc", sb.proc]
    if sb.dev is not None:
        a += ["--dev", sb.dev]
    if sb.tmp is not None:
        a += [*(["--size", str(tmp_size)] if tmp_size is not None else []), "--tmpfs", sb.tmp]
    bound = {*sb.read_only, *sb.read_write}
    links = {k: v for k, v in usr_links.items() if "/usr" in bound}
    binds = [("--ro-bind", p) for p in sb.read_only if p not in links]
    binds += [("--bind", p) for p in sb.read_write if p not in links]
    fds = bind_fds or {}
    for flag, p in sorted(binds, key=lambda b: _depth(b[1])):  # stable: same depth keeps the run's order
        if p in fds:
            if slots is not None:
                slots.append((len(a) + 1, p))
            a += [flag + "-fd", str(fds[p]), p]
        else:
            a += [flag, p, p]
    for name in sorted(links):
        a += ["--symlink", links[name], name]
    for c, fd in zip(sb.created_files, data_fds, strict=True):
        a += ["--perms", f"{c.mode:04o}", "--ro-bind-data", str(fd), c.path]
    if status_fd is not None:
        a += ["--json-status-fd", str(status_fd)]
    if seccomp_fd is not None:
        if slots is not None:
            slots.append((len(a) + 1, ""))
        a += ["--seccomp", str(seccomp_fd)]
    a += ["--clearenv"]
    for k, v in process.env.items():
        a += ["--setenv", k, v]
    if process.cwd is not None:
        a += ["--chdir", process.cwd]
    return [*a, "--", *process.command]


def unreachable(path: str, uid: int, gid: int, stat: Mapping[str, tuple[int, int, int]]) -> str | None:
    """The first directory on the way to ``path`` that ``uid``/``gid`` cannot search, else ``None``.

    ``stat`` maps each ancestor (``/``, ``/a``, ``/a/b`` ...) to ``(mode, owner uid, owner gid)``. bwrap
    runs as ``uid`` after the drop, so a bind source behind a 0700 root directory cannot be mounted.
    """
    if uid == 0:
        return None
    parts = [p for p in os.path.normpath(path).split("/") if p]
    cur = "/"
    for i in range(len(parts)):
        if cur in stat:
            mode, o_uid, o_gid = stat[cur]
            bit = 0o100 if o_uid == uid else 0o010 if o_gid == gid else 0o001
            if not mode & bit:
                return cur
        cur = "/" + "/".join(parts[: i + 1])
    return None
