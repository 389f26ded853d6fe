"""The seccomp filter every sandbox runs under (issue 18, "limits that hold"): bwrap's ``--seccomp FD``.

``program()`` is pure: the classic-BPF program (``struct sock_filter`` array, native byte order) that
bwrap loads just before it executes the command. It refuses with ``EPERM`` the calls a sandbox has no
business making and that serve escapes: mounting and namespace changes (``mount``, ``umount2``,
``pivot_root``, ``unshare``, ``setns``, the new mount API), kernel modules and ``kexec``, ``bpf``,
``perf_event_open``, keyrings, ``userfaultfd``, ``open_by_handle_at`` / ``name_to_handle_at``,
``ptrace`` and ``process_vm_*``, raw I/O ports, clock and swap changes, ``chroot``, ``acct``,
``quotactl``, ``syslog``, and ``ioctl(fd, TIOCSTI, …)`` (typing into a terminal). A call of another
architecture's ABI (not x86_64, or x32) kills the process: its numbers mean other calls.

Guarantee: on x86_64 the listed calls fail with EPERM inside every jobs sandbox. What would break it: a
kernel ABI other than x86_64 (``available()`` is False there and ``started`` names no filter), or a new
escape call the list does not name yet (the list is a floor, not a proof; user namespaces are also off
through bwrap's ``--disable-userns``).
"""

from __future__ import annotations

import os
import struct

# x86_64 numbers, from <asm/unistd_64.h>
DENIED = {
    "ptrace": 101, "syslog": 103, "uselib": 134, "vhangup": 153, "pivot_root": 155, "adjtimex": 159,
    "chroot": 161, "acct": 163, "settimeofday": 164, "mount": 165, "umount2": 166, "swapon": 167,
    "swapoff": 168, "reboot": 169, "iopl": 172, "ioperm": 173, "init_module": 175, "delete_module": 176,
    "quotactl": 179, "lookup_dcookie": 212, "clock_settime": 227, "kexec_load": 246, "add_key": 248,
    "request_key": 249, "keyctl": 250, "unshare": 272, "perf_event_open": 298, "name_to_handle_at": 303,
    "open_by_handle_at": 304, "clock_adjtime": 305, "setns": 308, "process_vm_readv": 310,
    "process_vm_writev": 311, "finit_module": 313, "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442,
}  # fmt: skip
IOCTL = 16
TIOCSTI = 0x5412
AUDIT_ARCH_X86_64 = 0xC000003E
X32_BIT = 0x40000000

# classic BPF opcodes and seccomp return values
LD_W_ABS = 0x20
JEQ_K = 0x15
JGE_K = 0x35
RET_K = 0x06
RET_KILL_PROCESS = 0x80000000
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
EPERM = 1
# offsets in struct seccomp_data
NR, ARCH, ARG1_LOW = 0, 4, 24


def _ins(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program() -> bytes:
    """The filter as bytes for bwrap's ``--seccomp FD`` (see the module docstring)."""
    nrs = sorted(DENIED.values())
    # layout: arch check (3), load nr (1), x32 (1), one jeq per denied call, ioctl (1 + 2), allow, deny
    body: list[tuple[int, int, int | str, int | str]] = [
        (LD_W_ABS, ARCH, 0, 0),
        (JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
        (RET_K, RET_KILL_PROCESS, 0, 0),
        (LD_W_ABS, NR, 0, 0),
        (JGE_K, X32_BIT, "deny", 0),
        *((JEQ_K, n, "deny", 0) for n in nrs),
        (JEQ_K, IOCTL, 0, "allow"),
        (LD_W_ABS, ARG1_LOW, 0, 0),
        (JEQ_K, TIOCSTI, "deny", "allow"),
        (RET_K, RET_ALLOW, 0, 0),  # allow
        (RET_K, RET_ERRNO | EPERM, 0, 0),  # deny
    ]
    labels = {"allow": len(body) - 2, "deny": len(body) - 1}
    out = []
    for i, (code, k, jt, jf) in enumerate(body):
        jt_n = labels[jt] - i - 1 if isinstance(jt, str) else jt
        jf_n = labels[jf] - i - 1 if isinstance(jf, str) else jf
        out.append(_ins(code, k, jt_n, jf_n))
    return b"".join(out)


def available() -> bool:
    """True on an x86_64 kernel, the only ABI the numbers above name."""
    return os.uname().machine == "x86_64"


def memfd() -> int:
    """``program()`` in a new memfd, rewound: the descriptor bwrap's ``--seccomp`` reads (every sandbox's
    one copy: ``launchers.Direct`` and a session row's ``sotd.jobs.launch``). The caller closes it."""
    fd = os.memfd_create("seccomp", 0)
    os.write(fd, program())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
