"""``sotd ocx`` commands not covered elsewhere: ``list --re/--kind`` (human and --json), ``sync --json``, and
the server-code collision branch of ``clone`` (O12). Real fossil; every command through the real CLI except
the collision, which needs a clone whose fresh server-code happens to match a configured one and so runs
``sotd.cli.ocx`` in process with that coincidence forced.
"""

from __future__ import annotations

import json
import os

import pytest

from sotd.cli import ocx as cli
from sotd.ocx import envelope as ev
from sotd.ocx import fossil as fx
from tests.ocx.fossilkit import USERS, base_env, free_port, make_hub, need_fossil, sotd, write_config

pytestmark = pytest.mark.integration


@pytest.fixture
def home(tmp_path: str) -> str:
    need_fossil()
    return str(tmp_path)


def hub_env(home: str, clones: list[dict[str, object]]) -> dict[str, str]:
    cfg = os.path.join(home, "ocx.toml")
    write_config(cfg, os.path.join(home, "index.sqlite"), clones)
    env = base_env(home)
    env["SOT_OCX_CONFIG"] = cfg
    return env


def post(home: str, env: dict[str, str], data: bytes) -> str:
    path = os.path.join(home, "msg.json")
    with open(path, "wb") as f:
        f.write(data)
    r = sotd("ocx", "post", path, "--repo", "hub", env=env)
    assert r.code == 0, r
    return r.out.strip()


def test_list_by_re_and_by_kind(home: str) -> None:
    hub = os.path.join(home, "hub.fossil")
    make_hub(hub, USERS)
    env = hub_env(home, [{"name": "hub", "repository": hub, "login": "alice"}])
    ask = post(home, env, ev.encode("review", {"checkin": "a"}, to="bob"))
    other = post(home, env, ev.encode("review", {"checkin": "b"}, to="carol"))
    note = post(home, env, ev.encode("note", {"text": "n"}, to="bob"))
    r = sotd(
        "ocx", "answer", ask, "--kind", "reviewed", "--body", '{"verdict": "pass"}', "--repo", "hub", env=env
    )
    assert r.code == 0, r
    ans = r.out.strip()

    by_re = sotd("ocx", "list", "--re", ask, env=env)
    assert by_re.code == 0, by_re
    (line,) = by_re.out.splitlines()
    assert f" hub {ans} reviewed re={ask} from=alice" in line
    rows = json.loads(sotd("ocx", "list", "--re", ask, "--json", env=env).out)
    assert [(x["hash"], x["kind"], x["re_hash"], x["to_login"], x["sender_login"]) for x in rows] == [
        (ans, "reviewed", ask, None, "alice")
    ]

    by_kind = sotd("ocx", "list", "--kind", "review", env=env)
    assert by_kind.code == 0, by_kind
    lines = by_kind.out.splitlines()
    assert len(lines) == 2
    assert (
        f" hub {ask} review to=bob from=alice" in lines[0]
        and f" hub {other} review to=carol from=alice" in lines[1]
    )
    assert note not in by_kind.out and ans not in by_kind.out
    rows = json.loads(sotd("ocx", "list", "--kind", "review", "--json", env=env).out)
    assert [(x["hash"], x["kind"], x["to_login"]) for x in rows] == [
        (ask, "review", "bob"),
        (other, "review", "carol"),
    ]
    both = json.loads(sotd("ocx", "list", "--kind", "review", "--to", "bob", "--json", env=env).out)
    assert [x["hash"] for x in both] == [ask]

    # nothing matches: a sentence, or an empty array
    none = sotd("ocx", "list", "--re", note, env=env)
    assert (none.code, none.out) == (0, "no messages\n")
    assert json.loads(sotd("ocx", "list", "--kind", "nothing", "--json", env=env).out) == []


