"""The NFS tier's guest: build a small initramfs, boot Debian's kernel under QEMU (TCG), collect results.

File: ``tests/nfs/vm.py`` (host side). Recipe: ``../shared/spec/testing-notes.md`` §2.7 and appendix A.
Guarantee: one bounded boot. The guest's root is this machine's ``/`` over 9p, read-only, under a tmpfs
overlay, so it runs this checkout's ``.venv`` and sotd exactly as the host sees them; a second 9p share
(writable) carries the run's config in and ``results.json`` and the guest log out. The guest mounts fresh
tmpfs on ``/tmp``, ``/run`` and ``/var/lib/nfs`` (issue 32): the checkout, its ``.venv`` and
the interpreter that ``.venv`` points into are bound back over those (``folders_seen``, ``keep_paths``, the share's ``keep``
file, ``tmpfs_keeping`` in ``guest/init.sh``), so a checkout under ``/tmp`` or a path with a space runs
too; a place the guest cannot show at all is refused before the boot, in one sentence (``unreachable``). QEMU runs under
``timeout`` and the guest powers itself off; a boot that outlives its wall time is killed, and its console
log is kept for the failure message.
What would break it: KVM (it hangs on this machine: software emulation only), more than 2 vCPUs on a
2-core machine shared with others, or a second guest at once (the tier runs one boot per pytest session).
"""

from __future__ import annotations

import glob
import json
import os
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
GUEST_INIT = os.path.join(HERE, "guest", "init.sh")

# QEMU's scheduling priority. The guest is the suite's longest lane and CPU-bound (software emulation):
# beside the other lanes at the same priority it ran about three times slower than alone (points
# 925-1,090 s against 300 s), and its two vCPUs, descheduled in turn, spend more CPU on the same work. At
# nice -5 the lanes beside it yield to it (a weight about three times theirs) without stopping.
QEMU_NICE = -5

# Modules the initramfs loads to reach the root: everything else is modprobed from the 9p root later.
BOOT_MODULES = ("virtio_pci", "9pnet_virtio", "9p", "overlay")
PACKAGES = ("qemu-system-x86", "linux-image-amd64", "busybox-static", "nfs-kernel-server", "nfs-common")

INIT = """#!/bin/sh
# initramfs /init: load the root's modules, mount / over 9p read-only under a tmpfs overlay, switch to it.
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $(cat /modules.order); do insmod /lib/modules/$m; done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose hostroot /mnt/host || poweroff -f
mount -t tmpfs -o size=1g tmpfs /mnt/upper
mkdir -p /mnt/upper/u /mnt/upper/w
mount -t overlay overlay -o lowerdir=/mnt/host,upperdir=/mnt/upper/u,workdir=/mnt/upper/w /newroot || poweroff -f
mkdir -p /newroot/share
mount -t 9p -o trans=virtio,version=9p2000.L share /newroot/share || poweroff -f
exec switch_root /newroot /bin/sh /share/boot.sh
"""


# The guest's own mounts over its root: fresh tmpfs (what lies beneath is bound back over them when kept),
# and the ones nothing can be bound back over (kernel file systems, the share, host A's NFS mounts).
GUEST_TMPFS = ("/tmp", "/run", "/var/lib/nfs")
GUEST_OWN = ("/proc", "/sys", "/dev", "/share", "/srv/nfs", "/mnt/a4", "/mnt/a3", "/mnt/a4nocto")


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top + "/")


def keep_paths(folders: list[str]) -> list[str]:
    """Of ``folders`` (absolute, resolved), the ones a guest tmpfs would hide, sorted, none inside another
    (binding the outer one back shows the inner one too)."""
    hidden = sorted({p for p in folders if any(_under(p, t) and p != t for t in GUEST_TMPFS)})
    return [p for p in hidden if not any(q != p and _under(p, q) for q in hidden)]


def folders_seen(repo: str, python: str) -> list[str]:
    """What the guest must see as the host does: the checkout, the venv ``python`` is in (as written and
    resolved), the prefix of the interpreter it resolves to and the folders it imports from (its
    ``sys.path``, which holds what its venv's ``.pth`` files point at)."""
    venv = os.path.dirname(os.path.dirname(os.path.abspath(python)))
    real = os.path.realpath(python)
    out = [os.path.realpath(repo), venv, os.path.realpath(venv), os.path.dirname(os.path.dirname(real))]
    return out + [os.path.realpath(p) for p in imports_from(python) if p and os.path.isdir(p)]


