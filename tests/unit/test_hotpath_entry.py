"""``sotd/__main__.py``, the wrappers' ``python -S`` entry (issue 17 target 1): under ``-S`` it still finds
sotd wherever the package is, and the folder holding it never shadows the standard library; and
``sotd/entry.py``'s way out (``os._exit`` only when the teardown has nothing to run).

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


@pytest.mark.parametrize(
    ("callbacks", "threads", "fast"),
    [(0, 0, True), (1, 0, False), (None, 0, False), (0, 1, False), (2, 3, False)],
    ids=["nothing-to-tear-down", "an-atexit-callback", "cannot-tell", "a-live-thread", "both"],
)
def test_fast_exit_ok(callbacks: int | None, threads: int, fast: bool) -> None:
    from sotd.entry import fast_exit_ok

    assert fast_exit_ok(callbacks, threads) is fast


def run_console(prelude: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``console()`` (what pip's ``bin/sotd`` calls) after ``prelude``, in a fresh interpreter."""
    code = f"import sys\n{prelude}\nsys.argv = ['sotd', *{list(args)!r}]\nfrom sotd.entry import console\nconsole()\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPROFILE", "SOT_"))}
    return subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, env=env, timeout=60
    )


def test_a_command_ends_without_the_teardown() -> None:
    """The fast exit really happens: an object whose ``__del__`` would speak at teardown stays silent."""
    prelude = "class Loud:\n    def __del__(self):\n        print('torn down')\nloud = Loud()"
    p = run_console(prelude, "--version")
    assert (p.returncode, p.stdout, p.stderr) == (0, f"sotd {__version__}\n", "")


def test_an_atexit_callback_still_runs() -> None:
    p = run_console("import atexit\natexit.register(lambda: print('atexit ran'))", "--version")
    assert (p.returncode, p.stdout) == (0, f"sotd {__version__}\natexit ran\n")


def test_a_live_thread_is_waited_for() -> None:
    prelude = (
        "import threading, time\n"
        "t = threading.Thread(target=lambda: (time.sleep(0.3), print('thread done', flush=True)))\n"
        "t.start()"
    )
    p = run_console(prelude, "--version")
    assert (p.returncode, p.stdout) == (0, f"sotd {__version__}\nthread done\n")


@pytest.mark.parametrize(
    ("args", "status"), [(("--version",), 0), ((), 2), (("comm", "nosuchverb"), 2), (("comm", "--help"), 0)]
)
def test_status_and_output_are_main_s(args: tuple[str, ...], status: int) -> None:
    """Through ``console`` (fast exit) the status, stdout and stderr are exactly ``main``'s under
    ``sys.exit`` (the reference run registers an atexit callback, so it takes the normal exit)."""
    fast = run_console("", *args)
    slow = run_console("import atexit\natexit.register(lambda: None)", *args)
    assert fast.returncode == slow.returncode == status
    assert (fast.stdout, fast.stderr) == (slow.stdout, slow.stderr)
    assert fast.stdout or fast.stderr
