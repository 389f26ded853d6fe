"""``sotd/cli/install/skill.py``: the install part that writes the sot-comm skill Claude Code loads
(``skills/sot-session-start/SKILL.md``) and removes it.

Issue 11 part 2 item 8. The skill file carries a mark line; a SKILL.md there without it is somebody's own
and is left alone, by install and by uninstall.

What would break it: writing or removing a SKILL.md without our mark.
"""

from __future__ import annotations

import os

from sotd.cli.comm.common import err, out
from sotd.cli.install.record import note_made_dir, read_bytes, remove_made_dir, write_file

TYPE_CHECKING = False
if TYPE_CHECKING:
    from sotd.cli.install.part import Setup


SKILL = "sot-session-start"


SKILL_MARK = "<!-- written by `sotd comm install`; `sotd comm uninstall` removes it -->"


def skill_text(bin_dir: str) -> str:
    """The sot-comm skill Claude Code loads (``skills/sot-session-start/SKILL.md``): how to join, send,
    poll and leave, the recovery when the handle is lost, and seed 000's conventions, in our own words."""
    b = bin_dir
    return f"""---
name: {SKILL}
description: How this session talks to other agent sessions over sot-comm - its handle, reading and sending mail, leaving, and getting a lost handle back. Use it when a message mentions sot-comm, comm-poll.sh, comm-send.sh, a handle like @name, or "[sot-comm] you have mail".
---
{SKILL_MARK}

# sot-comm: mail between agent sessions

Every session has a **handle** (`@name`). Mail to a handle is one line appended to its inbox; the
scripts are in `{b}` (on the PATH in a sotd row and in a session the start hook joined).

## Your handle

The session-start hook joins this session by itself and tells you the handle. To see it again:
`comm-context.sh` (the `NAME=` line). To join by hand: `comm-join.sh --name NAME`.

## Read and send

- `comm-poll.sh` shows the mail you have not read yet and marks it read. Run it when the line
  `[sot-comm] you have mail: run comm-poll.sh` arrives, or when a hook tells you mail is waiting.
- `comm-send.sh @name "text"` sends one message. The answer is exactly `filed -> @name` (it is in
  that inbox) or `FAILED -> @name: <reason>`; nothing is queued or retried for you. Read the reason
  and act on it.
- `comm-send.sh --broadcast "text"` reaches every registered session. Use it sparingly.
- `comm-list.sh` shows who is registered and whether each session is live.
- Answer the sender of a message in a message to them, not only in your own reply text: they cannot
  see your screen.

## Ending a turn

End each turn with one closing line, so the others (and the dashboard) can see where you are:
`SITREP: <what is done>`, `SITREP-QUESTION: <what you need from a person>` or
`SITREP-WAITING: <what you are waiting for>`.

## Leaving

`comm-leave.sh` gives the handle up (its registry entry goes; the mail already filed stays).

## Recovery recipe: when the handle is lost

If a send says your identity did not resolve, or a hook says the session has no handle:

1. Do **not** run a bare `comm-join.sh` if you held a handle before: it may derive a different one,
   and mail to the old one would no longer reach you.
2. Find the handle you held: the start hook's message at the top of this session, or your
   project's entry in `comm-list.sh` (the one whose folder is this project).
3. Take it again: `comm-join.sh --name THAT_NAME`. In a sotd row, a plain `comm-join.sh` takes the
   row's own name.
4. Send a short message to whoever was waiting on you, saying you are back.

A refusal that says this process runs under another agent's session means you are a sub-agent: do
not join; the session that started you owns the handle.

## Working with other sessions

- **Domain expertise.** Each session knows its own project best. Say what you need or what is
  broken, and offer a fix if you have one, but leave the other session to decide how to do it there.
- **Tags against groupthink.** Start a message with one of `[design]`, `[question]`, `[breaks]`,
  `[challenge]` or `[consensus]` when it fits. Do not declare `[consensus]` in a thread until someone
  in it has posted a `[breaks]` (tried to break the idea) first.
"""


def checkout_of(sotd: str) -> str | None:
    """The source checkout (a folder holding ``.git``) the recorded ``sotd`` lives in, else None."""
    d = os.path.dirname(os.path.abspath(sotd))
    while True:
        if os.path.exists(os.path.join(d, ".git")):
            return d
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


def checkout_note(sotd: str) -> str | None:
    """The note install prints when the scripts will run a ``sotd`` inside a source checkout."""
    top = checkout_of(sotd)
    if top is None:
        return None
    return (
        f"note: the scripts run {sotd}, inside the source checkout {top}; if that checkout moves or its .venv "
        "is rebuilt they stop (and say so). For a sotd that stays put: pipx install <checkout>, then run "
        "sotd comm install --sotd=$(command -v sotd)"
    )


def install_skill(claude_dir: str, bin_dir: str) -> tuple[str | None, str | None]:
    """Write ``<claude_dir>/skills/sot-session-start/SKILL.md``; (the path written or None, a warning).

    A SKILL.md there that this install did not write (no mark line) is somebody's own: left alone."""
    folder = os.path.join(claude_dir, "skills", SKILL)
    path = os.path.join(folder, "SKILL.md")
    old = read_bytes(path)
    if old is not None and SKILL_MARK.encode() not in old:
        return (
            None,
            f"WARNING: {path} is not one sotd wrote; it was left as it is, and the skill was not installed",
        )
    os.makedirs(folder, mode=0o755, exist_ok=True)
    write_file(path, skill_text(bin_dir), 0o644)
    return path, None


def uninstall_skill(path: str) -> str | None:
    data = read_bytes(path)
    if data is None or SKILL_MARK.encode() not in data:
        return None
    os.unlink(path)
    try:
        os.rmdir(os.path.dirname(path))
    except OSError:
        pass
    return f"Removed the skill {path}"


def check(setup: Setup) -> None:
    """Nothing to refuse: a SKILL.md that is not ours is left alone at install (with a warning)."""


def install(setup: Setup, record: dict[str, object]) -> None:
    """With ``--agent-settings`` or ``--skill``: write the skill and list it in ``record["skills"]``."""
    if not (setup.settings or setup.skill_wanted):
        return
    skills_dir = os.path.join(setup.claude_dir, "skills")
    skills_had = os.path.isdir(skills_dir)
    skill, warning = install_skill(setup.claude_dir, setup.lay.bin_dir)
    note_made_dir(record, skills_dir, skills_had)
    if warning:
        err(warning)
    if skill:
        skills = record.setdefault("skills", [])
        if isinstance(skills, list) and skill not in skills:
            skills.append(skill)
        out(f"Installed the Claude Code skill {SKILL}: {skill}")


def uninstall(setup: Setup, record: dict[str, object]) -> int:
    """Remove each skill ``record["skills"]`` names that still carries our mark."""
    skills = record.get("skills")
    for path in skills if isinstance(skills, list) else []:
        if isinstance(path, str):
            line = uninstall_skill(path)
            if line:
                out(line)
            remove_made_dir(record, os.path.dirname(os.path.dirname(path)))  # ``skills/``, if we made it
    return 0
