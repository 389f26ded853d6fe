"""The node's OCX configuration file.

File: ``$SOT_OCX_CONFIG``, else ``$SOT_COMM_HOME/ocx.toml``, else ``~/.sot-comm/ocx.toml``. TOML::

    index = "/var/lib/sotd/ocx-index.sqlite"   # optional; default ocx-index.sqlite beside this file
    interval = 5                               # optional; seconds between syncs of the poll loop

    [[clone]]
    name = "proj"                              # optional; what --repo names; default the file's stem
    repository = "/srv/ocx/proj.fossil"        # the clone (a Fossil repository file)
    login = "lab-user"                         # the login it syncs and posts as
    logins = ["lab-user", "build-user"]        # optional; the logins it acts as; default [login]
    url = "http://lab-user@10.78.0.1:8080/"    # optional; http(s) URL of a fossil server, or
                                               # ssh://[user@]host[:port]//abs/path.fossil[?fossil=PROGRAM]
    password_file = "/etc/sotd/lab-user.pw"    # optional; else the password the clone saved

A clone without ``url`` is a hub: it is served (``fossil server``) and others push to it; it never syncs.

Guarantee: ``parse_config`` is pure (text in, ``NodeConfig`` out, or ``OcxConfigError`` naming the key);
``check_server_codes`` refuses two clones with one server-code and says how to regenerate one (O12).
"""

from __future__ import annotations

import os
import tomllib
import urllib.parse

from sotd.ocx.envelope import is_login
from sotd.ocx.errors import DuplicateServerCode, OcxConfigError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

DEFAULT_INTERVAL = 5.0
INDEX_NAME = "ocx-index.sqlite"


class CloneConfig:
    """One clone the node serves."""

    __slots__ = ("login", "logins", "name", "password_file", "repository", "url")

    def __init__(
        self,
        *,
        name: str,
        repository: str,
        login: str,
        logins: tuple[str, ...],
        url: str | None,
        password_file: str | None,
    ) -> None:
        self.name = name
        self.repository = repository
        self.login = login
        self.logins = logins
        self.url = url
        self.password_file = password_file

    def __repr__(self) -> str:
        return f"CloneConfig(name={self.name!r}, repository={self.repository!r}, login={self.login!r})"


class NodeConfig:
    """The whole file: where the index lives, the poll interval, the clones."""

    __slots__ = ("clones", "index", "interval", "path")

    def __init__(self, path: str, index: str, interval: float, clones: tuple[CloneConfig, ...]) -> None:
        self.path = path
        self.index = index
        self.interval = interval
        self.clones = clones

    def clone(self, name_or_path: str) -> CloneConfig:
        """The clone whose name is ``name_or_path``, or whose repository file it names."""
        for c in self.clones:
            if c.name == name_or_path:
                return c
        real = os.path.realpath(name_or_path)
        for c in self.clones:
            if os.path.realpath(c.repository) == real:
                return c
        known = ", ".join(c.name for c in self.clones) or "none"
        raise OcxConfigError(
            f"ocx: no clone named {name_or_path!r} in {self.path} (clones: {known})",
            hint="name a clone by its 'name' or its repository file",
        )


def config_path(environ: Mapping[str, str]) -> str:
    """``$SOT_OCX_CONFIG``, else ``$SOT_COMM_HOME/ocx.toml``, else ``$HOME/.sot-comm/ocx.toml``."""
    if environ.get("SOT_OCX_CONFIG"):
        return os.path.abspath(environ["SOT_OCX_CONFIG"])
    home = environ.get("SOT_COMM_HOME", "")
    if not home:
        home = os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".sot-comm")
    return os.path.join(os.path.abspath(home), "ocx.toml")


def _str(d: Mapping[str, object], key: str, where: str, *, required: bool) -> str | None:
    v = d.get(key)
    if v is None:
        if required:
            raise OcxConfigError(f"ocx: {where} has no {key!r}")
        return None
    if not isinstance(v, str) or not v:
        raise OcxConfigError(f"ocx: {where}: {key!r} must be a non-empty string")
    return v


