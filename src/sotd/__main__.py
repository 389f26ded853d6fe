"""``python -S <this file> comm send ...``: the installed wrappers' direct entry (issue 17 target 1).

Spec: docs/design.md, "The hot path" (the wrappers); behaviour 1.12 (the wrappers ``sotd comm install``
writes). A wrapper runs the interpreter with ``-S`` (no ``site``: no .pth files, no sitecustomize, a few
ms of every call) on this file, which puts the folder holding the ``sotd`` package first on ``sys.path``
in place of its own folder, then runs ``sotd.cli.main`` exactly as the console script does. sotd needs
nothing outside the standard library, so ``site`` has nothing to add.
Guarantee: the same command line, environment and exit status as ``sotd`` itself; ``python -m sotd`` runs
it too (``sys.path`` is then left as Python set it).
What would break it: a runtime dependency outside the standard library (it would not be found under
``-S``), or leaving ``sys.path[0]`` at the package folder (its modules would shadow the standard library's).
"""

import sys

if __name__ == "__main__":
    here = __file__.rpartition("/")[0]
    if sys.path and sys.path[0] == here:
        sys.path[0] = here.rpartition("/")[0]
    from sotd.cli.main import main

    sys.exit(main())
