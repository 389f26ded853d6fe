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
(``sotd.errors.TopologyUnreadable``: ``this box's hosts.toml cannot be read, so it names no hub: <why>``,
one line) — never a half-read, never another exception, whatever the bytes (nested too deep, a NUL or a
newline in an endpoint, an ``ssh:`` target that is no plain host name, a bad type; issue 25), so every
endpoint a ``Topology`` names can be dialled as it is.
What would break it: treating an unreadable file as absent (an absent file makes a box its own hub), or
a check of an endpoint's shape that is looser than the dial's (``sotd.client.dial.parse_endpoint``).

A leaf module: stdlib only; ``tomllib`` is imported when a file is read.
"""

from __future__ import annotations

import os

from sotd.errors import TopologyUnreadable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

NO_HUB = "no hosts.toml names a hub"


TopologyError = TopologyUnreadable  # the name this module's users know; the class is in sotd.errors


def unreadable_text(err: str) -> str:
    return TopologyError(err).message


SHOWN_MAX = 80  # characters of a bad value quoted in the reason (repr: control characters escaped)
READ_MAX = 1 << 20  # a hosts.toml larger than this is refused, never read cut short


def shown(value: object) -> str:
    """A bad value as the reason quotes it: its ``repr`` (one line, escapes visible), cut to ``SHOWN_MAX``. Pure."""
    text = repr(value)
    return text if len(text) <= SHOWN_MAX else text[: SHOWN_MAX - 3] + "..."


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


def endpoint_problem(endpoint: object) -> str:
    """What is wrong with a box's ``endpoint`` (``""`` when it is good). Pure.

    ``unix:<absolute path>`` with no control character; ``ssh:<target>[/<host>]`` with both plain host
    names (so the target is never read as an ssh option, and a host is never empty or capitalised)."""
    if not isinstance(endpoint, str):
        return f"endpoint must be a string (got {shown(endpoint)})"
    if any(c < " " or c == "\x7f" for c in endpoint):
        return f"endpoint holds a control character (got {shown(endpoint)})"
    if endpoint.startswith("unix:"):
        if not endpoint.startswith("unix:/"):
            return f"endpoint unix:<path> needs an absolute path (got {shown(endpoint)})"
        return ""
    if endpoint.startswith("ssh:"):
        target, sep, host = endpoint[len("ssh:") :].partition("/")
        if not plain_host(target):
            return (
                "endpoint ssh:<target>[/<host>] needs a target that is a plain host name "
                f"[a-z0-9][a-z0-9._-]* (got {shown(endpoint)})"
            )
        if sep and not plain_host(host):
            return (
                "endpoint ssh:<target>/<host> needs a host that is a plain host name "
                f"[a-z0-9][a-z0-9._-]* (got {shown(endpoint)})"
            )
        return ""
    return f"endpoint must be unix:<path> or ssh:<target>[/<host>] (got {shown(endpoint)})"


def parse(data: bytes, where: str = "") -> Topology:
    """A ``Topology`` from the file's bytes, or ``TopologyError`` naming the first problem — whatever the
    bytes (too deep for the TOML reader, a number past its digit limit, any type in any place)."""
    import tomllib

    name = where or "hosts.toml"
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise TopologyError(f"{name} is not UTF-8 ({e.reason} at byte {e.start})") from None
    except RecursionError:
        raise TopologyError(f"{name} is nested too deep to read") from None
    except ValueError as e:  # tomllib.TOMLDecodeError, and int's digit limit
        raise TopologyError(f"{name} is not TOML ({' '.join(str(e).split())[:200]})") from None
    hub = doc.get("hub")
    if not plain_host(hub):
        raise TopologyError(f"hub must be a plain host name [a-z0-9][a-z0-9._-]* (got {shown(hub)})")
    assert isinstance(hub, str)
    raw = doc.get("boxes", {})
    if not isinstance(raw, dict):
        raise TopologyError("boxes must be a table of [boxes.<host>] tables")
    boxes: dict[str, Box] = {}
    for box_name, spec in raw.items():
        if not plain_host(box_name):
            raise TopologyError(f"box name must be a plain host name (got {shown(box_name)})")
        if not isinstance(spec, dict):
            raise TopologyError(f"[boxes.{box_name}] must be a table")
        ssh = spec.get("ssh", "")
        if ssh != "" and not plain_host(ssh):
            raise TopologyError(f"[boxes.{box_name}] ssh must be a plain host name (got {shown(ssh)})")
        endpoint = spec.get("endpoint", "")
        problem = endpoint_problem(endpoint) if endpoint != "" else ""
        if problem:
            raise TopologyError(f"[boxes.{box_name}] {problem}")
        assert isinstance(ssh, str) and isinstance(endpoint, str)
        boxes[box_name] = Box(box_name, ssh, endpoint)
    return Topology(hub, boxes, where)


def load(environ: Mapping[str, str]) -> Topology | None:
    """This box's topology; None when there is no file; ``TopologyError`` when it cannot be read."""
    p = path(environ)
    try:
        with open(p, "rb") as f:
            data = f.read(READ_MAX + 1)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise TopologyError(f"{p}: {e.strerror or e}") from None
    if len(data) > READ_MAX:
        raise TopologyError(f"{p} is larger than {READ_MAX} bytes")
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
        return None, e.message
    if topo is None:
        return None, NO_HUB
    ep = relay_endpoint(topo, self_host)
    if ep is None:
        return hub_own_endpoint(topo, self_host, own_socket)
    return ep, ""
