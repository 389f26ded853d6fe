"""docs/deploy.md, run as written (issue 20): every command of its ``console`` blocks, in the page's order, on
two fresh boxes built ``as_deployed`` (netns.py: their own network namespace, sshd, host name, ``HOME`` over
``/root`` and ``/etc/hosts``; nothing installed, configured or keyed for the user).

The page's grammar: in a fenced block whose info string is ``console``, a line ``<box>$ <command>`` is a
command typed on that box; a command whose line ends with ``<<'EOF'`` runs to its ``EOF`` line; the lines
after it, up to the next command, are its output (stdout and stderr together). An output line ``…`` alone
stands for any number of lines, and ``…`` inside a line for any text. A command with no output shown must
print nothing. Every command must exit 0. Each box keeps its working folder between commands (``cd``
carries over, as in the user's shell). Placeholders in angle brackets are what the page says they are:
``<checkout>`` (this checkout), ``<boxb's id_sotd.pub line>`` (that file's line), ``<boxa's hosts.toml>``
(the file, reached through the shared file system the test boxes have: the copy the page asks for).
``sotd daemon status`` is tried again for up to 15 s while its output does not match yet (a link comes up
a moment after its daemon answers); no other command is ever repeated.

Not run: the systemd unit (the boxes run no systemd), which the page says. Behaviour 2.2-2.4; D4.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator

import pytest

from tests.multihost.conftest import build_net
from tests.multihost.netns import ROOT_KEPT, Net

pytestmark = [pytest.mark.multihost, pytest.mark.serial, pytest.mark.root, pytest.mark.timeout(240)]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGE = os.path.join(ROOT, "docs", "deploy.md")
PROMPT = re.compile(r"^(box[a-z])\$ (.*)$")
# what converges, so a step of it is retried: the page says each daemon applies an edit within 2 s
RETRIED = ("sotd daemon status", "sotd doctor")
RETRY_S = 15.0
PAGE_FOLDERS = (".local", ".ssh", ".sot-comm", "work", ".config")  # what the page makes in the home


class Step:
    def __init__(self, box: str, command: str, line: int) -> None:
        self.box = box
        self.command = command
        self.line = line
        self.output: list[str] = []

    def __repr__(self) -> str:
        return f"deploy.md:{self.line} {self.box}$ {self.command.splitlines()[0]}"


def steps(text: str) -> list[Step]:
    """The page's commands in order, each with its shown output."""
    out: list[Step] = []
    lines = text.splitlines()
    i = 0
    in_console = False
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            in_console = line.strip() == "```console" if not in_console else False
            i += 1
            continue
        if not in_console:
            i += 1
            continue
        m = PROMPT.match(line)
        if m:
            step = Step(m.group(1), m.group(2), i + 1)
            if step.command.endswith("<<'EOF'"):
                body = []
                i += 1
                while lines[i] != "EOF":
                    body.append(lines[i])
                    i += 1
                step.command += "\n" + "\n".join(body) + "\nEOF"
            out.append(step)
        else:
            assert out, f"deploy.md:{i + 1}: output before any command in a console block"
            out[-1].output.append(line)
        i += 1
    return out


def line_pattern(shown: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in shown.split("…")))


def matches(shown: list[str], got: list[str]) -> bool:
    """Line by line; a shown ``…`` line takes any number of lines (shortest first)."""
    if not shown:
        return not got
    head, rest = shown[0], shown[1:]
    if head == "…":
        return any(matches(rest, got[k:]) for k in range(len(got) + 1))
    return bool(got) and line_pattern(head).fullmatch(got[0]) is not None and matches(rest, got[1:])


def test_parser_reads_commands_heredocs_and_output() -> None:
    page = "x\n```console\nboxa$ echo hi\nhi\nboxb$ cat > f <<'EOF'\na = 1\nEOF\n```\n```ini\nboxa$ no\n```\n"
    got = steps(page)
    assert [(s.box, s.command, s.output) for s in got] == [
        ("boxa", "echo hi", ["hi"]),
        ("boxb", "cat > f <<'EOF'\na = 1\nEOF", []),
    ]
    assert matches(["a …", "…", "z"], ["a b", "c", "d", "z"]) and matches(["…"], [])
    assert not matches(["a"], ["a", "b"]) and not matches([], ["x"])


class Page:
    def __init__(self, net: Net) -> None:
        self.net = net
        self.cwd = {name: "/root" for name in net.boxes}

    def placeholders(self, command: str) -> str:
        b = self.net.boxes
        table = {
            "<checkout>": ROOT,
            "<boxa's hosts.toml>": os.path.join(b["boxa"].home, ".sot-comm", "hosts.toml"),
        }
        for name, box in b.items():
            key = f"<{name}'s id_sotd.pub line>"
            if key in command:
                with open(os.path.join(box.home, ".ssh", "id_sotd.pub")) as f:
                    table[key] = f.read().strip()
        for k, v in table.items():
            command = command.replace(k, v)
        assert "<checkout>" not in command
        return command

    def run(self, step: Step) -> tuple[int, list[str]]:
        box = self.net.boxes[step.box]
        where = os.path.join(box.dir, "cwd")
        script = f'exec 2>&1\ncd "$0" || exit 99\n{self.placeholders(step.command)}\nrc=$?\npwd > {where}\nexit $rc\n'
        r = self.net.run(step.box, ["bash", "-c", script, self.cwd[step.box]], timeout=120)
        with open(where) as f:
            self.cwd[step.box] = f.read().strip()
        return r.returncode, r.stdout.splitlines()


@pytest.fixture(scope="module")
def net() -> Iterator[Net]:
    if ROOT_KEPT in PAGE_FOLDERS:
        pytest.skip(f"this Python lives in /root/{ROOT_KEPT}, a folder the page writes in as the box's own")
    yield from build_net(["boxa", "boxb"], as_deployed=True)


def test_every_command_of_deploy_md_in_order(net: Net) -> None:
    with open(PAGE) as f:
        todo = steps(f.read())
    assert len(todo) >= 25, todo  # the page's sections are all there
    page = Page(net)
    for step in todo:
        deadline = time.monotonic() + (RETRY_S if step.command.startswith(RETRIED) else 0)
        while True:
            code, got = page.run(step)
            ok = code == 0 and matches(step.output, got)
            if ok or time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        assert ok, (
            f"{step}: exit {code}, printed:\n"
            + "\n".join(got)
            + "\n--- the page shows:\n"
            + "\n".join(step.output)
        )
    # nothing listens on TCP in either box but sshd
    for name in net.boxes:
        r = net.run(name, ["ss", "-Htlnp"])
        assert all("sshd" in x for x in r.stdout.splitlines()), r.stdout


def test_the_failure_table_shows_what_a_user_sees(net: Net) -> None:
    """Section 7's ``exec: sotd: not found`` row, on the boxes the page set up: boxa's ``sotd`` gone from
    where a non-interactive ssh looks, a send from boxb's session names it (after the page's own run)."""
    link = os.path.join(net.boxes["boxa"].home, ".local", "bin", "sotd")
    target = os.readlink(link)
    os.unlink(link)
    try:
        page = Page(net)
        page.cwd["boxb"] = "/root/work/bob"
        code, got = page.run(Step("boxb", 'sotd comm send @hank "is sotd there?"', 0))
    finally:
        os.symlink(target, link)
    assert (code, got) == (
        1,
        ["FAILED -> @hank: the daemon did not answer at ssh:boxa/boxa: bash: line 1: exec: sotd: not found"],
    )
