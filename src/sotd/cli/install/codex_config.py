"""``sotd/cli/install/codex_config.py``: the lines ``sotd comm install --agent-settings`` adds to Codex's
``config.toml`` so that a Codex session started outside a sotd row finds the comm scripts by name.

Issue 12 (a Codex session outside a row; docs/agents.md "PATH"). Codex runs the model's commands in
bash with an environment rebuilt from a login shell's snapshot (Debian's /etc/profile resets ``PATH``),
and ``shell_environment_policy.set`` can only replace a variable, never prepend to one, so ``PATH`` is
not touched at all. Instead ``[shell_environment_policy.set]`` gets one exported bash function per
wrapper (``"BASH_FUNC_comm-poll.sh%%" = "() { '<bin>/comm-poll.sh' \\"$@\\"; }"``): every bash Codex
starts imports them from its environment, whatever its startup files did to ``PATH``, so the bare
``comm-poll.sh`` the hooks and the wake line name runs sotd's script by its full path.

Guarantees (pure text functions, the I/O is ``install.codex_functions``'s): the user's bytes are kept (our lines
are inserted after the ``[shell_environment_policy.set]`` header, or appended with that header at the
end); a key the user already set is left as it is; a second run adds nothing; the result is parsed again
and must equal the old document plus our keys, else nothing is written; a file that is not TOML is
refused with its parser's reason. ``remove_functions`` takes out exactly the lines that were added.
What would break them: an edit that is not re-parsed (an inline ``set = {...}`` table cannot take
another key: appending a header would make the file invalid), or removing lines by anything but their
exact text.
"""

from __future__ import annotations

import json
import os
import re

from sotd.errors import SettingsRefused

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

TABLE = "shell_environment_policy"
HEADER = "[shell_environment_policy.set]"
MARK = (
    "# sot-comm: the comm scripts by name in Codex's bash "
    "(sotd comm install --agent-settings; sotd comm uninstall takes these lines out)"
)
_HEADER_RE = re.compile(
    r"^[ \t]*\[[ \t]*shell_environment_policy[ \t]*\.[ \t]*set[ \t]*\][ \t]*(#[^\n]*)?\n?", re.M
)


