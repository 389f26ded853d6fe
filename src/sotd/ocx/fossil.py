"""Layer 1: the thin shell around Debian's ``fossil`` (2.21) and the repository file.

Messages are unversioned files ``ocx/m/<hash>.json`` (spec ocx.md 3.4). Writing goes through the
``fossil`` program (``uv add``, ``uv sync``, ``clone``); reading goes straight to the repository file with
SQLite, read-only, because the facts we need (``unversioned.rcvid -> rcvfrom -> user.login``) are only
there. The remote's listing comes from the server's ``/juvlist`` page, which names the login that pushed
each file at its first receipt; that is both the sender of a pulled message (O3) and the confirmation of
a push (a login without capability ``y`` gets no error, its file is just not there).

Remotes are ``http(s)://`` fossil servers or ``ssh://[user@]host[:port]/PATH[?fossil=PROGRAM]``. Over
ssh, fossil 2.21 runs the ssh command through a shell as ``SSH -p PORT -T -- user@host PROGRAM
test-http PATH`` and speaks HTTP over that pipe (checked with a logging ssh command and a real sshd). OCX
gives fossil the user's own OpenSSH with ``BatchMode=yes`` (no password prompt) and a connect timeout
(``ssh_base``; ``$SOT_SSH_CONFIG`` adds ``-F FILE``, as for the rest of sotd), and reads the listing over
the same kind of channel: one ``GET /juvlist`` sent through ``ssh … PROGRAM test-http PATH``. That is the
very command fossil's own sync runs there, so whatever lets the sync in (a forced command in
``authorized_keys``, the ``fossil=`` program, the remote ``PATH``) serves the listing too, and the page is
the one an http remote gives: no SQL output to parse, no write access needed on the far side.

What would break it: a Fossil whose ``unversioned`` or ``rcvfrom`` tables change shape (checked: 2.21);
one whose ssh transport stops running ``test-http`` on the far side; one that, like 2.21, exits 0 when
its ssh link fails but no longer prints ``server did not reply`` (``uv_sync`` turns that into an error).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import sqlite3
import stat
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Iterator

from sotd.ocx.errors import FossilFailed, NotFossil, OcxError

FOSSIL = "fossil"
TIMEOUT = 60.0
HTTP_TIMEOUT = 15.0
SSH = "ssh"
SSH_TIMEOUT = 30.0
# BatchMode: never ask for a password or a host key (a node runs unattended); the rest bounds a dead link.
SSH_OPTIONS = (
    "-o",
    "BatchMode=yes",
    "-o",
    "ConnectTimeout=10",
    "-o",
    "ServerAliveInterval=15",
    "-o",
    "ServerAliveCountMax=3",
)
NO_REPLY = "server did not reply"  # what fossil 2.21 prints (exiting 0) when its ssh link fails
LOCAL_ADD = "#!fossil unversioned add"
_SQLITE_MAGIC = b"SQLite format 3\x00"


class RepoInfo:
    """What OCX reads from a repository's ``config`` table."""

    __slots__ = ("hash_policy", "last_sync_url", "project_code", "server_code")

    def __init__(
        self, server_code: str, project_code: str, hash_policy: str | None, last_sync_url: str | None = None
    ) -> None:
        self.server_code = server_code
        self.project_code = project_code
        self.hash_policy = hash_policy
        self.last_sync_url = last_sync_url


class UvRow:
    """One ``ocx/m/`` unversioned file as this clone holds it, with its local receipt."""

    __slots__ = ("data", "hash", "mtime", "name", "rcv_addr", "rcv_login", "rcv_time", "uvid")

    def __init__(
        self,
        *,
        uvid: int,
        name: str,
        hash: str,
        mtime: int,
        data: bytes,
        rcv_login: str | None,
        rcv_addr: str | None,
        rcv_time: float | None,
    ) -> None:
        self.uvid = uvid
        self.name = name
        self.hash = hash
        self.mtime = mtime
        self.data = data
        self.rcv_login = rcv_login
        self.rcv_addr = rcv_addr
        self.rcv_time = rcv_time


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("USER", "ocx")
    return env


