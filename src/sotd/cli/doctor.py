"""``sotd doctor``: what is wrong on this box, why it matters, and the command that fixes it.

Spec: issue 13 part 4 (the checks, ``--json``, exit 0 healthy / 1 a problem, read-only unless ``--fix``);
every rule it applies is the rule's own function (``layout.is_open`` and ``tighten``, ``registry.read``,
``reglock.read_fresh`` and ``holder.judge``, ``inbox.torn_tail``/``cut_torn_tail``, ``cursor.offset``,
``lockmanager.decide``, ``install.settings.merge_claude_settings``, ``ancestry.check``), never a second copy.
Guarantee: without ``--fix`` nothing under the comm folder or anywhere else is written; ``--fix`` applies
only fixes that are safe by the contract (tightening modes as every command does; the registry lock's own
reclaim, which removes a lock only when its holder is proven dead; removing reclaim markers whose holder
and reclaimer are both proven dead, while holding the registry lock; cutting a torn inbox tail under the
inbox lock, as the next appender would) and prints each. Each finding names a command the user can type.
What would break it: a check that writes, or a fix that removes a lock on anything but proof of death.

The findings are values (``Finding``); the checks gather facts and make them; ``run`` prints.
"""

from __future__ import annotations

import json
import os
import sys
import time

from sotd.cli.comm.common import out
from sotd.errors import EXIT_FAILED, EXIT_OK, EndpointDiscarded, FixNotApplicable, SotdError, UsageError
from sotd.wire import payloads

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from sotd.formats.layout import Layout

DAEMON_ASK_S = 3.0


class Finding:
    """One problem: a stable ``code``, what is wrong, why it matters, the command that fixes it, and
    (when it is safe by the contract) the fix ``--fix`` applies, which returns what it did."""

    __slots__ = ("code", "fix", "repair", "what", "why")

    def __init__(
        self, code: str, what: str, why: str, fix: str, repair: Callable[[], str] | None = None
    ) -> None:
        self.code = code
        self.what = what
        self.why = why
        self.fix = fix
        self.repair = repair

    def doc(self) -> dict[str, object]:
        return {
            "code": self.code,
            "what": self.what,
            "why": self.why,
            "fix": self.fix,
            "fixable": bool(self.repair),
        }


class Report:
    """The findings and the checks that passed (``ok``: one line each)."""

    __slots__ = ("findings", "ok")

    def __init__(self) -> None:
        self.findings: list[Finding] = []
        self.ok: list[str] = []

    def add(self, f: Finding) -> None:
        self.findings.append(f)


# ------------------------------------------------------------------------------------------ comm folder


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


# ------------------------------------------------------------------------------------------- daemons


def _ask(
    endpoint: str,
    env: dict[str, str],
    op: str = payloads.VERSION_QUERY,
    payload: dict[str, object] | None = None,
) -> dict[str, object]:
    from sotd import runtime
    from sotd.client import dial
    from sotd.wire import hello as wire_hello

    hello = wire_hello.hello_payload(
        host=runtime.self_host(env) or "unknown",
        os_user=wire_hello.os_user_for_uid(os.geteuid()),
        role="cli",
        name="sotd-doctor",
    )
    ep, discard = dial.parse_endpoint(endpoint)
    if ep is None:
        raise EndpointDiscarded(discard or f"bad endpoint '{endpoint}'")
    bound = DAEMON_ASK_S * 3 if ep.kind == "ssh" else DAEMON_ASK_S  # ssh's handshake comes first
    return dial.request(ep, op, payload or {}, hello, deadline_s=bound, environ=env)


def check_daemon(env: dict[str, str], rep: Report) -> bool:
    """This box's daemon: answering, its version, whether it asks to be restarted. True when it answers."""
    from sotd import __version__, runtime

    sock = runtime.socket_path(env)
    try:
        info = _ask("unix:" + sock, env).get("daemon")
    except SotdError as e:
        rep.add(
            Finding(
                "daemon_down",
                f"no daemon answers at {sock} ({e.message})",
                "mail this box cannot append itself is not filed, and rows and the wake do not run "
                "(commands start it when they need it, unless SOT_DAEMON_AUTOSTART=off)",
                "sotd daemon start",
            )
        )
        return False
    info = info if isinstance(info, dict) else {}
    if info.get("version") != __version__:
        rep.add(
            Finding(
                "daemon_version",
                f"the daemon at {sock} runs sotd {info.get('version')}, this command is {__version__}",
                "the two may not speak the same ops or write the same formats",
                "sotd daemon stop; sotd daemon start",
            )
        )
    elif info.get("restart_requested"):
        rep.add(
            Finding(
                "daemon_code_changed",
                f"the daemon at {sock} asks to be restarted: {info['restart_requested']}",
                "it still runs the code it started with",
                "sotd daemon stop; sotd daemon start",
            )
        )
    else:
        rep.ok.append(f"daemon at {sock}: pid {info.get('pid')}, sotd {info.get('version')}")
    return True


