"""Behaviour 6.0 (modes, tightening) and 6.3 (ensure_home) for sotd.formats.layout."""

from __future__ import annotations

import os
import stat

import pytest

from sotd.errors import HomeError
from sotd.formats import layout as L
from sotd.formats.layout import Layout, ensure_home, tighten

pytestmark = pytest.mark.unit


def mode(p: str) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


def mk(p: str, m: int, data: bytes = b"x") -> str:
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f:
        f.write(data)
    os.chmod(p, m)
    return p


def mkd(p: str, m: int) -> str:
    os.makedirs(p, exist_ok=True)
    os.chmod(p, m)
    return p


@pytest.fixture
def env(tmp_path: object) -> dict[str, str]:
    return {"HOME": os.path.join(str(tmp_path), "userhome")}


@pytest.fixture
def home(tmp_path: object) -> str:
    return os.path.join(str(tmp_path), "comm")


def test_6_3_ensure_home_creates_private_folders(home: str, env: dict[str, str]) -> None:
    old = os.umask(0o022)
    try:
        lay = Layout(os.path.join(home, "deeper"))
        assert ensure_home(lay, env) == []
    finally:
        os.umask(old)
    for d in (home, lay.home, lay.inbox_dir, lay.self_dir, lay.read_dir, lay.state_dir):
        assert os.path.isdir(d) and mode(d) == 0o700, d
    assert not os.path.exists(lay.registry)  # the skeleton is registry.ensure's


def test_6_3_ensure_home_idempotent_and_keeps_files(home: str, env: dict[str, str]) -> None:
    lay = Layout(home)
    ensure_home(lay, env)
    mk(lay.inbox("a"), 0o600, b"line\n")
    assert ensure_home(lay, env) == []
    with open(lay.inbox("a"), "rb") as f:
        assert f.read() == b"line\n"


def test_6_3_ensure_home_failure_is_home_error(home: str, env: dict[str, str]) -> None:
    os.makedirs(home)
    mk(os.path.join(home, "inbox"), 0o600)  # a file where a folder belongs
    with pytest.raises(HomeError):
        ensure_home(Layout(home), env)


def build_open_home(home: str) -> Layout:
    lay = Layout(home)
    mkd(home, 0o755)
    for d in (lay.inbox_dir, lay.self_dir, lay.read_dir, lay.state_dir, lay.bin_dir):
        mkd(d, 0o755)
    mk(lay.registry, 0o644)
    mk(lay.registry_tmp, 0o644)
    mk(lay.registry_skeleton(1, 2), 0o644)
    mk(lay.reglock, 0o644)
    mk(lay.reglock_tmp("h:m:b:n:1:2"), 0o644)
    mk(lay.reclaim_marker("h:m:b:n:1:2"), 0o644)
    mk(lay.lock_manager, 0o644)
    mk(lay.lock_manager_tmp("mid", 1, 2), 0o644)
    mk(os.path.join(home, "gh-device-auth.json"), 0o644)
    mk(lay.inbox("a"), 0o644)
    mk(lay.inbox_lock("a"), 0o666)
    mk(lay.cursor("a"), 0o644)
    mk(lay.self_file("box", "ws-1"), 0o644)
    mk(lay.self_file("box", "ws-1") + ".tmp.abc123", 0o644)
    mk(lay.state("tick-1"), 0o644)
    mkd(lay.state("sub"), 0o755)
    mk(lay.state("sub/mark"), 0o644)
    mkd(os.path.join(lay.probe_dir, "h1"), 0o755)
    os.chmod(lay.probe_dir, 0o755)
    mk(os.path.join(lay.probe_dir, "h1", "user-file"), 0o644)
    mk(lay.version_file, 0o644)
    mk(os.path.join(lay.bin_dir, "comm-send.sh"), 0o755)
    mk(os.path.join(home, "notes.txt"), 0o644)  # unknown: never touched
    mk(os.path.join(lay.inbox_dir, "README"), 0o644)  # unknown inside a layout folder
    return lay


