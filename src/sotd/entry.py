"""``sotd/entry.py``: how a sotd command starts and ends, for pip's ``bin/sotd`` (``console``, the
``[project.scripts]`` entry) and the wrappers' ``python -S sotd/__main__.py`` (issue 17 target 1).

Both end through ``leave``: stdout and stderr flushed, then ``os._exit`` with the command's status,
skipping the interpreter's teardown, which frees every module and object and costs about a quarter of
``python -c pass`` for a poll here. That is done only when the teardown has nothing to run
(``fast_exit_ok``): no ``atexit`` callback (logging, tempfile's finalizers, coverage and the like register
one) and no live non-daemon thread (a normal exit would wait for it). Otherwise the command exits as
usual, through ``sys.exit``. This lives here, not in ``__main__.py``: a script run as ``__main__`` is
compiled from source at every start (0.8 ms for this text), and a module is read from its .pyc.
Guarantee: the same output and exit status as ``sotd.cli.main.main`` under ``sys.exit``.
What would break it: work left to the teardown that neither check sees, such as a buffered file never
closed or a ``__del__`` with a side effect. Every sotd writer closes or flushes its files itself.
Tests: tests/unit/test_hotpath_entry.py.
"""

import os
import sys
import time

_IMPORTED = time.monotonic()  # the first sotd code this process ran (``sotd/__main__.py`` or pip's script)
# Set by ``console``: when this command started, for the send's verdict bound (``cli.comm.daemoncall.left_now``);
# None in a process that runs ``main`` itself (a test), whose calls count their bound from the dial.
COMMAND_STARTED: float | None = None


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
    global COMMAND_STARTED
    COMMAND_STARTED = _IMPORTED
    from sotd.cli.main import main

    leave(main())
