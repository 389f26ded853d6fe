"""``sotd/cli/install/mcp.py``: the install part (``sotd.cli.install.part.Part``) of ``sotd comm install
--agent-settings`` that registers ``sotd mcp`` with Claude Code (user scope) and Codex, and takes it out
again on ``sotd comm uninstall`` (issue 26 item 2).

Where: Claude Code reads user-scope MCP servers from ``mcpServers`` in ``~/.claude.json``
(``$CLAUDE_CONFIG_DIR/.claude.json`` when that is set) and calls their tools ``mcp__<server>__<tool>``; the
allow rules that let a call go without a dialog are those names in ``permissions.allow`` of the settings
file the rest of the install writes (``allow_rules``, merged there by the ``settings`` part, so its
record gives those bytes back). In ``command.PARTS`` this part comes after ``codex_functions`` (its table
is appended after those lines, so it comes out first) and before ``settings``. Codex reads ``[mcp_servers.<name>]`` from ``$CODEX_HOME/config.toml``;
``default_tools_approval_mode = "approve"`` lets its tools run without asking.
Guarantee: everything else in either file is kept (a JSON object's other keys; the TOML file's bytes, our
table appended after them); an entry of the same name that is not ours is left as it is and said; a file
that is not a JSON object is refused before anything is written. The record (``record["mcp"]``: per file
the bytes before, the digest written, what was added) lets ``uninstall`` put the exact bytes back when
nobody changed the file since, else take out exactly our entry (Claude Code rewrites ``~/.claude.json``
itself all the time, so that is the usual case there).
What would break it: writing through a symlink's own path (``os.path.realpath`` is written instead), or
matching our entry by anything but the exact value recorded.
"""

from __future__ import annotations

import json
import os

from sotd.cli.comm.common import out
from sotd.cli.install.scripts import sotd_executable
from sotd.cli.install.settings import load_doc
from sotd.errors import SettingsRefused, SotdError
from sotd.mcp import NAMES, SERVER_NAME

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from sotd.cli.install.part import Setup


def check(setup: Setup) -> None:
    """With ``--agent-settings``: refuse, before anything is written, a ``~/.claude.json`` that cannot take
    our entry."""
    if setup.settings:
        trial(setup.sotd or sotd_executable())


def install(setup: Setup, record: dict[str, object]) -> None:
    """With ``--agent-settings``: register the server; each line says what was done."""
    if setup.settings:
        for line in register(record, setup.sotd or sotd_executable()):
            out(line)


def uninstall(setup: Setup, record: dict[str, object]) -> int:
    """Take out what ``install`` recorded (``record["mcp"]``); each line says what happened."""
    for line in unregister(record):
        out(line)
    return 0


def allow_rules() -> list[str]:
    """Claude Code's allow rules for every tool of the server (``mcp__sotd__send`` ...)."""
    return [f"mcp__{SERVER_NAME}__{name}" for name in NAMES]


