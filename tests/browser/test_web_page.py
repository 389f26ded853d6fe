"""``sotd web`` in a real browser (issue 30 item 5): Debian's Chromium, headless, through Selenium and
Debian's chromedriver, against a real daemon, real rows in its private tmux server and a real ``sotd web``.

What each test shows: the secret's first load sets the cookie and every other request is a plain 403 that
says nothing; a POST from another origin, or with none, is refused; a send typed into the page is filed
(the inbox's bytes); a handle that joins appears, and a work-state change recolours its row, within 2 s;
a row's screen follows what its shell prints; escape sequences and markup in mail and on a screen are shown
as text. A screenshot of each state is kept (conftest: ``tests/artifacts/browser/<test>/``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from tests.browser.conftest import Fleet, Page, within
from tests.conftest import wait_for

ESC = "\x1b"


def http(
    fleet: Fleet, path: str, *, data: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One request without a browser (urllib follows no redirect here)."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kw: object) -> None:
            return None

    req = urllib.request.Request(
        fleet.base + path, data=data, headers=headers or {}, method="POST" if data is not None else "GET"
    )
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, dict(e.headers), e.read()


def open_page(fleet: Fleet, page: Page) -> None:
    page.driver.get(fleet.url)
    wait_for(
        lambda: page.driver.execute_script("return document.body.dataset.updated"), 10, "the first state"
    )


def handle_row(page: Page, name: str) -> dict[str, str] | None:
    """The handle's row as the page shows it now: its colour and text, read in one script (the page
    replaces its rows at every event, so a found element may be gone by the next call)."""
    return page.driver.execute_script(  # type: ignore[no-any-return]
        'const r = document.querySelector(`#handles tr[data-handle="${arguments[0]}"]`);'
        "return r ? {colour: r.dataset.colour, text: r.textContent} : null;",
        name,
    )


def row_div(page: Page, wid: str) -> dict[str, object] | None:
    """A row's block: its screen's text, the elements inside the screen, its attach command."""
    return page.driver.execute_script(  # type: ignore[no-any-return]
        'const d = document.querySelector(`div[data-row="${arguments[0]}"]`); if (!d) return null;'
        "const s = d.querySelector('pre.screen'), a = d.querySelector('pre.attach');"
        "return {screen: s.textContent, elements: s.children.length, attach: a ? a.textContent : ''};",
        wid,
    )


def mail_shown(page: Page) -> dict[str, object]:
    return page.driver.execute_script(  # type: ignore[no-any-return]
        "return {msgs: [...document.querySelectorAll('#mail .msg')].map(m => m.textContent),"
        " markup: document.querySelectorAll('#mail img, #mail b, #mail i, #handles i').length};"
    )


def test_secret_sets_the_cookie_and_everything_else_is_a_plain_403(fleet: Fleet, page: Page) -> None:
    for path in ("/", "/state", "/events", "/page.js", "/nothing", f"/?s={fleet.secret[:-1]}x"):
        code, headers, body = http(fleet, path)
        assert (code, body) == (403, b"forbidden\n"), path
        assert headers["Content-Type"] == "text/plain; charset=utf-8"
        assert "Set-Cookie" not in headers
    # the right secret from a DNS name that points here is still refused (DNS rebinding)
    code, _h, body = http(fleet, f"/?s={fleet.secret}", headers={"Host": f"evil.example:{fleet.port}"})
    assert (code, body) == (403, b"forbidden\n")
    # the browser without the secret sees the refusal's one word, nothing of the fleet
    page.driver.get(fleet.base + "/")
    assert page.driver.find_element(By.TAG_NAME, "body").text == "forbidden"
    page.shot("refused-without-the-secret")
    # the secret: a cookie (HttpOnly, SameSite=Strict), and the address bar loses the secret
    open_page(fleet, page)
    assert page.driver.current_url == fleet.base + "/"
    cookie = page.driver.get_cookie(f"sotd_web_{fleet.port}")
    assert cookie is not None and cookie["value"] == fleet.secret
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert page.driver.execute_script("return document.cookie") == ""
    within(2, lambda: handle_row(page, "boss"), "the person's own handle")
    page.shot("loaded-with-the-secret")
    # after the first load the cookie alone is enough: a reload without the secret
    page.driver.get(fleet.base + "/")
    wait_for(
        lambda: page.driver.execute_script("return document.body.dataset.updated"), 10, "the state again"
    )
    assert handle_row(page, "boss") is not None


CLIENT = (
    "import http.cookiejar, sys, urllib.request, urllib.error\n"
    "jar = urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())\n"
    "try:\n"
    "    r = urllib.request.build_opener(jar).open(sys.argv[1], timeout=10)\n"
    "    print(r.status, r.read())\n"
    "except urllib.error.HTTPError as e:\n"
    "    print(e.code, e.read())\n"
)


@pytest.mark.root
def test_another_local_account_is_refused_even_with_the_secret(fleet: Fleet) -> None:
    """The connection's owner is read from /proc/net/tcp: a client running as ``nobody`` that holds the
    address with the secret still gets the plain 403; the same client as this account is let in."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run a client as another account (setpriv)")
    argv = [sys.executable, "-c", CLIENT, fleet.url]
    other = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv],
        capture_output=True, text=True, timeout=30, check=False, cwd="/",
    )  # fmt: skip
    assert (other.returncode, other.stdout.strip()) == (0, "403 b'forbidden\\n'"), other.stderr
    mine = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert mine.stdout.startswith("200 b'<!doctype html>"), mine.stdout + mine.stderr


