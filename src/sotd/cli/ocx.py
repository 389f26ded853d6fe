"""``sotd ocx ...``: post, list, show, answer and sync OCX v2 messages; clone and check repositories.

Human-readable by default, ``--json`` for scripts. The node's configuration is ``$SOT_OCX_CONFIG``, else
``$SOT_COMM_HOME/ocx.toml`` (docs/ocx.md). Every failure raises ``SotdError`` for ``sotd.cli.main``.
"""

from __future__ import annotations

import json
import os
import sys

from sotd import cmdtable
from sotd.errors import EXIT_FAILED, EXIT_NOT_DELIVERED, EXIT_OK, EXIT_USAGE, UsageError
from sotd.text import inert

TYPE_CHECKING = False
if TYPE_CHECKING:
    from sotd.ocx.index import IndexRow
    from sotd.ocx.node import NodeClones, PostResult

USAGE = cmdtable.usages("ocx") + "\n"  # made from the command table (sotd.cmdtable)

_VALUED = ("--repo", "--to", "--re", "--kind", "--body", "--interval")
_FLAGS = ("--json", "--new", "--once")


def _parse(argv: list[str], positional: int, allowed: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
    pos: list[str] = []
    opts: dict[str, str] = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        name, eq, val = a.partition("=")
        if name in _VALUED and name in allowed:
            if not eq:
                if i + 1 >= len(argv):
                    raise UsageError(f"sotd ocx: {name} needs a value\n{USAGE.rstrip()}")
                i += 1
                val = argv[i]
            opts[name] = val
        elif a in _FLAGS and a in allowed:
            opts[a] = "1"
        elif a.startswith("--") and a != "--":
            raise UsageError(f"sotd ocx: unknown option {a}\n{USAGE.rstrip()}")
        else:
            pos.append(a)
        i += 1
    if len(pos) != positional:
        raise UsageError(f"sotd ocx: wrong number of arguments\n{USAGE.rstrip()}")
    return pos, opts


def _out(line: str) -> None:
    """One line to stdout, made inert (``sotd.text.inert``): a message's fields are a peer's bytes."""
    sys.stdout.write(inert(line, lines=True) + "\n")


def _note(line: str) -> None:
    """One line of progress to stderr (what the index did with a post, the node's banner), as written."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _json(obj: object) -> None:
    _out(json.dumps(obj, indent=None, sort_keys=True))


def _node() -> NodeClones:
    from sotd.ocx.config import load_config
    from sotd.ocx.node import NodeClones

    return NodeClones(load_config(os.environ))


def _when(t: object) -> str:
    from sotd import _clock

    return _clock.stamp(float(t)) if isinstance(t, int | float) else "-"


def _line(r: IndexRow) -> str:
    addr = (
        f"to={r['to_login']}" if r["to_login"] is not None else f"re={r['re_hash']}" if r["re_hash"] else ""
    )
    sender = r["sender_login"] or "?"
    head = (
        f"{_when(r['received_at'])} {r['repo']} {r['hash']} {r['kind'] or '-'} {addr} from={sender}".replace(
            "  ", " "
        )
    )
    if not r["valid"]:
        head += f" INVALID: {r['reason']}"
    if r["post_state"] == "not_delivered":
        head += " NOT DELIVERED"
    elif r["post_state"] == "pending":
        head += " (not yet delivered)"
    return head


def _print_rows(rows: list[IndexRow], as_json: bool, empty: str) -> None:
    if as_json:
        _json([dict(r) for r in rows])
        return
    if not rows:
        _out(empty)
    for r in rows:
        _out(_line(r))


def _check_hash(h: str) -> str:
    from sotd.ocx.envelope import is_hash

    if not is_hash(h):
        raise UsageError(f"sotd ocx: {h!r} is not a hash (40 or 64 lower-case hex digits)")
    return h


def cmd_post(argv: list[str]) -> int:
    (path,), opts = _parse(argv, 1, ("--repo", "--json"))
    if "--repo" not in opts:
        raise UsageError("sotd ocx post: --repo R is required (a clone's name or repository file)")
    from sotd.ocx.envelope import MAX_MESSAGE_BYTES
    from sotd.ocx.errors import OcxError

    try:
        size = os.path.getsize(path) if path != "-" else 0
        if size > MAX_MESSAGE_BYTES:
            raise OcxError(
                f"ocx: not posted: too large: {size} bytes; the limit is {MAX_MESSAGE_BYTES} bytes"
            )
        if path == "-":
            data = sys.stdin.buffer.read(MAX_MESSAGE_BYTES + 1)
        else:
            with open(path, "rb") as f:
                data = f.read(MAX_MESSAGE_BYTES + 1)
    except OSError as e:
        raise OcxError(f"ocx: cannot read {path}: {e.strerror}") from None
    import secrets

    from sotd.ocx.envelope import NONCE_BYTES, with_nonce

    node = _node()
    try:  # bytes of the sender's own: no one could have posted them first (docs/ocx.md, "Whose bytes")
        res = node.post(opts["--repo"], with_nonce(data, secrets.token_bytes(NONCE_BYTES)))
    finally:
        node.close()
    return _report_post(res, opts)


def _report_post(res: PostResult, opts: dict[str, str]) -> int:
    """A post's or an answer's outcome: its hash (exit 0) and, on stderr, what the index did with it; or
    not delivered (exit 3, nothing on stdout)."""
    from sotd.ocx.node import require_delivered

    if "--json" in opts:
        _json(
            {
                "hash": res.hash,
                "name": res.name,
                "repo": res.repo,
                "delivered": res.delivered,
                "reason": res.reason,
                "indexed": res.indexed,
            }
        )
        return EXIT_OK if res.delivered else EXIT_NOT_DELIVERED
    require_delivered(res)
    _out(res.hash)
    if res.indexed:
        _note(res.indexed)
    return EXIT_OK


def cmd_answer(argv: list[str]) -> int:
    (h,), opts = _parse(argv, 1, ("--repo", "--kind", "--body", "--json"))
    for need in ("--repo", "--kind"):
        if need not in opts:
            raise UsageError(f"sotd ocx answer: {need} is required")
    try:
        body = json.loads(opts.get("--body", "{}"))
    except json.JSONDecodeError as e:
        raise UsageError(f"sotd ocx answer: --body is not JSON: {e.msg}") from None
    import secrets

    from sotd.ocx.envelope import NONCE_BYTES

    node = _node()
    try:
        res = node.answer(opts["--repo"], _check_hash(h), opts["--kind"], body,
                          nonce=secrets.token_bytes(NONCE_BYTES))  # fmt: skip
    finally:
        node.close()
    return _report_post(res, opts)


def cmd_list(argv: list[str]) -> int:
    _, opts = _parse(argv, 0, ("--to", "--re", "--kind", "--repo", "--json"))
    node = _node()
    try:
        rows = node.index.query(
            to=opts.get("--to"), re=opts.get("--re"), kind=opts.get("--kind"), repo=opts.get("--repo")
        )
    finally:
        node.close()
    _print_rows(rows, "--json" in opts, "no messages")
    return EXIT_OK


def cmd_show(argv: list[str]) -> int:
    (h,), opts = _parse(argv, 1, ("--json",))
    from sotd.ocx.errors import OcxError
    from sotd.text import carry

    node = _node()
    try:
        rows = node.index.show(_check_hash(h))
        if not rows:
            raise OcxError(f"ocx: no message {h} in the index", hint="run sotd ocx sync first")
        got = node.row_bytes(rows[0])  # a valid row's first bytes, whatever the clone holds now
    finally:
        node.close()
    text = carry(got) if got is not None else None
    if "--json" in opts:
        _json({"rows": [dict(r) for r in rows], "message": text})
        return EXIT_OK
    for r in rows:
        _out(f"hash:     {r['hash']}")
        _out(f"repo:     {r['repo']}  ({r['name']})")
        _out(
            f"sender:   {r['sender_login'] or '?'}"
            + (f"  at {r['sender_addr']}" if r["sender_addr"] else "")
            + f"  ({r['origin'] or 'unknown'})"
        )
        _out(f"received: {_when(r['received_at'])}")
        if r["valid"]:
            _out(f"kind:     {r['kind']}")
            _out(f"to:       {r['to_login']}" if r["to_login"] is not None else f"re:       {r['re_hash']}")
        else:
            _out(f"INVALID:  {r['reason']}")
        if r["post_state"]:
            _out(f"posted:   {str(r['post_state']).replace('_', ' ')}")
    if text is not None:
        _out("")
        _out(text)
    return EXIT_OK


def cmd_answers(argv: list[str]) -> int:
    (h,), opts = _parse(argv, 1, ("--json",))
    node = _node()
    try:
        rows = node.index.answers(_check_hash(h))
    finally:
        node.close()
    _print_rows(rows, "--json" in opts, f"no answers to {h}")
    return EXIT_OK


def cmd_sync(argv: list[str]) -> int:
    _, opts = _parse(argv, 0, ("--json",))
    node = _node()
    try:
        reports = node.sync_once()
    finally:
        node.close()
    if "--json" in opts:
        _json([{"repo": r.repo, "new": r.new, "handed": r.handed, "restored": r.restored, "error": r.error}
               for r in reports])  # fmt: skip
    else:
        for r in reports:
            _out(
                f"{r.repo}: " + (f"FAILED: {r.error}" if r.error else f"{r.new} new") + _restored(r.restored)
            )
    return EXIT_FAILED if any(r.error for r in reports) else EXIT_OK


def _restored(n: int) -> str:
    return f", {n} put back (another version had replaced them)" if n else ""


def cmd_rebuild(argv: list[str]) -> int:
    _, opts = _parse(argv, 0, ("--repo",))
    node = _node()
    try:
        node.rebuild(opts.get("--repo"))
    finally:
        node.close()
    return EXIT_OK


def cmd_clone(argv: list[str]) -> int:
    (url, path), _ = _parse(argv, 2, ())
    from sotd.ocx import fossil
    from sotd.ocx.config import load_config

    fossil.clone(url, path)
    code = fossil.repo_info(path).server_code
    # A fresh clone has a fresh server-code; make sure no other clone this node serves has the same one
    # (O12). The configuration may already name PATH itself: that one is not another clone.
    others: dict[str, str] = {}
    try:
        cfg = load_config(os.environ)
        here = os.path.realpath(path)
        for c in cfg.clones:
            if os.path.realpath(c.repository) != here and os.path.exists(c.repository):
                others[fossil.repo_info(c.repository).server_code] = c.name
    except Exception:  # no configuration, or a clone that cannot be read: nothing to compare with
        others = {}
    clash = others.get(code)
    if clash is not None:
        code = fossil.new_server_code(path)
    _out(
        f"cloned {fossil.redact_password(url)} into {path}; server-code {code}"
        + (f" (the clone's first server-code was the one of the clone {clash!r}: replaced)" if clash else "")
    )
    return EXIT_OK


def server_code_target(repo: str) -> str:
    """The repository file ``sotd ocx server-code REPO`` means: a configured clone's name first; else a
    path naming a regular file (a folder of that name in the current directory is not a repository)."""
    from sotd.ocx.config import load_config
    from sotd.ocx.errors import OcxConfigError

    try:
        cfg = load_config(os.environ)
    except OcxConfigError:
        cfg = None
    if cfg is not None and any(c.name == repo for c in cfg.clones):
        return cfg.clone(repo).repository
    if os.path.isfile(repo):
        return repo
    if cfg is None:
        return load_config(os.environ).clone(repo).repository  # raises: says what is missing
    return cfg.clone(repo).repository  # a repository file named by another path, else the clear error


def cmd_server_code(argv: list[str]) -> int:
    (repo,), opts = _parse(argv, 1, ("--new",))
    from sotd.ocx import fossil

    path = server_code_target(repo)
    if "--new" in opts:
        _out(fossil.new_server_code(path))
    else:
        _out(fossil.repo_info(path).server_code)
    return EXIT_OK


def cmd_node(argv: list[str]) -> int:
    """The node in the foreground: look again at unfinished runs, then sync every interval and take
    runs and stops until SIGTERM/SIGINT. ``--once``: one sync, wait for the runs it took, sync again."""
    _, opts = _parse(argv, 0, ("--once", "--interval"))
    interval: float | None = None
    if "--interval" in opts:
        try:
            interval = float(opts["--interval"])
        except ValueError:
            interval = -1.0
        if not 0 < interval <= 86400:
            raise UsageError("sotd ocx node: --interval must be a number of seconds above 0")
    import logging
    import signal
    import threading

    from sotd.ocxrun import Runs, load_settings

    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s sotd-ocx[%(process)d] %(message)s"
    )
    os.umask(0o077)  # as the daemon: state and logs are private; workspaces are opened up explicitly
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    node = _node()
    runs = Runs(node, load_settings(node.config, os.environ)).attach()
    _note(
        f"sotd ocx node: {len(node.config.clones)} clone(s) of {node.config.path}; "
        f"node policy {runs.settings.path or 'none (this node runs nothing)'}"
    )
    runs.recover()
    if "--once" not in opts:
        node.poll_loop(stop, interval)
        return EXIT_OK
    failed = False
    for _ in range(2):
        for r in node.sync_once():
            _out(
                f"{r.repo}: "
                + (f"FAILED: {r.error}" if r.error else f"{r.new} new, {r.handed} handed")
                + _restored(r.restored)
            )
            failed = failed or r.error is not None
        while not runs.wait_idle(0.2) and not stop.is_set():
            pass
    node.close()
    return EXIT_FAILED if failed else EXIT_OK


VERBS = {
    "post": cmd_post,
    "answer": cmd_answer,
    "list": cmd_list,
    "show": cmd_show,
    "answers": cmd_answers,
    "sync": cmd_sync,
    "rebuild": cmd_rebuild,
    "clone": cmd_clone,
    "server-code": cmd_server_code,
    "node": cmd_node,
}


def node_runs(environ: dict[str, str]) -> tuple[list[dict[str, object]], str]:
    """The OCX runs this box's node took (``ocxrun.runs.node_runs``) and ``""``, or none and why (no
    configuration, an unreadable one). For ``sotd web`` (issue 30): ``sotd.ocxrun`` (and the executor it
    imports, several MB) is imported only on a box that has a node configuration."""
    from sotd.errors import SotdError
    from sotd.ocx.config import load_config

    try:
        config = load_config(environ)
        from sotd.ocxrun.runs import node_runs as read_runs
        from sotd.ocxrun.settings import load_settings

        settings = load_settings(config, environ)
    except SotdError as e:
        return [], e.message
    return read_runs(settings.state), ""


def run(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        sys.stdout.write(USAGE)
        return EXIT_OK if argv else EXIT_USAGE
    verb = VERBS.get(argv[0])
    if verb is None:
        raise UsageError(f"sotd ocx: unknown verb {argv[0]!r}\n{USAGE.rstrip()}")
    return verb(argv[1:])
