"""``hosts.toml``: which box is the hub of a comm folder, and how the other boxes reach it.

File: ``$SOT_HOSTS_TOML``, else ``<comm folder>/hosts.toml`` (``$SOT_COMM_HOME``, else ``~/.sot-comm``)::

    hub = "boxa"                 # the host name (declared host) of the hub box

    [boxes.boxa]
    ssh = "boxa.lan"             # the ssh target that reaches that box (default: the box's own name)

    [boxes.boxb]                 # a guest: listed so the hub can name it when it holds no link
    ssh = "boxb"

A box may carry ``endpoint = "unix:<path>"`` (or ``"ssh:<target>/<host>"``) instead of ``ssh``: the hub
endpoint used as is (tests run a hub and a guest on one machine this way).

Spec: behaviour 2.2 (endpoints: plain host names ``[a-z0-9][a-z0-9._-]*``), 2.4 (hub and guests), 1.4
(the relay endpoint) and D4 (the hub offers a handle its folder does not list to the linked boxes).
Relay endpoint (``sotd topology relay-endpoint``): a guest's is the hub's endpoint; the hub's own is its
daemon's socket, because that daemon is where D4's offer happens (a hub session's send to a guest's handle
is filed there with one answer). It is named by the file, never a silent stand-in: a box with no file, or
an unreadable one, has none.
Guarantee: ``load`` gives a validated ``Topology``, ``None`` when there is no file, or ``TopologyError``
(the reason, for ``this box's hosts.toml cannot be read, so it names no hub: <err>``) — never a half-read.
What would break it: treating an unreadable file as absent (an absent file makes a box its own hub).

A leaf module: stdlib only; ``tomllib`` is imported when a file is read.
"""

from __future__ import annotations

import os

from sotd.errors import SotdError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

NO_HUB = "no hosts.toml names a hub"


def unreadable_text(err: str) -> str:
    return f"this box's hosts.toml cannot be read, so it names no hub: {err}"


class TopologyError(SotdError):
    """``hosts.toml`` exists but cannot be read or is not a valid topology (message: the reason)."""

    code = "topology_unreadable"


def plain_host(s: object) -> bool:
    """``[a-z0-9][a-z0-9._-]*``"""
    if not isinstance(s, str) or not s or not ("a" <= s[0] <= "z" or "0" <= s[0] <= "9"):
        return False
    return all("a" <= c <= "z" or "0" <= c <= "9" or c in "._-" for c in s)


class Box:
    __slots__ = ("endpoint", "name", "ssh")

    def __init__(self, name: str, ssh: str = "", endpoint: str = "") -> None:
        self.name = name
        self.ssh = ssh or name
        self.endpoint = endpoint

    def __repr__(self) -> str:
        return f"Box({self.name!r}, ssh={self.ssh!r}, endpoint={self.endpoint!r})"


class Topology:
    __slots__ = ("boxes", "hub", "path")

    def __init__(self, hub: str, boxes: dict[str, Box], path: str = "") -> None:
        self.hub = hub
        self.boxes = boxes
        self.path = path

    def __repr__(self) -> str:
        return f"Topology(hub={self.hub!r}, boxes={sorted(self.boxes)!r})"

    def guests(self) -> list[str]:
        """The boxes other than the hub, sorted (the ones that should hold a link to it)."""
        return sorted(b for b in self.boxes if b != self.hub)


def path(environ: Mapping[str, str]) -> str:
    """Where this box's ``hosts.toml`` is: ``$SOT_HOSTS_TOML``, else in the comm folder."""
    explicit = environ.get("SOT_HOSTS_TOML", "")
    if explicit:
        return os.path.abspath(explicit)
    home = environ.get("SOT_COMM_HOME", "")
    if home:
        home = os.path.abspath(home)
    else:
        home = os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".sot-comm")
    return os.path.join(home, "hosts.toml")


def parse(data: bytes, where: str = "") -> Topology:
    """A ``Topology`` from the file's bytes, or ``TopologyError`` naming the first problem."""
    import tomllib

    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise TopologyError(f"{where or 'hosts.toml'} is not UTF-8 ({e.reason})") from None
    except tomllib.TOMLDecodeError as e:
        raise TopologyError(f"{where or 'hosts.toml'} is not TOML ({e})") from None
    hub = doc.get("hub")
    if not plain_host(hub):
        raise TopologyError(f"hub must be a plain host name [a-z0-9][a-z0-9._-]* (got {hub!r})")
    assert isinstance(hub, str)
    raw = doc.get("boxes", {})
    if not isinstance(raw, dict):
        raise TopologyError("boxes must be a table of [boxes.<host>] tables")
    boxes: dict[str, Box] = {}
    for name, spec in raw.items():
        if not plain_host(name):
            raise TopologyError(f"box name must be a plain host name (got {name!r})")
        if not isinstance(spec, dict):
            raise TopologyError(f"[boxes.{name}] must be a table")
        ssh = spec.get("ssh", "")
        if ssh != "" and not plain_host(ssh):
            raise TopologyError(f"[boxes.{name}] ssh must be a plain host name (got {ssh!r})")
        endpoint = spec.get("endpoint", "")
        if endpoint != "" and not (
            isinstance(endpoint, str) and (endpoint.startswith("unix:/") or endpoint.startswith("ssh:"))
        ):
            raise TopologyError(f"[boxes.{name}] endpoint must be unix:<path> or ssh:<target>[/<host>]")
        boxes[name] = Box(name, ssh, endpoint)
    return Topology(hub, boxes, where)


