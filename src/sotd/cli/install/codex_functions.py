"""``sotd/cli/install/codex_functions.py``: the install part that puts the comm scripts on Codex's shell by
name (bash functions in ``config.toml``, the text from ``codex_config``) and takes exactly those out.

Guarantees: the user's bytes are kept; a ``config.toml`` that is not TOML is refused before anything at
all is written (``check``); a file nobody changed since goes back byte for byte, and one Codex changed
since (it records trust there) loses only our lines.

What would break it: rewriting the file from a parse (the user's comments and order would go), or
uninstall taking out a line it did not add.
"""

from __future__ import annotations

import os

from sotd.cli.comm.common import out
from sotd.cli.install import codex_config
from sotd.cli.install.record import (
    b64,
    link_target,
    read_bytes,
    replace_keeping_mode,
    sha256,
    strs,
    undo_each,
    undo_if_untouched,
)
from sotd.cli.install.scripts import WRAPPERS
from sotd.errors import SettingsRefused

TYPE_CHECKING = False
if TYPE_CHECKING:
    from sotd.cli.install.part import Setup


def codex_config_path() -> str:
    return os.path.join(codex_config.codex_dir(), "config.toml")


def codex_functions(bin_dir: str) -> dict[str, str]:

    return codex_config.shell_functions(bin_dir, list(WRAPPERS))


def codex_functions_trial(bin_dir: str) -> None:
    """Raise (before anything is written) when Codex's ``config.toml`` cannot take our lines."""

    path = codex_config_path()
    data = read_bytes(link_target(path))
    codex_config.add_functions(path, _decode_toml(path, data), codex_functions(bin_dir))


def _decode_toml(path: str, data: bytes | None) -> str:
    try:
        return (data or b"").decode("utf-8")
    except UnicodeDecodeError:
        raise SettingsRefused(f"{path} is not valid TOML (it is not UTF-8); nothing was changed",
                              hint="Fix it, then run: sotd comm install --agent-settings") from None  # fmt: skip


def write_codex_functions(path: str, bin_dir: str, record: dict[str, object]) -> tuple[bool, list[str]]:
    """Add the comm scripts' bash functions to Codex's ``config.toml`` at ``path`` (through a symlink,
    mode kept, 0600 when new); (whether it changed, the keys the user holds with another value).
    ``record`` (this file's entry in the install record, changed in place) keeps the bytes from before,
    the digest written and the lines added, for ``unwrite_codex_functions``."""

    target = link_target(path)
    data = read_bytes(target)
    new, added, foreign = codex_config.add_functions(path, _decode_toml(path, data), codex_functions(bin_dir))
    if not added:
        return False, foreign
    mode = 0o600
    if data is not None:
        mode = os.stat(target).st_mode & 0o7777
    else:
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
    if not record:
        record.update(before=b64(data), before_known=True, added=[], keys=[])
    elif record.get("after_sha256") != (sha256(data) if data is not None else None):
        record["before_known"] = False
    lines = record.setdefault("added", [])
    if isinstance(lines, list):
        lines.extend(added)
    funcs = codex_functions(bin_dir)
    keys = record.setdefault("keys", [])
    if isinstance(keys, list):
        for key, line in zip(funcs, codex_config.function_lines(funcs), strict=True):
            if line in added and key not in keys:
                keys.append(key)
    encoded = new.encode()
    replace_keeping_mode(target, encoded, mode)
    record["after_sha256"] = sha256(encoded)
    return True, foreign


def unwrite_codex_functions(path: str, record: dict[str, object]) -> str:
    """Take the install's lines out of Codex's ``config.toml``; the line saying what happened. Unchanged
    since our write: the bytes from before are put back (or the file we made is removed); changed since
    (Codex itself records trust there): exactly our lines are taken out."""

    target = link_target(path)
    data = read_bytes(target)
    if data is None:
        return f"{path} is gone; nothing to take out of it"
    mode = os.stat(target).st_mode & 0o7777
    undone = undo_if_untouched(path, target, data, record)
    if undone is not None:
        return undone
    added = strs(record.get("added"))
    keys = strs(record.get("keys"))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    new = None if text is None else codex_config.remove_functions(path, text, added, keys)
    if new is None:
        return (
            f"{path} no longer holds sotd's lines as install wrote them; left as it is "
            f"(take any {codex_config.function_key('comm-…')} keys out of {codex_config.HEADER} by hand)"
        )
    replace_keeping_mode(target, new.encode(), mode)
    return f"Took sotd's shell functions out of {path} (it had changed since the install, so only those)"


def install(setup: Setup, record: dict[str, object]) -> None:
    """With ``--agent-settings``: add the functions, their lines recorded in ``record["codex_config"]``."""
    if not setup.settings:
        return
    lay = setup.lay
    path = codex_config_path()
    configs = record.setdefault("codex_config", {})
    assert isinstance(configs, dict)
    entry = configs.setdefault(path, {})
    assert isinstance(entry, dict)
    changed_now, foreign = write_codex_functions(path, lay.bin_dir, entry)
    if changed_now:
        out(
            f"Put the comm scripts on Codex's shell by name (bash functions under {codex_config.HEADER}): {path}"
        )
    else:
        out(f"The comm scripts were already on Codex's shell by name in {path}")
    for key in foreign:
        out(f"{path}: {key} is set to something else there; left as it is")
    shell = os.path.basename(os.environ.get("SHELL", "") or "bash")
    if shell != "bash":
        out(
            f"note: your shell is {shell}; Codex runs the model's commands in it, and only bash imports "
            f"these functions: name the scripts by full path there ({lay.bin_dir}/comm-poll.sh)"
        )
    if not entry:
        configs.pop(path, None)


def check(setup: Setup) -> None:
    """With ``--agent-settings``: refuse a ``config.toml`` that cannot take our lines."""
    if setup.settings:
        codex_functions_trial(setup.lay.bin_dir)


def uninstall(setup: Setup, record: dict[str, object]) -> int:
    """Take our lines out of each ``config.toml`` ``record["codex_config"]`` names; 1 when one could not
    be changed (it is left as it is)."""
    return undo_each(record, "codex_config", unwrite_codex_functions)
