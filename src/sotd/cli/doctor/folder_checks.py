"""``sotd/cli/doctor/folder_checks.py``: ``sotd doctor``'s checks of the comm folder (issue 13 part 4): its
modes, the registry, the registry lock and its reclaim markers, the inboxes and their cursors, the inbox
lock record. Each applies the rule's own function (``layout.is_open``, ``registry.read``,
``reglock.read_fresh``, ``holder.judge``, ``inbox.torn_tail``, ``lockmanager.decide``) and writes nothing;
a repair (``--fix``) is one the contract makes safe. What would break it: a check that writes, or a
repair that removes a lock on anything but proof of its holder's death."""

from __future__ import annotations

import os
import time

from sotd.cli.doctor.report import Finding, Report
from sotd.errors import FixNotApplicable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from sotd.formats.layout import Layout


def check_folder(lay: Layout, env: dict[str, str], rep: Report) -> bool:
    """The folder and its modes. False when there is no folder (the folder checks stop there)."""
    from sotd import fsprim
    from sotd.formats import layout as layout_mod

    if not os.path.isdir(lay.home):
        rep.add(
            Finding(
                "no_comm_folder",
                f"there is no comm folder at {lay.home}",
                "no session on this box can join, send or read mail until it exists",
                "sotd comm join (any comm command makes it; sotd doctor --fix makes it too)",
                lambda: _make_folder(lay),
            )
        )
        return False
    open_paths = []
    try:
        mode = os.lstat(lay.home).st_mode
    except OSError:
        mode = 0
    if fsprim.is_open(mode):  # behaviour 6.0 looks at the folder itself: a private one hides the rest
        open_paths.append(f"{lay.home} ({oct(mode & 0o777)})")
    if open_paths:
        rep.add(
            Finding(
                "folder_modes",
                "the comm folder is open to group or other: " + ", ".join(open_paths),
                "other users of this machine could read the mail or write into the inboxes",
                "sotd doctor --fix (or any comm command: each tightens the folder as it starts)",
                lambda: "; ".join(layout_mod.tighten(lay, env)) or f"tightened {lay.home} (chmod go-rwx)",
            )
        )
    else:
        rep.ok.append(f"comm folder {lay.home}: private")
    return True


def _make_folder(lay: Layout) -> str:
    from sotd.formats import layout as layout_mod
    from sotd.formats import registry

    warnings = layout_mod.ensure_home(lay)
    registry.ensure(lay)
    return "; ".join(warnings) or f"made the comm folder {lay.home}"


def check_registry(lay: Layout, rep: Report) -> dict[str, object]:
    """The registry parses. Its rows (empty when it does not)."""
    from sotd.errors import RegistryUnreadable
    from sotd.formats import registry

    try:
        doc = registry.read(lay)
    except RegistryUnreadable as e:
        rep.add(
            Finding(
                "registry_unreadable",
                f"the registry {lay.registry} cannot be read: {e.message}",
                "no send can verify its sender and no join can take a handle, so nothing is sent",
                f"move it aside and join again (its rows are lost): mv {lay.registry} {lay.registry}.bad; "
                "sotd comm join",
            )
        )
        return {}
    agents = registry.agents_of(doc) if doc is not None else {}
    rep.ok.append(f"registry {lay.registry}: {len(agents)} row(s)")
    return agents


LOCK_HELD_LONG_S = 60.0  # a join, leave or send holds the registry lock for milliseconds


def _age_s(path: str) -> float | None:
    try:
        return time.time() - os.lstat(path).st_mtime
    except OSError:
        return None


def held_long_finding(
    path: str, holder_host: str, pid: int, why: str, *, age_s: float, verdict: str, here: str
) -> Finding:
    """The registry lock held past ``LOCK_HELD_LONG_S`` by a holder this box cannot prove dead (on another
    machine, or alive and stuck): a problem, never ``ok`` (issue 27), with the next step on the holder's
    own box, where its death can be proven. Pure."""
    from sotd.formats import holder

    held = (
        f"for {int(age_s // 3600)}h{int(age_s % 3600 // 60):02d}m" if age_s >= 3600 else f"for {int(age_s)}s"
    )
    where = "this box" if holder_host == here else holder_host
    if verdict == holder.ALIVE:
        fix = f"on {where}: ps -p {pid} -o pid,etime,args (a stuck sot-comm command: kill {pid})"
    else:
        fix = (
            f"on {where}: ps -p {pid} -o pid,etime,args; if it is gone there: sotd doctor --fix on {where} "
            "(that box can prove its death; this one cannot)"
        )
    return Finding(
        "registry_lock_held_long",
        f"the registry lock {path} has been held {held} by {holder_host} pid {pid} ({why})",
        "every join, leave and send waits for it and then fails after the lock's bound",
        fix,
    )


