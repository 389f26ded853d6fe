"""The NFS tier's guest: build a small initramfs, boot Debian's kernel under QEMU (TCG), collect results.

File: ``tests/nfs/vm.py`` (host side). Recipe: ``../shared/spec/testing-notes.md`` §2.7 and appendix A.
Guarantee: one bounded boot. The guest's root is this machine's ``/`` over 9p, read-only, under a tmpfs
overlay, so it runs this checkout's ``.venv`` and sotd exactly as the host sees them; a second 9p share
(writable) carries the run's config in and ``results.json`` and the guest log out. QEMU runs under
``timeout`` and the guest powers itself off; a boot that outlives its wall time is killed, and its console
log is kept for the failure message.
What would break it: KVM (it hangs on this machine: software emulation only), more than 2 vCPUs on a
2-core machine shared with others, or a second guest at once (the tier runs one boot per pytest session).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
GUEST_INIT = os.path.join(HERE, "guest", "init.sh")

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


@dataclass
class Boot:
    """What one boot left: QEMU's exit status, the wall time, the console text and the guest's results."""

    rc: int
    secs: float
    console: str
    guest_log: str
    results: dict[str, object] | None


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


def boot(work: str, config: dict[str, object], *, wall_secs: float) -> Boot:
    """Boot once with ``config`` (``/share/config.json`` in the guest); at most ``wall_secs`` of wall time.

    The guest runs ``tests/nfs/guest/init.sh`` of this checkout as PID 1 and powers off when done.
    """
    vmlinuz, _release = kernel()
    initrd = build_initramfs(work)
    share = os.path.join(work, "share")
    shutil.rmtree(share, ignore_errors=True)
    os.makedirs(share)
    with open(os.path.join(share, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(share, "boot.sh"), "w") as f:
        only = str(config.get("only", ""))  # a comma-separated subset of the points (by hand, when debugging)
        f.write(f"#!/bin/sh\nexport SOTD_NFS_ONLY='{only}'\n")
        f.write(f"exec /bin/sh {GUEST_INIT} /share {config['python']} {config['budget_secs']}\n")
    console = os.path.join(work, "console.log")
    argv = [
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
    results: dict[str, object] | None = None
    try:
        with open(os.path.join(share, "results.json")) as f:
            results = json.load(f)
    except (OSError, ValueError):
        results = None
    return Boot(
        rc=rc,
        secs=secs,
        console=_text(console),
        guest_log=_text(os.path.join(share, "guest.log")),
        results=results,
    )


def _text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""