def test_a_post_from_another_origin_or_none_is_refused(fleet: Fleet, page: Page) -> None:
    cookie = f"sotd_web_{fleet.port}={fleet.secret}"
    form = json.dumps({"to": "boss", "text": "forged"}).encode()
    for origin in ("http://evil.example", f"http://localhost:{fleet.port + 1}", "null", None):
        headers = {"Cookie": cookie, "Content-Type": "application/json"}
        if origin is not None:
            headers["Origin"] = origin
        code, _h, body = http(fleet, "/api/send", data=form, headers=headers)
        assert (code, body) == (403, b"forbidden\n"), origin
    # its own origin but no cookie: refused too
    code, _h, _b = http(fleet, "/api/send", data=form, headers={"Origin": fleet.base})
    assert code == 403
    assert b"forged" not in fleet.inbox_bytes("boss")
    # a page of another origin in the same browser (which holds the cookie) cannot send either
    open_page(fleet, page)
    page.driver.get(f"http://localhost:{fleet.port}/")  # another origin of this server: no cookie here
    assert page.driver.find_element(By.TAG_NAME, "body").text == "forbidden"
    page.driver.get("data:text/html,<p>elsewhere</p>")
    status = page.driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        f"fetch('{fleet.base}/api/send', {{method: 'POST', credentials: 'include', mode: 'no-cors',"
        ' headers: {\'Content-Type\': \'text/plain\'}, body: \'{"to": "boss", "text": "forged"}\'})'
        ".then(r => done('sent ' + r.type), e => done('error ' + e));"
    )
    assert status.startswith(("sent", "error")), status
    assert b"forged" not in fleet.inbox_bytes("boss")


def test_a_send_from_the_page_is_filed(fleet: Fleet, page: Page) -> None:
    peer = fleet.session("peer")
    assert fleet.run(peer, "join", "peer").code == 0
    open_page(fleet, page)
    within(2, lambda: handle_row(page, "peer"), "@peer listed")
    d = page.driver
    d.find_element(By.ID, "send-to").send_keys("peer")
    d.find_element(By.ID, "send-text").send_keys("hello from the page")
    d.find_element(By.ID, "send-button").click()
    answer = wait_for(
        lambda: (
            d.find_element(By.ID, "send-answer").text.strip() not in ("", "…")
            and d.find_element(By.ID, "send-answer").text
        ),
        20,
        "the send's answer",
    )
    assert answer.strip() == "filed -> @peer"
    line = json.loads(fleet.inbox_bytes("peer").splitlines()[-1])
    assert (line["from"], line["to"], line["msg"]) == ("boss", "peer", "hello from the page")
    # the same line the CLI gives for a handle nobody lists
    d.find_element(By.ID, "send-to").clear()
    d.find_element(By.ID, "send-to").send_keys("nobody")
    d.find_element(By.ID, "send-button").click()
    failed = wait_for(
        lambda: (
            "nobody" in d.find_element(By.ID, "send-answer").text
            and d.find_element(By.ID, "send-answer").text
        ),
        20,
        "the refusal",
    )
    cli = fleet.run(fleet.me, "send", "@nobody", "hello from the page")
    assert failed.strip() == (cli.out + cli.err).strip()
    assert failed.strip().startswith("FAILED -> @nobody: ")
    page.shot("sent")


def colour_of(page: Page, name: str) -> str | None:
    row = handle_row(page, name)
    return row["colour"] if row else None


