"""The run body: parsing with a refusal per bad field, placeholders (O5), policy check, limit caps."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sotd.jobs import nodepolicy, placeholders, spec
from sotd.jobs.errors import PolicyError, Refused

pytestmark = pytest.mark.unit

SC = "a" * 40
ROOT = "/srv/ocx"
RUN = "f" * 64
BASE = {"root": ROOT, "repository_name": "proj", "run": RUN, "release": "/opt/sotd"}


def build_run() -> dict[str, Any]:
    return {
        "clone": SC,
        "objective": "build trunk for the lab board and send the image",
        "workspace": [
            {"step": "directory", "at": "$$root$$/$$process_user$$/projects/$$repository_name$$/$$run$$"},
            {"step": "files", "of": "trunk", "into": "$$workspace$$/tree"},
        ],
        "sandbox": {
            "uid": 1000, "gid": 1000, "linux_capabilities": [], "network": False,
            "isolate_terminal": True, "ends_with_parent": True,
            "proc": "/proc", "dev": "/dev", "tmp": "/tmp",
            "read_only": ["/usr", "/etc/alternatives"], "read_write": ["$$workspace$$"],
            "homes": [], "created_files": [],
        },
        "limits": {"wall": "1h", "cpu": 3000, "processes": 256, "file_size": "2G"},
        "process": {
            "user": "build-user",
            "command": ["make", "-C", "$$tree$$", "image"],
            "env": {"PATH": "/usr/bin:/bin", "HOME": "$$workspace$$"},
            "verdict": True,
            "unversioned_files": [{"at": "$$workspace$$/tree/out/board.img", "as": "builds/board.img"}],
        },
    }  # fmt: skip


def agent_run() -> dict[str, Any]:
    return {
        "clone": SC,
        "objective": "answer each post",
        "workspace": [
            {"step": "directory", "at": "$$root$$/$$process_user$$/projects/$$repository_name$$/$$run$$"},
            {"step": "password"},
            {"step": "clone", "into": "$$workspace$$/clone"},
            {"step": "checkout", "of": "trunk", "into": "$$workspace$$/tree"},
        ],
        "sandbox": {
            "uid": 1000, "gid": 1000, "linux_capabilities": [], "network": True,
            "isolate_terminal": True, "ends_with_parent": True, "proc": "/proc", "dev": "/dev", "tmp": "/tmp",
            "read_only": ["/usr", "/bin", "/lib", "/etc/resolv.conf", "/etc/ssl/certs", "$$release$$"],
            "read_write": ["$$workspace$$"], "homes": ["/root/.claude"], "created_files": [],
        },
        "limits": {"wall": "8h"},
        "process": {
            "user": "agent-user", "command": ["agent", "--go"], "cwd": "$$tree$$",
            "session": True, "hears": ["person"], "deliveries": "start",
        },
    }  # fmt: skip


def test_build_example_parses_and_resolves() -> None:
    run, values = placeholders.resolve(spec.parse_run(build_run()), BASE)
    ws = f"{ROOT}/build-user/projects/proj/{RUN}"
    assert (
        values["workspace"] == ws
        and values["tree"] == ws + "/tree"
        and values["process_user"] == "build-user"
    )
    assert run.process.command == ("make", "-C", ws + "/tree", "image")
    assert run.process.env == {"PATH": "/usr/bin:/bin", "HOME": ws}
    assert run.process.cwd == ws  # no cwd: the workspace
    assert run.sandbox.read_write == (ws,)
    assert run.process.unversioned_files == (spec.Output(ws + "/tree/out/board.img", "builds/board.img"),)
    assert (run.limits.wall, run.limits.cpu, run.limits.processes, run.limits.file_size) == (
        3600,
        3000,
        256,
        2 << 30,
    )
    assert run.limits.report() == {"wall": "1h", "cpu": 3000, "processes": 256, "file_size": "2G"}


def test_agent_example_parses_and_resolves() -> None:
    run, values = placeholders.resolve(spec.parse_run(agent_run()), BASE)
    assert [s.kind for s in run.workspace] == ["directory", "password", "clone", "checkout"]
    assert run.process.cwd == values["tree"] and "/opt/sotd" in run.sandbox.read_only
    assert run.process.session and run.process.deliveries == "start" and run.limits.report() == {"wall": "8h"}


@pytest.mark.parametrize(
    ("text", "secs"), [(90, 90), ("90", 90), ("90s", 90), ("5m", 300), ("1h", 3600), ("2d", 172800)]
)
def test_durations(text: object, secs: int) -> None:
    assert spec.parse_duration(text, "x") == secs


@pytest.mark.parametrize("bad", [0, -1, "", "1.5h", "1H", "h", "1w", True, None, 1.5, "0s"])
def test_bad_durations(bad: object) -> None:
    with pytest.raises(Refused, match=r"^x must be"):
        spec.parse_duration(bad, "x")


@pytest.mark.parametrize(
    ("text", "n"), [(1, 1), ("1024", 1024), ("1K", 1024), ("3M", 3 << 20), ("2G", 2 << 30), ("1T", 1 << 40)]
)
def test_sizes(text: object, n: int) -> None:
    assert spec.parse_size(text, "x") == n


@pytest.mark.parametrize("bad", [0, "1k", "1KB", "1.5G", "G", False, [], "0K"])
def test_bad_sizes(bad: object) -> None:
    with pytest.raises(Refused):
        spec.parse_size(bad, "x")


def _set(d: dict[str, Any], path: str, value: object) -> None:
    keys = path.split(".")
    for k in keys[:-1]:
        d = d[int(k)] if isinstance(d, list) else d[k]
    if value is _DELETE:
        del d[keys[-1]]
    elif isinstance(d, list):
        d[int(keys[-1])] = value
    else:
        d[keys[-1]] = value


_DELETE = object()

BAD_FIELDS = [
    ("clone", "ABC", "run.clone must be a server-code"),
    ("clone", _DELETE, "run lacks the field 'clone'"),
    ("objective", 3, "run.objective must be a string"),
    ("extra", 1, "run has an unknown field 'extra'"),
    ("workspace", {}, "run.workspace must be a list"),
    ("workspace", [], "must start with a 'directory' step"),
    ("workspace.0.step", "mkdir", "run.workspace[0].step must be one of"),
    ("workspace.1.step", "directory", "the step 'directory' appears twice"),
    (
        "workspace.0",
        {"step": "files", "of": "trunk", "into": "/x"},
        "the first step, and only it, must be 'directory'",
    ),
    (
        "workspace.1",
        {"step": "clone", "into": "$$workspace$$/c"},
        "'clone' needs a 'password' step before it",
    ),
    (
        "workspace.1",
        {"step": "checkout", "of": "trunk", "into": "$$workspace$$/t"},
        "'checkout' needs a 'clone'",
    ),
    ("workspace.1.of", "--help", "must name a check-in"),
    ("workspace.1.into", "tree", "must be an absolute path"),
    ("workspace.1.colour", "red", "run.workspace[1] has an unknown field 'colour'"),
    ("workspace.0.at", _DELETE, "run.workspace[0] lacks the field 'at'"),
    ("sandbox.uid", -1, "run.sandbox.uid must be an integer"),
    ("sandbox.gid", "1000", "run.sandbox.gid must be an integer"),
    ("sandbox.uid", _DELETE, "run.sandbox lacks the field 'uid'"),
    ("sandbox.linux_capabilities", ["CAP_FLY"], "is not a Linux capability"),
    ("sandbox.network", "no", "run.sandbox.network must be true or false"),
    ("sandbox.isolate_terminal", 1, "run.sandbox.isolate_terminal must be true or false"),
    ("sandbox.read_only", ["usr"], "run.sandbox.read_only[0] must be an absolute path"),
    ("sandbox.read_write", "/x", "run.sandbox.read_write must be a list"),
    ("sandbox.created_files", [{"path": "/etc/x"}], "created_files[0] lacks the field 'content'"),
    ("sandbox.created_files", [{"path": "/etc/x", "content": "", "mode": "rw"}], "mode must be an octal"),
    ("sandbox.sudo", True, "run.sandbox has an unknown field 'sudo'"),
    ("limits.wall", "forever", "run.limits.wall must be"),
    ("limits.cpu", 0, "run.limits.cpu must be positive"),
    ("limits.processes", "256", "run.limits.processes must be a positive integer"),
    ("limits.file_size", "2GB", "run.limits.file_size must be"),
    ("limits.swap", "1G", "run.limits has an unknown field 'swap'"),
    ("limits.memory", "lots", "run.limits.memory must be a positive number of bytes"),
    ("process.user", "a/b", "run.process.user must be a login"),
    ("process.command", [], "run.process.command must be a non-empty list"),
    ("process.command", "make", "run.process.command must be a list"),
    ("process.env", {"A=B": "x"}, "bad variable name"),
    ("process.env", {"A": 1}, "run.process.env.A must be a string"),
    ("process.verdict", "yes", "run.process.verdict must be true or false"),
    ("process.unversioned_files", [{"at": "$$workspace$$/x", "as": "../x"}], "must be a relative name"),
    ("process.hears", ["p"], "need session: true"),
    ("process.session", 1, "run.process.session must be true or false"),
]


@pytest.mark.parametrize(("path", "value", "why"), BAD_FIELDS)
def test_each_bad_field_is_refused_with_its_reason(path: str, value: object, why: str) -> None:
    body = build_run()
    _set(body, path, value if value is _DELETE else copy.deepcopy(value))
    with pytest.raises(Refused) as e:
        spec.parse_run(body)
    assert why in e.value.message


def test_bad_deliveries() -> None:
    body = agent_run()
    body["process"]["deliveries"] = "later"
    with pytest.raises(Refused, match="deliveries must be one of start, new, none"):
        spec.parse_run(body)


def test_capability_names_are_normalised() -> None:
    body = build_run()
    body["sandbox"]["linux_capabilities"] = ["net_bind_service", "CAP_NET_BIND_SERVICE", "CAP_CHOWN"]
    assert spec.parse_run(body).sandbox.capabilities == ("CAP_NET_BIND_SERVICE", "CAP_CHOWN")


@pytest.mark.parametrize(
    ("template", "values", "out"),
    [
        ("plain", {}, "plain"),
        ("$$root$$/x", {"root": "/r"}, "/r/x"),
        ("$$root$$$$run$$", {"root": "a", "run": "b"}, "ab"),
        ("$$root$$", {"root": "$$run$$", "run": "no"}, "$$run$$"),  # one pass, never recursive
    ],
)
def test_expand(template: str, values: dict[str, str], out: str) -> None:
    assert placeholders.expand(template, values) == out


def test_a_doubled_dollar_pair_is_a_literal_dollar_pair() -> None:
    """The documented escape: ``$$$$`` expands to ``$$`` (a shell's pid), beside real placeholders."""
    assert placeholders.expand("echo $$$$ in $$root$$", {"root": "/r"}) == "echo $$ in /r"
    assert placeholders.expand("$$$$$$$$", {}) == "$$$$"


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("builds/board.img", None),
        ("ocx/m/" + "a" * 64 + ".json", "may not name anything under 'ocx/' (the names OCX itself writes)"),
        ("ocx/logs/x/stdout", "may not name anything under 'ocx/'"),
        ("ocx", "may not name anything under 'ocx/'"),
        ("OCX/m/x", None),  # fossil's names are case-sensitive: not OCX's
        ("/etc/x", "must be a relative name of non-empty segments"),
        ("a/../b", "must be a relative name of non-empty segments"),
        ("a//b", "must be a relative name of non-empty segments"),
        ("./ocx/m/x", "must be a relative name of non-empty segments"),
        ("a/", "must be a relative name of non-empty segments"),
        ("a\\b", "must hold no backslash or control character"),
        ("a\nb", "must hold no backslash or control character"),
        ("x" * 201, "must be at most 200 characters"),
    ],
)
def test_output_name_refusal(name: str, why: str | None) -> None:
    assert (
        spec.output_name_refusal(name) == why
        if why is None
        else why in (spec.output_name_refusal(name) or "")
    )


