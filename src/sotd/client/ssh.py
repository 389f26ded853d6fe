"""``ssh:<target>[/<host>]`` endpoints: the OpenSSH command line, and a blocking one-shot over it.

Behaviour 2.1, 2.2, 2.4; decision D6. ``ssh_argv`` builds the one command line every ssh dial uses (the
guest daemon's hub link and a session's relay send alike): ``ssh -T -o BatchMode=yes -o
ServerAliveInterval=15 -o ServerAliveCountMax=3 -o ControlMaster=auto -o ControlPath=<folder>/sot-comm-ssh-%C
-o ControlPersist=600 <target> <remote command>``, where the remote command prepends
``~/.local/share/sot/bin``, ``~/.cargo/bin`` and ``~/.local/bin`` to ``PATH`` and runs the given argv
(normally ``sotd stdio-bridge [--host <h>]``, which ``bridge_argv`` builds).

Choices, each documented in docs/ssh.md:

- ``$SOT_SSH_CONFIG`` names an ssh config file passed as ``-F <file>`` (first, so it is the only config
  read); unset, ssh reads the user's own ``~/.ssh/config`` as usual. There is no free-form
  ``$SOT_SSH_OPTS``: every option a user needs can go in a config file, which quotes correctly.
- The ControlPath folder is ``$XDG_RUNTIME_DIR``; without it, ``${TMPDIR:-/tmp}/sot-comm-ssh-<euid>``,
  created 0700 and used only if it is a real folder owned by this user and private. When no private
  folder can be had, multiplexing is off (``ControlMaster=no``, ``ControlPath=none``): a dial costs a full
  handshake but never uses a socket another account could have planted.

``request`` sends hello + request through one ssh child under ONE deadline counted from the start of the
dial (D6), skips non-JSON lines before the first envelope (a login banner from a shell rc file), and always
kills the child. No answer in time, or the child ending without one, is ``DaemonUnreachable`` with the text
``the daemon did not answer at ssh:<target>[/<host>]``, followed by ``: <ssh's last stderr line>`` when ssh
said anything (one line; ``hint`` carries the reason too).

What would break it: restarting the clock per phase; waiting for ssh to exit after the answer (a
``ControlPersist`` master or a slow remote teardown would then bill the sender); importing ``subprocess`` at
module level (``sotd comm send`` pays for it only when it actually dials ssh).
"""

from __future__ import annotations

import os
import time

from sotd import fsprim
from sotd.errors import DaemonUnreachable, HelloRefused, WireError
from sotd.wire.messages import OneShot

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

DEFAULT_DEADLINE_S = 5.0
SSH = "ssh"
BASE_OPTIONS = (
    "-T",
    "-o",
    "BatchMode=yes",
    "-o",
    "ServerAliveInterval=15",
    "-o",
    "ServerAliveCountMax=3",
)
CONTROL_PERSIST = "600"
REMOTE_PATH = "$HOME/.local/share/sot/bin:$HOME/.cargo/bin:$HOME/.local/bin"
PREAMBLE_MAX = 64 * 1024  # bytes of non-JSON lines tolerated before the first envelope
_RECV = 65536
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./-_")


def _plain(s: str) -> bool:
    """``[a-z0-9][a-z0-9._-]*`` (the endpoint grammar of behaviour 2.2)."""
    if not s or not ("a" <= s[0] <= "z" or "0" <= s[0] <= "9"):
        return False
    return all("a" <= c <= "z" or "0" <= c <= "9" or c in "._-" for c in s)


def shell_quote(word: str) -> str:
    """One word for a POSIX shell (the remote login shell runs the command line ssh sends)."""
    if word and all(c in _SAFE for c in word):
        return word
    return "'" + word.replace("'", "'\"'\"'") + "'"


def bridge_argv(host: str = "") -> list[str]:
    """The far side of an ssh endpoint: ``sotd stdio-bridge [--host <host>]``."""
    return ["sotd", "stdio-bridge", "--host", host] if host else ["sotd", "stdio-bridge"]


def remote_command(remote_argv: list[str]) -> str:
    """The command line the remote shell runs: the three sot folders first on PATH, then ``exec argv``."""
    if not remote_argv:
        raise ValueError("remote_argv must name a command")
    words = " ".join(shell_quote(w) for w in remote_argv)
    return f'PATH="{REMOTE_PATH}:$PATH"; export PATH; exec {words}'