def parse_config(text: str, path: str) -> NodeConfig:
    """The configuration in ``text`` (read from ``path``; relative paths are taken from its folder)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise OcxConfigError(f"ocx: {path} is not valid TOML: {e}") from None
    base = os.path.dirname(os.path.abspath(path))
    known = {"index", "interval", "clone"}
    extra = sorted(set(doc) - known)
    if extra:
        raise OcxConfigError(f"ocx: {path}: unknown key {extra[0]!r} (known: index, interval, [[clone]])")
    index = _str(doc, "index", path, required=False) or INDEX_NAME
    interval_v = doc.get("interval", DEFAULT_INTERVAL)
    if isinstance(interval_v, bool) or not isinstance(interval_v, int | float) or not 0 < interval_v <= 86400:
        raise OcxConfigError(
            f"ocx: {path}: 'interval' must be a number of seconds, above 0 and at most 86400"
        )
    raw = doc.get("clone", [])
    if not isinstance(raw, list):
        raise OcxConfigError(f"ocx: {path}: 'clone' must be an array of tables ([[clone]])")
    clones: list[CloneConfig] = []
    names: set[str] = set()
    files: set[str] = set()
    ckeys = {"name", "repository", "login", "logins", "url", "password_file"}
    for i, c in enumerate(raw):
        where = f"{path}: clone {i + 1}"
        if not isinstance(c, dict):
            raise OcxConfigError(f"ocx: {where} is not a table")
        bad = sorted(set(c) - ckeys)
        if bad:
            raise OcxConfigError(f"ocx: {where}: unknown key {bad[0]!r}")
        repo = os.path.join(base, _str(c, "repository", where, required=True) or "")
        login = _str(c, "login", where, required=True) or ""
        if not is_login(login):
            raise OcxConfigError(f"ocx: {where}: 'login' is not a login")
        logins_v = c.get("logins", [login])
        if not isinstance(logins_v, list) or not logins_v or not all(is_login(x) for x in logins_v):
            raise OcxConfigError(f"ocx: {where}: 'logins' must be a non-empty array of logins")
        name = _str(c, "name", where, required=False) or os.path.splitext(os.path.basename(repo))[0]
        if name in names:
            raise OcxConfigError(f"ocx: {where}: the name {name!r} is used twice")
        real = os.path.realpath(repo)
        if real in files:
            raise OcxConfigError(f"ocx: {where}: the repository {repo} is listed twice")
        url = _str(c, "url", where, required=False)
        if url is not None and not url.startswith(("http://", "https://", "ssh://")):
            raise OcxConfigError(f"ocx: {where}: 'url' must be an http(s):// or ssh:// URL")
        pw = _str(c, "password_file", where, required=False)
        if url is not None and url.startswith("ssh://"):
            _check_ssh_url(url, where)
            if pw is not None:
                raise OcxConfigError(
                    f"ocx: {where}: 'password_file' does not apply to an ssh:// url "
                    "(ssh logs in with the node's ssh keys; Fossil asks no password over ssh)"
                )
        names.add(name)
        files.add(real)
        clones.append(
            CloneConfig(
                name=name,
                repository=repo,
                login=login,
                logins=tuple(str(x) for x in logins_v),
                url=url,
                password_file=os.path.join(base, pw) if pw else None,
            )
        )
    return NodeConfig(os.path.abspath(path), os.path.join(base, index), float(interval_v), tuple(clones))


def _check_ssh_url(url: str, where: str) -> None:
    """An ssh URL as fossil reads it: ``ssh://[user@]host[:port]/PATH[?fossil=PROGRAM]``."""
    u = urllib.parse.urlsplit(url)
    try:
        port = u.port
    except ValueError:
        port = -1
    if not u.hostname or port == -1 or u.password is not None or len(u.path) < 2:
        raise OcxConfigError(
            f"ocx: {where}: 'url' {url!r} is not ssh://[user@]host[:port]/PATH "
            "(an absolute PATH takes two slashes: ssh://hub//srv/ocx/proj.fossil)"
        )
    extra = sorted(set(urllib.parse.parse_qs(u.query, keep_blank_values=True)) - {"fossil"})
    if extra:
        raise OcxConfigError(
            f"ocx: {where}: 'url' has the query key {extra[0]!r}; an ssh URL knows only 'fossil'"
        )


def load_config(environ: Mapping[str, str]) -> NodeConfig:
    """Read and parse the configuration file named by ``config_path``."""
    path = config_path(environ)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise OcxConfigError(
            f"ocx: no configuration file at {path}",
            hint="write one (see docs/ocx.md) or point $SOT_OCX_CONFIG at it",
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise OcxConfigError(f"ocx: cannot read {path}: {e}") from None
    return parse_config(text, path)


def check_server_codes(codes: Mapping[str, str]) -> None:
    """Refuse two clones (name -> server-code) that share one server-code (decision O12)."""
    seen: dict[str, str] = {}
    for name, code in codes.items():
        if code in seen:
            raise DuplicateServerCode(
                f"ocx: the clones {seen[code]!r} and {name!r} share the server-code {code}; "
                "a node serves each clone once",
                hint=f"give one a fresh server-code: sotd ocx server-code {name} --new "
                "(or make a fresh clone with sotd ocx clone URL FILE)",
            )
        seen[code] = name
