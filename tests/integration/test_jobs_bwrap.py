"""Real bubblewrap, field by field: the argv of ``bwrap_argv`` does what ocx.md 1.4 says (as root)."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from sotd.jobs import sandbox as sbx
from sotd.jobs.spec import CreatedFile, Process, Sandbox

pytestmark = [
    pytest.mark.integration,
    pytest.mark.root,
    pytest.mark.skipif(
        os.geteuid() != 0 or not os.path.exists(sbx.BWRAP), reason="needs root and bubblewrap"
    ),
]


@pytest.fixture
def ws() -> Iterator[str]:
    """A workspace uid 1000 can reach (pytest's tmp_path sits under a 0700 root directory)."""
    top = f"/tmp/sotd-jobs-{secrets.token_hex(4)}"
    os.mkdir(top)
    os.chmod(top, 0o755)  # whatever the umask this worker was left with
    w = os.path.join(top, "ws")
    os.mkdir(w, 0o700)
    os.chown(w, 1000, 1000)
    yield w
    shutil.rmtree(top, ignore_errors=True)


def base(ws: str) -> Sandbox:
    return Sandbox(
        uid=1000, gid=1000, proc="/proc", dev="/dev", tmp="/tmp", read_only=("/usr",), read_write=(ws,)
    )


def run(sb: Sandbox, script: str, **kw: object) -> subprocess.CompletedProcess[str]:
    proc = Process(
        user="u",
        command=("sh", "-c", script),
        env={"PATH": "/usr/bin:/bin"},
        cwd=sb.read_write[0] if sb.read_write else "/",
    )
    argv = sbx.bwrap_argv(sb, proc, usr_links=sbx.host_usr_links(), **kw)  # type: ignore[arg-type]
    return subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)


