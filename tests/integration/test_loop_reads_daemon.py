"""Where a real daemon runs ``comm.file``'s steps (``daemon/loopreads.py``; issue 27 item 8), seen by
``strace`` attached to it: the first filing reads the registry in a filing thread (nothing has checked the
comm folder's mounts yet, and that thread checks them); once the folder is known to be on a local disk
(here the test's ext4 or tmpfs folder), the next filings read it on the daemon's main thread, and every
append (the inbox file's open) stays in a filing thread. The answers and the lines are the same as before."""

from __future__ import annotations

import os
import shutil
import time
from typing import Any

import pytest

from sotd.daemon import loopreads
from sotd.formats import lockmanager
from tests.conftest import attached_strace
from tests.integration.test_daemon import Daemon, folder, inbox_lines, live, put_agents, start

STRACE = shutil.which("strace") or "/usr/bin/strace"

pytestmark = [
    pytest.mark.integration,
    pytest.mark.root,
    pytest.mark.timeout(120),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (strace attaches to the daemon)"),
    pytest.mark.skipif(not os.path.exists(STRACE), reason="no strace"),
]


def _opens(trace: str, name: str) -> list[int]:
    """The thread ids (strace ``-f`` line prefixes) of each ``openat`` of a path ending in ``name``."""
    tids = []
    with open(trace, encoding="utf-8", errors="replace") as f:
        for row in f:
            head, _, rest = row.partition(" ")
            if "openat(" in rest and f'/{name}"' in rest and head.isdigit():
                tids.append(int(head))
    return tids


def test_reads_move_to_the_main_thread_once_the_folder_is_known_local_and_appends_stay_in_threads(
    tmp_path: Any, daemons: list[Daemon]
) -> None:
    work = str(tmp_path)
    lay = folder(work, "comm")
    with open(lockmanager.MOUNTINFO) as f:
        safe = loopreads.loop_safe(f.read(), [os.path.realpath(lay.home), os.path.realpath(lay.inbox_dir)])
    assert safe, "the test's folder is on a local disk or tmpfs here"
    put_agents(lay, alpha=live("boxa"))
    d = start(daemons, work, "a", lay.home, "boxa")
    pid = d.proc.pid
    trace = os.path.join(work, "trace")
    with attached_strace(pid, "-o", trace, "-e", "trace=openat"):
        texts = ["first", 'a $HOME "quoted" \\ back | pipe > out', "third", "ünïcode ✓"]
        answers = []
        t0 = time.monotonic()
        for text in texts:
            answers.append(d.file("alpha", text))
            time.sleep(0.05)
        answers.append(d.file("nobody", "unlisted"))
        elapsed = time.monotonic() - t0
    assert answers == [{"ok": True}] * 4 + [{"error": "no box knows that handle: nobody", "code": "not_here"}]
    assert [x["msg"] for x in inbox_lines(lay, "alpha")] == texts
    reads = _opens(trace, "registry.json")
    appends = _opens(trace, "inbox")  # an append opens the inbox folder, then its files relative to it
    assert len(reads) == 5 and len(appends) == 4, (reads, appends)
    assert reads[0] != pid, "the first filing reads in a filing thread (nothing was checked yet)"
    # the later filings read on the main thread; a check that ran out (a loaded machine: over FRESH_S
    # between two sends) sends one filing a second back to a thread, which checks again
    in_threads = len(reads[1:]) - reads[1:].count(pid)
    assert in_threads <= int(elapsed / loopreads.FRESH_S), (reads, elapsed)
    assert pid not in appends, "every append is in a filing thread"
