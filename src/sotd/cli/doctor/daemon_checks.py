"""``sotd/cli/doctor/daemon_checks.py``: ``sotd doctor``'s checks of the daemons (issue 13 part 4, issue 27):
this box's daemon (answering, its version), the topology (``hosts.toml``, the hub every box names, each
linked box's answer and comm folder), and the rows (each running or starting). Read-only: each asks with
one request (``DAEMON_ASK_S``; three times that over ssh). What would break it: a check that starts a
daemon or changes a row, or a route other than the verbs' own (``client.dial``)."""

from __future__ import annotations

import os

from sotd.cli.doctor.report import Finding, Report
from sotd.errors import EndpointDiscarded, SotdError
from sotd.wire import payloads

TYPE_CHECKING = False
if TYPE_CHECKING:
    from sotd.formats.layout import Layout

DAEMON_ASK_S = 3.0


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