def test_no_network_shows_only_lo(ws: str) -> None:
    r = run(base(ws), "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["lo"]


def test_network_true_shares_the_hosts_interfaces(ws: str) -> None:
    with open("/proc/net/dev") as f:
        host = sorted(line.split(":")[0].strip() for line in f.readlines()[2:])
    r = run(replace(base(ws), network=True), "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
    assert sorted(r.stdout.split()) == host


def test_read_only_path_cannot_be_written_read_write_can(ws: str) -> None:
    ro = os.path.join(os.path.dirname(ws), "ro")
    os.mkdir(ro, 0o777)
    r = run(
        replace(base(ws), read_only=("/usr", ro)),
        f"touch {ro}/x; echo ro=$?; touch /usr/x; echo usr=$?; touch {ws}/y; echo rw=$?",
    )
    assert "ro=1" in r.stdout and "usr=1" in r.stdout and "rw=0" in r.stdout, r.stderr
    assert "Read-only file system" in r.stderr
    assert not os.path.exists(os.path.join(ro, "x"))
    st = os.stat(os.path.join(ws, "y"))
    assert (st.st_uid, st.st_gid) == (1000, 1000)  # privileges were dropped before bwrap: lands as 1000


@pytest.mark.parametrize(("uid", "gid"), [(1000, 1000), (1234, 4321)])
def test_uid_inside_is_the_one_asked(ws: str, uid: int, gid: int) -> None:
    shared = os.path.join(os.path.dirname(ws), "shared")
    os.mkdir(shared, 0o777)
    os.chmod(shared, 0o777)
    sb = replace(base(ws), uid=uid, gid=gid, read_write=(shared,))
    r = run(sb, f"id -u; id -g; id -G; touch {shared}/f")
    assert r.stdout.split() == [str(uid), str(gid), str(gid)], r.stderr
    st = os.stat(os.path.join(shared, "f"))
    assert (st.st_uid, st.st_gid) == (uid, gid)  # dropped before bwrap: not root outside


def _cap_eff(stdout: str) -> int:
    return int(next(line.split()[1] for line in stdout.splitlines() if line.startswith("CapEff:")), 16)


@pytest.mark.parametrize(
    ("caps", "mask"),
    [((), 0), (("CAP_NET_BIND_SERVICE",), 1 << 10), (("CAP_CHOWN", "CAP_KILL"), (1 << 0) | (1 << 5))],
)
def test_capabilities_are_exactly_those_listed(ws: str, caps: tuple[str, ...], mask: int) -> None:
    r = run(replace(base(ws), capabilities=caps), "grep -E '^Cap(Eff|Prm|Bnd):' /proc/self/status")
    assert r.returncode == 0, r.stderr
    assert _cap_eff(r.stdout) == mask
    bnd = int(next(line.split()[1] for line in r.stdout.splitlines() if line.startswith("CapBnd:")), 16)
    assert bnd == mask


def test_capabilities_for_a_sandbox_uid_0_are_also_dropped(ws: str) -> None:
    r = run(replace(base(ws), uid=0, gid=0, read_write=()), "grep '^CapEff:' /proc/self/status; id -u")
    assert _cap_eff(r.stdout) == 0 and r.stdout.split()[-1] == "0"


def test_isolate_terminal_starts_a_new_session(ws: str) -> None:
    script = "cut -d' ' -f6 /proc/self/stat"  # session id inside the pid namespace
    on = run(replace(base(ws), isolate_terminal=True), script)
    off = run(replace(base(ws), isolate_terminal=False), script)
    assert on.stdout.strip() != "0" and off.stdout.strip() == "0"  # 0: the session leader is outside


def test_environment_is_exactly_process_env(ws: str) -> None:
    r = run(base(ws), "env | sort")
    assert r.stdout.split() == ["PATH=/usr/bin:/bin", f"PWD={ws}", "SHLVL=1"] or r.stdout.split() == [
        "PATH=/usr/bin:/bin",
        f"PWD={ws}",
    ]


def test_proc_dev_tmp(ws: str) -> None:
    r = run(
        base(ws),
        "test -r /proc/self/status && test -c /dev/null && touch /tmp/t && echo ok; stat -f -c %T /tmp",
    )
    assert r.stdout.split() == ["ok", "tmpfs"], r.stderr
    r = run(replace(base(ws), proc=None, dev=None, tmp=None), "ls /proc /dev /tmp 2>&1 | head -3; echo end")
    assert "No such file" in r.stdout


def test_without_merged_usr_links_exec_fails(ws: str) -> None:
    proc = Process(user="u", command=("/usr/bin/true",))
    ok = subprocess.run(
        sbx.bwrap_argv(base(ws), proc, usr_links=sbx.host_usr_links()), capture_output=True, check=False
    )
    bad = subprocess.run(sbx.bwrap_argv(base(ws), proc, usr_links={}), capture_output=True, check=False)
    assert ok.returncode == 0 and bad.returncode != 0


def test_explicit_bin_and_lib_binds_work_beside_usr(ws: str) -> None:
    r = run(replace(base(ws), read_only=("/usr", "/bin", "/lib")), "readlink /bin; ls /bin/sh")
    assert r.stdout.split() == ["usr/bin", "/bin/sh"], r.stderr


def test_created_files_are_read_only_with_their_mode(ws: str) -> None:
    fd = os.memfd_create("f", 0)
    os.write(fd, b"builder:x:1000:1000::/w:/bin/sh\n")
    os.lseek(fd, 0, os.SEEK_SET)
    sb = replace(base(ws), created_files=(CreatedFile("/etc/passwd", "", 0o644),))
    proc = Process(
        user="u", command=("sh", "-c", "id -un; stat -c %a /etc/passwd; echo x >> /etc/passwd; echo w=$?")
    )
    argv = sbx.bwrap_argv(sb, proc, usr_links=sbx.host_usr_links(), data_fds=(fd,))
    r = subprocess.run(argv, capture_output=True, text=True, pass_fds=(fd,), check=False)
    os.close(fd)
    out = r.stdout.split()
    assert out[:2] == ["builder", "644"] and out[2] != "w=0", r.stderr
    assert "Read-only file system" in r.stderr


def _pids_with(marker: str) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        out.append(int(name))
            except OSError:
                pass
    return out


def _exec_done(marker: str) -> bool:
    for pid in _pids_with(marker):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == "sleep":
                    return True
        except OSError:
            pass
    return False


@pytest.mark.parametrize("ends_with_parent", [True, False])
def test_ends_with_parent_leaves_nothing_when_the_parent_is_killed(ws: str, ends_with_parent: bool) -> None:
    marker = f"{secrets.randbelow(10**6) + 10**6}.5"  # a unique sleep length names our processes
    sb = replace(base(ws), ends_with_parent=ends_with_parent, isolate_terminal=True)
    argv = sbx.bwrap_argv(sb, Process(user="u", command=("sleep", marker)), usr_links=sbx.host_usr_links())
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; subprocess.Popen(sys.argv[1:]); time.sleep(60)",
            *argv,
        ],
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 5
        while not _exec_done(marker) and time.monotonic() < deadline:  # sleep runs: bwrap's setup is over
            time.sleep(0.02)
        assert _pids_with(marker)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 2
        while _pids_with(marker) and time.monotonic() < deadline:
            time.sleep(0.02)
        left = _pids_with(marker)
        if ends_with_parent:
            assert left == []
        else:
            assert left  # the control: without the flag the sandbox outlives its parent
    finally:
        for pid in _pids_with(marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
