"""``sotd/cli/doctor/agent_checks.py``: ``sotd doctor``'s checks of what the agents run (issue 13 part 4): the
wrappers (installed, naming an existing ``sotd``, on ``PATH``), the hooks in the agents' settings (the
install's own merge, ``install.settings.merge_claude_settings``, decides what is missing), and whether this
process may act as its handle (``ancestry.check``). Read-only. What would break it: a second reading of
the settings that disagrees with the install's."""

from __future__ import annotations

import json
import os

from sotd.cli.doctor.report import Finding, Report
from sotd.errors import SotdError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from sotd.formats.layout import Layout


def check_hooks(lay: Layout, env: dict[str, str], rep: Report) -> None:
    """The wrappers (installed, pointing at an existing sotd, on PATH) and the hooks in the agents'
    settings (registered as ``sotd comm install --agent-settings`` registers them)."""
    import shutil

    from sotd.cli.install import scripts
    from sotd.cli.install import settings as hook_settings

    sample = os.path.join(lay.bin_dir, "comm-send.sh")
    if not os.path.exists(sample):
        rep.add(
            Finding(
                "wrappers_missing",
                f"the comm-*.sh wrappers are not installed in {lay.bin_dir}",
                "agents and their hooks call sot-comm through them",
                "sotd comm install --agent-settings",
            )
        )
        return
    expected = scripts.wrapper_text(scripts.sotd_executable(), "comm-send.sh", "comm send")
    with open(sample, encoding="utf-8", errors="replace") as f:
        if f.read() != expected:
            rep.add(
                Finding(
                    "wrappers_stale",
                    f"the wrappers in {lay.bin_dir} run another sotd than this one ({scripts.sotd_executable()})",
                    "that sotd may be gone or older: agents would run it",
                    "sotd comm install",
                )
            )
    found = shutil.which("comm-send.sh", path=env.get("PATH", ""))
    if found is None or os.path.dirname(os.path.realpath(found)) != os.path.realpath(lay.bin_dir):
        rep.add(
            Finding(
                "wrappers_not_on_path",
                f"{lay.bin_dir} is not on PATH" + (f" (comm-send.sh is {found})" if found else ""),
                "agents type comm-send.sh and comm-poll.sh; they would not find these",
                f'add it to PATH (e.g. in ~/.profile): export PATH="{lay.bin_dir}:$PATH"',
            )
        )
    home = env.get("HOME") or os.path.expanduser("~")
    claude = os.path.join(home, ".claude", "settings.json")
    settings: list[tuple[str, str, tuple[tuple[str, str | None, str], ...], str]] = [
        (claude, "Claude Code", hook_settings.CLAUDE_EVENTS, f"sotd comm install --agent-settings={claude}")
    ]
    codex = os.path.join(home, ".codex")
    if os.path.isdir(codex):  # only where Codex is set up
        block = "sotd comm install --agent-settings (it merges Codex's hooks.json), then trust them in Codex: /hooks"
        settings.append((os.path.join(codex, "hooks.json"), "Codex", hook_settings.CODEX_EVENTS, block))
    for path, agent, events, how in settings:
        try:
            with open(path, "rb") as f:
                doc = json.loads(f.read() or b"{}")
        except FileNotFoundError:
            doc = {}
        except (OSError, ValueError) as e:
            rep.add(
                Finding(
                    "agent_settings_unreadable",
                    f"{agent}'s settings {path} cannot be read: {e}",
                    "the hooks cannot be checked or registered there (install refuses to overwrite it)",
                    f"set it aside (its settings stay in the .bad copy), then register: mv {path} {path}.bad; {how}",
                )
            )
            continue
        try:
            missing = not isinstance(doc, dict) or hook_settings.changed(
                hook_settings.merge_claude_settings(doc, lay.bin_dir, events)
            )
        except SotdError as e:  # parses, but its "hooks" is not an object: install refuses it too
            rep.add(
                Finding(
                    "agent_settings_unreadable",
                    f"{agent}'s settings {path} cannot be read: {e.message}",
                    "the hooks cannot be checked or registered there (install refuses to overwrite it)",
                    f"set it aside (its settings stay in the .bad copy), then register: mv {path} {path}.bad; {how}",
                )
            )
            continue
        if missing:
            rep.add(
                Finding(
                    "hooks_not_registered",
                    f"the sot-comm hooks are not (all) registered in {agent}'s settings {path}",
                    "without them a turn ends with mail unread and nothing marks the session busy or idle",
                    how,
                )
            )
        else:
            rep.ok.append(f"{agent} hooks: registered in {path}")


def _context_fix(env: dict[str, str], e: SotdError) -> str:
    """The fix for a context that cannot be built: a working folder that cannot be resolved (``reason``
    set), or a host name that cannot name a self slot (``$SOT_SELF_HOST``, else the box's own name)."""
    if e.reason:
        return "run it from a folder that exists (cd to the project), then check: sotd comm context"
    if env.get("SOT_SELF_HOST"):
        return (
            "drop the host name that cannot name a file: unset SOT_SELF_HOST; then check: sotd comm context"
        )
    return "name this box plainly (no / or \\): export SOT_SELF_HOST=<name>; then check: sotd comm context"


def check_ancestry(env: dict[str, str], rep: Report) -> None:
    """This session's own identity: the identity check, and a joined handle when it is a session."""
    from sotd import ancestry
    from sotd.cli.comm.common import Context

    status, why = ancestry.check(env)
    if status:
        rep.add(
            Finding(
                "identity_refused",
                f"this process has no comm identity: {why}",
                "its sends and polls are refused",
                "run it inside the session or row it names (or, outside any: unset SOT_COMM_SELF_FILE "
                "SOT_WORKSPACE_ID)",
            )
        )
        return
    try:
        ctx = Context(env)
    except SotdError as e:
        rep.add(
            Finding("context_failed", e.message, "no command can name this session", _context_fix(env, e))
        )
        return
    if ctx.name:
        rep.ok.append(f"identity: @{ctx.name} ({ctx.self_file})")
    elif env.get("SOT_COMM_SELF_FILE") or env.get("CLAUDECODE") or env.get("SOT_WORKSPACE"):
        rep.add(
            Finding(
                "not_joined",
                f"this session has not joined (no handle in {ctx.self_file})",
                "it cannot send, and mail for it has no inbox",
                "sotd comm join",
            )
        )
    else:
        rep.ok.append("identity: not a joined session (nothing to check)")