def test_sync_json(home: str) -> None:
    hub = os.path.join(home, "hub.fossil")
    leaf = os.path.join(home, "leaf.fossil")
    make_hub(hub, USERS)
    make_hub(leaf, USERS)
    dead = f"http://alice@127.0.0.1:{free_port()}/"
    env = hub_env(
        home,
        [
            {"name": "hub", "repository": hub, "login": "alice"},
            {"name": "leaf", "repository": leaf, "login": "alice", "url": dead},
        ],
    )
    path = os.path.join(home, "m.json")
    with open(path, "wb") as f:
        f.write(ev.encode("review", {}, to="bob"))
    fx.run(["uv", "add", path, "--as", ev.message_name(ev.message_hash(ev.encode("review", {}, to="bob"))),
            "-R", hub, "--user", "bob"])  # fmt: skip
    r = sotd("ocx", "sync", "--json", env=env)
    assert r.code == 1, r  # a clone failed
    first = json.loads(r.out)
    assert [(x["repo"], x["new"], x["handed"]) for x in first] == [("hub", 1, 0), ("leaf", 0, 0)]
    assert first[0]["error"] is None
    assert first[1]["error"].startswith("ocx: fossil uv sync")
    again = json.loads(sotd("ocx", "sync", "--json", env=env).out)
    assert [(x["repo"], x["new"]) for x in again] == [("hub", 0), ("leaf", 0)]
    human = sotd("ocx", "sync", env=env)
    assert human.code == 1 and human.out.splitlines()[0] == "hub: 0 new"
    assert human.out.splitlines()[1].startswith("leaf: FAILED: ocx: fossil uv sync")
    # every clone fine: exit 0
    env_ok = hub_env(home, [{"name": "hub", "repository": hub, "login": "alice"}])
    ok = sotd("ocx", "sync", "--json", env=env_ok)
    assert ok.code == 0 and json.loads(ok.out) == [
        {"repo": "hub", "new": 0, "handed": 0, "restored": 0, "error": None}
    ]


def test_clone_replaces_a_server_code_a_configured_clone_has(
    home: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hub = os.path.join(home, "hub.fossil")
    make_hub(hub, USERS)
    served = os.path.join(home, "served.fossil")
    make_hub(served, USERS)
    new = os.path.join(home, "new.fossil")
    # the node already serves `served`, and its configuration names the new file too
    for k, v in base_env(home).items():
        monkeypatch.setenv(k, v)
    env = hub_env(
        home,
        [
            {"name": "served", "repository": served, "login": "alice"},
            {"name": "new", "repository": new, "login": "alice"},
        ],
    )
    monkeypatch.setenv("SOT_OCX_CONFIG", env["SOT_OCX_CONFIG"])
    taken = fx.repo_info(served).server_code
    real_clone = fx.clone

    def unlucky_clone(url: str, path: str) -> None:
        """A real clone whose fresh server-code happens to be the served clone's."""
        real_clone(url, path)
        db = fx.connect(path, write=True)
        with db:
            db.execute("UPDATE config SET value = ? WHERE name = 'server-code'", (taken,))
        db.close()

    monkeypatch.setattr(fx, "clone", unlucky_clone)
    assert cli.run(["clone", hub, new]) == 0
    out = capsys.readouterr().out
    code = fx.repo_info(new).server_code
    assert code != taken and len(code) == 40
    assert out == (
        f"cloned {hub} into {new}; server-code {code} "
        "(the clone's first server-code was the one of the clone 'served': replaced)\n"
    )
    r = sotd("ocx", "sync", env=env)
    assert r.code == 0, r  # the node serves both: no duplicate server-code (O12)

    # no clash: the clone keeps the server-code fossil gave it, even though the configuration names it
    monkeypatch.setattr(fx, "clone", real_clone)
    calls: list[str] = []
    real_new_code = fx.new_server_code
    monkeypatch.setattr(fx, "new_server_code", lambda p: calls.append(p) or real_new_code(p))
    os.unlink(new)
    assert cli.run(["clone", hub, new]) == 0
    out = capsys.readouterr().out
    assert calls == [] and "replaced" not in out
    assert out == f"cloned {hub} into {new}; server-code {fx.repo_info(new).server_code}\n"


def test_server_code_names_the_configured_clone_even_beside_a_folder_of_that_name(home: str) -> None:
    """``sotd ocx server-code NAME`` run where a folder NAME exists: the configured clone's server-code,
    not an error about the folder; a path to a repository file still works, and a name neither configured
    nor a file says which clones there are."""
    import subprocess

    from tests.ocx.fossilkit import SOTD

    hub = os.path.join(home, "hub.fossil")
    make_hub(hub, USERS)
    env = hub_env(home, [{"name": "proj", "repository": hub, "login": "alice"}])
    work = os.path.join(home, "work")
    os.makedirs(os.path.join(work, "proj"))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([SOTD, "ocx", "server-code", *args], cwd=work, env=env, capture_output=True,
                              text=True, timeout=60, check=False)  # fmt: skip

    code = fx.repo_info(hub).server_code
    assert (run("proj").returncode, run("proj").stdout) == (0, code + "\n")
    assert run(hub).stdout == code + "\n"
    os.makedirs(os.path.join(work, "other"))
    bad = run("other")
    assert bad.returncode != 0 and "no clone named 'other'" in bad.stderr and "(clones: proj)" in bad.stderr