def check_topology(lay: Layout, env: dict[str, str], host: str, rep: Report) -> None:
    """``hosts.toml``: readable; the hub answers over its route (from a guest); every other box answers
    over its ssh route (from the hub); and for each that answers, whether it serves this comm folder
    (``lockmanager.same_folder`` on the marks both read; a fact, not a problem: docs/doctor.md)."""
    from sotd import topology
    from sotd.formats import lockmanager

    try:
        topo = topology.load(env)
    except topology.TopologyError as e:
        rep.add(
            Finding(
                "hosts_toml_unreadable",
                e.message,
                "this box names no hub: mail for a handle its folder does not list goes nowhere "
                "(a running daemon keeps the last good topology it read)",
                f"fix the file (docs/deploy.md shows its shape): {topology.path(env)}; then: sotd daemon reload",
            )
        )
        return
    if topo is None:
        rep.ok.append("hosts.toml: none (this box is its own hub)")
        return
    ep = topology.relay_endpoint(topo, host)
    routes = (
        [(topo.hub, ep)] if ep else [(b, f"ssh:{topo.boxes[b].ssh}/{b}") for b in topo.guests() if b != host]
    )
    mine = lockmanager.folder_mark(lay) if routes else ""
    for box, route in routes:
        try:
            answer = _ask(route, env, payload=payloads.version_query_payload(comm_folder=True))
        except SotdError as e:
            rep.add(
                Finding(
                    "box_unreachable",
                    f"the daemon of {box} does not answer over {route} ({e.message})",
                    "mail between this box and that one is not carried",
                    link_fix(
                        f"{e.message} {e.hint or ''}",
                        box,
                        host,
                        route,
                        env.get("SOT_SSH_CONFIG", ""),
                        dials=bool(ep),
                    ),
                )
            )
        else:
            disagrees = hub_disagreement(topo.hub, box, answer.get("daemon"))
            if disagrees:
                rep.add(
                    Finding(
                        "topology_disagrees",
                        disagrees,
                        "boxes that name different hubs do not carry each other's mail: their sends say "
                        "no box knows that handle",
                        f"the same hosts.toml on every box (moving the hub: docs/deploy.md, section 8): on "
                        f"{box}: sotd topology path names its file; after the edit: sotd daemon reload there",
                    )
                )
            rep.ok.append(
                f"{box}: answers over {route}; {_folder_words(lay, mine, answer.get('comm_folder'))}"
            )


def hub_disagreement(my_hub: str, box: str, far: object) -> str:
    """``""`` when the far daemon's ``hosts.toml`` names the hub this box's names (or it is an older sotd
    that does not say); else the sentence saying which hub each names (issue 27 part 3). Pure."""
    if not isinstance(far, dict) or not isinstance(far.get("topology_hub"), str):
        return ""
    theirs = far["topology_hub"]
    if theirs == my_hub:
        return ""
    if far.get("topology_error"):
        return f"{box}'s hosts.toml cannot be read ({far['topology_error']}); this box's names {my_hub} as the hub"
    named = f"names {theirs} as the hub" if theirs else "names no hub (it has none)"
    return f"{box}'s hosts.toml {named}; this box's names {my_hub}"