def fallback_control_dir(environ: Mapping[str, str]) -> str:
    """Where ControlPath sockets go when ``$XDG_RUNTIME_DIR`` is unset."""
    return os.path.join(environ.get("TMPDIR") or "/tmp", f"sot-comm-ssh-{os.geteuid()}")


def _private_dir(path: str) -> bool:
    """Make ``path`` (0700) if missing; True when it is a real folder, ours, with no group/other bits."""

    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return False
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return fsprim.is_private_folder(st, os.geteuid())


def control_dir(environ: Mapping[str, str]) -> str | None:
    """The ControlPath folder: ``$XDG_RUNTIME_DIR``, else a private fallback, else None (no multiplexing)."""
    xdg = environ.get("XDG_RUNTIME_DIR", "")
    if xdg:
        return xdg
    path = fallback_control_dir(environ)
    return path if _private_dir(path) else None


def _control_path_option(folder: str | None) -> list[str]:
    # ssh expands % tokens in ControlPath (so a literal % is %%) and splits option values on blanks unless
    # quoted; a folder with a double quote or a newline cannot be written safely, so it turns multiplexing off.
    if folder is None or '"' in folder or "\n" in folder:
        return ["-o", "ControlMaster=no", "-o", "ControlPath=none"]
    path = os.path.join(folder, "sot-comm-ssh-").replace("%", "%%") + "%C"
    if any(c in path for c in " \t"):
        path = f'"{path}"'
    return [
        "-o",
        "ControlMaster=auto",
        "-o",
        f"ControlPath={path}",
        "-o",
        f"ControlPersist={CONTROL_PERSIST}",
    ]


def ssh_argv(
    target: str, remote_argv: list[str], environ: Mapping[str, str], *, connect_timeout: int = 0
) -> list[str]:
    """The ssh command line that runs ``remote_argv`` on ``target`` (behaviour 2.2).

    ``target`` must be a plain host name (``[a-z0-9][a-z0-9._-]*``; ``ValueError`` otherwise), so it can
    never be read as an option. ``$SOT_SSH_CONFIG`` adds ``-F <file>``. ``connect_timeout`` (the daemon's
    hub link) adds ``-o ConnectTimeout=<s>``: a dial into a partition ends in that time, so the next one
    starts a fresh TCP connection instead of waiting out SYN retransmissions.
    """
    if not _plain(target):
        raise ValueError(f"not an ssh target: {target!r}")
    argv = [SSH]
    config = environ.get("SOT_SSH_CONFIG", "")
    if config:
        argv += ["-F", config]
    argv += BASE_OPTIONS
    if connect_timeout > 0:
        argv += ["-o", f"ConnectTimeout={connect_timeout}"]
    argv += _control_path_option(control_dir(environ))
    argv += [target, remote_command(remote_argv)]
    return argv


def master_exit_argv(target: str, environ: Mapping[str, str]) -> list[str] | None:
    """``ssh -O exit`` for the connection-sharing master of ``target`` (the same ``-F`` and ControlPath
    as ``ssh_argv``); None when multiplexing is off (there is no master to close)."""
    if not _plain(target):
        raise ValueError(f"not an ssh target: {target!r}")
    control = _control_path_option(control_dir(environ))
    if "ControlPath=none" in control:
        return None
    argv = [SSH]
    config = environ.get("SOT_SSH_CONFIG", "")
    if config:
        argv += ["-F", config]
    path_opt = [o for o in control if o.startswith("ControlPath=")]
    return [*argv, "-o", path_opt[0], "-O", "exit", target]


def endpoint_text(target: str, host: str = "") -> str:
    return f"ssh:{target}/{host}" if host else f"ssh:{target}"


def _clean(line: bytes) -> str:
    """One stderr line as printable text, at most 300 characters."""
    text = line.decode("utf-8", "replace").strip()
    text = "".join(c if c.isprintable() else " " for c in text)
    return text[:300]


