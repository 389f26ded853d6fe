"""``sotd/cli/install/scripts.py``: the install part that writes the wrappers (``bin/comm-*.sh``), the rows'
settings file and the version stamp, and takes them out again.

Behaviour 1.12 and seed 000 "Upgrading to 0.7.0". Each wrapper is a short shell script that execs the
``sotd`` recorded at install (the venv's console script, or this installation's interpreter with ``-S`` on
the package's entry); when that ``sotd`` is gone a wrapper says so and how to put it back, and a hook says
so to the session (a ``systemMessage``) and lets the agent go on. ``comm-relay.sh`` is the one script that
is not such a wrapper: its ``send`` runs ``sotd comm relay``, its ``bridge`` is the retired verb's sleeping
stub. The scripts written are named in ``bin/.installed``; uninstall removes exactly those.

What would break it: a wrapper written in place (a session would run half of it), or uninstall removing a
name the record does not hold.
"""

from __future__ import annotations

import json
import os
import sys

from sotd import __version__
from sotd.cli.comm.common import err, out
from sotd.cli.install.record import RECORD, SETTINGS_RECORD, read_scripts_record, write_file
from sotd.cli.install.settings import row_settings_text, shell_quote
from sotd.cli.install.skill import checkout_note
from sotd.errors import NoSotdExecutable
from sotd.formats.layout import Layout
from sotd.rowargv import ROW_SETTINGS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from sotd.cli.install.part import Setup


WRAPPERS = {
    "comm-send.sh": "send",
    "comm-poll.sh": "poll",
    "comm-join.sh": "join",
    "comm-leave.sh": "leave",
    "comm-list.sh": "list",
    "comm-status.sh": "status",
    "comm-context.sh": "context",
    "comm-spawn.sh": "spawn",
    "comm-despawn.sh": "despawn",
}


HOOKS = {
    "comm-status-idle.sh": "stop",
    "comm-status-prompt.sh": "prompt",
    "comm-status-pretool.sh": "pre-tool",
    "comm-status-posttool.sh": "post-tool",
    "comm-status-permission.sh": "permission",
    "comm-session-start.sh": "start",
}


RETIRED = (
    "comm-listen.sh",
    "comm-watch.sh",
    "comm-wake.sh",
    "codex-watch.sh",
    "bus.sh",
    "comm-post-compact.sh",
    "comm-post-clear.sh",
    "comm-session-skill.sh",
    "comm-self-audit.sh",
    "comm-registry-lock-clear.sh",
)


def sotd_executable() -> str:
    """This installation's ``sotd``: the console script beside the running interpreter."""
    cand = os.path.join(os.path.dirname(sys.executable), "sotd")
    if os.access(cand, os.X_OK):
        return cand
    found = os.environ.get("SOTD_BIN", "")
    if found:
        return found
    raise NoSotdExecutable("sotd comm install: cannot find this installation's sotd beside " + sys.executable)


def gone_text(sotd: str) -> str:
    """What a script says when the ``sotd`` it was installed with is gone."""
    return (
        f"sot-comm: the sotd these scripts were installed with ({sotd}) is gone, so sot-comm is off here; "
        "install sotd again and run: sotd comm install"
    )


def direct_entry(sotd: str) -> tuple[str, str] | None:
    """(interpreter, ``sotd/__main__.py``) when ``sotd`` is this installation's own console script, so a
    wrapper can start the interpreter with ``-S`` on the entry itself (issue 17: no ``site``); None for any
    other ``sotd`` (``--sotd=PATH``), which the wrapper then runs as it is."""
    own = os.path.join(os.path.dirname(sys.executable), "sotd")
    if os.path.realpath(sotd) != os.path.realpath(own):
        return None
    import sotd as package

    entry = os.path.join(os.path.dirname(os.path.abspath(package.__file__ or "")), "__main__.py")
    return (sys.executable, entry) if os.path.isfile(entry) else None


def wrapper_text(sotd: str, name: str, argv: str, *, hook: bool = False) -> str:
    """A wrapper: exec the recorded ``sotd`` (this installation's own: its interpreter with ``-S`` on the
    package's entry, ``direct_entry``); when it is gone, say so (a hook: as a ``systemMessage`` on stdout
    and exit 0, so the agent is never failed; a command: on stderr and exit 1)."""
    gone = gone_text(sotd)
    if hook:
        said = (
            f"printf '%s\\n' {shell_quote(json.dumps({'systemMessage': gone}, ensure_ascii=False))}; exit 0"
        )
    else:
        said = f"printf '%s\\n' {shell_quote(name + ': ' + gone)} >&2; exit 1"
    head = (
        "#!/bin/sh\n"
        f"# sot-comm {__version__}: {name} is `sotd {argv}`; installed by `sotd comm install`.\n"
        f"sotd={shell_quote(sotd)}\n"
    )
    direct = direct_entry(sotd)
    if direct is None:
        return head + f'[ -x "$sotd" ] || {{ {said}; }}\nSOT_COMM_PROG={name} exec "$sotd" {argv} "$@"\n'
    python, entry = direct
    return head + (
        f"python={shell_quote(python)} entry={shell_quote(entry)}\n"
        f'[ -x "$sotd" ] && [ -x "$python" ] && [ -f "$entry" ] || {{ {said}; }}\n'
        f'SOT_COMM_PROG={name} exec "$python" -S "$entry" {argv} "$@"\n'
    )