def load(environ: Mapping[str, str]) -> Topology | None:
    """This box's topology; None when there is no file; ``TopologyError`` when it cannot be read."""
    p = path(environ)
    try:
        with open(p, "rb") as f:
            data = f.read(1 << 20)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise TopologyError(f"{p}: {e.strerror or e}") from None
    return parse(data, p)


def signature(environ: Mapping[str, str]) -> tuple[int, int, int] | None:
    """``(mtime_ns, size, inode)`` of the topology file, None when there is none: the daemon's watch
    compares it every tick (a rename-over by an editor changes the inode)."""
    try:
        st = os.stat(path(environ))
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _box_text(box: Box) -> str:
    return f"endpoint {box.endpoint}" if box.endpoint else f"ssh {box.ssh}"


def describe_changes(old: Topology | None, new: Topology | None) -> list[str]:
    """What changed between two readings of ``hosts.toml``, one phrase each (for the daemon's log and
    ``sotd daemon reload``); empty when they say the same. Pure."""
    if old is None and new is None:
        return []
    if old is None:
        assert new is not None
        return [f"hosts.toml appeared: hub {new.hub}, boxes {', '.join(sorted(new.boxes)) or '(none)'}"]
    if new is None:
        return [f"hosts.toml is gone (the hub was {old.hub})"]
    out: list[str] = []
    if old.hub != new.hub:
        out.append(f"hub {old.hub} -> {new.hub}")
    for name in sorted(set(new.boxes) - set(old.boxes)):
        out.append(f"box added: {name} ({_box_text(new.boxes[name])})")
    for name in sorted(set(old.boxes) - set(new.boxes)):
        out.append(f"box removed: {name}")
    for name in sorted(set(old.boxes) & set(new.boxes)):
        a, b = _box_text(old.boxes[name]), _box_text(new.boxes[name])
        if a != b:
            out.append(f"box {name}: {a} -> {b}")
    return out


def relay_endpoint(topo: Topology, self_host: str) -> str | None:
    """The hub's endpoint for a box that is not the hub (``ssh:<target>/<hub>``); None on the hub (whose
    daemon holds no link; its sessions' relay is ``hub_own_endpoint``)."""
    if self_host == topo.hub:
        return None
    box = topo.boxes.get(topo.hub) or Box(topo.hub)
    if box.endpoint:
        return box.endpoint
    return f"ssh:{box.ssh}/{topo.hub}"


def _is_socket(p: str) -> bool:
    import stat

    try:
        return stat.S_ISSOCK(os.stat(p).st_mode)
    except OSError:
        return False


def hub_own_endpoint(topo: Topology, self_host: str, own_socket: str | None) -> tuple[str | None, str]:
    """The relay endpoint of the hub box itself: its own daemon, which files a handle its folder lists and
    offers any other to the boxes linked to it (D4). The hub's ``unix:`` endpoint in the file names that
    socket when given, else ``own_socket`` (``$SOT_SOCKET``, else the default socket); only a socket that
    is there is named, so a hub whose daemon is not running has none (the send's "no sotd daemon found")."""
    box = topo.boxes.get(topo.hub)
    sock = (
        box.endpoint[len("unix:") :] if box is not None and box.endpoint.startswith("unix:") else own_socket
    )
    if sock and _is_socket(sock):
        return "unix:" + sock, ""
    return None, (
        f"this box ({self_host}) is the hub named by {topo.path}, and no daemon socket is at "
        f"{sock or '(no socket path)'} to relay through"
    )


def relay_endpoint_or_reason(
    environ: Mapping[str, str], self_host: str, own_socket: str | None = None
) -> tuple[str | None, str]:
    """``(endpoint, "")`` or ``(None, why there is none)`` — for ``sotd topology relay-endpoint``.

    A box that is not the hub: the hub's endpoint. The hub itself: its own daemon's socket
    (``hub_own_endpoint``; ``own_socket`` is this box's daemon socket). No file, or an unreadable one: none.
    """
    try:
        topo = load(environ)
    except TopologyError as e:
        return None, unreadable_text(e.message)
    if topo is None:
        return None, NO_HUB
    ep = relay_endpoint(topo, self_host)
    if ep is None:
        return hub_own_endpoint(topo, self_host, own_socket)
    return ep, ""
