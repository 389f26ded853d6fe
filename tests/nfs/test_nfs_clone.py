"""The NFS tier from a clone under /tmp, in a folder with a space (issue 32, part 2).

A fresh ``git clone`` of this repository into ``/tmp/sotd-clone-*/a dir/sotd`` with a venv of its own
(``tests/nfs/clone.py``), whose ``tests/nfs/guest/points.py`` runs the tier's first and smallest point
(``record_v4``) under the clone's interpreter and sotd, in the tier's one boot (``conftest.guest``), before
the tier's own points, in folders of its own; checked with that point's own test. The guest mounts a fresh
``/tmp``: before issue 32 it hid the clone and every point ended "the guest recorded no result". The clone
is of the committed HEAD: what is not committed is not in it.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.nfs import clone as nfs_clone
from tests.nfs import test_nfs, vm
from tests.nfs.conftest import BUDGET_SECS, Guest

pytestmark = [pytest.mark.nfs, pytest.mark.serial, pytest.mark.root, pytest.mark.timeout(BUDGET_SECS + 90)]


def test_the_smallest_point_runs_from_a_clone_under_tmp_with_a_space(guest: Guest) -> None:
    clone = guest.clone
    if clone is None:
        pytest.fail(f"the clone under /tmp could not be made: {guest.clone_error}")
    assert " " in clone.path and clone.path.startswith("/tmp/"), clone.path
    assert vm.unreachable(clone.path, clone.python) is None
    # the clone's sotd is the one its venv runs, not this checkout's
    where = subprocess.run(
        [clone.python, "-c", "import sotd; print(sotd.__file__)"],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.strip()
    assert where == os.path.join(clone.path, "src", "sotd", "__init__.py"), where
    # the clone (its venv inside it) is the one folder kept for it, and the guest kept it
    assert vm.keep_paths(vm.folders_seen(clone.path, clone.python)) == [clone.path]
    assert clone.path in guest.boot.keep, guest.boot.keep
    # the point's own assertions, on what the clone's sotd did in the guest
    test_nfs.test_record_v4_hub_writes_nfs4_manager_and_host_b_appends_itself(guest.beside(nfs_clone.TAG))