def link_fix(err: str, box: str, here: str, route: str, ssh_config: str, *, dials: bool = True) -> str:
    """The next step for a box whose daemon does not answer over ``route``: for an ``ssh:`` route by ssh's
    (or the far bridge's) own words in ``err`` — a refused key, an untrusted host key, no sshd, no name, no
    network, no ``sotd``, no daemon — each naming the box its commands run on (issue 27). ``dials``: this
    box's daemon holds its link over the route (a guest asking its hub), so a reload redials it now; the
    hub's route to a guest is only its reverse ssh (spawn, doctor). Pure."""
    generic = f"on {box}: sotd daemon start (and check the route: sotd doctor on {box})"
    if not route.startswith("ssh:"):
        return generic
    target = route[4:].split("/", 1)[0]
    ssh = f"ssh -F {ssh_config}" if ssh_config else "ssh"
    retry = (
        f"then on {here}: sotd daemon reload (the link dials at once) and sotd doctor"
        if dials
        else f"then on {here}: sotd doctor"
    )
    if "Permission denied" in err or "Too many authentication failures" in err:
        return (
            f"ssh refused this box's key (it will not fix itself): on {here}: {ssh} -G {target} | grep -i "
            f"'^identityfile' names the keys ssh offers; on {box}: append the .pub line of one of them to "
            f"~/.ssh/authorized_keys of the user the route logs in as; check on {here}: {ssh} {target} true; "
            f"{retry}"
        )
    if "Host key verification failed" in err or "HOST IDENTIFICATION HAS CHANGED" in err:
        return (
            f"ssh does not trust {box}'s host key (changed or never accepted): on {box}: "
            f"ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub (its fingerprint); on {here}: "
            f"ssh-keygen -R $({ssh} -G {target} | awk '/^hostname /{{print $2}}'), then {ssh} {target} true "
            f"and accept the key only if ssh shows that fingerprint; {retry}"
        )
    if "Connection refused" in err:
        return f"nothing listens for ssh on {box}: on {box}: systemctl start ssh (or start its sshd); {retry}"
    if "Could not resolve hostname" in err:
        return (
            f"on {here}: {target} is no host name ssh knows: fix [boxes.{box}] ssh in hosts.toml or a Host "
            f"entry in ~/.ssh/config; then: sotd daemon reload"
        )
    if "timed out" in err or "No route to host" in err or "Network is unreachable" in err:
        return (
            f"the network between {here} and {box} does not carry ssh: on {here}: {ssh} -v {target} true "
            f"shows where it stops (a firewall, a route, the box down); {retry}"
        )
    if "not found" in err and "sotd" in err:
        return (
            f"on {box}: sotd is not on the PATH of a non-login ssh command (docs/deploy.md, step 1); check "
            f"on {here}: {ssh} {target} sotd --version"
        )
    if "no daemon socket" in err:
        return f"on {box}: sotd daemon start (its daemon is down); {retry}"
    return generic


def _folder_words(lay: Layout, mine: str, theirs: object) -> str:
    """The ok line's second half: the far box's comm folder against this one (``lockmanager.same_folder``)."""
    from sotd.formats import lockmanager

    if not isinstance(theirs, dict) or not isinstance(theirs.get("mark"), str):
        return "its daemon does not say which comm folder it serves (an older sotd)"
    path = theirs.get("path")
    verdict = lockmanager.same_folder(mine, theirs["mark"])
    if verdict == lockmanager.SAME:
        return f"the same comm folder as this box ({lay.home})"
    if verdict == lockmanager.OTHER:
        return f"another comm folder ({path} there; {lay.home} here)"
    return (
        f"comm folder {path} there: cannot tell whether it is this one (no lock-manager record in either yet)"
    )


def check_rows(env: dict[str, str], rep: Report) -> None:
    """Rows whose agent is not running (phases terminal and ended_no_respawn)."""
    from sotd import runtime

    try:
        listed = _ask("unix:" + runtime.socket_path(env), env, payloads.WORKSPACE_LIST).get("workspaces")
    except SotdError:
        return
    rows = [r for r in listed if isinstance(r, dict)] if isinstance(listed, list) else []
    down = [r for r in rows if r.get("phase") in ("terminal", "ended_no_respawn")]
    for r in down:
        rep.add(
            Finding(
                "row_down",
                f"row {r.get('slug')} (@{r.get('handle') or '?'}, {r.get('project_root')}) is {r.get('phase')}",
                "its agent does not run: mail to it waits unread and nothing wakes it",
                f"sotd comm despawn {r.get('slug')} (then sotd comm spawn {r.get('project_root')} to run it again)",
            )
        )
    if not down:
        rep.ok.append(f"rows: {len(rows)}, every one running or starting")


# -------------------------------------------------------------------------------------- hooks, identity