def has_secret(arg: str) -> bool:
    """Pure: is ``arg`` a URL carrying a password (``scheme://user:PW@host``)?"""
    if "://" not in arg or "@" not in arg:
        return False
    try:
        return bool(urllib.parse.urlsplit(arg).password)
    except ValueError:
        return False


@contextlib.contextmanager
def secrets_moved(args: list[str]) -> Iterator[list[str]]:
    """``args`` with every password-carrying URL moved into a private file fossil reads with ``--args``
    (one argument a line), so no password is on a command line (``/proc/PID/cmdline`` is world-readable).
    The file lives in a fresh 0700 folder and is removed after."""
    secret = [a for a in args if has_secret(a)]
    if not secret:
        yield args
        return
    if any("\n" in a or "\r" in a for a in secret):
        raise FossilFailed("ocx: a URL's password holds a line break; fossil cannot be given it safely")
    with tempfile.TemporaryDirectory(prefix="sotd-fossil-args-") as d:
        path = os.path.join(d, "args")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("".join(a + "\n" for a in secret))
        at = args.index(secret[0])
        yield [*(a for a in args[:at] if a not in secret), "--args", path,
               *(a for a in args[at:] if a not in secret)]  # fmt: skip


def run(args: list[str], *, timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    """``fossil ARGS``; raises FossilFailed when it cannot run or exits non-zero. A password-carrying URL
    among ``args`` reaches fossil through ``--args FILE`` (``secrets_moved``), never its command line."""
    with secrets_moved(args) as argv:
        return _run(argv, args, timeout)


def _run(argv: list[str], args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        p = subprocess.run(
            [FOSSIL, *argv],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
            env=_env(),
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise FossilFailed(
            f"ocx: the fossil program ({FOSSIL}) is not installed", hint="apt-get install fossil"
        ) from None
    except subprocess.TimeoutExpired:
        raise FossilFailed(
            f"ocx: fossil {args[0]} {args[1] if len(args) > 1 else ''} took over {timeout:.0f}s"
        ) from None
    if p.returncode != 0:
        said = " ".join((p.stderr.strip() or p.stdout.strip()).split())[-300:]
        raise FossilFailed(f"ocx: fossil {' '.join(redact_password(a) for a in args[:3])} failed: {said}")
    return p


def redact_password(arg: str) -> str:
    """``arg`` with a URL's password shown as ``***`` (what a log line or an error may carry)."""
    if "://" in arg and "@" in arg:
        u = urllib.parse.urlsplit(arg)
        if u.password:
            return arg.replace(":" + u.password + "@", ":***@")
    return arg


def connect(path: str, *, write: bool = False) -> sqlite3.Connection:
    """A connection to the repository file, after checking it is one (else NotFossil)."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except FileNotFoundError:
        raise NotFossil(f"ocx: no repository file at {path}") from None
    except OSError as e:
        raise NotFossil(f"ocx: cannot read the repository {path}: {e.strerror}") from None
    if head != _SQLITE_MAGIC:
        raise NotFossil(f"ocx: {path} is not a Fossil repository (not an SQLite database)")
    uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + ("?mode=rw" if write else "?mode=ro")
    try:
        db = sqlite3.connect(uri, uri=True, timeout=10.0)
        db.text_factory = _text  # a peer's name or login that is not UTF-8 must not stop a read
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError as e:
        raise NotFossil(f"ocx: {path} is not a Fossil repository ({e})") from None
    if not {"config", "blob", "user"} <= tables:
        db.close()
        raise NotFossil(f"ocx: {path} is not a Fossil repository (an SQLite file without Fossil's tables)")
    return db


def _text(data: bytes) -> str:
    """A TEXT value as Python text: UTF-8, any byte that is not kept as a surrogate escape (the index
    carries such text, ``sotd.text.carry_os``; a name holding it is no message name)."""
    return data.decode("utf-8", "surrogateescape")


def repo_info(path: str) -> RepoInfo:
    """The server-code, project-code and hash policy of the repository at ``path``."""
    db = connect(path)
    try:
        cfg = dict(
            db.execute(
                "SELECT name, value FROM config"
                " WHERE name IN ('server-code','project-code','hash-policy','last-sync-url')"
            ).fetchall()
        )
    finally:
        db.close()
    if not cfg.get("project-code") or not cfg.get("server-code"):
        raise NotFossil(f"ocx: {path} is not a Fossil repository (no project-code or server-code)")
    policy = cfg.get("hash-policy")
    last = cfg.get("last-sync-url")
    return RepoInfo(
        str(cfg["server-code"]),
        str(cfg["project-code"]),
        None if policy is None else str(policy),
        None if last is None else str(last),
    )


def same_remote(a: str | None, b: str | None) -> bool:
    """True when two URLs name the same remote and login (passwords and a trailing slash ignored)."""
    if not a or not b:
        return False

    def key(u: str) -> tuple[str, str, int | None, str, str]:
        s = urllib.parse.urlsplit(u)
        return (s.scheme, (s.hostname or "").lower(), s.port, s.path.rstrip("/"), s.username or "")

    try:
        return key(a) == key(b)
    except ValueError:
        return False


def _julian_to_epoch(jd: object) -> float | None:
    try:
        return (float(jd) - 2440587.5) * 86400.0  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _content(blob: bytes | None, encoding: int | None) -> bytes:
    if blob is None:
        return b""
    if encoding == 1:  # Fossil's compressed blob: a 4-byte size, then zlib
        try:
            return zlib.decompress(blob[4:])
        except zlib.error:
            return b""
    return bytes(blob)


def read_message(path: str, name: str) -> UvRow | None:
    """The live unversioned file ``name``, or None."""
    rows = read_messages(path, 0, name)
    return rows[0] if rows else None


def read_messages(path: str, after_uvid: int = 0, name: str | None = None) -> list[UvRow]:
    """Every live ``ocx/m/`` unversioned file with ``uvid > after_uvid`` (or just ``name``), oldest first."""
    db = connect(path)
    try:
        has_uv = db.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name='unversioned'"
        ).fetchone()
        if not has_uv:
            return []
        rows = db.execute(
            """SELECT u.uvid, u.name, u.hash, u.mtime, u.content, u.encoding,
                      (SELECT login FROM user WHERE user.uid = r.uid), r.ipaddr, r.mtime
               FROM unversioned u LEFT JOIN rcvfrom r ON r.rcvid = u.rcvid
               WHERE u.uvid > ? AND u.name LIKE 'ocx/m/%' AND u.hash IS NOT NULL
                     AND (? IS NULL OR u.name = ?)
               ORDER BY u.uvid""",
            (after_uvid, name, name),
        ).fetchall()
    finally:
        db.close()
    return [
        UvRow(
            uvid=int(r[0]),
            name=str(r[1]),
            hash=str(r[2]),
            mtime=int(r[3] or 0),
            data=_content(r[4], r[5]),
            rcv_login=r[6],
            rcv_addr=r[7],
            rcv_time=_julian_to_epoch(r[8]),
        )
        for r in rows
    ]


def uv_state(path: str) -> dict[str, tuple[str | None, int]]:
    """Every ``ocx/`` unversioned file of the repository: name -> (hash, or None for a deletion; mtime)."""
    db = connect(path)
    try:
        if not db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='unversioned'").fetchone():
            return {}
        rows = db.execute("SELECT name, hash, mtime FROM unversioned WHERE substr(name, 1, 4) = 'ocx/'")
        return {str(r[0]): (None if r[1] is None else str(r[1]), int(r[2] or 0)) for r in rows.fetchall()}
    finally:
        db.close()


MAX_MTIME = 253402300799  # 9999-12-31 23:59:59 UTC: the last time fossil's --mtime can name


def _mtime_args(mtime: int | None) -> list[str]:
    if mtime is None:
        return []
    return ["--mtime", time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(min(mtime, MAX_MTIME)))]


def uv_add(repo: str, name: str, data: bytes, user: str, *, mtime: int | None = None) -> None:
    """Store ``data`` as the unversioned file ``name`` in ``repo``, recorded as written by ``user``
    (``mtime``: the version's time, seconds since 1970; default now)."""
    fd, tmp = tempfile.mkstemp(prefix="ocx-", suffix=".json")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        run(["uv", "add", tmp, "--as", name, "-R", repo, "--user", user, *_mtime_args(mtime)])
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def uv_add_file(repo: str, name: str, path: str, user: str, *, mtime: int | None = None) -> None:
    """Store the file at ``path`` as the unversioned file ``name`` in ``repo``, written by ``user``."""
    run(["uv", "add", path, "--as", name, "-R", repo, "--user", user, *_mtime_args(mtime)], timeout=600.0)


def file_hash(path: str, length: int) -> str | None:
    """The hash of the regular file at ``path`` by the algorithm a hash of ``length`` digits names (40:
    SHA1, 64: SHA3-256), read through a descriptor opened without following a link; None when it cannot
    be read or is no regular file."""
    if length not in (40, 64):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        h = hashlib.sha1(usedforsecurity=False) if length == 40 else hashlib.sha3_256()
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def uv_hash(repo: str, name: str) -> str | None:
    """The hash Fossil stored for the unversioned file ``name`` (``None`` when there is none)."""
    db = connect(repo)
    try:
        r = db.execute("SELECT hash FROM unversioned WHERE name = ?", (name,)).fetchone()
    finally:
        db.close()
    return None if r is None or r[0] is None else str(r[0])


def user_caps(repo: str, login: str) -> str | None:
    """The capability letters of ``login`` in the repository's user table (``None``: no such login)."""
    db = connect(repo)
    try:
        r = db.execute("SELECT cap FROM user WHERE login = ?", (login,)).fetchone()
    finally:
        db.close()
    return None if r is None else str(r[0] or "")


def sync_url(url: str, password: str | None) -> str:
    """``url`` with ``password`` put in its userinfo (percent-encoded), for ``fossil uv sync URL``."""
    if password is None:
        return url
    u = urllib.parse.urlsplit(url)
    user = urllib.parse.quote(urllib.parse.unquote(u.username or ""), safe="")
    host = u.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{user}:{urllib.parse.quote(password, safe='')}@{host}" + (f":{u.port}" if u.port else "")
    return urllib.parse.urlunsplit((u.scheme, netloc, u.path, u.query, u.fragment))


def uv_sync(repo: str, url: str | None) -> str:
    """``fossil uv sync [URL] -R repo``: push and pull unversioned files. Returns what fossil said.

    With no URL, fossil uses the URL and password the clone remembered (``clone --save-http-password``).
    """
    args = ["uv", "sync", "-R", repo]
    if url:
        args.insert(2, url)
        if is_ssh(url):
            args += ["--ssh-command", ssh_command()]
    p = run(args)
    if NO_REPLY in p.stderr:
        # fossil exits 0 when the far side never answered (an ssh link that failed): say what ssh said
        said = "; ".join(line.strip() for line in p.stderr.splitlines() if line.strip())[-300:]
        shown = redact_password(url) if url else "the remembered remote"
        raise FossilFailed(f"ocx: fossil uv sync {shown} failed: {said}")
    return p.stdout + p.stderr


def bare_url(url: str) -> str:
    """``url`` without its login, password, query and trailing slash: the remote as a person names it."""
    u = urllib.parse.urlsplit(url)
    host = u.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{u.port}" if u.port else "")
    return urllib.parse.urlunsplit((u.scheme, netloc, u.path.rstrip("/"), "", ""))


def remote_listing(url: str, password: str | None = None) -> dict[str, tuple[str, str | None]] | None:
    """The remote's unversioned files: name -> (hash, login that pushed it at first receipt).

    Reads ``URL/juvlist`` (capability o), logging in first when a password is given; over ``ssh://`` the
    same page through ``ssh … fossil test-http PATH`` (``ssh_listing``). None for any other URL.
    Raises OcxError when the remote cannot be read.
    """
    if is_ssh(url):
        return ssh_listing(url)
    if not url.startswith(("http://", "https://")):
        return None
    base = bare_url(url)
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
    user = urllib.parse.unquote(urllib.parse.urlsplit(url).username or "")
    try:
        if password is not None and user:
            form = urllib.parse.urlencode({"u": user, "p": password, "in": "Login"}).encode()
            opener.open(base + "/login", data=form, timeout=HTTP_TIMEOUT).read()
        with opener.open(base + "/juvlist", timeout=HTTP_TIMEOUT) as resp:
            body = resp.read()
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise OcxError(f"ocx: cannot read the remote listing at {base}/juvlist: {e}") from None
    return _listing(body, f"{base}/juvlist")


def _listing(body: bytes, where: str) -> dict[str, tuple[str, str | None]]:
    """The ``/juvlist`` JSON array as name -> (hash, user)."""
    try:
        doc = json.loads(body.decode("utf-8") or "[]")
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise OcxError(f"ocx: {where} did not answer with JSON (no read access?)") from None
    out: dict[str, tuple[str, str | None]] = {}
    if isinstance(doc, list):
        for item in doc:
            if (
                isinstance(item, dict)
                and isinstance(item.get("name"), str)
                and isinstance(item.get("hash"), str)
            ):
                login = item.get("user")
                out[item["name"]] = (item["hash"], login if isinstance(login, str) else None)
    return out


# --- ssh ---------------------------------------------------------------------------------------------


def is_ssh(url: str | None) -> bool:
    return bool(url) and str(url).startswith("ssh://")


class SshRemote:
    """What an ``ssh://[user@]host[:port]/PATH[?fossil=PROGRAM]`` URL names (fossil's own reading).

    ``path`` is the URL's path less its first ``/``: ``ssh://h//srv/r.fossil`` is the absolute
    ``/srv/r.fossil``, ``ssh://h/r.fossil`` is ``r.fossil`` in the remote login's home.
    """

    __slots__ = ("destination", "path", "port", "program")

    def __init__(self, url: str) -> None:
        u = urllib.parse.urlsplit(url)
        if u.scheme != "ssh" or not u.hostname:
            raise OcxError(f"ocx: {url!r} is not an ssh://[user@]host[:port]/PATH URL")
        try:
            self.port = u.port
        except ValueError:
            raise OcxError(f"ocx: {url!r} has a bad port") from None
        host = u.hostname
        user = urllib.parse.unquote(u.username or "")
        self.destination = f"{user}@{host}" if user else host
        self.path = urllib.parse.unquote(u.path[1:] if u.path.startswith("/") else u.path)
        if not self.path:
            raise OcxError(
                f"ocx: {url!r} names no repository; write ssh://[user@]host[:port]//ABSOLUTE/PATH.fossil"
            )
        q = urllib.parse.parse_qs(u.query)
        self.program = q.get("fossil", ["fossil"])[-1] or "fossil"


def ssh_base() -> list[str]:
    """``ssh [-F $SOT_SSH_CONFIG] -o BatchMode=yes …``: the user's OpenSSH, never asking for a password."""
    argv = [SSH]
    config = os.environ.get("SOT_SSH_CONFIG", "")
    if config:
        argv += ["-F", config]
    return [*argv, *SSH_OPTIONS]


def ssh_command() -> str:
    """``ssh_base`` as the one string fossil's ``--ssh-command`` wants (fossil runs it through sh)."""
    return " ".join(shlex.quote(a) for a in ssh_base())


def ssh_listing(url: str) -> dict[str, tuple[str, str | None]]:
    """The ``/juvlist`` of the repository an ssh URL names, read through ``ssh … PROGRAM test-http PATH``.

    Lines before the HTTP status line (a login banner printed by the remote shell) are skipped.
    """
    r = SshRemote(url)
    remote = " ".join(shlex.quote(w) for w in (r.program, "test-http", r.path))
    argv = [*ssh_base(), "-T", *(["-p", str(r.port)] if r.port else []), "--", r.destination, remote]
    where = f"{redact_password(url)}/juvlist over ssh"
    try:
        p = subprocess.run(
            argv,
            input=b"GET /juvlist HTTP/1.0\r\nHost: ocx\r\n\r\n",
            capture_output=True,
            timeout=SSH_TIMEOUT,
            check=False,
            env=_env(),
        )
    except FileNotFoundError:
        raise OcxError(
            f"ocx: the ssh program ({SSH}) is not installed", hint="apt-get install openssh-client"
        ) from None
    except subprocess.TimeoutExpired:
        raise OcxError(f"ocx: cannot read {where}: no answer within {SSH_TIMEOUT:.0f}s") from None
    status, body = http_reply(p.stdout)
    if status is None:
        said = " ".join(p.stderr.decode("utf-8", "replace").split())[-300:]
        raise OcxError(f"ocx: cannot read {where}: " + (said or f"no HTTP reply (ssh exited {p.returncode})"))
    if status != 200:
        raise OcxError(f"ocx: cannot read {where}: the far side answered HTTP {status}")
    return _listing(body, where)


def http_reply(raw: bytes) -> tuple[int | None, bytes]:
    """(status, body) of the first HTTP/1.x reply in ``raw``; (None, b"") when there is none."""
    at = 0
    while True:
        at = raw.find(b"HTTP/1.", at)
        if at < 0:
            return None, b""
        if at == 0 or raw[at - 1 : at] == b"\n":
            break
        at += 1
    head_end = raw.find(b"\r\n\r\n", at)
    sep = 4
    if head_end < 0:
        head_end, sep = raw.find(b"\n\n", at), 2
    if head_end < 0:
        return None, b""
    lines = raw[at:head_end].decode("latin-1").splitlines()
    parts = lines[0].split()
    if len(parts) < 2 or not parts[1].isdigit():
        return None, b""
    body = raw[head_end + sep :]
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length" and value.strip().isdigit():
            body = body[: int(value.strip())]
    return int(parts[1]), body


def clone(url: str, path: str) -> None:
    """``fossil clone -u --save-http-password --no-open URL PATH`` (a new clone gets a new server-code).

    Over ``ssh://`` fossil is given ``ssh_command`` (BatchMode), as for every sync.
    """
    if os.path.lexists(path):
        raise OcxError(f"ocx: {path} exists; a clone is made into a new file")
    ssh = ["--ssh-command", ssh_command()] if is_ssh(url) else []
    run(["clone", "-u", "--save-http-password", "--no-open", *ssh, url, path], timeout=300.0)


def new_server_code(path: str) -> str:
    """Give the repository at ``path`` a fresh random server-code and return it."""
    db = connect(path, write=True)
    try:
        with db:
            db.execute("UPDATE config SET value = lower(hex(randomblob(20))) WHERE name = 'server-code'")
        row = db.execute("SELECT value FROM config WHERE name = 'server-code'").fetchone()
    except sqlite3.DatabaseError as e:
        raise OcxError(f"ocx: cannot change the server-code of {path}: {e}") from None
    finally:
        db.close()
    if not row:
        raise NotFossil(f"ocx: {path} is not a Fossil repository (no server-code)")
    return str(row[0])