def test_output_name_is_below_a_per_run_prefix() -> None:
    assert spec.output_name("ab" * 32, "builds/board.img") == f"ocx/out/{'ab' * 32}/builds/board.img"


def test_forged_message_name_as_output_is_refused_naming_the_field() -> None:
    body = build_run()
    body["process"]["unversioned_files"] = [{"at": "$$workspace$$/x", "as": "ocx/m/" + "b" * 64 + ".json"}]
    with pytest.raises(Refused) as e:
        spec.parse_run(body)
    assert e.value.message == (
        "run.process.unversioned_files[0].as may not name anything under 'ocx/' (the names OCX itself"
        f" writes), not {'ocx/m/' + 'b' * 64 + '.json'!r}"
    )


@pytest.mark.parametrize(
    ("template", "why"),
    [
        ("$$root", "unclosed placeholder"),
        ("a$$b$$c$$", "unclosed placeholder"),
        ("$$home$$", "unknown placeholder $$home$$"),
        ("$$ROOT$$", "unknown placeholder $$ROOT$$"),
        ("$$$$$$", "unclosed placeholder"),
        ("$$tree$$", "placeholder $$tree$$ has no value"),
    ],
)
def test_expand_refusals(template: str, why: str) -> None:
    with pytest.raises(Refused) as e:
        placeholders.expand(template, {"root": "/r"})
    assert why in e.value.message


