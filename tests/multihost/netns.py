"""Several "boxes" on one machine: network namespaces on one bridge, each with its own sshd.

Testing notes 2.8. ``Net(names)`` builds, per box, a namespace ``sotd<tag><box>`` holding ``eth0`` with
``10.77.0.<n>/24`` (a veth whose other end sits on a Linux bridge in a switch namespace), and an sshd
listening on that address only, started in its own UTS namespace with the box's name as hostname. Nothing
is ever added to the root namespace: every address lives in a namespace these tests made.

Per box (``Box``): a folder ``<base>/<box>`` with the sshd config, host key and log, a private
``run/`` (0700; the box's daemon socket goes there), and a ``home/`` that the box's sshd gives its sessions
as ``$HOME`` (``SetEnv``), so the tests never read or write the real ``/root`` and a box can have its own
shell start-up files (``.bashrc`` is how a login banner on stdout is simulated). ``home/.local/bin/sotd``
links to this checkout's ``sotd``: the far side finds it only through the PATH prepend of behaviour 2.2.
The session environment also carries ``SOT_SELF_HOST=<box>``, ``SOT_SOCKET=<box>/run/sotd.sock`` and
``SOT_COMM_HOME=<box>/comm`` (every box has its own comm folder; they all share this file system, so
each box is told its own paths).

``Net.ssh_config`` is an ``ssh -F`` file naming every box by alias (``HostName``, root, the test key,
``UserKnownHostsFile /dev/null``, ``StrictHostKeyChecking no``, ``LogLevel ERROR``); ``Net.env(box)`` is
an environment for a client on that box (``SOT_SSH_CONFIG`` set to that file, ``XDG_RUNTIME_DIR`` its
private ``run/`` so ControlMaster sockets stay per box). ``run``/``popen`` start a command inside a box
(``ip netns exec <ns> unshare --uts`` with the hostname set). ``link(box, up)`` partitions a box.

``Net(..., as_deployed=True)`` makes boxes as a user has them, for the deploy doc test: every command in a
box also runs in its own mount namespace where the box's ``home/`` is bind-mounted over ``/root`` (so
``~`` is the box's home for ssh and every tool, as it is for a real account) and a per-box ``hosts`` file
over ``/etc/hosts`` (naming ``<box>.lan`` for every box); sshd reads ``~/.ssh/authorized_keys`` and gives
sessions only ``HOME``, ``PATH`` and ``XDG_RUNTIME_DIR`` (the box's ``run/``: a stand-in for logind's
``/run/user/<uid>``, which these boxes do not run); nothing is installed, configured or keyed for the user.
One stand-in: when this machine's Python lives under ``/root`` (pyenv), that one folder stays visible in
the box's home (``ROOT_KEPT``), or ``sotd`` could not run at all.

Teardown (``close``, also on a failed build) kills every process left in the namespaces — sshd, its
sessions, ssh ControlMaster processes, daemons — by pid (``ip netns pids``), then deletes the namespaces.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable

from tests.conftest import running

SUBNET = "10.77.0"
SSHD = "/usr/sbin/sshd"
VENV_BIN = os.path.dirname(sys.executable)
SOTD = shutil.which("sotd", path=VENV_BIN) or os.path.join(VENV_BIN, "sotd")
HERE = os.path.dirname(os.path.abspath(__file__))
DELAY_RELAY = os.path.join(HERE, "delay_relay.py")
# The top folder under /root that holds this interpreter (pyenv puts it in /root/.pyenv), or "": an
# ``as_deployed`` box has its own /root, and this one folder of the real one stays visible in it.
_PY = os.path.realpath(sys.base_prefix)
ROOT_KEPT = _PY.split("/")[2] if _PY.startswith("/root/") else ""


def unavailable() -> str | None:
    """Why these tests cannot run here (None when they can)."""
    if os.geteuid() != 0:
        return "multihost tests need root (network namespaces and sshd)"
    for tool in ("ip", "unshare", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"multihost tests need '{tool}' on PATH"
    if not os.access(SSHD, os.X_OK):
        return f"multihost tests need {SSHD} (apt-get install openssh-server)"
    probe = f"sotdprobe{secrets.token_hex(3)}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        return f"'ip netns add' is not available here: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    return None


def sh(*argv: str, check: bool = True, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


class Box:
    def __init__(self, net: Net, name: str, index: int) -> None:
        self.net = net
        self.name = name
        self.ns = f"sotd{net.tag}{name}"
        self.addr = f"{SUBNET}.{index + 1}"
        self.dir = os.path.join(net.base, name)
        self.run_dir = os.path.join(self.dir, "run")
        self.home = os.path.join(self.dir, "home")
        self.comm_home = os.path.join(self.dir, "comm")
        self.socket = os.path.join(self.run_dir, "sotd.sock")
        self.sshd_config = os.path.join(self.dir, "sshd_config")
        self.sshd_log = os.path.join(self.dir, "sshd.log")
        self.sshd_pid = 0
        self.peer = f"s{net.tag}{index}"  # the switch side of the veth (interface names: 15 bytes max)

    def __repr__(self) -> str:
        return f"Box({self.name} {self.addr} ns={self.ns})"

    def session_env(self) -> dict[str, str]:
        """What the box's sshd puts in every session's environment."""
        if self.net.as_deployed:
            return {"HOME": "/root", "PATH": "/usr/local/bin:/usr/bin:/bin", "XDG_RUNTIME_DIR": self.run_dir}
        return {
            "HOME": self.home,
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "SOT_SELF_HOST": self.name,
            "SOT_SOCKET": self.socket,
            "SOT_COMM_HOME": self.comm_home,
            "SOT_DAEMON_AUTOSTART": "off",  # these tests start each box's daemon themselves (tests/conftest.py)
        }

    def write_sshd_config(self, extra: Iterable[str] = ()) -> None:
        setenv = " ".join(f'"{k}={v}"' for k, v in self.session_env().items())
        lines = [
            f"ListenAddress {self.addr}",
            "Port 22",
            f"HostKey {self.dir}/hostkey",
            "AuthorizedKeysFile .ssh/authorized_keys"
            if self.net.as_deployed
            else f"AuthorizedKeysFile {self.net.userkey}.pub",
            "PermitRootLogin prohibit-password",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes",
            "StrictModes no",
            "UsePAM no",
            f"PidFile {self.dir}/sshd.pid",
            "PrintMotd no",
            "PrintLastLog no",
            "MaxSessions 100",
            "MaxStartups 100:30:200",
            "LogLevel VERBOSE",
            f"SetEnv {setenv}",
            *extra,
        ]
        with open(self.sshd_config, "w") as f:
            f.write("\n".join(lines) + "\n")


class Net:
    """N boxes joined by a bridge. Use as a context manager, or call ``close``."""

    def __init__(
        self,
        names: Iterable[str],
        base: str,
        *,
        sshd_extra: dict[str, list[str]] | None = None,
        as_deployed: bool = False,
    ) -> None:
        self.as_deployed = as_deployed
        self.tag = secrets.token_hex(2)
        self.base = base
        self.boxes: dict[str, Box] = {}
        self.switch = f"sotd{self.tag}sw"
        self.userkey = os.path.join(base, "userkey")
        self.ssh_config = os.path.join(base, "ssh_config")
        self._made: list[str] = []
        try:
            self._build(list(names), sshd_extra or {})
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------------------------------------- building

    def _build(self, names: list[str], sshd_extra: dict[str, list[str]]) -> None:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege-separation folder
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sotd-test-user", "-f", self.userkey)
        sh("ip", "netns", "add", self.switch)
        self._made.append(self.switch)
        sh("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.switch, "link", "set", "br0", "up")
        for i, name in enumerate(names):
            box = Box(self, name, i)
            self.boxes[name] = box
            for d in (box.dir, box.home, os.path.join(box.home, ".local", "bin"), box.comm_home):
                os.makedirs(d, exist_ok=True)
            os.makedirs(box.run_dir, mode=0o700, exist_ok=True)
            os.chmod(box.run_dir, 0o700)
            if not self.as_deployed:
                os.symlink(SOTD, os.path.join(box.home, ".local", "bin", "sotd"))
            sh("ip", "netns", "add", box.ns)
            self._made.append(box.ns)
            sh("ip", "-n", box.ns, "link", "set", "lo", "up")
            sh(
                "ip",
                "link",
                "add",
                "eth0",
                "netns",
                box.ns,
                "type",
                "veth",
                "peer",
                "name",
                box.peer,
                "netns",
                self.switch,
            )
            sh("ip", "-n", self.switch, "link", "set", box.peer, "master", "br0")
            sh("ip", "-n", self.switch, "link", "set", box.peer, "up")
            sh("ip", "-n", box.ns, "addr", "add", f"{box.addr}/24", "dev", "eth0")
            sh("ip", "-n", box.ns, "link", "set", "eth0", "up")
            sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(box.dir, "hostkey"))
            box.write_sshd_config(sshd_extra.get(name, ()))
        self._write_ssh_config()
        hosts = "127.0.0.1 localhost\n" + "".join(f"{b.addr} {b.name}.lan\n" for b in self.boxes.values())
        for box in self.boxes.values():
            with open(os.path.join(box.dir, "hosts"), "w") as f:
                f.write(hosts)
        for box in self.boxes.values():
            self.start_sshd(box)

    def _write_ssh_config(self) -> None:
        lines: list[str] = []
        for box in self.boxes.values():
            lines += [f"Host {box.name}", f"  HostName {box.addr}"]
        lines += [
            "Host *",
            "  User root",
            f"  IdentityFile {self.userkey}",
            "  IdentitiesOnly yes",
            "  UserKnownHostsFile /dev/null",
            "  StrictHostKeyChecking no",
            "  LogLevel ERROR",
        ]
        with open(self.ssh_config, "w") as f:
            f.write("\n".join(lines) + "\n")

    def start_sshd(self, box: Box) -> None:
        pidfile = os.path.join(box.dir, "sshd.pid")
        try:
            os.unlink(pidfile)
        except FileNotFoundError:
            pass
        self.run(box.name, [SSHD, "-f", box.sshd_config, "-E", box.sshd_log], check=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with open(pidfile) as f:
                    box.sshd_pid = int(f.read().strip())
                return
            except (FileNotFoundError, ValueError):
                time.sleep(0.02)
        raise RuntimeError(f"sshd on {box.name} did not start; its log:\n{_tail(box.sshd_log)}")

    # ----------------------------------------------------------------------------------------- using

    def in_box(self, box: str, argv: list[str]) -> list[str]:
        """``argv`` run inside ``box``: its network namespace, and a UTS namespace named after it."""
        b = self.boxes[box]
        if self.as_deployed:
            keep = ""
            if ROOT_KEPT:  # this machine's Python lives under /root: keep it visible under the box's home
                keep = f'mkdir -p "$1/{ROOT_KEPT}" && mount --bind /root/{ROOT_KEPT} "$1/{ROOT_KEPT}" && '
            script = (
                f'hostname "$0" && {keep}mount --rbind "$1" /root && mount --bind "$2" /etc/hosts && shift 2 && '
                'exec "$@"'
            )
            mounts = ["--mount", "--propagation", "private"]
            return ["ip", "netns", "exec", b.ns, "unshare", "--uts", *mounts, "sh", "-c", script, b.name,
                    b.home, os.path.join(b.dir, "hosts"), *argv]  # fmt: skip
        return [
            "ip",
            "netns",
            "exec",
            b.ns,
            "unshare",
            "--uts",
            "sh",
            "-c",
            'hostname "$0" && exec "$@"',
            b.name,
            *argv,
        ]

    def env(self, box: str, **extra: str) -> dict[str, str]:
        """An environment for a client process on ``box`` (its own ssh config, ControlPath folder, paths)."""
        b = self.boxes[box]
        drop = ("SOT_", "SOTD_", "TMUX", "CLAUDE", "COMM_STATUS_", "SSH_")
        e = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
        if self.as_deployed:  # a login shell's environment: nothing of this test process's
            e = {k: v for k, v in e.items() if k in ("LANG", "LC_ALL", "TERM", "TZ")}
            e.update(b.session_env(), PATH="/root/.local/bin:/usr/local/bin:/usr/bin:/bin", USER="root")
            e.update(extra)
            return e
        e.update(b.session_env())
        e.update(SOT_SSH_CONFIG=self.ssh_config, XDG_RUNTIME_DIR=b.run_dir, SOT_COMM_TEST_HOST=b.name)
        e.update(extra)
        return e

    def run(
        self,
        box: str,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        check: bool = False,
        timeout: float = 30,
        **kw: object,
    ) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(
            self.in_box(box, argv),
            env=self.env(box) if env is None else env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            **kw,  # type: ignore[call-overload]
        )
        if check and r.returncode != 0:
            raise RuntimeError(f"on {box}: {argv} failed ({r.returncode}): {r.stderr.strip()}")
        return r

    def popen(
        self, box: str, argv: list[str], *, env: dict[str, str] | None = None, **kw: object
    ) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.in_box(box, argv), env=self.env(box) if env is None else env, **kw)  # type: ignore[call-overload]

    def link(self, box: str, up: bool) -> None:
        """Cut ``box`` off the network (or put it back): its only interface goes down."""
        b = self.boxes[box]
        sh("ip", "-n", b.ns, "link", "set", "eth0", "up" if up else "down")

    def ssh(
        self, src: str, dst: str, command: str, *, timeout: float = 20
    ) -> subprocess.CompletedProcess[str]:
        """Plain ssh from ``src`` to ``dst`` with the test config (no multiplexing), for setup checks."""
        argv = ["ssh", "-F", self.ssh_config, "-o", "BatchMode=yes", "-o", "ControlPath=none", dst, command]
        return self.run(src, argv, timeout=timeout)

    def proxy_config(self, delay_ms: int, path: str | None = None) -> str:
        """An ssh config like ``ssh_config`` whose connections go through the delaying relay."""
        path = path or os.path.join(self.base, f"ssh_config_delay{delay_ms}")
        with open(self.ssh_config) as f:
            text = f.read()
        text = text.replace(
            "Host *\n",
            f"Host *\n  ProxyCommand {sys.executable} {DELAY_RELAY} %h %p {delay_ms}\n",
        )
        with open(path, "w") as f:
            f.write(text)
        return path

    def pids(self, box: str) -> list[int]:
        r = sh("ip", "netns", "pids", self.boxes[box].ns, check=False)
        return [int(x) for x in r.stdout.split()]

    # -------------------------------------------------------------------------------------- teardown

    def close(self) -> None:
        for ns in self._made:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                r = sh("ip", "netns", "pids", ns, check=False)
                pids = [int(x) for x in r.stdout.split()]
                for pid in pids:
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
                deadline = time.monotonic() + 3
                while pids and time.monotonic() < deadline:
                    pids = [p for p in pids if running(p)]
                    if pids:
                        time.sleep(0.02)
                if not pids:
                    break
        for ns in reversed(self._made):
            sh("ip", "netns", "del", ns, check=False)
        self._made.clear()

    def __enter__(self) -> Net:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _tail(path: str, n: int = 20) -> str:
    try:
        with open(path) as f:
            return "".join(f.readlines()[-n:])
    except OSError as e:
        return f"({e})"
