"""``sotd/jobs/statefolder.py``: a run's state folder ``STATE_DIR/<RUN-HASH>/`` (ocx.md section 6): its
records and the outputs copied into it as hashed.

``state.json`` (written once the process started: what a restart needs to adopt it, with the
``plan_record`` of its limits), ``stdout``, ``stderr``, ``status.json`` (bwrap's ``--json-status-fd``:
child pid, then ``exit-code``, read by ``read_exit``; it survives our restart because bwrap holds the fd)
and ``ended.json``; ``unfinished`` names the runs with a state and no end. Outputs are hashed with the
repository's hash (``sha3_256`` or ``sha1``) through a descriptor opened one component at a time without
following links and copied as hashed into the state folder (``hash_file``), so a symlink planted by the
process never makes the node read or upload a file outside the workspace, and what is uploaded is what
was hashed. What would break it: opening an output by path (a planted link would be followed), or
uploading the workspace's file rather than the copy hashed.
"""

from __future__ import annotations

import hashlib
import json
import os

from sotd import fsprim
from sotd.jobs import limits as lim
from sotd.jobs import paths, placeholders
from sotd.jobs.errors import Refused


def write_json(path: str, obj: object) -> None:
    """One record of the state folder, replaced whole (``fsprim.write_atomic``)."""
    fsprim.write_atomic(path, json.dumps(obj).encode(), tmp=path + ".tmp", mode=0o666, sync_folder=False)


def read_exit(status_path: str) -> int | None:
    """The ``exit-code`` bwrap wrote to its JSON status file, if it did."""
    try:
        with open(status_path) as f:
            text = f.read()
    except OSError:
        return None
    dec, i, code = json.JSONDecoder(), 0, None
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return code
        try:
            obj, i = dec.raw_decode(text, i)
        except ValueError:
            return code
        if isinstance(obj, dict) and isinstance(obj.get("exit-code"), int):
            code = obj["exit-code"]


def plan_record(p: lim.Plan) -> dict[str, object]:
    """What a run's record keeps of its ``Plan``: the mechanisms its supervision needs again."""
    return {"pids": p.pids, "cpu": p.cpu, "kill": p.kill}


def plan_from(rec: object) -> lim.Plan:
    """The ``Plan`` a record kept (``plan_record``): enough to read and kill the run's cgroups."""
    pl = rec if isinstance(rec, dict) else {}
    return lim.Plan(pids=pl.get("pids"), cpu=pl.get("cpu"), kill=pl.get("kill"), v2=None, v1={}, how={})


def unfinished(state_dir: str) -> list[str]:
    """RUN-HASHes with a ``state.json`` and no ``ended.json``: runs a restart must adopt or end ``lost``."""
    try:
        names = sorted(os.listdir(state_dir))
    except OSError:
        return []
    return [
        n
        for n in names
        if os.path.exists(os.path.join(state_dir, n, "state.json"))
        and not os.path.exists(os.path.join(state_dir, n, "ended.json"))
    ]


def hash_file(path: str, top: str, hash_name: str, copy_to: str | None = None) -> str | None:
    """The ``hash_name`` hex digest of the regular file ``path`` below ``top``, opened one component at a
    time without following a symlink (``paths.open_nofollow``); ``None`` when it is missing, is or passes
    through a symlink, or is not a regular file. With ``copy_to``, the bytes hashed are also written
    there (a new file), so what is uploaded later is exactly what was hashed."""
    if not placeholders.inside(path, top):
        return None
    try:
        fd = paths.open_nofollow(path, "the output", flags=os.O_RDONLY | os.O_NONBLOCK)
    except (OSError, Refused):
        return None
    try:
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        out = None if copy_to is None else os.open(copy_to, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            h = hashlib.new(hash_name)
            while chunk := os.read(fd, 1 << 20):
                h.update(chunk)
                if out is not None:
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(out, view) :]
        finally:
            if out is not None:
                os.close(out)
        return h.hexdigest()
    finally:
        os.close(fd)