def test_a_join_appears_and_a_work_state_recolours_within_2s(fleet: Fleet, page: Page) -> None:
    open_page(fleet, page)
    newbie = fleet.session("newbie")
    assert fleet.run(newbie, "join", "newbie").code == 0
    within(2, lambda: handle_row(page, "newbie"), "@newbie to appear")
    assert colour_of(page, "newbie") == "grey"
    page.shot("joined")
    # a turn starts (the prompt hook's event), and the agent says what it works on
    assert fleet.run(newbie, "status", "prompt").code == 0
    assert fleet.run(newbie, "status", "working", "building the page").code == 0
    # the prompt event alone already makes it working (green): wait for the summary beside the colour
    within(
        2,
        lambda: (
            colour_of(page, "newbie") == "green"
            and "building the page" in (handle_row(page, "newbie") or {}).get("text", "")
        ),
        "green, with the summary",
    )
    page.shot("working")
    # it asks a question and its turn ends: blocked (behaviour 4.3's order)
    assert fleet.run(newbie, "status", "blocked", "needs a key").code == 0
    assert fleet.run(newbie, "status", "stop").code == 0
    within(2, lambda: colour_of(page, "newbie") == "red", "red")
    page.shot("blocked")


def unread_cell(page: Page, name: str) -> str | None:
    """The handle's unread cell as the page shows it now (None: no such row)."""
    return page.driver.execute_script(  # type: ignore[no-any-return]
        'const r = document.querySelector(`#handles tr[data-handle="${arguments[0]}"]`);'
        "return r ? r.querySelector('td.unread').textContent : null;",
        name,
    )


def test_a_writer_holding_an_inbox_stalls_nothing_and_the_count_comes_back(fleet: Fleet, page: Page) -> None:
    """A writer holds @boss's inbox lock for as long as it likes (a frozen sender): the page's reader
    waits at most 0.1 s on it (``snapshot.UNREAD_LOCK_BOUND_S``), shows no count for @boss meanwhile, and
    every other update still comes within 2 s; once the lock is free the count is back."""
    from tests.integration.cli_support import flock_held

    open_page(fleet, page)
    sender = fleet.session("sender")
    assert fleet.run(sender, "join", "sender").code == 0
    assert fleet.run(sender, "send", "@boss", "one line").code == 0
    within(2, lambda: unread_cell(page, "boss") == "1", "@boss's count 1")
    with flock_held(fleet.layout.inbox_lock("boss")):
        os.utime(fleet.layout.inbox("boss"))  # the inbox moved: its count must be read again, under the lock
        within(2, lambda: unread_cell(page, "boss") == "", "@boss uncounted while its inbox is held")
        late = fleet.session("late")
        assert fleet.run(late, "join", "late").code == 0
        within(2, lambda: handle_row(page, "late"), "@late to appear while @boss's inbox is held")
        page.shot("inbox-held")
    within(2, lambda: unread_cell(page, "boss") == "1", "@boss's count back once the lock is free")


def box_line(page: Page, box: str) -> str | None:
    """The text of the box's line in the links list now, read in one script (as ``handle_row``)."""
    return page.driver.execute_script(  # type: ignore[no-any-return]
        'const b = document.querySelector(`#links li[data-box="${arguments[0]}"]`);'
        "return b ? b.textContent : null;",
        box,
    )


def test_a_box_on_the_scripts_sharing_the_folder_shows_as_such(fleet: Fleet, page: Page) -> None:
    # A box on the 0.6.6 scripts shares this comm folder and keeps no daemon link: all the page can know of
    # it is its registry rows. They are written here by `sotd comm join` under that box's host name, the
    # registry's bytes being the same either way (docs/contract.md); the page runs no 0.6.6 script.
    old = fleet.session("oldtimer")
    old["env"] = {**old["env"], "SOT_SELF_HOST": "oldbox", "SOT_COMM_TEST_HOST": "oldbox"}
    assert fleet.run(old, "join", "oldtimer").code == 0
    open_page(fleet, page)
    line = within(2, lambda: box_line(page, "oldbox"), "the box of the scripts to be listed")
    assert line == (
        "box oldbox: no sotd daemon answers for it (the 0.6.6 scripts, or a daemon not linked here); "
        "this folder's registry lists 1 handles of it, 1 live"
    ), line
    assert "oldbox" in (handle_row(page, "oldtimer") or {}).get("text", "")
    assert box_line(page, "testhost") is None  # this box is not listed as another
    page.shot("scripts-box")


