"""``python -S <this file> comm send ...``: the installed wrappers' direct entry (issue 17 target 1).

Spec: docs/design.md, "The hot path"; behaviour 1.12 (the wrappers ``sotd comm install`` writes). A
wrapper runs the interpreter with ``-S`` (no ``site``: no .pth files, no sitecustomize) on this file.
Python puts this file's folder (symlinks resolved) first on ``sys.path``. This entry takes it off and
puts the folder holding the ``sotd`` package *last*, after the standard library, so a stray module there
(a ``fcntl.py``, an ``enum`` backport) never shadows a standard one. Then it runs the command as pip's
``bin/sotd`` does (``sotd.entry.console``). ``python -m sotd`` runs it too, with ``sys.path`` left as
Python set it. Kept this short because a script is compiled from source at every run. The rest is
``sotd/entry.py``.
Guarantee: the same command line, environment and exit status as ``sotd`` itself.
What would break it: a runtime dependency outside the standard library (not found under ``-S``),
leaving ``sys.path[0]`` at the package folder (``import sotd`` would fail), or comparing it with an
unresolved path (Python resolves it). Tests: tests/unit/test_hotpath_entry.py.
"""

import os
import sys

if __name__ == "__main__":
    here = os.path.dirname(os.path.realpath(__file__))
    if sys.path and os.path.realpath(sys.path[0]) == here:
        del sys.path[0]
        sys.path.append(os.path.dirname(here))
    from sotd.entry import console

    console()