def relay_text(sotd: str) -> str:
    """comm-relay.sh: ``send`` is ``sotd comm relay send`` (``sotd.cli.comm.relay``); ``bridge`` is the sleeping
    stub."""
    return (
        "#!/bin/sh\n"
        f"# sot-comm {__version__}: comm-relay.sh. `send` is sotd comm relay; `bridge` was retired in 0.6.6.\n"
        'case "${1:-}" in\n'
        "  bridge)\n"
        "    echo 'comm-relay: bridge retired in 0.6.6; this leftover loop now sleeps (a reboot clears it)' >&2\n"
        "    while :; do sleep 3600; done ;;\n"
        f'  send) SOT_COMM_PROG=comm-relay.sh exec {shell_quote(sotd)} comm relay "$@" ;;\n'
        '  *) echo \'usage: comm-relay.sh send @to "msg" | --all "msg" | bridge\' >&2; exit 1 ;;\n'
        "esac\n"
    )


def _version_stamp() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    head = os.path.join(here, "..", "..", "..", "..", ".git", "HEAD")
    commit = "unknown"
    try:
        with open(head) as f:
            ref = f.read().strip()
        if ref.startswith("ref: "):
            with open(os.path.join(os.path.dirname(head), ref[5:])) as f:
                commit = f.read().strip()
        else:
            commit = ref
    except OSError:
        pass
    return f"{__version__} {commit}\n"


def write_scripts(lay: Layout, sotd: str) -> tuple[list[str], list[str]]:
    """Write every script and the rows' settings file; return (installed names, removed names)."""
    from sotd.formats.layout import ensure_home

    for w in ensure_home(lay):
        err(w)
    os.makedirs(lay.bin_dir, mode=0o755, exist_ok=True)
    previous = read_scripts_record(lay)
    names: list[str] = []
    for name, verb in WRAPPERS.items():
        write_file(os.path.join(lay.bin_dir, name), wrapper_text(sotd, name, f"comm {verb}"), 0o755)
        names.append(name)
    for name, event in HOOKS.items():
        write_file(
            os.path.join(lay.bin_dir, name), wrapper_text(sotd, name, f"comm hook {event}", hook=True), 0o755
        )
        names.append(name)
    write_file(os.path.join(lay.bin_dir, "comm-relay.sh"), relay_text(sotd), 0o755)
    names.append("comm-relay.sh")
    write_file(os.path.join(lay.bin_dir, ROW_SETTINGS), row_settings_text(lay.bin_dir), 0o644)
    names.append(ROW_SETTINGS)
    write_file(lay.version_file, _version_stamp(), 0o644)
    removed = []
    for name in sorted(set(RETIRED) | (previous - set(names))):
        path = os.path.join(lay.bin_dir, name)
        if os.path.lexists(path):
            os.unlink(path)
            removed.append(name)
    write_file(os.path.join(lay.bin_dir, RECORD), "".join(n + "\n" for n in names), 0o644)
    return names, removed


def check(setup: Setup) -> None:
    """Nothing to refuse: ``bin/`` is the comm folder's own."""


def install(setup: Setup, record: dict[str, object]) -> None:
    """Write the scripts (their names go to ``bin/.installed``, not to ``record``) and say so."""
    lay = setup.lay
    names, removed = write_scripts(lay, setup.sotd)
    note = checkout_note(setup.sotd)
    if note:
        err(note)
    out(f"Installed sot-comm {__version__} into {lay.bin_dir}: {', '.join(names)}")
    if removed:
        out(f"Removed retired scripts: {', '.join(removed)}")


def uninstall(setup: Setup, record: dict[str, object]) -> int:
    """Remove the scripts ``bin/.installed`` names (a link or a folder of that name stays), both records,
    the version stamp, and ``bin/`` when it is then empty."""
    lay = setup.lay
    gone = []
    for name in sorted(read_scripts_record(lay)):
        p = os.path.join(lay.bin_dir, name)
        if os.path.isfile(p) and not os.path.islink(p):
            os.unlink(p)
            gone.append(name)
    for extra in (RECORD, SETTINGS_RECORD):
        try:
            os.unlink(os.path.join(lay.bin_dir, extra))
        except FileNotFoundError:
            pass
    try:
        os.unlink(lay.version_file)
    except FileNotFoundError:
        pass
    if gone:
        out(f"Removed from {lay.bin_dir}: {', '.join(gone)}")
    try:
        os.rmdir(lay.bin_dir)
    except OSError:
        pass
    return 0