def claude_json_path(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    base = env.get("CLAUDE_CONFIG_DIR") or os.path.expanduser("~")
    return os.path.join(base, ".claude.json")


def codex_config_path(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return os.path.join(
        env.get("CODEX_HOME") or os.path.join(os.path.expanduser("~"), ".codex"), "config.toml"
    )


def claude_entry(sotd: str) -> dict[str, object]:
    """The ``mcpServers`` entry: ``sotd mcp`` over stdio, run by the ``sotd`` the scripts record."""
    return {"type": "stdio", "command": sotd, "args": ["mcp"], "env": {}}


def codex_table(sotd: str) -> str:
    """The TOML table Codex reads (strings as TOML basic strings: JSON's escapes are TOML's)."""
    return (
        f"\n[mcp_servers.{SERVER_NAME}]\n"
        f"command = {json.dumps(sotd)}\n"
        'args = ["mcp"]\n'
        'default_tools_approval_mode = "approve"\n'
    )


# ------------------------------------------------------------------------------------------ pure merges


def merge_claude_json(doc: dict[str, object], sotd: str) -> str:
    """Add our server to ``doc`` (in place): "added", "kept" (ours is there already) or "foreign" (a server
    of that name that is not ours: left as it is). Pure."""
    servers = doc.get("mcpServers")
    if servers is None:
        doc["mcpServers"] = servers = {}
    if not isinstance(servers, dict):
        raise SettingsRefused('~/.claude.json\'s "mcpServers" is not an object; nothing was changed')
    if SERVER_NAME in servers:
        return "kept" if servers[SERVER_NAME] == claude_entry(sotd) else "foreign"
    servers[SERVER_NAME] = claude_entry(sotd)
    return "added"


def unmerge_claude_json(doc: dict[str, object], entry: object) -> bool:
    """Take our server (exactly ``entry``) out of ``doc``, and ``mcpServers`` when it is left empty; True
    when something was taken out. Pure."""
    servers = doc.get("mcpServers")
    if not isinstance(servers, dict) or servers.get(SERVER_NAME) != entry:
        return False
    del servers[SERVER_NAME]
    if not servers:
        del doc["mcpServers"]
    return True


def merge_codex_toml(text: str, sotd: str) -> tuple[str, str]:
    """(new text, "added" | "kept" | "foreign"): our table appended unless a ``[mcp_servers.sotd]`` table is
    there already (ours, or someone's). Pure."""
    header = f"[mcp_servers.{SERVER_NAME}]"
    if codex_table(sotd) in text:
        return text, "kept"
    if any(line.strip() == header for line in text.splitlines()):
        return text, "foreign"
    sep = "" if not text or text.endswith("\n") else "\n"
    return text + sep + codex_table(sotd), "added"


def unmerge_codex_toml(text: str, added: str) -> str | None:
    """``text`` without exactly the block we appended, or None when it is not there as written. Pure."""
    if not added or added not in text:
        return None
    i = text.rindex(added)
    return text[:i] + text[i + len(added) :]


# ------------------------------------------------------------------------------------------- file I/O


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _replace(target: str, data: bytes, mode: int) -> None:
    from sotd import fsprim

    os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
    fsprim.write_atomic(target, data, tmp=f"{target}.tmp.{os.urandom(3).hex()}", mode=mode, exact_mode=True)


def trial(sotd: str) -> None:
    """Raise, before anything is written, when ``~/.claude.json`` cannot take our entry."""
    path = claude_json_path()
    merge_claude_json(load_doc(path, _read(os.path.realpath(path))), sotd)


def register(record: dict[str, object], sotd: str) -> list[str]:
    """Register ``sotd mcp`` with Claude Code and Codex; the lines saying what was done. ``record`` is the
    install record (``record["mcp"]`` is kept per file)."""
    files = record.setdefault("mcp", {})
    assert isinstance(files, dict)
    lines = []
    path = claude_json_path()
    target = os.path.realpath(path)
    data = _read(target)
    doc = load_doc(path, data)
    verdict = merge_claude_json(doc, sotd)
    if verdict == "added":
        new = (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode()
        _remember(files, path, data, new, added=claude_entry(sotd))
        _replace(target, new, _mode(target, data))
        lines.append(f"Registered the MCP server '{SERVER_NAME}' (sotd mcp) with Claude Code in {path}")
    else:
        lines.append(_not_added(path, verdict))
    path = codex_config_path()
    target = os.path.realpath(path)
    data = _read(target)
    try:
        text = (data or b"").decode("utf-8")
    except UnicodeDecodeError:
        lines.append(f"{path} is not UTF-8, so the MCP server was not registered with Codex there")
        return lines
    new_text, verdict = merge_codex_toml(text, sotd)
    if verdict == "added":
        new = new_text.encode()
        _remember(files, path, data, new, added=new_text[len(text) :])
        _replace(target, new, _mode(target, data))
        lines.append(
            f"Registered the MCP server '{SERVER_NAME}' with Codex in {path} (its tools run without asking)"
        )
    else:
        lines.append(_not_added(path, verdict))
    return lines


def _not_added(path: str, verdict: str) -> str:
    if verdict == "kept":
        return f"The MCP server '{SERVER_NAME}' was already registered in {path}"
    return f"{path} already names an MCP server '{SERVER_NAME}' that is not this install's; left as it is"


def _mode(target: str, data: bytes | None) -> int:
    return os.stat(target).st_mode & 0o7777 if data is not None else 0o600


def _remember(
    files: dict[str, object], path: str, before: bytes | None, after: bytes, *, added: object
) -> None:
    import base64

    files[path] = {
        "before": None if before is None else base64.b64encode(before).decode(),
        "after_sha256": _sha(after),
        "added": added,
    }


def unregister(record: dict[str, object]) -> list[str]:
    """Take out what ``register`` recorded; the lines saying what happened."""
    import base64

    files = record.get("mcp")
    lines: list[str] = []
    for path, entry in files.items() if isinstance(files, dict) else []:
        if not isinstance(path, str) or not isinstance(entry, dict):
            continue
        target = os.path.realpath(path)
        data = _read(target)
        if data is None:
            lines.append(f"{path} is gone; nothing to take out of it")
            continue
        if entry.get("after_sha256") == _sha(data):
            before = entry.get("before")
            if before is None:
                os.unlink(target)
                lines.append(f"Removed {path} (install had created it)")
            else:
                _replace(target, base64.b64decode(str(before)), _mode(target, data))
                lines.append(f"Restored {path} to its bytes before the install")
            continue
        lines.append(_take_out(path, target, data, entry.get("added")))
    return lines


def _take_out(path: str, target: str, data: bytes, added: object) -> str:
    """The file changed since the install: exactly our entry comes out, the rest stays."""
    if path.endswith(".toml"):
        try:
            new_text = unmerge_codex_toml(data.decode("utf-8"), str(added or ""))
        except UnicodeDecodeError:
            new_text = None
        if new_text is None:
            return f"{path} no longer holds the MCP server table as install wrote it; left as it is"
        _replace(target, new_text.encode(), _mode(target, data))
        return f"Took the MCP server '{SERVER_NAME}' out of {path} (it had changed since the install, so only that)"
    try:
        doc = load_doc(path, data)
    except SotdError as e:
        return f"{e.message}: its MCP server '{SERVER_NAME}' was left there; take it out by hand"
    if not unmerge_claude_json(doc, added):
        return f"{path} no longer holds the MCP server '{SERVER_NAME}' as install wrote it; left as it is"
    _replace(target, (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode(), _mode(target, data))
    return (
        f"Took the MCP server '{SERVER_NAME}' out of {path} (it had changed since the install, so only that)"
    )
