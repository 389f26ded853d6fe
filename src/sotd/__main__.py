"""``python -S <this file> comm send ...``: the installed wrappers' direct entry (issue 17 target 1).

Spec: docs/design.md, "The hot path" (the wrappers); behaviour 1.12 (the wrappers ``sotd comm install``
writes). A wrapper runs the interpreter with ``-S`` (no ``site``: no .pth files, no sitecustomize, a few
ms of every call) on this file. Python then puts this file's folder (symlinks resolved) first on
``sys.path``; this entry takes it off and puts the folder holding the ``sotd`` package *last*, after the
standard library, then runs ``sotd.cli.main`` exactly as the console script does. sotd needs nothing
outside the standard library, so ``site`` has nothing to add, and the folder that holds sotd (a venv's
site-packages, where ``sotd comm install`` finds its own console script beside the interpreter) cannot
shadow a standard module (a stray ``fcntl.py`` or ``enum`` backport there).
Guarantee: the same command line, environment and exit status as ``sotd`` itself; ``python -m sotd`` runs
it too (``sys.path`` is then left as Python set it).
What would break it: a runtime dependency outside the standard library (it would not be found under
``-S``), leaving ``sys.path[0]`` at the package folder (its modules would shadow the standard library's,
and ``import sotd`` would fail), or comparing that entry with an unresolved path (Python resolves it).
Tests: tests/unit/test_hotpath_entry.py.
"""

import os
import sys

if __name__ == "__main__":
    here = os.path.dirname(os.path.realpath(__file__))
    if sys.path and os.path.realpath(sys.path[0]) == here:
        del sys.path[0]
        sys.path.append(os.path.dirname(here))
    from sotd.cli.main import main

    sys.exit(main())