@pytest.mark.parametrize(
    ("path", "value", "why"),
    [
        ("workspace.0.at", "/etc/passwd", "run.workspace[0].at leaves $$root$$"),
        ("workspace.0.at", "$$root$$/../etc", "leaves $$root$$"),
        ("workspace.0.at", "$$root$$", "leaves $$root$$"),
        ("workspace.0.at", "$$root$$/$$tree$$", "placeholder $$tree$$ has no value"),
        ("workspace.0.at", "$$root$$/$$workspace$$", "placeholder $$workspace$$ has no value"),
        ("workspace.1.into", "$$workspace$$/../other", "must be below $$workspace$$"),
        ("workspace.1.into", "$$root$$/x", "must be below $$workspace$$"),
        ("process.unversioned_files.0.at", "/etc/shadow", "must be below $$workspace$$"),
        ("process.unversioned_files.0.at", "$$workspace$$/../../x", "must be below $$workspace$$"),
        ("process.command.0", "$$secret$$", "unknown placeholder $$secret$$"),
        ("process.cwd", "$$tree", "unclosed placeholder"),
        ("sandbox.read_only.0", "$$home$$/x", "unknown placeholder"),
    ],
)
def test_resolve_refusals(path: str, value: object, why: str) -> None:
    body = build_run()
    _set(body, path, value)
    with pytest.raises(Refused) as e:
        placeholders.resolve(spec.parse_run(body), BASE)
    assert why in e.value.message


