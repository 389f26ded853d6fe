"""The NFS tier from a clone under /tmp, in a folder with a space (issue 32, part 2).

A fresh ``git clone`` of this repository into ``/tmp/sotd-clone-*/a dir/sotd`` with a venv of its own
(the same interpreter, the clone's ``src`` on its path, its own ``sotd`` entry script: no install, no
network), then one guest boot of the clone's ``tests/nfs/guest`` for the tier's first and smallest point
(``record_v4``), checked with that point's own test. The guest mounts a fresh ``/tmp``: before issue 32 it
hid the clone and every point ended "the guest recorded no result". The clone is of the committed HEAD:
what is not committed is not in it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile

import pytest

from tests.nfs import test_nfs, vm
from tests.nfs.conftest import Guest

pytestmark = [pytest.mark.nfs, pytest.mark.serial, pytest.mark.root, pytest.mark.timeout(600)]

POINT = "record_v4"


def make_clone(top: str) -> tuple[str, str]:
    """(clone, its venv's python): this repository's HEAD cloned under ``top``, with a venv of its own."""
    clone = os.path.join(top, "a dir", "sotd")
    subprocess.run(["git", "clone", "--quiet", vm.REPO, clone], check=True, timeout=120)
    venv = os.path.join(clone, ".venv")
    base = os.path.realpath(sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
    py = os.path.join(venv, "bin", "python")
    purelib = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.strip()
    with open(os.path.join(purelib, "sotd-clone.pth"), "w") as f:
        f.write(os.path.join(clone, "src") + "\n")  # what an editable install's .pth says
    # the entry script scripts/setup's install writes (pyproject's [project.scripts]), for this venv; a
    # "#!" line cannot hold a path with a space, so it starts as sh and execs the python (as pip's does)
    entry = os.path.join(venv, "bin", "sotd")
    with open(entry, "w") as f:
        f.write("#!/bin/sh\n'''exec' " + shlex.quote(py) + ' "$0" "$@"\n' + "' '''\n")
        f.write("import sys\nfrom sotd.entry import console\nsys.exit(console())\n")
    os.chmod(entry, 0o755)
    return clone, py


def test_the_smallest_point_runs_from_a_clone_under_tmp_with_a_space() -> None:
    if os.geteuid() != 0:
        pytest.skip("the NFS tier boots a QEMU guest with 9p and mounts: run as root (CI does)")
    missing = vm.missing_tools() + ([] if shutil.which("git") else ["git"])
    if missing:
        pytest.fail(f"the NFS tier needs {' '.join(missing)}: run scripts/setup")
    top = tempfile.mkdtemp(prefix="sotd-clone-", dir="/tmp")
    try:
        clone, py = make_clone(top)
        assert vm.unreachable(clone, py) is None
        # the clone's sotd is the one its venv runs, not this checkout's
        where = subprocess.run(
            [py, "-c", "import sotd; print(sotd.__file__)"],
            check=True,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
        assert where == os.path.join(clone, "src", "sotd", "__init__.py"), where
        work = os.path.join(top, "vm")
        config = {"python": py, "budget_secs": 300, "only": POINT}
        boot = vm.boot(work, config, wall_secs=330, repo=clone)
        with open(os.path.join(work, "share", "keep")) as f:
            assert f.read() == clone + "\n", "the clone (its venv inside it) is the one folder kept"
        guest = Guest(boot)
        assert POINT in guest.results, boot.guest_log[-3000:]
        # the point's own assertions, on what the clone's sotd did in the guest
        test_nfs.test_record_v4_hub_writes_nfs4_manager_and_host_b_appends_itself(guest)
    finally:
        shutil.rmtree(top, ignore_errors=True)