def check_registry_lock(lay: Layout, host: str, rep: Report) -> None:
    """The registry lock: a holder proven dead (the lock's own reclaim clears it), and reclaim markers
    whose holder and reclaimer are both proven dead."""
    from sotd.formats import holder, reglock

    shape, value = reglock.read_fresh(lay.reglock)
    me = holder.own(host)
    if shape == "record" and isinstance(value, holder.Holder):
        verdict, why = holder.judge(value, me)
        if verdict == holder.DEAD:
            rep.add(
                Finding(
                    "registry_lock_dead_holder",
                    f"the registry lock {lay.reglock} is held by {value.name} pid {value.pid}, which is dead "
                    f"({why})",
                    "every join, leave and send waits for it, then reclaims it (up to the lock's bound)",
                    "sotd doctor --fix (the lock's own reclaim: removed only on proof of death)",
                    lambda: _reclaim(lay, host),
                )
            )
        else:
            age = _age_s(lay.reglock)
            if age is not None and age > LOCK_HELD_LONG_S:
                rep.add(
                    held_long_finding(
                        lay.reglock, value.name, value.pid, why, age_s=age, verdict=verdict, here=host
                    )
                )
            else:
                rep.ok.append(f"registry lock: held by {value.name} pid {value.pid} ({why})")
    elif shape == "gone":
        rep.ok.append("registry lock: free")
    elif shape in ("dir", "garbage"):
        rep.add(
            Finding(
                "registry_lock_by_hand",
                f"the registry lock {lay.reglock} names no holder ("
                + (
                    "a folder, as an older version made it"
                    if shape == "dir"
                    else f"its first line is {value!r}"
                )
                + "), so no death can be proven and no command will remove it",
                "every join, leave and send fails on it after the lock's bound",
                f"when no sot-comm command is running: rm -r {lay.reglock}",
            )
        )
    markers = _dead_markers(lay, me)
    if markers:
        rep.add(
            Finding(
                "stale_reclaim_markers",
                f"{len(markers)} reclaim marker(s) of dead holders are left: " + ", ".join(markers),
                "they are inert, but each is a file the lock's reclaim walks past forever",
                "sotd doctor --fix (removes them while it holds the registry lock)",
                lambda: _remove_markers(lay, host),
            )
        )


def _marker_holder(name: str) -> object:
    """The holder a marker's name records (``.registry.lock.reclaim.<id>``, ``:`` written as ``.``)."""
    from sotd.errors import FormatError
    from sotd.formats import holder

    ident = name[len(".registry.lock.reclaim.") :]
    parts = ident.rsplit(".", 5)
    try:
        return holder.Holder.parse(":".join(parts))
    except FormatError:
        return None


def _dead_markers(lay: Layout, me: object) -> list[str]:
    from sotd.formats import holder, reglock

    try:
        names = sorted(n for n in os.listdir(lay.home) if n.startswith(".registry.lock.reclaim."))
    except OSError:
        return []
    dead = []
    for n in names:
        named = _marker_holder(n)
        shape, reclaimer = reglock.read_fresh(os.path.join(lay.home, n))
        if (
            not isinstance(named, holder.Holder)
            or shape != "record"
            or not isinstance(reclaimer, holder.Holder)
        ):
            continue
        if holder.judge(named, me)[0] == holder.DEAD and holder.judge(reclaimer, me)[0] == holder.DEAD:  # type: ignore[arg-type]
            dead.append(os.path.join(lay.home, n))
    return dead


def _reclaim(lay: Layout, host: str) -> str:
    from sotd.formats import reglock

    with reglock.hold(lay, host, reglock.wait_bound()):
        pass
    return f"reclaimed and released the registry lock {lay.reglock}"


def _remove_markers(lay: Layout, host: str) -> str:
    from sotd.formats import holder, reglock

    with reglock.hold(lay, host, reglock.wait_bound()):
        gone = _dead_markers(lay, holder.own(host))
        for p in gone:
            os.unlink(p)
    return f"removed {len(gone)} reclaim marker(s)"