def workspaces(fleet: Fleet) -> list[dict[str, Any]]:
    return fleet.request("workspace.list", {})["workspaces"]  # type: ignore[no-any-return]


def test_a_row_s_screen_updates_and_escapes_render_as_text(fleet: Fleet, page: Page) -> None:
    root = os.path.join(fleet.work, "shellrow")
    os.makedirs(root)
    answer = fleet.request(
        "workspace.create",
        {
            "label": "shellrow",
            "project_root": os.path.realpath(root),
            "agent": "none",
            "agent_name": "shellrow",
            "command": ["bash", "--norc", "--noprofile", "-i"],
        },
    )
    assert answer.get("ok") is True, answer
    wid = answer["workspace_id"]
    pane = wait_for(
        lambda: next((w["pane"] for w in workspaces(fleet) if w["workspace_id"] == wid and w["pane"]), None),
        20,
        "the row's pane",
    )
    open_page(fleet, page)
    shown = within(3, lambda: row_div(page, wid), "the row's screen")
    assert (
        shown["attach"]
        == f"tmux -S {fleet.tmux.socket_path} attach-session -t {pane} ';' select-window -t {pane}"
    )
    # the shell prints colour and markup: the page shows the characters, no element, no escape
    fleet.tmux.send_text(pane, "printf 'RED-\\033[31m<b>bold</b>\\033[0m-END\\n'")
    fleet.tmux.send_enter(pane)
    shown = within(
        2,
        lambda: (r := row_div(page, wid)) and "\nRED-<b>bold</b>-END\n" in str(r["screen"]) and r,
        "the screen to update",
    )
    assert shown["elements"] == 0
    assert ESC not in str(shown["screen"])
    page.shot("screen")
    # mail holding an escape sequence and markup: shown as its \u escape and its characters
    hostile = f"{ESC}[2J{ESC}]0;title\a<img src=x onerror=alert(1)><b>loud</b>"
    assert fleet.run(fleet.me, "send", "@boss", hostile).code == 0
    mail = within(
        2, lambda: (m := mail_shown(page)) and any("loud" in x for x in m["msgs"]) and m, "the mail"
    )
    assert "\\u001b[2J\\u001b]0;title\\u0007<img src=x onerror=alert(1)><b>loud</b>" in mail["msgs"]
    assert mail["markup"] == 0
    # a second handle at work, so the state this shot keeps has its colours (docs/web.png is this shot)
    peer = fleet.session("peer")
    assert fleet.run(peer, "join", "peer").code == 0
    assert fleet.run(peer, "status", "prompt").code == 0
    assert fleet.run(peer, "status", "working", "<i>reviewing</i> the page").code == 0
    # the prompt event alone already makes it working (green): wait for the summary beside the colour
    within(
        2,
        lambda: (
            colour_of(page, "peer") == "green"
            and "<i>reviewing</i> the page" in (handle_row(page, "peer") or {}).get("text", "")
        ),
        "green, with the summary as text",
    )
    assert mail_shown(page)["markup"] == 0
    page.shot("hostile-mail")


def test_spawn_and_despawn_from_the_page(fleet: Fleet, page: Page) -> None:
    root = os.path.realpath(os.path.join(fleet.work, "spawned"))
    os.makedirs(root)
    open_page(fleet, page)
    d = page.driver
    d.find_element(By.ID, "spawn-path").send_keys(root)
    d.find_element(By.ID, "spawn-name").send_keys("spawned")
    Select(d.find_element(By.ID, "spawn-agent")).select_by_visible_text("none")
    d.find_element(By.ID, "spawn-command").send_keys("bash --norc --noprofile -i")
    d.find_element(By.ID, "spawn-button").click()
    text = wait_for(
        lambda: "ready" in (t := d.find_element(By.ID, "spawn-answer").text) and t, 60, "the spawn's answer"
    )
    assert "Capsule row ready" in text
    (row,) = [w for w in workspaces(fleet) if w["project_root"] == root]
    wid = row["workspace_id"]
    within(2, lambda: row_div(page, wid), "the row on the page")
    page.shot("spawned")
    d.execute_script(f"document.querySelector('div[data-row=\"{wid}\"] button.despawn').click()")
    text = wait_for(
        lambda: wid in (t := d.find_element(By.ID, "spawn-answer").text) and t, 30, "the despawn's answer"
    )
    assert not any(w["workspace_id"] == wid for w in workspaces(fleet)), text
    within(2, lambda: row_div(page, wid) is None, "the row off the page")
    page.shot("despawned")