def check_hooks(lay: Layout, env: dict[str, str], rep: Report) -> None:
    """The wrappers (installed, pointing at an existing sotd, on PATH) and the hooks in the agents'
    settings (registered as ``sotd comm install --agent-settings`` registers them)."""
    import shutil

    from sotd.cli.install import scripts
    from sotd.cli.install import settings as hook_settings

    sample = os.path.join(lay.bin_dir, "comm-send.sh")
    if not os.path.exists(sample):
        rep.add(
            Finding(
                "wrappers_missing",
                f"the comm-*.sh wrappers are not installed in {lay.bin_dir}",
                "agents and their hooks call sot-comm through them",
                "sotd comm install --agent-settings",
            )
        )
        return
    expected = scripts.wrapper_text(scripts.sotd_executable(), "comm-send.sh", "comm send")
    with open(sample, encoding="utf-8", errors="replace") as f:
        if f.read() != expected:
            rep.add(
                Finding(
                    "wrappers_stale",
                    f"the wrappers in {lay.bin_dir} run another sotd than this one ({scripts.sotd_executable()})",
                    "that sotd may be gone or older: agents would run it",
                    "sotd comm install",
                )
            )
    found = shutil.which("comm-send.sh", path=env.get("PATH", ""))
    if found is None or os.path.dirname(os.path.realpath(found)) != os.path.realpath(lay.bin_dir):
        rep.add(
            Finding(
                "wrappers_not_on_path",
                f"{lay.bin_dir} is not on PATH" + (f" (comm-send.sh is {found})" if found else ""),
                "agents type comm-send.sh and comm-poll.sh; they would not find these",
                f'add it to PATH (e.g. in ~/.profile): export PATH="{lay.bin_dir}:$PATH"',
            )
        )
    home = env.get("HOME") or os.path.expanduser("~")
    claude = os.path.join(home, ".claude", "settings.json")
    settings: list[tuple[str, str, tuple[tuple[str, str | None, str], ...], str]] = [
        (claude, "Claude Code", hook_settings.CLAUDE_EVENTS, f"sotd comm install --agent-settings={claude}")
    ]
    codex = os.path.join(home, ".codex")
    if os.path.isdir(codex):  # only where Codex is set up
        block = "sotd comm install --agent-settings (it merges Codex's hooks.json), then trust them in Codex: /hooks"
        settings.append((os.path.join(codex, "hooks.json"), "Codex", hook_settings.CODEX_EVENTS, block))
    for path, agent, events, how in settings:
        try:
            with open(path, "rb") as f:
                doc = json.loads(f.read() or b"{}")
        except FileNotFoundError:
            doc = {}
        except (OSError, ValueError) as e:
            rep.add(
                Finding(
                    "agent_settings_unreadable",
                    f"{agent}'s settings {path} cannot be read: {e}",
                    "the hooks cannot be checked or registered there (install refuses to overwrite it)",
                    f"set it aside (its settings stay in the .bad copy), then register: mv {path} {path}.bad; {how}",
                )
            )
            continue
        try:
            missing = not isinstance(doc, dict) or hook_settings.changed(
                hook_settings.merge_claude_settings(doc, lay.bin_dir, events)
            )
        except SotdError as e:  # parses, but its "hooks" is not an object: install refuses it too
            rep.add(
                Finding(
                    "agent_settings_unreadable",
                    f"{agent}'s settings {path} cannot be read: {e.message}",
                    "the hooks cannot be checked or registered there (install refuses to overwrite it)",
                    f"set it aside (its settings stay in the .bad copy), then register: mv {path} {path}.bad; {how}",
                )
            )
            continue
        if missing:
            rep.add(
                Finding(
                    "hooks_not_registered",
                    f"the sot-comm hooks are not (all) registered in {agent}'s settings {path}",
                    "without them a turn ends with mail unread and nothing marks the session busy or idle",
                    how,
                )
            )
        else:
            rep.ok.append(f"{agent} hooks: registered in {path}")


def _context_fix(env: dict[str, str], e: SotdError) -> str:
    """The fix for a context that cannot be built: a working folder that cannot be resolved (``reason``
    set), or a host name that cannot name a self slot (``$SOT_SELF_HOST``, else the box's own name)."""
    if e.reason:
        return "run it from a folder that exists (cd to the project), then check: sotd comm context"
    if env.get("SOT_SELF_HOST"):
        return (
            "drop the host name that cannot name a file: unset SOT_SELF_HOST; then check: sotd comm context"
        )
    return "name this box plainly (no / or \\): export SOT_SELF_HOST=<name>; then check: sotd comm context"


def check_ancestry(env: dict[str, str], rep: Report) -> None:
    """This session's own identity: the identity check, and a joined handle when it is a session."""
    from sotd import ancestry
    from sotd.cli.comm.common import Context

    status, why = ancestry.check(env)
    if status:
        rep.add(
            Finding(
                "identity_refused",
                f"this process has no comm identity: {why}",
                "its sends and polls are refused",
                "run it inside the session or row it names (or, outside any: unset SOT_COMM_SELF_FILE "
                "SOT_WORKSPACE_ID)",
            )
        )
        return
    try:
        ctx = Context(env)
    except SotdError as e:
        rep.add(
            Finding("context_failed", e.message, "no command can name this session", _context_fix(env, e))
        )
        return
    if ctx.name:
        rep.ok.append(f"identity: @{ctx.name} ({ctx.self_file})")
    elif env.get("SOT_COMM_SELF_FILE") or env.get("CLAUDECODE") or env.get("SOT_WORKSPACE"):
        rep.add(
            Finding(
                "not_joined",
                f"this session has not joined (no handle in {ctx.self_file})",
                "it cannot send, and mail for it has no inbox",
                "sotd comm join",
            )
        )
    else:
        rep.ok.append("identity: not a joined session (nothing to check)")


# ------------------------------------------------------------------------------------------------ run


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