def check_inboxes(lay: Layout, env: dict[str, str], agents: dict[str, object], rep: Report) -> None:
    """Torn tails (a writer died mid-line) and read cursors that do not fit their inbox."""
    from sotd import handles
    from sotd.formats import cursor, inbox

    try:
        names = sorted(n[: -len(".jsonl")] for n in os.listdir(lay.inbox_dir) if n.endswith(".jsonl"))
    except OSError:
        names = []
    bad = 0
    for h in names:
        if not handles.is_valid(h):
            continue
        try:
            torn = inbox.torn_tail(lay, h)
        except OSError:
            torn = 0
        if torn:
            bad += 1
            rep.add(
                Finding(
                    "torn_inbox_tail",
                    f"the inbox of @{h} ends in {torn} bytes of an unterminated line (a writer died mid-line)",
                    "readers skip it and the next message to it cuts it; until then it is dead weight",
                    "sotd doctor --fix (cuts it under the inbox lock, as the next writer would)",
                    _cutter(lay, env, h),
                )
            )
        text = cursor.read(lay, h)
        data = inbox.read_all(lay, h) or b""
        lines = [ln for ln in data.split(b"\n")[: data.count(b"\n")]]
        if text.strip() and not text.startswith("0") and cursor.offset(text, lines, h) == 0:
            bad += 1
            who = "its session" if h in agents else "the session that holds it"
            rep.add(
                Finding(
                    "cursor_past_end",
                    f"the read cursor of @{h} ({text.strip()}) does not fit its inbox ({len(lines)} line(s))",
                    "the next poll shows every line of that inbox again, as if none had been read",
                    f"run comm-poll.sh (sotd comm poll) in {who}: poll writes a fresh cursor",
                )
            )
    if not bad:
        rep.ok.append(f"inboxes: {len(names)}, none torn, every cursor fits")


def _cutter(lay: Layout, env: dict[str, str], h: str) -> Callable[[], str]:
    def cut() -> str:
        from sotd.formats import inbox, lockmanager

        own = lockmanager.own_lock(lay)
        if own is None:
            raise FixNotApplicable(
                "this box does not take the inbox lock itself, so it cannot cut the tail",
                hint="the next message filed to it cuts it: sotd comm send @" + h + " ...",
            )
        n = inbox.cut_torn_tail(lay, h, nfs=lockmanager.is_nfs(own), bound=inbox.inbox_wait(env))
        return f"cut {n} bytes from the inbox of @{h}"

    return cut


def check_lock_record(lay: Layout, host: str, env: dict[str, str], rep: Report) -> None:
    """The inbox-lock-manager record against this box's mount of ``inbox/``."""
    from sotd import topology
    from sotd.formats import lockmanager

    own = lockmanager.lock_manager_of(lay.inbox_dir)
    try:
        record = lockmanager.read_record(lay)
    except OSError as e:
        rep.add(
            Finding(
                "lock_record_unreadable",
                f"the inbox lock record {lay.lock_manager} cannot be read: {e.strerror or e}",
                "no box can tell whether it may append to the inboxes itself",
                f"check its permissions: ls -l {lay.lock_manager}",
            )
        )
        return
    if record is not None and record[0] == own and own != "none":
        rep.ok.append(f"inbox lock record: {own} (this box appends itself)")
        return
    try:
        topo = topology.load(env)
    except topology.TopologyError:
        topo = None
    hub = topo.hub if topo is not None else host
    decision = lockmanager.decide(record, own, lockmanager.machine_id_or_none(), topo is None or hub == host)
    if record is None:
        what = f"there is no inbox lock record at {lay.lock_manager}"
    else:
        what = f"the inbox lock record names {record[0]}, but this box's lock identity for inbox/ is {own}"
    if decision == lockmanager.GUEST:
        rep.ok.append(
            f"inbox lock record: {record[0] if record else 'none'} (this box hands mail to the hub {hub})"
        )
        return
    rep.add(
        Finding(
            "lock_record",
            what,
            "this box cannot append mail itself: every send needs a daemon to file it",
            "sotd daemon start (the hub writes the record at its start; a running one: sotd daemon stop; "
            "sotd daemon start)"
            if decision in lockmanager.WRITES
            else f"see docs/daemon.md: the record is another lock manager's ({decision})",
        )
    )