def _q(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


def function_key(name: str) -> str:
    """The environment variable bash imports the function ``name`` from."""
    return f"BASH_FUNC_{name}%%"


def shell_functions(bin_dir: str, names: list[str]) -> dict[str, str]:
    """One exported bash function per script: ``name`` runs ``<bin>/name`` with the same arguments."""
    return {function_key(n): "() { " + _q(os.path.join(bin_dir, n)) + ' "$@"; }' for n in names}


def _toml_string(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)  # a JSON string is a TOML basic string for these texts


def function_lines(funcs: dict[str, str]) -> list[str]:
    return [f"{_toml_string(k)} = {_toml_string(v)}" for k, v in funcs.items()]


def parse(path: str, text: str) -> dict[str, object]:
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SettingsRefused(
            f"{path} is not valid TOML ({e}); nothing was changed",
            hint="Fix that line, then run: sotd comm install --agent-settings",
        ) from None


def set_table(path: str, doc: dict[str, object]) -> dict[str, object]:
    """``shell_environment_policy.set`` of ``doc`` ({} when absent); one that is not a table is refused."""
    policy = doc.get(TABLE, {})
    if not isinstance(policy, dict):
        raise SettingsRefused(f"{path}: {TABLE} is not a table; nothing was changed",
                              hint=f"Make it a [{TABLE}] table, then run: sotd comm install --agent-settings")  # fmt: skip
    got = policy.get("set", {})
    if not isinstance(got, dict):
        raise SettingsRefused(f"{path}: {TABLE}.set is not a table; nothing was changed",
                              hint=f"Make it a {HEADER} table, then run: sotd comm install --agent-settings")  # fmt: skip
    return got


def _without(doc: dict[str, object], keys: list[str]) -> dict[str, object]:
    """``doc`` with ``keys`` taken out of its ``set`` table, and that table (and the policy) dropped when
    that leaves them empty: what must not change when our lines come and go."""
    out = dict(doc)
    policy = out.get(TABLE)
    if isinstance(policy, dict):
        policy = dict(policy)
        table = policy.get("set")
        if isinstance(table, dict):
            table = {k: v for k, v in table.items() if k not in keys}
            if table:
                policy["set"] = table
            else:
                policy.pop("set")
        if policy:
            out[TABLE] = policy
        else:
            out.pop(TABLE)
    return out


def add_functions(path: str, text: str, funcs: dict[str, str]) -> tuple[str, list[str], list[str]]:
    """``text`` with the missing ``funcs`` added: (the new text, the lines added, the keys the user holds
    with another value, left as they are). Raises ``SotdError`` (nothing to write) when ``text`` is not
    TOML or the edit would change anything else."""
    doc = parse(path, text)
    table = set_table(path, doc)
    missing = {k: v for k, v in funcs.items() if k not in table}
    foreign = [k for k, v in funcs.items() if k in table and table[k] != v]
    if not missing:
        return text, [], foreign
    lines = [MARK, *function_lines(missing)]
    found = _HEADER_RE.search(text)
    if found is not None:
        at = found.end()
        head = text[:at] if text[:at].endswith("\n") else text[:at] + "\n"
        new = head + "".join(ln + "\n" for ln in lines) + text[at:]
        added = lines
    else:
        added = [HEADER, *lines]
        sep = "" if not text else ("\n" if text.endswith("\n") else "\n\n")
        new = text + sep + "\n".join(added) + "\n"
    import tomllib

    try:
        after = tomllib.loads(new)
    except tomllib.TOMLDecodeError as e:
        raise _cannot(path, str(e)) from None
    if _without(after, list(missing)) != _without(doc, list(missing)) or any(
        set_table(path, after).get(k) != v for k, v in missing.items()
    ):
        raise _cannot(path, "the edited file would read differently")
    return new, added, foreign


def _cannot(path: str, why: str) -> SettingsRefused:
    return SettingsRefused(
        f"{path}: sotd cannot add its lines under {HEADER} safely ({why}); nothing was changed",
        hint=f"Write {TABLE}.set as a {HEADER} table (not inline), or add the lines `sotd comm install` "
        "prints there by hand",
    )


def remove_functions(path: str, text: str, added: list[str], keys: list[str]) -> str | None:
    """``text`` without the ``added`` lines (the block, or what is left of it line by line); None when
    none of them is there any more or taking them out would change anything else."""
    lines = text.splitlines(keepends=True)
    bare = [ln.rstrip("\r\n") for ln in lines]
    n = len(added)
    keep: list[str] | None = None
    for i in range(len(bare) - n + 1):
        if n and bare[i : i + n] == added:
            start = i - 1 if added[0] == HEADER and i > 0 and bare[i - 1] == "" else i
            keep = lines[:start] + lines[i + n :]
            break
    if keep is None:
        ours = {ln for ln in added if ln != HEADER}
        keep = [ln for ln, b in zip(lines, bare, strict=True) if b not in ours]
        if len(keep) == len(lines):
            return None
    new = "".join(keep)
    import tomllib

    try:
        before_doc = tomllib.loads(text)
        after_doc = tomllib.loads(new)
    except tomllib.TOMLDecodeError:
        return None
    if _without(after_doc, keys) != _without(before_doc, keys):
        return None
    return new


def codex_dir(environ: Mapping[str, str] | None = None) -> str:
    """Codex's own folder: ``$CODEX_HOME`` when set (as Codex reads it), else ``~/.codex``."""
    env = os.environ if environ is None else environ
    return env.get("CODEX_HOME") or os.path.join(os.path.expanduser("~"), ".codex")
