"""The NFS tier's one guest boot per pytest session (``tests/nfs/vm.py``), shared by every point's test,
with the clone test's points (``tests/nfs/clone.py``) run in the same boot before the tier's own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from tests.nfs import clone as nfs_clone
from tests.nfs import vm

# The guest's whole run (boot, nfsd, mounts, the clone's point, every point) must end inside this; QEMU is
# killed past it. (720 s until the guest booted beside the suite's other groups; a run at a load of 10 ran
# out of 720; 1,080 s until a fresh-clone run of 2026-12-03, in an hour when this machine ran 40% slower,
# ran out of it three points before the end.)
BUDGET_SECS = 1500
ARTIFACTS = os.path.join(vm.REPO, "build", "nfs")


class Guest:
    """The facts one boot left: ``point(key)`` is one point's facts, or a failure naming the kept logs.
    ``clone`` is the clone whose points ran beside (None, with ``clone_error``, when it could not be made);
    ``beside(tag)`` is those points' facts, asked the same way."""

    def __init__(
        self,
        boot: vm.Boot,
        results: dict[str, Any] | None = None,
        clone: nfs_clone.Clone | None = None,
        clone_error: str = "",
    ) -> None:
        self.boot = boot
        self.results: dict[str, Any] = dict(boot.results or {}) if results is None else results
        self.clone, self.clone_error = clone, clone_error

    def where(self) -> str:
        return f"guest log {ARTIFACTS}/guest.log, console {ARTIFACTS}/console.log (QEMU exit {self.boot.rc})"

    def beside(self, tag: str) -> Guest:
        got = self.boot.beside.get(tag)
        return Guest(self.boot, {} if got is None else dict(got), self.clone, self.clone_error)

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
    missing = vm.missing_tools() + ([] if shutil.which("git") else ["git"])
    if missing:
        pytest.fail(f"the NFS tier needs {' '.join(missing)}: run scripts/setup")
    where = vm.unreachable(vm.REPO, sys.executable)
    if where is not None:
        pytest.fail(f"the NFS tier cannot run from here: {where}")
    with (
        tempfile.TemporaryDirectory(prefix="sotd-nfs-vm-") as work,
        tempfile.TemporaryDirectory(prefix="sotd-clone-", dir="/tmp") as clone_top,
    ):
        clone: nfs_clone.Clone | None = None
        clone_error = ""
        try:
            clone = nfs_clone.make(clone_top)
        except (OSError, subprocess.SubprocessError) as e:  # the clone test fails with it; the tier goes on
            clone_error = f"{type(e).__name__}: {e}"
        # SOTD_NFS_ONLY=<point>,<point>: boot for those points alone (by hand, with -k for their tests;
        # every other point's test then fails as "no result", and the clone's point is not run)
        only = os.environ.get("SOTD_NFS_ONLY", "")
        config = {"python": sys.executable, "budget_secs": BUDGET_SECS, "only": only}
        beside = (clone.beside(),) if clone is not None and not only else ()
        boot = vm.boot(work, config, wall_secs=BUDGET_SECS + 30, beside=beside)
        os.makedirs(ARTIFACTS, exist_ok=True)
        for name, src in (
            ("console.log", os.path.join(work, "console.log")),
            ("guest.log", os.path.join(work, "share", "guest.log")),
            ("results.json", os.path.join(work, "share", "results.json")),
            *((b.results_name, os.path.join(work, "share", b.results_name)) for b in beside),
        ):
            if os.path.exists(src):
                shutil.copy(src, os.path.join(ARTIFACTS, name))
        yield Guest(boot, clone=clone, clone_error=clone_error)