@pytest.mark.parametrize(
    ("base", "why"),
    [
        ({**BASE, "repository_name": "../x"}, "$$repository_name$$ cannot be used in a path"),
        ({**BASE, "repository_name": "a/b"}, "cannot be used in a path"),
        ({k: v for k, v in BASE.items() if k != "run"}, "no value for $$run$$"),
        ({**BASE, "root": "relative"}, "not usable"),
    ],
)
def test_resolve_refuses_bad_node_values(base: dict[str, str], why: str) -> None:
    with pytest.raises(Refused) as e:
        placeholders.resolve(spec.parse_run(build_run()), base)
    assert why in e.value.message


def test_release_unset_refuses_its_use() -> None:
    base = {k: v for k, v in BASE.items() if k != "release"}
    with pytest.raises(Refused, match=r"\$\$release\$\$ has no value"):
        placeholders.resolve(spec.parse_run(agent_run()), base)


POLICY_TOML = {
    "users": ["build-user", "agent-user"],
    "uids": [1000, "2000-2099"],
    "gids": [1000],
    "capabilities": ["CAP_NET_BIND_SERVICE"],
    "network": False,
    "sessions": False,
    "read_only": [
        "/usr",
        "/etc/alternatives",
        "/etc/resolv.conf",
        "/etc/ssl/certs",
        "/bin",
        "/lib",
        "$$release$$",
    ],
    "read_write": ["$$workspace$$"],
    "homes": ["/root/.claude"],
    "created_files": ["/etc/passwd"],
    "limits": {"wall": "2h", "cpu": "1h", "processes": 512},
}