def imports_from(python: str) -> list[str]:
    """``python``'s ``sys.path`` as it runs here (its venv's ``.pth`` files included)."""
    p = subprocess.run(
        [python, "-c", "import json, sys; print(json.dumps(sys.path))"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    try:
        return [str(x) for x in json.loads(p.stdout)]
    except ValueError:
        return []


def unreachable(repo: str, python: str) -> str | None:
    """Why the guest could not run this checkout from where it is (one sentence with what to do), or None."""
    real = os.path.realpath(python)
    for what, path in (("the checkout", os.path.realpath(repo)), ("its interpreter", real)):
        if "\n" in path:
            return f"{what} {path!r} has a newline in its path, which the guest's list of kept folders cannot carry: clone it elsewhere"
        for top in (*GUEST_OWN, *GUEST_TMPFS):
            if path == top or (top in GUEST_OWN and _under(path, top)):
                return (
                    f"{what} is at {path}, where the NFS tier's guest mounts its own {top}: clone the "
                    "repository elsewhere (any other folder, /tmp included) and run scripts/setup there"
                )
    if not os.access(real, os.X_OK):
        return f"{python} does not run ({real} is not an executable file): run scripts/setup"
    return None


@dataclass(frozen=True)
class Beside:
    """Points of a second checkout run in the same boot, before the main ones (the clone test's, issue 32):
    that checkout's ``points.py`` under its own ``python``, for the points ``only`` names, in folders and a
    results file suffixed ``tag``, within ``secs``. One boot instead of a second one: a boot and its NFS
    set-up cost the suite's longest lane about a minute and a half under load."""

    repo: str
    python: str
    only: str
    tag: str
    secs: int

    @property
    def results_name(self) -> str:
        return f"results{self.tag}.json"

    def script(self) -> str:
        """The lines init.sh sources (``$share/beside.sh``; its ``say`` and ``$hostb_pid`` in scope)."""
        points = os.path.join(self.repo, "tests", "nfs", "guest", "points.py")
        env = (
            f"SOTD_NFS_HOSTB_PID=$hostb_pid SOTD_NFS_ONLY={shlex.quote(self.only)} "
            f"SOTD_NFS_TAG={shlex.quote(self.tag)} SOTD_NFS_RESULTS={shlex.quote(self.results_name)}"
        )
        return (
            f"say {shlex.quote(f'beside: {points} ({self.only})')}\n"
            f'{env} timeout -k 5 {self.secs} {shlex.quote(self.python)} {shlex.quote(points)} "$share" '
            f'|| say "beside points.py exit $?"\n'
        )


@dataclass
class Boot:
    """What one boot left: QEMU's exit status, the wall time, the console text and the guest's results
    (``beside``: each ``Beside`` run's, by its tag; None where it wrote none)."""

    rc: int
    secs: float
    console: str
    guest_log: str
    results: dict[str, object] | None
    beside: dict[str, dict[str, object] | None]
    keep: list[str]  # the folders the guest bound back over its fresh tmpfs mounts (the share's keep file)


def kernel() -> tuple[str, str]:
    """(vmlinuz path, module folder) of the newest Debian kernel installed here, or raise."""
    found = sorted(glob.glob("/boot/vmlinuz-*"))
    for vmlinuz in reversed(found):
        release = os.path.basename(vmlinuz)[len("vmlinuz-") :]
        mods = os.path.join("/lib/modules", release)
        if os.path.isdir(mods):
            return vmlinuz, release
    raise RuntimeError(
        f"no Debian kernel with modules in /boot and /lib/modules: apt-get install {PACKAGES[1]}"
    )


def missing_tools() -> list[str]:
    """The Debian packages of the recipe that are not installed (scripts/setup installs them)."""
    need = {
        "qemu-system-x86": "/usr/bin/qemu-system-x86_64",
        "busybox-static": "/bin/busybox",
        "nfs-kernel-server": "/usr/sbin/rpc.nfsd",
        "nfs-common": "/sbin/mount.nfs",
    }
    out = [pkg for pkg, path in need.items() if not os.path.exists(path)]
    if not glob.glob("/boot/vmlinuz-*"):
        out.append("linux-image-amd64")
    return out


def build_initramfs(work: str) -> str:
    """Write ``<work>/initramfs.gz``: static busybox, the boot modules (with their dependencies), /init."""
    _vmlinuz, release = kernel()
    root = os.path.join(work, "initramfs")
    shutil.rmtree(root, ignore_errors=True)
    for d in ("bin", "dev", "proc", "sys", "mnt/host", "mnt/upper", "newroot", "lib/modules"):
        os.makedirs(os.path.join(root, d))
    shutil.copy("/bin/busybox", os.path.join(root, "bin", "busybox"))
    for applet in ("sh", "mount", "mkdir", "insmod", "cat", "switch_root", "poweroff"):
        os.symlink("busybox", os.path.join(root, "bin", applet))
    order: list[str] = []
    for mod in BOOT_MODULES:
        p = subprocess.run(
            ["modprobe", "-S", release, "--show-depends", mod],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        for line in p.stdout.splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "insmod":
                name = os.path.basename(parts[1])
                if name not in order:
                    order.append(name)
                    shutil.copy(parts[1], os.path.join(root, "lib", "modules", name))
    with open(os.path.join(root, "modules.order"), "w") as f:
        f.write("\n".join(order) + "\n")
    with open(os.path.join(root, "init"), "w") as f:
        f.write(INIT)
    os.chmod(os.path.join(root, "init"), 0o755)
    out = os.path.join(work, "initramfs.gz")
    names = subprocess.run(["find", "."], cwd=root, capture_output=True, check=True, timeout=30).stdout
    cpio = subprocess.run(
        ["cpio", "-o", "-H", "newc", "--quiet"],
        cwd=root,
        input=names,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    import gzip

    with open(out, "wb") as f:
        f.write(gzip.compress(cpio, compresslevel=1))
    return out


def boot(
    work: str,
    config: dict[str, object],
    *,
    wall_secs: float,
    repo: str = REPO,
    beside: tuple[Beside, ...] = (),
) -> Boot:
    """Boot once with ``config`` (``/share/config.json`` in the guest); at most ``wall_secs`` of wall time.

    The guest runs ``tests/nfs/guest/init.sh`` of the checkout ``repo`` (this one unless told) as PID 1,
    with ``config["python"]`` as its interpreter, runs each ``beside`` run, then the points, and powers off.
    """
    python = str(config["python"])
    vmlinuz, _release = kernel()
    initrd = build_initramfs(work)
    share = os.path.join(work, "share")
    shutil.rmtree(share, ignore_errors=True)
    os.makedirs(share)
    with open(os.path.join(share, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(share, "keep"), "w") as f:
        seen = folders_seen(repo, python) + [p for b in beside for p in folders_seen(b.repo, b.python)]
        keep = keep_paths(seen)
        f.write("".join(p + "\n" for p in keep))
    if beside:
        with open(os.path.join(share, "beside.sh"), "w") as f:
            f.write("".join(b.script() for b in beside))
    init = os.path.join(repo, os.path.relpath(GUEST_INIT, REPO))
    with open(os.path.join(share, "boot.sh"), "w") as f:
        only = str(config.get("only", ""))  # a comma-separated subset of the points (by hand, when debugging)
        f.write(f"#!/bin/sh\nexport SOTD_NFS_ONLY={shlex.quote(only)}\n")
        budget = int(str(config["budget_secs"]))
        f.write(f"exec /bin/sh {shlex.quote(init)} /share {shlex.quote(python)} {budget}\n")
    console = os.path.join(work, "console.log")
    argv = [
        "nice",
        "-n",
        str(QEMU_NICE),
        "timeout",
        "--kill-after=5",
        str(int(wall_secs)),
        "qemu-system-x86_64",
        "-accel",
        "tcg,thread=multi",
        "-cpu",
        "max",
        "-smp",
        "2",
        "-m",
        "1536",
        "-kernel",
        vmlinuz,
        "-initrd",
        initrd,
        "-append",
        "console=ttyS0 panic=-1 quiet loglevel=4",
        "-nographic",
        "-no-reboot",
        "-nic",
        "none",
        "-monitor",
        "none",
        "-virtfs",
        "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
        "-virtfs",
        f"local,path={share},mount_tag=share,security_model=none,multidevs=remap",
    ]
    t0 = time.monotonic()
    with open(console, "wb") as out, open(os.devnull, "rb") as devnull:
        rc = subprocess.run(argv, stdin=devnull, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
    secs = time.monotonic() - t0
    results = _json(os.path.join(share, "results.json"))
    preflight = _text(os.path.join(share, "preflight")).strip()
    if preflight:  # the guest could not reach the checkout: say so instead of every point's "no result"
        results = {"_preflight": preflight}
    return Boot(
        rc=rc,
        secs=secs,
        console=_text(console),
        guest_log=_text(os.path.join(share, "guest.log")),
        results=results,
        beside={b.tag: _json(os.path.join(share, b.results_name)) for b in beside},
        keep=keep,
    )


def _json(path: str) -> dict[str, object] | None:
    try:
        with open(path) as f:
            out = json.load(f)
    except (OSError, ValueError):
        return None
    return out if isinstance(out, dict) else None


def _text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""
