"""``sotd daemon install|uninstall``: this user's daemon as a systemd user unit.

File: ``$XDG_CONFIG_HOME/systemd/user/sotd.service`` (``~/.config`` when unset), 0644, written whole
through a temp file and a rename. Spec: issue 13 "Any order works" (the daemon runs from login on, where
systemd runs for the user; elsewhere commands start it on demand, ``cli/comm/autostart.py``).
Guarantee: the unit runs ``sotd daemon run`` with the interpreter and socket of the installing command and
the environment that picks this user's comm folder (``SOT_COMM_HOME``, ``SOT_SELF_HOST``, ``SOT_BACKEND_LABEL``,
``SOT_HOSTS_TOML`` when set), so the daemon it starts is the one the commands dial; install and uninstall
say what they did, and where no user manager answers they say so and what to do instead.
What would break it: a unit whose daemon serves another socket or folder than the commands use, or a
value that systemd reads differently from what was meant (``%`` specifiers, quotes, backslashes).

``unit_text`` and ``quote`` are pure; the rest is a thin shell around ``systemctl --user``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping

from sotd import fsprim
from sotd.errors import EXIT_OK, DaemonUnitFailed

UNIT_NAME = "sotd.service"
CARRIED = ("SOT_COMM_HOME", "SOT_SELF_HOST", "SOT_HOSTS_TOML", "SOT_BACKEND_LABEL")
SYSTEMCTL_S = 20.0


def unit_path(environ: Mapping[str, str]) -> str:
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "systemd", "user", UNIT_NAME)


def quote(value: str) -> str:
    """One word for an ``ExecStart=``/``Environment=`` line: double-quoted, ``\\`` and ``"`` escaped, ``%``
    doubled (systemd's specifier sign)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%") + '"'


def unit_text(python: str, socket_path: str, environ: Mapping[str, str]) -> str:
    """The unit's bytes for an interpreter, a socket and the installing command's environment."""
    env_lines = "".join(f"Environment={quote(f'{k}={environ[k]}')}\n" for k in CARRIED if environ.get(k))
    argv = " ".join(
        quote(a) for a in (python, "-m", "sotd.cli.main", "daemon", "run", "--socket", socket_path)
    )
    return (
        "# written by `sotd daemon install`; `sotd daemon uninstall` removes it\n"
        "[Unit]\n"
        "Description=sotd: sot-comm daemon for this user (files mail, links boxes, runs rows)\n"
        "\n"
        "[Service]\n"
        "Type=simple\n"
        f"{env_lines}"
        f"ExecStart={argv}\n"
        "Restart=on-failure\n"
        "RestartSec=2\n"
        "\n"
        "[Install]\n"
        "WantedBy=default.target\n"
    )


def user_manager_runs() -> tuple[bool, str]:
    """(True, "") when ``systemctl --user`` reaches this user's manager, else (False, why not)."""
    if shutil.which("systemctl") is None:
        return False, "there is no systemctl on PATH"
    try:
        done = subprocess.run(
            ["systemctl", "--user", "show-environment"],
            check=False,
            capture_output=True,
            text=True,
            timeout=SYSTEMCTL_S,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"systemctl --user did not answer ({e})"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return False, f"systemctl --user reaches no user manager ({last})"
    return True, ""


def _systemctl(*args: str) -> tuple[bool, str]:
    try:
        done = subprocess.run(
            ["systemctl", "--user", *args], check=False, capture_output=True, text=True, timeout=SYSTEMCTL_S
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    return done.returncode == 0, (done.stderr.strip().splitlines() or [""])[-1]


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fsprim.write_atomic(path, text.encode(), tmp=f"{path}.tmp.{os.getpid()}", mode=0o644, sync_folder=False)


def install(socket_path: str, environ: Mapping[str, str], *, running_pid: object = None) -> int:
    """Write the unit; where a user manager runs, enable it (and start it unless a daemon already
    answers at the socket: ``running_pid``). Prints what it did."""
    path = unit_path(environ)
    try:
        _write(path, unit_text(sys.executable, socket_path, environ))
    except OSError as e:
        raise DaemonUnitFailed(f"sotd daemon install: cannot write {path}: {e.strerror or e}") from None
    sys.stdout.write(f"wrote the systemd user unit {path}\n")
    runs, why = user_manager_runs()
    if not runs:
        sys.stdout.write(
            f"systemd does not run for this user here: {why}; the unit was written but not enabled.\n"
            "Instead: every command that needs the daemon starts it (or start it yourself: sotd daemon start);\n"
            f"where systemd runs for you, enable the unit with: systemctl --user enable --now {UNIT_NAME}\n"
        )
        return EXIT_OK
    ok, said = _systemctl("daemon-reload")
    now = () if running_pid is not None else ("--now",)
    if ok:
        ok, said = _systemctl("enable", *now, UNIT_NAME)
    if not ok:
        raise DaemonUnitFailed(
            f"sotd daemon install: systemctl --user enable {UNIT_NAME} failed: {said}",
            hint=f"see: systemctl --user status {UNIT_NAME}",
        )
    if running_pid is not None:
        sys.stdout.write(
            f"enabled {UNIT_NAME} for your next login; a daemon already runs at {socket_path} "
            f"(pid {running_pid}), so it was not started. To hand over now: sotd daemon stop; "
            f"systemctl --user start {UNIT_NAME}\n"
        )
    else:
        sys.stdout.write(
            f"enabled and started {UNIT_NAME}; see it with: systemctl --user status {UNIT_NAME}\n"
        )
    return EXIT_OK


def uninstall(environ: Mapping[str, str]) -> int:
    """Disable and stop the unit where a user manager runs, then remove its file. Prints what it did."""
    path = unit_path(environ)
    runs, why = user_manager_runs()
    if runs:
        ok, said = _systemctl("disable", "--now", UNIT_NAME)
        sys.stdout.write(
            f"disabled and stopped {UNIT_NAME}\n" if ok else f"systemctl --user disable {UNIT_NAME}: {said}\n"
        )
    if not os.path.exists(path):
        sys.stdout.write(f"no systemd user unit at {path}: nothing to remove\n")
        return EXIT_OK
    try:
        os.unlink(path)
    except OSError as e:
        raise DaemonUnitFailed(f"sotd daemon uninstall: cannot remove {path}: {e.strerror or e}") from None
    sys.stdout.write(f"removed the systemd user unit {path}\n")
    if runs:
        _systemctl("daemon-reload")
    else:
        sys.stdout.write(f"(systemd does not run for this user here: {why}; nothing else to undo)\n")
    return EXIT_OK