def resolved(body: dict[str, Any]) -> tuple[spec.RunSpec, dict[str, str]]:
    return placeholders.resolve(spec.parse_run(body), BASE)


def test_policy_allows_the_build_example() -> None:
    run, values = resolved(build_run())
    assert nodepolicy.check(run, nodepolicy.parse_policy(POLICY_TOML), values) is None


@pytest.mark.parametrize(
    ("path", "value", "why"),
    [
        ("process.user", "root-user", "does not run processes as the login 'root-user'"),
        ("sandbox.uid", 0, "does not run sandboxes as uid 0"),
        ("sandbox.uid", 2100, "as uid 2100"),
        ("sandbox.gid", 0, "as gid 0"),
        ("sandbox.linux_capabilities", ["CAP_SYS_ADMIN"], "does not grant the capabilities CAP_SYS_ADMIN"),
        ("sandbox.network", True, "does not give sandboxes network access"),
        ("sandbox.read_only", ["/etc"], "does not bind /etc read-only"),
        ("sandbox.read_only", ["/usrx"], "does not bind /usrx read-only"),
        ("sandbox.read_write", ["/usr"], "does not bind /usr read-write"),
        (
            "sandbox.read_write",
            ["$$root$$"],
            "binds nothing of $$root$$ (/srv/ocx) into a sandbox but the run",
        ),
        (
            "sandbox.read_only",
            ["/srv"],
            "binds nothing of $$root$$ (/srv/ocx) into a sandbox but the run's own",
        ),
        (
            "sandbox.read_only",
            ["$$root$$/build-user/projects/proj/" + "e" * 64],
            "but the run's own workspace",
        ),
        ("sandbox.homes", ["/root/.ssh"], "does not bring the home entry /root/.ssh"),
        ("sandbox.created_files", [{"path": "/etc/shadow", "content": "x"}], "does not create /etc/shadow"),
    ],
)
def test_policy_refusals(path: str, value: object, why: str) -> None:
    body = build_run()
    _set(body, path, value)
    run, values = resolved(body)
    reason = nodepolicy.check(run, nodepolicy.parse_policy(POLICY_TOML), values)
    assert reason is not None and why in reason


def test_policy_uid_range_and_workspace_subpaths() -> None:
    body = build_run()
    body["sandbox"]["uid"] = 2050
    body["sandbox"]["read_only"] = ["/usr/lib", "$$workspace$$/tree"]
    run, values = resolved(body)
    assert nodepolicy.check(run, nodepolicy.parse_policy(POLICY_TOML), values) is None