def test_6_0_tighten_known_entries_only(home: str, env: dict[str, str]) -> None:
    lay = build_open_home(home)
    assert tighten(lay, env) == []
    private_files = [
        lay.registry,
        lay.registry_tmp,
        lay.registry_skeleton(1, 2),
        lay.reglock,
        lay.reglock_tmp("h:m:b:n:1:2"),
        lay.reclaim_marker("h:m:b:n:1:2"),
        lay.lock_manager,
        lay.lock_manager_tmp("mid", 1, 2),
        os.path.join(home, "gh-device-auth.json"),
        lay.inbox("a"),
        lay.inbox_lock("a"),
        lay.cursor("a"),
        lay.self_file("box", "ws-1"),
        lay.self_file("box", "ws-1") + ".tmp.abc123",
        lay.state("tick-1"),
        lay.state("sub/mark"),
    ]
    for p in private_files:
        assert mode(p) & 0o077 == 0, p
    assert mode(lay.inbox_lock("a")) == 0o600
    for d in (
        home,
        lay.inbox_dir,
        lay.self_dir,
        lay.read_dir,
        lay.state_dir,
        lay.state("sub"),
        lay.probe_dir,
    ):
        assert mode(d) == 0o700, d
    assert mode(os.path.join(lay.probe_dir, "h1")) == 0o700
    # never: unknown files, bin/, VERSION, a probe row's own files
    assert mode(os.path.join(home, "notes.txt")) == 0o644
    assert mode(os.path.join(lay.inbox_dir, "README")) == 0o644
    assert mode(lay.bin_dir) == 0o755
    assert mode(os.path.join(lay.bin_dir, "comm-send.sh")) == 0o755
    assert mode(lay.version_file) == 0o644
    assert mode(os.path.join(lay.probe_dir, "h1", "user-file")) == 0o644


def test_6_0_tighten_only_when_folder_itself_open(home: str, env: dict[str, str]) -> None:
    lay = build_open_home(home)
    os.chmod(home, 0o700)
    assert tighten(lay, env) == []
    assert mode(lay.registry) == 0o644  # untouched: the folder was not open


def test_6_0_tighten_never_through_symlinked_layout_folder(
    home: str, env: dict[str, str], tmp_path: object
) -> None:
    lay = Layout(home)
    mkd(home, 0o755)
    elsewhere = mkd(os.path.join(str(tmp_path), "elsewhere"), 0o755)
    target = mk(os.path.join(elsewhere, "a.jsonl"), 0o644)
    os.symlink(elsewhere, lay.inbox_dir)
    victim = mk(os.path.join(str(tmp_path), "victim"), 0o644)
    os.symlink(victim, lay.registry)
    assert tighten(lay, env) == []
    assert mode(elsewhere) == 0o755 and mode(target) == 0o644 and mode(victim) == 0o644
    assert mode(home) == 0o700


