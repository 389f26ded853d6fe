"""Where the NFS tier can run from (issue 32): the folders kept in the guest's view, and the refusals.

Pure decisions of ``tests/nfs/vm.py`` (no guest is booted): ``keep_paths`` names what the guest's fresh
``/tmp``, ``/run`` and ``/var/lib/nfs`` must not hide; ``unreachable`` is the one sentence the tier fails
with when the checkout sits where the guest mounts something of its own.
"""

from __future__ import annotations

import os
import sys

import pytest

from tests.nfs import vm

pytestmark = pytest.mark.unit

PY = os.path.realpath(sys.executable)  # a real interpreter: its prefix is where it resolves to


@pytest.mark.parametrize(
    ("folders", "want"),
    [
        # a checkout and its interpreter outside the guest's tmpfs mounts: nothing to keep
        (["/work/sotd", "/work/sotd/.venv", "/usr"], []),
        # under /tmp (the case), with a space: the checkout, with its venv inside it, kept once
        (["/tmp/x/a b/sotd", "/tmp/x/a b/sotd/.venv", "/usr"], ["/tmp/x/a b/sotd"]),
        # a venv under /run, a folder it imports from under /tmp, one under /var/lib/nfs
        (
            ["/tmp/c", "/run/v", "/tmp/c/src", "/var/lib/nfs/p", "/run/v/lib"],
            ["/run/v", "/tmp/c", "/var/lib/nfs/p"],
        ),
        # the tmpfs mount points themselves are never kept (they are the fresh tmpfs); a look-alike is no child
        (["/tmp", "/run", "/tmpx/sotd", "/var/lib/nfsx"], []),
    ],
)
def test_keep_paths_are_the_hidden_folders_once_each(folders: list[str], want: list[str]) -> None:
    assert vm.keep_paths(folders) == want


def test_this_checkouts_folders_hold_it_and_its_interpreter() -> None:
    got = vm.folders_seen(vm.REPO, sys.executable)
    assert os.path.realpath(vm.REPO) in got
    assert os.path.dirname(os.path.dirname(PY)) in got  # the prefix .venv/bin/python resolves into
    assert os.path.realpath(os.path.join(vm.REPO, "src")) in got  # the editable install's .pth


def test_a_checkout_under_tmp_is_reachable() -> None:
    assert vm.unreachable("/tmp/x/sotd", PY) is None


@pytest.mark.parametrize(
    ("repo", "top"),
    [("/proc/sys/sotd", "/proc"), ("/srv/nfs/sotd", "/srv/nfs"), ("/share", "/share"), ("/tmp", "/tmp")],
)
def test_a_checkout_where_the_guest_mounts_its_own_is_refused_in_one_sentence(repo: str, top: str) -> None:
    assert vm.unreachable(repo, PY) == (
        f"the checkout is at {repo}, where the NFS tier's guest mounts its own {top}: clone the "
        "repository elsewhere (any other folder, /tmp included) and run scripts/setup there"
    )


def test_an_interpreter_that_does_not_run_is_refused(tmp_path) -> None:
    gone = str(tmp_path / "venv" / "bin" / "python")
    assert vm.unreachable("/work/sotd", gone) == (
        f"{gone} does not run ({gone} is not an executable file): run scripts/setup"
    )
