"""Issue 13, part 4: ``--help`` everywhere, made from the one command table (``sotd.cmdtable``).

Before: ``sotd comm send --help`` → ``no target; use @name or --broadcast`` (exit 1); ``sotd comm spawn
--help`` → ``ERROR: repo path not found: --help``; ``sotd daemon --help`` and ``sotd daemon start --help``
→ ``sotd daemon: unknown argument '--help'`` (exit 2). After: every command's ``--help`` (and ``-h``)
prints its usage, summary and options on stdout, exit 0, nothing on stderr; an unknown option exits 2
with the problem and the usage on stderr, before the command runs (nothing is written).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from sotd import cmdtable
from sotd.cli import main, ocx
from sotd.cli.comm import spawn
from tests.conftest import SOTD, Comm

pytestmark = pytest.mark.transcripts

GROUPS = ("", "comm", "daemon", "ocx")


def _sotd(comm: Comm, *args: str) -> subprocess.CompletedProcess[str]:
    s = comm.session("alpha")
    return subprocess.run(
        [SOTD, *args], cwd=s.root, env=s.env, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize("path", list(cmdtable.TABLE))
def test_every_command_has_help(comm: Comm, path: str) -> None:
    for flag in ("--help", "-h"):
        r = _sotd(comm, *path.split(), flag)
        assert (r.returncode, r.stdout, r.stderr) == (0, cmdtable.help_text(path), ""), (flag, r)
    assert cmdtable.help_text(path).startswith(f"usage: {cmdtable.name_of(path)}")
    assert "  -h, --help" in cmdtable.help_text(path)


@pytest.mark.parametrize(
    "path", [p for p in cmdtable.TABLE if p not in GROUPS and not cmdtable.TABLE[p].pinned]
)
def test_an_unknown_option_exits_2_with_the_usage_and_writes_nothing(comm: Comm, path: str) -> None:
    before = sorted(os.walk(comm.home))
    r = _sotd(comm, *path.split(), "--no-such-option")
    name = cmdtable.name_of(path)
    assert (r.returncode, r.stdout) == (2, ""), r
    assert r.stderr == (
        f"{name}: unknown option '--no-such-option' (see: {name} --help)\n{cmdtable.usage(path)}\n"
    )
    assert sorted(os.walk(comm.home)) == before


# Behaviour 1.2 and 1.8 pin these two verbs' answers to an unknown option (issue 28 item 4): the verb's
# own parser gives them, byte for byte, and nothing is written.
PINNED = {
    "comm join": (
        2,
        "sotd comm join: unknown option '--no-such-option' (a handle can't start with '-'; see --help)\n",
    ),
    "comm leave": (1, "usage: sotd comm leave [--name <handle>]\n"),
}


def test_the_pinned_verbs_answer_an_unknown_option_in_the_spec_s_words(comm: Comm) -> None:
    assert sorted(PINNED) == sorted(p for p in cmdtable.TABLE if cmdtable.TABLE[p].pinned)
    for path, (code, err) in PINNED.items():
        before = sorted(os.walk(comm.home))
        r = _sotd(comm, *path.split(), "--no-such-option")
        assert (r.returncode, r.stdout, r.stderr) == (code, "", err), r
        assert sorted(os.walk(comm.home)) == before


def test_the_issue_transcripts(comm: Comm) -> None:
    r = _sotd(comm, "comm", "send", "--help")
    assert (r.returncode, r.stdout.splitlines()[0]) == (
        0,
        'usage: sotd comm send @name "msg" | --broadcast "msg"',
    )
    r = _sotd(comm, "comm", "spawn", "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: sotd comm spawn <repo-path> [--name NAME]")
    r = _sotd(comm, "daemon", "--help")
    assert r.returncode == 0 and "  uninstall  disable and remove that systemd user unit\n" in r.stdout
    r = _sotd(comm, "daemon", "start", "--help")
    assert (r.returncode, r.stdout.splitlines()[0]) == (0, "usage: sotd daemon start [--socket PATH]")
    # a message's own words are text, not options: only the words before the first one are checked
    r = _sotd(comm, "comm", "send", "--bogus", "hi")
    assert r.returncode == 2


def test_a_bare_group_or_an_unknown_member_exits_2_with_the_help_or_usage(comm: Comm) -> None:
    r = _sotd(comm, "daemon")
    assert (r.returncode, r.stdout, r.stderr) == (2, "", cmdtable.help_text("daemon"))
    r = _sotd(comm, "comm", "nosuch")
    assert (r.returncode, r.stderr) == (
        2,
        "sotd comm: unknown verb 'nosuch' (see: sotd comm --help)\nusage: sotd comm <verb> [args]\n",
    )
    r = _sotd(comm, "ocx", "nosuch")
    assert (r.returncode, r.stderr.splitlines()[0]) == (
        2,
        "sotd ocx: unknown subcommand 'nosuch' (see: sotd ocx --help)",
    )


def test_the_table_names_every_command_there_is() -> None:
    assert {p.split()[1] for p in cmdtable.members("comm")} == set(main.COMM_VERBS)
    assert {p for p in cmdtable.members("")} - {"comm"} == set(main.COMMANDS)
    assert {p.split()[1] for p in cmdtable.members("ocx")} == set(ocx.VERBS)
    from sotd.daemon import command as daemon_command

    for p in cmdtable.members("daemon"):
        assert daemon_command._parse([p.split()[1]])[0] == p.split()[1]
    with pytest.raises(ValueError):
        daemon_command._parse(["nosuch"])


def test_the_table_and_the_parsers_agree() -> None:
    """The parsers that keep their own option lists take exactly the table's (the help can't drift)."""
    assert set(cmdtable.flags("comm spawn")) == set(spawn.OPTS) | set(spawn.OPTS_EXTRA)
    ocx_flags = {f for p in cmdtable.members("ocx") for f in cmdtable.flags(p)}
    assert ocx_flags == set(ocx._VALUED) | set(ocx._FLAGS)
    from sotd.cli.comm import join

    for flag in cmdtable.flags("comm join"):
        join.parse([flag, "x"] if flag != "--repin" else [flag], "me")  # raises UsageError if unknown