class _Child:
    """The ssh child's output as it arrives: the wire for ``OneShot``, stderr's last line for the error."""

    __slots__ = ("_err_buf", "_pre", "last_err", "passed", "shot")

    def __init__(self, shot: OneShot) -> None:
        self.shot = shot
        self.passed = False  # the first envelope has been seen: everything after goes to the wire
        self._pre = bytearray()
        self._err_buf = b""
        self.last_err = ""

    def out(self, data: bytes) -> None:
        if self.passed:
            self.shot.feed(data)
            return
        from sotd.wire.framing import decode_line

        self._pre += data
        while True:
            nl = self._pre.find(b"\n")
            if nl < 0:
                if len(self._pre) > PREAMBLE_MAX:
                    raise WireError(f"more than {PREAMBLE_MAX} bytes before the first envelope")
                return
            line = bytes(self._pre[:nl])
            try:
                decode_line(line)
            except WireError:
                del self._pre[: nl + 1]  # a banner line: not ours to judge
                continue
            self.passed = True
            rest = bytes(self._pre)
            self._pre.clear()
            self.shot.feed(rest)
            return

    def err(self, data: bytes) -> None:
        buf = self._err_buf + data
        lines = buf.split(b"\n")
        self._err_buf = lines.pop()[-4096:]
        for line in lines:
            text = _clean(line)
            if text:
                self.last_err = text

    def err_done(self) -> None:
        text = _clean(self._err_buf)
        self._err_buf = b""
        if text:
            self.last_err = text


def request(
    target: str,
    host: str,
    op: str,
    payload: dict[str, Any],
    hello: dict[str, Any],
    *,
    deadline_s: float = DEFAULT_DEADLINE_S,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Send ``op`` with ``payload`` to the daemon behind ``ssh:<target>[/<host>]``; its response payload."""
    deadline = time.monotonic() + deadline_s
    import select
    import subprocess

    env = dict(os.environ if environ is None else environ)
    where = endpoint_text(target, host)
    silent = f"the daemon did not answer at {where}"
    shot = OneShot(op, payload, hello)
    child = _Child(shot)
    argv = ssh_argv(target, bridge_argv(host), env)
    reason = "timed out"
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
    except OSError as e:
        raise DaemonUnreachable(f"{silent}: {e}", hint=str(e)) from None
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    to_send = memoryview(shot.to_send())
    in_fd = proc.stdin.fileno()
    os.set_blocking(in_fd, False)
    wfd: int | None = in_fd
    rfds = {proc.stdout.fileno(): child.out, proc.stderr.fileno(): child.err}
    out_fd = proc.stdout.fileno()
    try:
        while not shot.done:
            left = deadline - time.monotonic()
            if left <= 0:
                reason = f"timed out after {deadline_s:g}s"
                break
            if not rfds:  # stdout and stderr both closed: ssh has ended without an answer
                reason = "ssh ended without an answer"
                break
            want_w = [wfd] if wfd is not None else []
            readable, writable, _ = select.select(list(rfds), want_w, [], left)
            if writable and wfd is not None:
                try:
                    n = os.write(wfd, to_send[:_RECV])
                    to_send = to_send[n:]
                except BlockingIOError:
                    pass
                except OSError:
                    to_send = to_send[:0]  # the child will not read: its stderr says why
                if not to_send:
                    wfd = None  # keep stdin open: the bridge ends when stdin ends
            for fd in readable:
                data = os.read(fd, _RECV)
                if data:
                    try:
                        rfds[fd](data)
                    except WireError as e:
                        raise WireError(f"the daemon at {where} sent a malformed line: {e.message}") from None
                else:
                    if fd != out_fd:
                        child.err_done()
                    del rfds[fd]
    finally:
        _kill(proc)
    if shot.response is not None:
        return shot.response
    refusal = shot.final_refusal()
    if refusal is not None:
        raise HelloRefused(f"hello refused: {refusal}")
    child.err_done()
    if child.last_err:
        raise DaemonUnreachable(f"{silent}: {child.last_err}", hint=reason)
    raise DaemonUnreachable(silent, hint=reason)


def _kill(proc: Any) -> None:
    """End the ssh child now (the answer, or the bound, has decided) and reap it."""
    for f in (proc.stdin, proc.stdout, proc.stderr):
        try:
            f.close()
        except OSError:
            pass
    if proc.poll() is None:
        try:
            proc.kill()
        except OSError:
            pass
    try:
        proc.wait(timeout=2)
    except Exception:  # a child that will not die is left to init; the send has its verdict
        pass
