"""``python -I -m sotd.jobs.launch SPEC``: start a session's sandbox with descriptors (issue 18).

A session's command runs in a terminal row of the daemon, which cannot hand it descriptors. So the row
runs this launcher first: it reads ``SPEC`` (JSON written by the node into the run's root-only state
folder: ``argv``, the bwrap command line, and the argv slots to fill), opens each bind source without
following links (``paths.open_nofollow``) and puts its descriptor in its slot (``--bind-fd`` /
``--ro-bind-fd``), writes the seccomp filter into a memfd for ``--seccomp``, and ``execv``s the argv.
So a session gets the same binds-by-descriptor and filter as a job, opened at the moment it starts.

Guarantee: the sandbox starts only on what was opened without following a link; a source that became a
link exits 126 with the reason on stderr (the row ends; the node ends the run). What would break it: a
SPEC another user can write (it lives in ``STATE/jobs/<RUN-HASH>/``, 0700 root).
"""

from __future__ import annotations

import json
import os
import sys

from sotd.jobs import paths, seccomp
from sotd.jobs.errors import Refused

EXIT_REFUSED = 126


def fill(spec: dict[str, object]) -> list[str]:
    """The argv of ``spec`` with each slot filled by a descriptor opened now (inheritable)."""
    argv = [str(a) for a in spec["argv"]]  # type: ignore[attr-defined]
    for index, path in spec.get("binds", []):  # type: ignore[attr-defined]
        fd = paths.open_nofollow(str(path), "the sandbox path")
        os.set_inheritable(fd, True)
        argv[int(index)] = str(fd)
    at = spec.get("seccomp")
    if isinstance(at, int):
        fd = seccomp.memfd()
        os.set_inheritable(fd, True)
        argv[at] = str(fd)
    return argv


def main(args: list[str]) -> int:
    if len(args) != 1:
        sys.stderr.write("usage: python -I -m sotd.jobs.launch SPEC\n")
        return 2
    try:
        with open(args[0], encoding="utf-8") as f:
            spec = json.load(f)
        argv = fill(spec)
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.stderr.write(f"sotd.jobs.launch: cannot start the sandbox: {e}\n")
        return EXIT_REFUSED
    except Refused as e:
        sys.stderr.write(f"sotd.jobs.launch: {e.message}\n")
        return EXIT_REFUSED
    os.execv(argv[0], argv)  # noqa: S606 -- the argv the node wrote; never returns


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
