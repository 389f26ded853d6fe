"""bwrap_argv: the exact argv, field by field (O7, ocx.md 1.4)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sotd.jobs import sandbox as sbx
from sotd.jobs.spec import CreatedFile, Process, Sandbox

pytestmark = pytest.mark.unit

BARE = Sandbox(uid=1000, gid=1000, isolate_terminal=False, ends_with_parent=False)
PROC = Process(user="u", command=("make", "image"))
HEAD = ["/usr/bin/setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "--", "/usr/bin/bwrap",
        "--unshare-user", "--disable-userns", "--uid", "1000", "--gid", "1000",
        "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]  # fmt: skip
TAIL = ["--clearenv", "--", "make", "image"]


def middle(sb: Sandbox, proc: Process = PROC, **kw: object) -> list[str]:
    """The argv between the fixed head and the fixed tail."""
    a = sbx.bwrap_argv(sb, proc, **kw)  # type: ignore[arg-type]
    assert a[: len(HEAD)] == HEAD and a[-len(TAIL) :] == TAIL
    i = a.index("--unshare-cgroup-try") + 1
    j = a.index("--clearenv")
    return a[i:j]


def test_bare_sandbox_exact_argv() -> None:
    assert sbx.bwrap_argv(BARE, PROC) == [*HEAD, "--unshare-net", "--cap-drop", "ALL", *TAIL]


def test_binds_by_descriptor_tmp_size_and_seccomp() -> None:
    """A bind with a descriptor is ``--bind-fd``/``--ro-bind-fd`` (no path resolved again); ``tmp_size``
    is ``--size`` before the tmpfs; the filter is ``--seccomp FD``."""
    sb = replace(BARE, tmp="/tmp", read_only=("/etc/alternatives",), read_write=("/srv/ws", "/srv/ws/x"))
    got = middle(sb, bind_fds={"/srv/ws": 7, "/etc/alternatives": 9}, tmp_size=1024, seccomp_fd=5)
    assert got == [
        "--unshare-net", "--cap-drop", "ALL", "--size", "1024", "--tmpfs", "/tmp",
        "--ro-bind-fd", "9", "/etc/alternatives", "--bind-fd", "7", "/srv/ws", "--bind", "/srv/ws/x", "/srv/ws/x",
        "--seccomp", "5",
    ]  # fmt: skip


def test_user_namespaces_only_when_the_policy_allows_them() -> None:
    assert "--disable-userns" in sbx.bwrap_argv(BARE, PROC)
    assert "--disable-userns" not in sbx.bwrap_argv(BARE, PROC, user_namespaces=True)


def test_uid_gid_drop_first_then_namespace_ids() -> None:
    a = sbx.bwrap_argv(replace(BARE, uid=2001, gid=3002), PROC)
    assert a[:6] == [
        "/usr/bin/setpriv",
        "--reuid=2001",
        "--regid=3002",
        "--clear-groups",
        "--",
        "/usr/bin/bwrap",
    ]
    assert a[6:12] == ["--unshare-user", "--disable-userns", "--uid", "2001", "--gid", "3002"]


@pytest.mark.parametrize(
    ("fields", "want"),
    [
        ({}, ["--unshare-net", "--cap-drop", "ALL"]),
        ({"network": True}, ["--cap-drop", "ALL"]),
        (
            {"capabilities": ("CAP_NET_BIND_SERVICE",)},
            ["--unshare-net", "--cap-drop", "ALL", "--cap-add", "CAP_NET_BIND_SERVICE"],
        ),
        (
            {"capabilities": ("CAP_CHOWN", "CAP_KILL")},
            ["--unshare-net", "--cap-drop", "ALL", "--cap-add", "CAP_CHOWN", "--cap-add", "CAP_KILL"],
        ),
        ({"isolate_terminal": True}, ["--unshare-net", "--cap-drop", "ALL", "--new-session"]),
        ({"ends_with_parent": True}, ["--unshare-net", "--cap-drop", "ALL", "--die-with-parent"]),
        ({"proc": "/proc"}, ["--unshare-net", "--cap-drop", "ALL", "--proc", "/proc"]),
        ({"dev": "/dev"}, ["--unshare-net", "--cap-drop", "ALL", "--dev", "/dev"]),
        ({"tmp": "/tmp"}, ["--unshare-net", "--cap-drop", "ALL", "--tmpfs", "/tmp"]),
        (
            {"read_only": ("/etc/alternatives",)},
            ["--unshare-net", "--cap-drop", "ALL", "--ro-bind", "/etc/alternatives", "/etc/alternatives"],
        ),
        (
            {"read_write": ("/srv/ws",)},
            ["--unshare-net", "--cap-drop", "ALL", "--bind", "/srv/ws", "/srv/ws"],
        ),
        (
            {"homes": ("/root/.claude",)},
            ["--unshare-net", "--cap-drop", "ALL"],
        ),  # copied into the workspace, not bound
    ],
)
def test_each_field(fields: dict[str, object], want: list[str]) -> None:
    assert middle(replace(BARE, **fields)) == want  # type: ignore[arg-type]


def test_cap_drop_all_always_precedes_cap_add() -> None:
    a = sbx.bwrap_argv(replace(BARE, capabilities=("CAP_NET_RAW",)), PROC)
    assert a.index("--cap-drop") < a.index("--cap-add") and a[a.index("--cap-drop") + 1] == "ALL"


def test_usr_bound_adds_merged_usr_symlinks() -> None:
    got = middle(replace(BARE, read_only=("/usr",)))
    assert got[-14:] == ["--ro-bind", "/usr", "/usr",
                         "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
                         "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin"][-14:]  # fmt: skip
    assert "--symlink" not in middle(replace(BARE, read_only=("/etc",)))  # no /usr, no links


def test_only_the_hosts_links_and_explicit_link_binds_become_symlinks() -> None:
    sb = replace(BARE, read_only=("/usr", "/bin", "/lib", "/etc/ssl/certs"))
    got = middle(sb, usr_links={"/bin": "usr/bin", "/lib": "usr/lib"})
    assert got == ["--unshare-net", "--cap-drop", "ALL",
                   "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc/ssl/certs", "/etc/ssl/certs",
                   "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib"]  # fmt: skip


def test_binds_go_shallowest_first_so_a_parent_never_hides_a_child() -> None:
    sb = replace(BARE, read_only=("/srv/ws/tree/src", "/usr"), read_write=("/srv/ws",))
    got = middle(sb, usr_links={})
    assert got[3:] == ["--ro-bind", "/usr", "/usr", "--bind", "/srv/ws", "/srv/ws",
                       "--ro-bind", "/srv/ws/tree/src", "/srv/ws/tree/src"]  # fmt: skip


def test_mount_order_proc_dev_tmp_then_binds() -> None:
    sb = replace(BARE, proc="/proc", dev="/dev", tmp="/tmp", read_write=("/tmp/ws",))
    assert middle(sb, usr_links={})[3:] == [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "--bind",
        "/tmp/ws",
        "/tmp/ws",
    ]


def test_created_files_use_ro_bind_data_with_perms() -> None:
    sb = replace(
        BARE,
        created_files=(
            CreatedFile("/etc/passwd", "u:x:1000:1000::/h:/bin/sh\n", 0o644),
            CreatedFile("/etc/x", ""),
        ),
    )
    got = middle(sb, data_fds=(7, 8))
    assert got[3:] == [
        "--perms",
        "0644",
        "--ro-bind-data",
        "7",
        "/etc/passwd",
        "--perms",
        "0444",
        "--ro-bind-data",
        "8",
        "/etc/x",
    ]
    with pytest.raises(ValueError, match="one data fd per created file"):
        sbx.bwrap_argv(sb, PROC)


def test_status_fd_env_cwd_and_command() -> None:
    proc = Process(
        user="u", command=("sh", "-c", "echo $HOME"), env={"PATH": "/usr/bin", "HOME": "/w"}, cwd="/w/tree"
    )
    a = sbx.bwrap_argv(BARE, proc, status_fd=5)
    assert a[a.index("--json-status-fd") :] == [
        "--json-status-fd", "5", "--clearenv", "--setenv", "PATH", "/usr/bin", "--setenv", "HOME", "/w",
        "--chdir", "/w/tree", "--", "sh", "-c", "echo $HOME",
    ]  # fmt: skip


def test_seed_build_example_full_argv() -> None:
    sb = Sandbox(
        uid=1000,
        gid=1000,
        proc="/proc",
        dev="/dev",
        tmp="/tmp",
        read_only=("/usr", "/etc/alternatives"),
        read_write=("/r/ws",),
    )
    proc = Process(
        user="b",
        command=("make", "-C", "/r/ws/tree", "image"),
        env={"PATH": "/usr/bin:/bin", "HOME": "/r/ws"},
        cwd="/r/ws",
    )
    assert sbx.bwrap_argv(sb, proc, status_fd=3) == [
        *HEAD, "--unshare-net", "--cap-drop", "ALL", "--new-session", "--die-with-parent",
        "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
        "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc/alternatives", "/etc/alternatives", "--bind", "/r/ws", "/r/ws",
        "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
        "--symlink", "usr/sbin", "/sbin", "--json-status-fd", "3", "--clearenv",
        "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/r/ws", "--chdir", "/r/ws",
        "--", "make", "-C", "/r/ws/tree", "image",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("uid", "stat", "bad"),
    [
        (1000, {"/": (0o40755, 0, 0), "/tmp": (0o41777, 0, 0), "/tmp/x": (0o40700, 0, 0)}, "/tmp/x"),
        (1000, {"/": (0o40755, 0, 0), "/tmp": (0o41777, 0, 0), "/tmp/x": (0o40700, 1000, 0)}, None),
        (1000, {"/": (0o40755, 0, 0), "/tmp": (0o41777, 0, 0), "/tmp/x": (0o40710, 0, 1000)}, None),
        (1000, {"/": (0o40755, 0, 0), "/tmp": (0o40750, 0, 0), "/tmp/x": (0o40755, 0, 0)}, "/tmp"),
        (0, {"/": (0o40700, 5, 5)}, None),
    ],
)
def test_unreachable(uid: int, stat: dict[str, tuple[int, int, int]], bad: str | None) -> None:
    assert sbx.unreachable("/tmp/x/ws", uid, 1000, stat) == bad