def test_6_0_folder_itself_last(home: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    lay = build_open_home(home)
    order: list[str] = []
    real = os.chmod

    def spy(p: str, m: int, *, dir_fd: int | None = None) -> None:
        order.append(p)
        real(p, m, dir_fd=dir_fd)

    monkeypatch.setattr(L, "_chmod", spy)
    tighten(lay, env)
    assert order[-1] == os.path.realpath(home)
    assert order.count(os.path.realpath(home)) == 1


@pytest.mark.parametrize(
    ("case", "why"), [("home", "the home folder"), ("git", "a git checkout"), ("root", "the root folder")]
)
def test_6_0_refusals(
    home: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch, case: str, why: str
) -> None:
    def no_chmod(*a: object, **k: object) -> None:
        raise AssertionError("chmod during a refusal")

    monkeypatch.setattr(L, "_chmod", no_chmod)
    if case == "root":
        lay = Layout("/")
        if not mode("/") & 0o077:
            pytest.skip("/ is private here")
    else:
        lay = build_open_home(home)
        if case == "home":
            env = {"HOME": home}
        else:
            mkd(os.path.join(home, ".git"), 0o755)
    assert tighten(lay, env) == [
        f"WARNING: the comm folder {lay.home} is {why}, so its permissions were not changed"
    ]
    if case != "root":
        assert mode(lay.registry) == 0o644


def test_6_0_home_given_through_symlink_is_the_home_folder(
    home: str, tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    lay = build_open_home(home)
    link = os.path.join(str(tmp_path), "link-to-home")
    os.symlink(home, link)
    monkeypatch.setattr(L, "_chmod", lambda *a, **k: None)
    assert tighten(lay, {"HOME": link})[0].endswith("is the home folder, so its permissions were not changed")


def test_6_0_leftover_warning(home: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    lay = build_open_home(home)
    real = os.chmod

    def stubborn(p: str, m: int, *, dir_fd: int | None = None) -> None:
        if p == "a.jsonl":
            raise PermissionError(1, "Operation not permitted")
        real(p, m, dir_fd=dir_fd)

    monkeypatch.setattr(L, "_chmod", stubborn)
    assert tighten(lay, env) == [
        f"WARNING: the comm folder {home} could not be made private: {lay.inbox('a')} is still 644"
    ]
    assert mode(home) == 0o700


def test_6_0_vanishing_file_is_not_a_warning(
    home: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lay = build_open_home(home)
    real = os.chmod

    def vanish(p: str, m: int, *, dir_fd: int | None = None) -> None:
        if p == "a.cursor":
            os.unlink(p, dir_fd=dir_fd)
        real(p, m, dir_fd=dir_fd)

    monkeypatch.setattr(L, "_chmod", vanish)
    assert tighten(lay, env) == []
    assert not os.path.exists(lay.cursor("a"))


def test_6_0_missing_home_is_nothing(home: str, env: dict[str, str]) -> None:
    assert tighten(Layout(home), env) == []


def test_6_0_ensure_home_tightens_an_old_open_folder(home: str, env: dict[str, str]) -> None:
    lay = build_open_home(home)
    assert ensure_home(lay, env) == []
    assert mode(home) == 0o700 and mode(lay.inbox("a")) == 0o600


# ----------------------------------------------------------------------------- relative SOT_COMM_HOME


@pytest.mark.parametrize(
    ("given", "want"),
    [
        ("comm", "work/comm"),
        ("./comm/", "work/comm"),
        ("a/../comm", "work/comm"),
        ("../comm", "comm"),
        (".", "work"),
    ],
)
def test_1_13_relative_home_made_absolute_against_pwd(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch, given: str, want: str
) -> None:
    base = os.path.realpath(str(tmp_path))
    work = os.path.join(base, "work")
    os.makedirs(work)
    monkeypatch.chdir(work)
    got = L.comm_home({"SOT_COMM_HOME": given, "PWD": work})
    assert got == os.path.join(base, want)
    assert os.path.isabs(got)
    assert Layout.from_env({"SOT_COMM_HOME": given, "PWD": work}).registry == os.path.join(
        base, want, "registry.json"
    )


def test_1_13_relative_home_keeps_the_pwd_spelling_through_a_symlink(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = os.path.realpath(str(tmp_path))
    real = os.path.join(base, "real")
    os.makedirs(real)
    link = os.path.join(base, "link")
    os.symlink(real, link)
    monkeypatch.chdir(link)
    assert L.comm_home({"SOT_COMM_HOME": "c", "PWD": link}) == os.path.join(link, "c")


@pytest.mark.parametrize("pwd", [None, "", "relative/pwd", "/somewhere/else/entirely"])
def test_1_13_relative_home_with_a_pwd_that_is_not_the_working_folder(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch, pwd: str | None
) -> None:
    work = os.path.realpath(str(tmp_path))
    monkeypatch.chdir(work)
    env = {"SOT_COMM_HOME": "c"} if pwd is None else {"SOT_COMM_HOME": "c", "PWD": pwd}
    assert L.comm_home(env) == os.path.join(work, "c")


def test_1_13_absolute_and_default_home(tmp_path: object) -> None:
    assert L.comm_home({"SOT_COMM_HOME": "/x/./y/", "PWD": "/p"}) == "/x/y"
    assert L.comm_home({"HOME": "/home/u"}) == "/home/u/.sot-comm"
    assert L.comm_home({"SOT_COMM_HOME": "", "HOME": "/home/u"}) == "/home/u/.sot-comm"
