"""``python -S <this file> comm send ...`` (the installed wrappers) and ``console`` (pip's ``bin/sotd``): the
entries that start a sotd command, and the way it ends (issue 17 target 1).

Spec: docs/design.md, "The hot path" (the wrappers); behaviour 1.12 (the wrappers ``sotd comm install``
writes). A wrapper runs the interpreter with ``-S`` (no ``site``: no .pth files, no sitecustomize, a few
ms of every call) on this file. Python then puts this file's folder (symlinks resolved) first on
``sys.path``; this entry takes it off and puts the folder holding the ``sotd`` package *last*, after the
standard library, then runs ``sotd.cli.main`` exactly as the console script does. sotd needs nothing
outside the standard library, so ``site`` has nothing to add, and the folder that holds sotd (a venv's
site-packages, where ``sotd comm install`` finds its own console script beside the interpreter) cannot
shadow a standard module (a stray ``fcntl.py`` or ``enum`` backport there).

Both entries end through ``leave``: stdout and stderr flushed, then ``os._exit`` with the command's
status, skipping the interpreter's teardown (freeing every module and object: about a quarter of
``python -c pass`` for a poll here). That is only done when the teardown has nothing to run
(``fast_exit_ok``): no ``atexit`` callback (logging, tempfile's finalizers, coverage and the like register
one) and no live non-daemon thread (a normal exit would wait for it). Otherwise the command exits as
usual, through ``sys.exit``.
Guarantee: the same command line, environment, output and exit status as ``sotd.cli.main.main`` under
``sys.exit``; ``python -m sotd`` runs it too (``sys.path`` is then left as Python set it).
What would break it: a runtime dependency outside the standard library (it would not be found under
``-S``); leaving ``sys.path[0]`` at the package folder (its modules would shadow the standard library's,
and ``import sotd`` would fail), or comparing that entry with an unresolved path (Python resolves it);
work left to the teardown that neither check sees (a buffered file never closed, a ``__del__`` with a side
effect): every sotd writer closes or flushes its files itself.
Tests: tests/unit/test_hotpath_entry.py.
"""

import os
import sys


def fast_exit_ok(atexit_callbacks: int | None, live_threads: int) -> bool:
    """Whether a command may end with ``os._exit``: no ``atexit`` callback is registered (None: cannot
    tell, so no) and no thread but the main one that a normal exit would wait for is alive. Pure."""
    return atexit_callbacks == 0 and live_threads == 0


def _atexit_callbacks() -> int | None:
    import atexit

    count = getattr(atexit, "_ncallbacks", None)  # CPython's; elsewhere: cannot tell
    return count() if callable(count) else None


def _live_threads() -> int:
    """Live non-daemon threads besides the main one (0 when ``threading`` was never imported)."""
    threading = sys.modules.get("threading")
    if threading is None:
        return 0
    main = threading.main_thread()
    return sum(1 for t in threading.enumerate() if t is not main and not t.daemon and t.is_alive())


def leave(status: int) -> None:
    """End the process with ``status``: flushed, and without the teardown when ``fast_exit_ok``."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be said on it
            pass
    if fast_exit_ok(_atexit_callbacks(), _live_threads()):
        os._exit(status)
    sys.exit(status)


def console() -> None:
    """pip's ``bin/sotd`` (``[project.scripts]``): ``sotd.cli.main.main``, ended through ``leave``."""
    from sotd.cli.main import main

    leave(main())


if __name__ == "__main__":
    here = os.path.dirname(os.path.realpath(__file__))
    if sys.path and os.path.realpath(sys.path[0]) == here:
        del sys.path[0]
        sys.path.append(os.path.dirname(here))
    console()
