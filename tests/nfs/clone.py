"""The NFS tier's clone under /tmp, in a folder with a space (issue 32, part 2), made on the host.

File: ``tests/nfs/clone.py``. ``make`` clones this repository's committed HEAD into
``<top>/a dir/sotd`` and gives it a venv of its own (the same interpreter, the clone's ``src`` on its path
through a ``.pth`` as an editable install writes it, its own ``sotd`` entry script: no install, no
network), byte-compiled here so the guest does not compile it under emulation. The tier's one boot
(``conftest.guest``) runs the clone's ``points.py`` for ``POINT`` beside its own points (``vm.Beside``),
and ``test_nfs_clone`` checks what it did. What is not committed is not in the clone.
What would break it: a clone the guest's fresh ``/tmp`` hides (the bug of issue 32), or a venv that
imports this checkout's ``sotd`` instead of the clone's (``test_nfs_clone`` asserts which one runs).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass

from tests.nfs import vm

POINT = "record_v4"  # the tier's first and smallest point
TAG = "-clone"  # its folders' and results file's suffix in the guest


@dataclass(frozen=True)
class Clone:
    path: str
    python: str  # its venv's interpreter

    def beside(self) -> vm.Beside:
        return vm.Beside(repo=self.path, python=self.python, only=POINT, tag=TAG, secs=300)


def make(top: str) -> Clone:
    """This repository's HEAD cloned under ``top``, with a venv of its own; raises OSError or
    subprocess.SubprocessError when it cannot be made."""
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
    subprocess.run(
        [py, "-m", "compileall", "-q", os.path.join(clone, "src"), os.path.join(clone, "tests", "nfs")],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return Clone(clone, py)