def test_policy_refuses_sessions_unless_allowed() -> None:
    run, values = resolved(agent_run())
    pol = nodepolicy.parse_policy({**POLICY_TOML, "network": True})
    assert nodepolicy.check(run, pol, values) == "this node does not run sessions"
    assert (
        nodepolicy.check(
            run, nodepolicy.parse_policy({**POLICY_TOML, "network": True, "sessions": True}), values
        )
        is None
    )


def test_empty_policy_allows_nothing() -> None:
    run, values = resolved(build_run())
    assert (
        nodepolicy.check(run, nodepolicy.Policy(), values)
        == "this node does not run processes as the login 'build-user'"
    )


def test_cap_limits_lowers_and_fills_from_maxima() -> None:
    pol = nodepolicy.parse_policy(POLICY_TOML)
    capped = nodepolicy.cap_limits(spec.parse_limits({"wall": "8h", "cpu": 60, "file_size": "2G"}), pol)
    assert (capped.wall, capped.cpu, capped.processes, capped.file_size) == (7200, 60, 512, 2 << 30)
    assert capped.report() == {"wall": "2h", "cpu": 60, "processes": 512, "file_size": "2G",
                               **nodepolicy.DEFAULT_MAXIMA}  # fmt: skip


def test_policy_user_namespaces_off_and_seccomp_on_by_default() -> None:
    pol = nodepolicy.parse_policy({})
    assert (pol.user_namespaces, pol.seccomp) == (False, True)
    pol = nodepolicy.parse_policy({"user_namespaces": True, "seccomp": False})
    assert (pol.user_namespaces, pol.seccomp) == (True, False)
    with pytest.raises(PolicyError, match=r"jobs\.policy\.seccomp must be true or false"):
        nodepolicy.parse_policy({"seccomp": "yes"})


def test_policy_defaults_for_memory_tmp_and_disk_and_a_policy_may_change_them() -> None:
    pol = nodepolicy.parse_policy({"limits": {"memory": "1G"}})
    assert (pol.limits.memory, pol.limits.tmp_size, pol.limits.disk) == (1 << 30, 512 << 20, 8 << 30)
    capped = nodepolicy.cap_limits(spec.parse_limits({"memory": "2G", "tmp_size": "1M"}), pol)
    assert capped.report() == {"memory": "1G", "tmp_size": "1M", "disk": "8G"}
    assert nodepolicy.cap_limits(spec.parse_limits(None), nodepolicy.Policy()).report() == {}


@pytest.mark.parametrize(
    ("table", "why"),
    [
        ({"user": ["x"]}, "unknown key 'user'"),
        ({"uids": ["5-1"]}, "empty or too large range"),
        ({"uids": ["abc"]}, "bad entry"),
        ({"uids": 1000}, "must be a list"),
        ({"network": "yes"}, "network must be true or false"),
        ({"read_only": "/usr"}, "read_only must be a list of strings"),
        ({"capabilities": ["CAP_NOPE"]}, "is not a Linux capability"),
        ({"limits": {"wall": "1y"}}, "jobs.policy.limits.wall must be"),
    ],
)
def test_bad_policies(table: dict[str, object], why: str) -> None:
    with pytest.raises(PolicyError) as e:
        nodepolicy.parse_policy(table)
    assert why in e.value.message


def test_load_policy_reads_the_jobs_table(tmp_path: Any) -> None:
    p = tmp_path / "ocx.toml"
    p.write_text(
        '[jobs.policy]\nusers = ["build-user"]\nuids = [1000]\ngids = [1000]\n[jobs.policy.limits]\nwall = "1h"\n'
    )
    pol = nodepolicy.load_policy(str(p))
    assert (
        pol.users == frozenset({"build-user"})
        and pol.limits.wall == 3600
        and pol.read_write == ("$$workspace$$",)
    )
    p.write_text("[jobs\n")
    with pytest.raises(PolicyError, match="cannot read the jobs policy"):
        nodepolicy.load_policy(str(p))
