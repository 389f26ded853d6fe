"""``sotd/cli/doctor/command.py``: ``sotd doctor [--json] [--fix]`` (issue 13 part 4): the checks in order
(``examine``), then ``--fix``'s repairs (each printed, then the checks again), then the report: exit 0
healthy, 1 a problem (the findings are the report, not an error). Guarantee: without ``--fix`` nothing is
written. What would break it: a repair run without ``--fix``, or an exit status that is not an
``EXIT_*``."""

from __future__ import annotations

import json
import os
import sys

from sotd.cli.comm.common import out
from sotd.cli.doctor.agent_checks import check_ancestry, check_hooks
from sotd.cli.doctor.daemon_checks import check_daemon, check_rows, check_topology
from sotd.cli.doctor.folder_checks import (
    check_folder,
    check_inboxes,
    check_lock_record,
    check_registry,
    check_registry_lock,
)
from sotd.cli.doctor.report import Report
from sotd.errors import EXIT_FAILED, EXIT_OK, SotdError, UsageError


def examine(env: dict[str, str]) -> Report:
    from sotd import runtime
    from sotd.formats.layout import Layout

    rep = Report()
    lay = Layout.from_env(env)
    host = runtime.self_host(env)
    if check_folder(lay, env, rep):
        agents = check_registry(lay, rep)
        check_registry_lock(lay, host, rep)
        check_inboxes(lay, env, agents, rep)
        check_lock_record(lay, host, env, rep)
        check_hooks(lay, env, rep)
    if check_daemon(env, rep):
        check_rows(env, rep)
    check_topology(lay, env, host, rep)
    check_ancestry(env, rep)
    return rep


def run(argv: list[str]) -> int:
    as_json = fix = False
    for a in argv:
        if a == "--json":
            as_json = True
        elif a == "--fix":
            fix = True
        else:
            from sotd.text import inert

            raise UsageError(f"sotd doctor: unexpected argument '{inert(a)}' (see: sotd doctor --help)")
    env = dict(os.environ)
    rep = examine(env)
    fixed: list[dict[str, str]] = []
    if fix and any(f.repair for f in rep.findings):
        for f in rep.findings:
            if f.repair is None:
                continue
            try:
                done = f.repair()
            except (SotdError, OSError) as e:
                done = f"not fixed: {e}"
            fixed.append({"code": f.code, "done": done})
            if not as_json:
                out(f"fixed {f.code}: {done}")
        rep = examine(env)
    if as_json:
        doc = {
            "healthy": not rep.findings,
            "findings": [f.doc() for f in rep.findings],
            "ok": rep.ok,
            "fixed": fixed,
        }
        out(json.dumps(doc, indent=2, ensure_ascii=False))
    else:
        for line in rep.ok:
            out(f"ok  {line}")
        for f in rep.findings:
            out(f"PROBLEM {f.code}: {f.what}")
            out(f"  why: {f.why}")
            out(f"  fix: {f.fix}")
        n = len(rep.findings)
        out("sotd doctor: no problem found" if not n else f"sotd doctor: {n} problem(s) found")
    sys.stdout.flush()
    return EXIT_OK if not rep.findings else EXIT_FAILED  # findings are the report, not an error
