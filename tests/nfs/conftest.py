"""The NFS tier's one guest boot per pytest session (``tests/nfs/vm.py``), shared by every point's test."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from tests.nfs import vm

# The guest's whole run (boot, nfsd, mounts, every point) must end inside this; QEMU is killed past it.
# (720 s until the guest booted beside the suite's other groups; a run at a load of 10 ran out of 720.)
BUDGET_SECS = 1080
ARTIFACTS = os.path.join(vm.REPO, "build", "nfs")


class Guest:
    """The facts one boot left: ``point(key)`` is one point's facts, or a failure naming the kept logs."""

    def __init__(self, boot: vm.Boot) -> None:
        self.boot = boot
        self.results: dict[str, Any] = dict(boot.results or {})

    def where(self) -> str:
        return f"guest log {ARTIFACTS}/guest.log, console {ARTIFACTS}/console.log (QEMU exit {self.boot.rc})"

    def point(self, key: str) -> dict[str, Any]:
        if "_preflight" in self.results:  # the guest could not reach the checkout: one reason for all
            pytest.fail(f"the NFS tier cannot run from here: {self.results['_preflight']}; {self.where()}")
        facts = self.results.get(key)
        if facts is None:
            pytest.fail(
                f"the guest recorded no result for {key}; {self.where()}\n{self.boot.guest_log[-3000:]}"
            )
        if "error" in facts:
            pytest.fail(f"point {key} raised in the guest:\n{facts['error']}\n{self.where()}")
        return dict(facts)


@pytest.fixture(scope="session")
def guest() -> Iterator[Guest]:
    if os.geteuid() != 0:
        pytest.skip("the NFS tier boots a QEMU guest with 9p and mounts: run as root (CI does)")
    missing = vm.missing_tools()
    if missing:
        pytest.fail(f"the NFS tier needs {' '.join(missing)}: run scripts/setup")
    import sys

    where = vm.unreachable(vm.REPO, sys.executable)
    if where is not None:
        pytest.fail(f"the NFS tier cannot run from here: {where}")
    with tempfile.TemporaryDirectory(prefix="sotd-nfs-vm-") as work:
        # SOTD_NFS_ONLY=<point>,<point>: boot for those points alone (by hand, with -k for their tests;
        # every other point's test then fails as "no result")
        only = os.environ.get("SOTD_NFS_ONLY", "")
        config = {"python": sys.executable, "budget_secs": BUDGET_SECS, "only": only}
        boot = vm.boot(work, config, wall_secs=BUDGET_SECS + 30)
        os.makedirs(ARTIFACTS, exist_ok=True)
        for name, src in (
            ("console.log", os.path.join(work, "console.log")),
            ("guest.log", os.path.join(work, "share", "guest.log")),
            ("results.json", os.path.join(work, "share", "results.json")),
        ):
            if os.path.exists(src):
                shutil.copy(src, os.path.join(ARTIFACTS, name))
        yield Guest(boot)
