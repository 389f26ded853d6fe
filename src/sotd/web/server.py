"""``sotd/web/server.py``: ``sotd web``, the page's HTTP server (issue 30; docs/web.md).

The standard library's ``ThreadingHTTPServer`` on 127.0.0.1, one thread per connection. ``GET /`` is the
page (``page.html``, ``page.js``, ``page.css``, package data); ``GET /events`` is a server-sent event
stream that sends the fleet (``snapshot.Reader.read``) whenever it changes; ``GET /state`` is the same
object once; ``POST /api/send``, ``/api/spawn``, ``/api/despawn`` run the CLI's verbs (``actions``).
Every request first passes ``guard.verdict`` (the secret or its cookie, a loopback ``Host``, a ``POST``'s
own ``Origin``) and the connection's peer must be a socket of this account (``guard.peer_uid`` on
``/proc/net/tcp``); anything else is the same plain 403.
Guarantee: nothing is read while no page is open (the reading thread runs only while an event stream
does, and stops within about 2 s of the last one closing: each stream looks for its end every second), so an idle ``sotd web`` costs its daemon nothing;
the daemon itself is untouched (this is a process of its own, its client).
What would break it: a route served before the guard, an error page of the standard library's (it
names the server and the path), or the reading thread kept alive with no stream open.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources

from sotd.errors import EXIT_OK, UsageError, WebListenFailed
from sotd.web import actions, guard
from sotd.web.snapshot import Reader

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

TICK_S = 0.5
KEEPALIVE_S = 15.0
CLOSED_CHECK_S = 1.0  # how soon a closed page's stream is noticed (and the reading stops)
BODY_MAX = 256 * 1024
STATIC = {
    "/": ("page.html", "text/html; charset=utf-8"),
    "/page.js": ("page.js", "text/javascript; charset=utf-8"),
    "/page.css": ("page.css", "text/css; charset=utf-8"),
}
HEADERS = (
    (
        "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
)
USAGE = "usage: sotd web [--port N] [--socket PATH]"


class Fleet:
    """The latest fleet object and the thread that reads it while at least one event stream is open."""

    def __init__(self, reader: Reader, tick: float = TICK_S) -> None:
        self.reader = reader
        self.tick = tick
        self.cond = threading.Condition()
        self.version = 0
        self.data = b"{}"
        self.streams = 0
        self.running = False
        self.poked = False
        self.read_lock = threading.Lock()

    def attach(self) -> None:
        with self.cond:
            self.streams += 1
            if not self.running:
                self.running = True
                threading.Thread(target=self._loop, name="sotd-web-read", daemon=True).start()

    def detach(self) -> None:
        with self.cond:
            self.streams -= 1
            self.cond.notify_all()

    def poke(self) -> None:
        """Read again now (an action just ran)."""
        with self.cond:
            self.poked = True
            self.reader.ask_daemon_now()
            self.cond.notify_all()

    def read_once(self) -> bytes:
        with self.read_lock:
            body = json.dumps(self.reader.read(), ensure_ascii=False, separators=(",", ":")).encode()
        with self.cond:
            if body != self.data:
                self.data = body
                self.version += 1
                self.cond.notify_all()
        return body

    def _loop(self) -> None:
        while True:
            with self.cond:
                if self.streams <= 0:
                    self.running = False
                    return
                self.poked = False
            try:
                self.read_once()
            except Exception as e:  # a fault of ours: said once per tick on stderr, the page keeps its last
                sys.stderr.write(f"sotd web: reading the fleet failed: {type(e).__name__}: {e}\n")
            with self.cond:
                if not self.poked:
                    self.cond.wait(self.tick)

    def newer(self, seen: int, timeout: float) -> tuple[int, bytes]:
        with self.cond:
            self.cond.wait_for(lambda: self.version != seen, timeout)
            return self.version, self.data


class PageHandler(BaseHTTPRequestHandler):
    server: WebServer
    protocol_version = "HTTP/1.1"

    def version_string(self) -> str:
        return "sotd"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # no line per request: the actions log their own

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        self._plain(403 if code in (400, 403, 501) else code, guard.REFUSAL_BODY)

    def _plain(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def _verdict(self) -> str:
        if not self.server.peer_is_ours(self.client_address):
            return guard.REFUSE
        headers = {k.lower(): v for k, v in self.headers.items()}
        _path, _sep, query = self.path.partition("?")
        return guard.verdict(self.command, query, headers, self.server.secret, self.server.port)

    def _send(self, code: int, ctype: str, body: bytes, extra: tuple[tuple[str, str], ...] = ()) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (*HEADERS, *extra):
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        verdict = self._verdict()
        path = self.path.partition("?")[0]
        if verdict == guard.REFUSE:
            self._plain(403, guard.REFUSAL_BODY)
            return
        if verdict == guard.ENTER:
            cookie = f"{guard.cookie_name(self.server.port)}={self.server.secret}; HttpOnly; SameSite=Strict; Path=/"
            self.send_response(303)
            self.send_header("Location", path)
            self.send_header("Set-Cookie", cookie)
            self.send_header("Content-Length", "0")
            for k, v in HEADERS:
                self.send_header(k, v)
            self.end_headers()
            return
        if path in STATIC:
            name, ctype = STATIC[path]
            self._send(200, ctype, resources.files("sotd.web").joinpath(name).read_bytes())
        elif path == "/state":
            self._send(200, "application/json", self.server.fleet.read_once())
        elif path == "/events":
            self._events()
        else:
            self._plain(404, b"not found\n")

    def _events(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        for k, v in HEADERS:
            self.send_header(k, v)
        self.end_headers()
        self.close_connection = True
        fleet = self.server.fleet
        fleet.attach()
        try:
            seen = 0  # version 0: nothing read yet (the first read makes it 1)
            wrote = time.monotonic()
            while not self.server.stopping and not self._peer_gone():
                version, data = fleet.newer(seen, CLOSED_CHECK_S)
                if version != seen:
                    self.wfile.write(b"event: state\ndata: " + data + b"\n\n")
                    seen = version
                elif time.monotonic() - wrote >= KEEPALIVE_S:
                    self.wfile.write(b": keepalive\n\n")
                else:
                    continue
                self.wfile.flush()
                wrote = time.monotonic()
        except OSError:
            pass  # the page closed
        finally:
            fleet.detach()

    def _peer_gone(self) -> bool:
        """The page closed its stream: the socket reads as its end (a page sends nothing on it)."""
        try:
            readable, _w, _x = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def do_POST(self) -> None:
        if self._verdict() != guard.SERVE:
            self._plain(403, guard.REFUSAL_BODY)
            return
        path = self.path.partition("?")[0]
        action = path.removeprefix("/api/")
        if not path.startswith("/api/") or action not in actions.ARGV:
            self._plain(404, b"not found\n")
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if not 0 <= length <= BODY_MAX:
            self._plain(413, b"too large\n")
            return
        try:
            form = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            form = None
        if not isinstance(form, dict):
            text, ok = "the request is not a JSON object", False
        else:
            text, ok = actions.run(action, form, self.server.environ)
        sys.stderr.write(f"sotd web: {action}: {'ok' if ok else 'failed'}\n")
        self.server.fleet.poke()
        body = json.dumps({"ok": ok, "text": text}, ensure_ascii=False).encode()
        self._send(200, "application/json", body)

    def do_PUT(self) -> None:
        self._plain(403, guard.REFUSAL_BODY)

    do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_PUT


class WebServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int, environ: dict[str, str], socket: str) -> None:
        super().__init__(("127.0.0.1", port), PageHandler)
        self.port = int(self.server_address[1])
        self.secret = secrets.token_urlsafe(24)
        self.environ = environ
        self.stopping = False
        self.fleet = Fleet(Reader(environ, socket))

    def peer_is_ours(self, client: tuple[str, int] | Any) -> bool:
        """The connecting socket belongs to this account (``/proc/net/tcp``); true where that table is
        not there to read (the secret still guards)."""
        try:
            with open("/proc/net/tcp", encoding="ascii", errors="replace") as f:
                table = f.read()
        except OSError:
            return True
        uid = guard.peer_uid(table, client[0], int(client[1]), self.port)
        return uid is None or uid == os.geteuid()

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/?s={self.secret}"


def parse(argv: list[str]) -> tuple[int, str]:
    port, sock = 0, ""
    it = iter(argv)
    for word in it:
        value = next(it, None)
        if word == "--port" and value is not None and value.isdigit() and int(value) < 65536:
            port = int(value)
        elif word == "--socket" and value:
            sock = value
        else:
            raise UsageError(USAGE)
    return port, sock


def run(argv: list[str]) -> int:
    import signal

    from sotd import runtime

    port, sock = parse(argv)
    environ = dict(os.environ)
    try:
        server = WebServer(port, environ, runtime.socket_path(environ, sock or None))
    except OSError as e:
        raise WebListenFailed(
            f"sotd web: cannot listen on 127.0.0.1:{port}: {e.strerror or e}",
            hint="choose another port (--port N), or none and the system picks one",
        ) from None

    def stop(_signo: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    sys.stdout.write(f"{server.url()}\n")
    sys.stdout.flush()
    sys.stderr.write(
        "sotd web: open the address above (it holds this start's secret; keep it to yourself). "
        "Ctrl-C stops it.\n"
    )
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.stopping = True
        server.server_close()
    return EXIT_OK
