"""``sotd/__main__.py``, the wrappers' ``python -S`` entry (issue 17 target 1): under ``-S`` it still finds
sotd wherever the package is, and the folder holding it never shadows the standard library.

Real interpreters on real folders: a copy of the package beside a stray ``__future__.py`` (what a
site-packages may hold: a backport of a standard module), and a package reached through a symlinked
folder (Python resolves ``sys.path[0]``; the entry must compare resolved paths).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

import sotd
from sotd import __version__

pytestmark = pytest.mark.unit

PACKAGE = os.path.dirname(os.path.abspath(sotd.__file__))


def run_entry(entry: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # nothing written into the copies
    return subprocess.run(
        [sys.executable, "-S", entry, "--version"],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        timeout=60,
    )


def test_the_folder_holding_sotd_does_not_shadow_the_standard_library(tmp_path) -> None:
    site = tmp_path / "site-packages"
    shutil.copytree(PACKAGE, site / "sotd", ignore=shutil.ignore_patterns("__pycache__"))
    (site / "__future__.py").write_text("raise ImportError('the stray __future__ was imported')\n")
    p = run_entry(str(site / "sotd" / "__main__.py"))
    assert (p.returncode, p.stdout, p.stderr) == (0, f"sotd {__version__}\n", "")


def test_a_package_reached_through_a_symlinked_folder_is_found(tmp_path) -> None:
    link = tmp_path / "linked"
    link.mkdir()
    (link / "sotd").symlink_to(PACKAGE, target_is_directory=True)
    p = run_entry(str(link / "sotd" / "__main__.py"))
    assert (p.returncode, p.stdout, p.stderr) == (0, f"sotd {__version__}\n", "")
