"""``comm-relay.sh send``: the relay's send verb (behaviour 1.4). ``comm-relay.sh bridge`` stays a sleeping
stub in the shell script itself (``sotd.cli.install.scripts.relay_text``).

Arguments: ``@to words…`` or ``--all words…``. ``--all`` anywhere makes a broadcast, and then every word
is message text, ``@words`` included; otherwise the first word, when it is an ``@word``, names the
recipient and every later word (``@words`` too) is message text, joined with single spaces. Usage errors
(exit 1, nothing else done, before the identity check, as ``comm-send.sh`` does):
``usage: comm-relay.sh send @to "msg" | --all "msg"  (no recipient)`` and ``…  (empty message)``; a
missing recipient is reported first.

The rest is ``sotd comm send``'s own path, called in this process: the identity check, the routable
identity (``FAILED -> @to: …``), a listed handle filed through this box's folder (``  filed -> @to``) or
its daemon, a handle this folder does not list handed to the relay endpoint (``filed -> @to`` from the
daemon, or ``FAILED -> @to: <its words>``). ``--all`` is ``--broadcast``: one copy per handle this folder
lists, never through the relay. Known limit: a directed message whose whole text is the one word
``--broadcast`` is read by the send path as that flag.

The wrapper runs ``sotd comm relay "$@"`` (the verb table in ``sotd.cli.main``), so the umask, the
error printing and the exit status are those of every other verb.
"""

from __future__ import annotations

from sotd.errors import ScriptUsage

USAGE = 'usage: comm-relay.sh send @to "msg" | --all "msg"'


def parse(argv: list[str]) -> tuple[bool, str | None, str]:
    """(broadcast, recipient or None, message text) of the words after ``send``."""
    broadcast = "--all" in argv
    to: str | None = None
    words: list[str] = []
    for a in argv:
        if a == "--all":
            continue
        if not broadcast and to is None and not words and len(a) > 1 and a.startswith("@"):
            to = a[1:]
        else:
            words.append(a)
    return broadcast, to, " ".join(words)


def send_argv(argv: list[str]) -> list[str]:
    """The ``sotd comm send`` words for the relay's words (``send`` first); raises the relay's usage: no
    verb, then no recipient, then an empty message."""
    if not argv or argv[0] != "send":
        raise ScriptUsage(f"{USAGE} | bridge")
    broadcast, to, text = parse(argv[1:])
    if not broadcast and to is None:
        raise ScriptUsage(f"{USAGE}  (no recipient)")
    if not text:
        raise ScriptUsage(f"{USAGE}  (empty message)")
    return ["--broadcast", text] if broadcast else [f"@{to}", text]


def run(argv: list[str]) -> int:
    words = send_argv(argv)
    from sotd.cli.comm import send

    return send.run(words)
