"""Behaviour 1.2 (comm-join.sh) through the installed wrapper: the texts and exit codes the audit found
untested, and that a refused or failed join writes nothing it should not."""

from __future__ import annotations

import os

import pytest

from tests.conftest import Comm, Session
from tests.integration.cli_support import put_registry, registry, row, skeleton, snapshot
from tests.integration.test_cli_identity import Tree

pytestmark = pytest.mark.integration


@pytest.fixture
def comm(comm: Comm) -> Comm:
    return skeleton(comm)


def joined(comm: Comm, name: str, repo: str, others: str = "none") -> list[str]:
    return [
        f"Joined sot-comm as @{name}  ({repo} on testhost).",
        f"  inbox: {comm.home}/inbox/{name}.jsonl",
        f"Others registered: {others}",
    ]


def slot_refusal(s: Session, ws: str = "unset") -> str:
    repo = os.path.basename(s.root)
    return (
        f"comm-join.sh: REFUSING to put a '{repo}' identity in that slot — it is keyed by this shell's "
        f"$SOT_WORKSPACE_ID ('{ws}'), and a row that comes to name another project's session reads that "
        f"session's mail. Either run this from inside the row it belongs to, or, if this row really is "
        f"'{repo}' now, re-run with --repin."
    )


OTHER = "/elsewhere/other"
CLAIM = f"other\nrepo=other\nroot={OTHER}\n"


def put_slot(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


# ---------------------------------------------------------------------------------------- slot guard


def test_1_2_slot_claimed_for_another_project_exit_3_writes_nothing(comm: Comm) -> None:
    a = comm.session("alpha")
    put_slot(a.self_file, CLAIM)
    before = snapshot(comm.home)
    r = a.run("join", "--name", "alpha")
    assert r.code == 3, r
    assert r.out == ""
    assert (
        r.err_lines[0]
        == f"the identity slot '{a.self_file}' already names @other, claimed for root='{OTHER}'"
    )
    assert r.err_lines[1].startswith("REFUSING to write ")
    assert r.err_lines[2:] == [slot_refusal(a)]
    assert snapshot(comm.home) == before  # no registry row, no inbox, the slot as it was
    assert "alpha" not in registry(comm)["agents"]


def test_1_2_slot_legacy_repo_claim_is_refused_too(comm: Comm) -> None:
    a = comm.session("alpha")
    put_slot(a.self_file, "other\nrepo=other\n")
    before = snapshot(comm.home)
    r = a.run("join")
    assert r.code == 3, r
    assert (
        r.err_lines[0] == f"the identity slot '{a.self_file}' already names @other, claimed for repo='other'"
    )
    assert r.err_lines[-1] == slot_refusal(a)
    assert snapshot(comm.home) == before


def test_1_2_repin_passes_the_slot_guard(comm: Comm) -> None:
    a = comm.session("alpha")
    put_slot(a.self_file, CLAIM)
    r = a.run("join", "--name", "alpha", "--repin")
    assert (r.code, r.out_lines, r.err) == (0, joined(comm, "alpha", "alpha"), ""), r
    with open(a.self_file) as f:
        assert f.read() == f"alpha\nrepo=alpha\nroot={a.root}\n"
    assert registry(comm)["agents"]["alpha"]["root"] == a.root


def test_1_2_nopane_slot_is_exempt(comm: Comm) -> None:
    a = comm.session("alpha")
    a.env.pop("SOT_COMM_SELF_FILE")
    slot = os.path.join(comm.layout.self_dir, "testhost__nopane.txt")
    put_slot(slot, CLAIM)
    r = a.run("join", "--name", "alpha")
    assert (r.code, r.out_lines, r.err) == (0, joined(comm, "alpha", "alpha"), ""), r
    with open(slot) as f:
        assert f.read() == f"alpha\nrepo=alpha\nroot={a.root}\n"


def test_1_2_row_slot_refusal_names_the_workspace_id(comm: Comm, tmp_path: object) -> None:
    tree = Tree(os.path.join(str(tmp_path), "tree"))
    a = comm.session("alpha")
    put_slot(os.path.join(comm.layout.self_dir, "testhost__ws-x.txt"), CLAIM)
    before = snapshot(comm.home)
    cap = ["supervise", os.path.join(tree.ws, "ws-x"), "--start", "--"]
    r = tree.run(
        a,
        [os.path.join(comm.layout.bin_dir, "comm-join.sh"), "--name", "alpha"],
        layers=("claude",),
        env={"SOT_WORKSPACE_ID": "ws-x"},
        drop=("SOT_COMM_SELF_FILE",),
        capsule_args=cap,
    )
    assert (r.code, r.out) == (3, ""), r
    assert r.err_lines[-1] == slot_refusal(a, "ws-x")
    assert snapshot(comm.home) == before


# ---------------------------------------------------------------------------------- self-file failure


def test_1_2_self_file_write_failure_is_fatal_exit_1(comm: Comm) -> None:
    a = comm.session("alpha")
    blocker = os.path.join(comm.work, "not-a-folder")
    with open(blocker, "w") as f:
        f.write("a file where the slot's folder should be\n")
    slot = os.path.join(blocker, "alpha.txt")
    r = a.run("join", "--name", "alpha", env={"SOT_COMM_SELF_FILE": slot})
    assert (r.code, r.out) == (1, ""), r
    assert len(r.err_lines) == 2, r
    assert r.err_lines[0].startswith(f"could not write the self file '{slot}'"), r
    assert r.err_lines[1].startswith(
        f"comm-join.sh: FATAL — joined as @alpha in the registry, but could not write the local self-file "
        f"at '{slot}' (see reason above). "
    ), r
    assert registry(comm)["agents"]["alpha"]["root"] == a.root  # the row was written first


# ------------------------------------------------------------------------------------------ stranding


def _tier2(comm: Comm, a: Session, t1: str) -> tuple[str, list[str]]:
    r = a.run("join")
    assert r.code == 0, r
    name = r.out_lines[0].split("@", 1)[1].split("  ", 1)[0]
    assert name != t1 and name.startswith("alpha-") and name.endswith("-testhost"), r
    assert r.out_lines == joined(comm, name, "alpha", t1), r
    return name, r.err_lines


def test_1_2_stranding_warning_when_the_tier1_holder_is_live(comm: Comm) -> None:
    a = comm.session("alpha")
    t1 = "alpha-testhost"
    doc = registry(comm)
    doc["agents"][t1] = row(comm, t1, "/elsewhere/alpha", ago=60)
    put_registry(comm, doc)
    name, err = _tier2(comm, a, t1)
    assert err == [
        f"comm: '@{t1}' is already held by /elsewhere/alpha — joining as '@{name}' instead",
        f"*** WARNING: joined as '@{name}', but '@{t1}' (this project's bare handle) is held by a live "
        "session of another project.",
        f"*** Mail sent to @{t1} will not reach you. If '@{t1}' should be yours, recover it with:",
        f"***   comm-leave.sh --name {name}; comm-join.sh --name {t1}",
    ]
    assert registry(comm)["agents"][t1]["root"] == "/elsewhere/alpha"  # never reclaimed automatically


def test_1_2_no_stranding_warning_when_the_tier1_holder_is_stale(comm: Comm) -> None:
    a = comm.session("alpha")
    t1 = "alpha-testhost"
    doc = registry(comm)
    doc["agents"][t1] = row(comm, t1, "/elsewhere/alpha", ago=601)
    put_registry(comm, doc)
    name, err = _tier2(comm, a, t1)
    assert err == [f"comm: '@{t1}' is already held by /elsewhere/alpha — joining as '@{name}' instead"]


# ----------------------------------------------------------------------------------- registry texts


def test_1_2_registry_protocol_mismatch_warns_and_joins(comm: Comm) -> None:
    put_registry(comm, {"protocol_version": 2, "agents": {}})
    r = comm.session("alpha").run("join", "--name", "alpha")
    assert r.code == 0, r
    assert r.out_lines == joined(comm, "alpha", "alpha")
    assert r.err_lines == [
        "WARNING: registry protocol v2 != client v1 — run ShipTools.update_comm() on all machines"
    ]


def test_1_2_protocol_v1_says_nothing(comm: Comm) -> None:
    r = comm.session("alpha").run("join", "--name", "alpha")
    assert (r.code, r.err) == (0, ""), r


def test_1_2_unreadable_registry_derives_no_handle_and_writes_nothing(comm: Comm) -> None:
    with open(comm.layout.registry, "w") as f:
        f.write('{"agents": 5}\n')
    before = snapshot(comm.home)
    r = comm.session("alpha").run("join")
    assert (r.code, r.out, r.err_lines) == (
        1,
        "",
        [
            "comm: the registry could not be read, so no handle was derived; nothing was written",
            "see why and what to do: sotd doctor",
        ],
    ), r
    assert snapshot(comm.home) == before


def test_1_2_unreadable_registry_with_a_name_writes_nothing(comm: Comm) -> None:
    with open(comm.layout.registry, "w") as f:
        f.write("{\n")
    before = snapshot(comm.home)
    r = comm.session("alpha").run("join", "--name", "alpha")
    assert (r.code, r.out, r.err_lines) == (
        1,
        "",
        [
            "FAILED: the registry could not be read or updated, so nothing was written",
            "see why and what to do: sotd doctor",
        ],
    ), r
    assert snapshot(comm.home) == before


# ------------------------------------------------------------------------------------------- options


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_1_2_help_exit_0_writes_nothing(comm: Comm, flag: str) -> None:
    before = snapshot(comm.home)
    r = comm.session("alpha").run("join", flag)
    assert (r.code, r.err) == (0, ""), r
    assert r.out_lines[0].startswith("usage: comm-join.sh "), r
    assert snapshot(comm.home) == before


@pytest.mark.parametrize("opt", ["-x", "--bogus", "--name-x"])
def test_1_2_unknown_option_exit_2_in_the_spec_s_words_writes_nothing(comm: Comm, opt: str) -> None:
    """Behaviour 1.2's sentence byte for byte (issue 28 item 4): the command table leaves a pinned verb's
    unknown option to join's own parser, which refuses it before anything is read or written."""
    before = snapshot(comm.home)
    r = comm.session("alpha").run("join", opt)
    assert (r.code, r.out, r.err) == (
        2,
        "",
        f"comm-join.sh: unknown option '{opt}' (a handle can't start with '-'; see --help)\n",
    ), r
    assert snapshot(comm.home) == before


def test_1_2_a_bare_dash_is_no_handle(comm: Comm) -> None:
    before = snapshot(comm.home)
    r = comm.session("alpha").run("join", "-")
    assert (r.code, r.out, r.err_lines) == (
        2,
        "",
        ["comm-join.sh: unknown option '-' (a handle can't start with '-'; see --help)"],
    ), r
    assert snapshot(comm.home) == before


def test_1_2_unknown_option_typed_directly_names_sotd_comm_join(comm: Comm) -> None:
    r = comm.session("alpha").run("join", "-x", wrapper=False)
    assert (r.code, r.err_lines) == (
        2,
        ["sotd comm join: unknown option '-x' (a handle can't start with '-'; see --help)"],
    ), r


# ------------------------------------------------------------------------------------ the environment


def test_1_2_sot_comm_name_is_used_verbatim_even_when_held(comm: Comm) -> None:
    b = comm.session("beta")
    assert b.run("join", "--name", "shared").code == 0
    a = comm.session("alpha")
    r = a.run("join", env={"SOT_COMM_NAME": "shared"})
    assert (r.code, r.out_lines, r.err) == (0, joined(comm, "shared", "alpha"), ""), r
    assert registry(comm)["agents"]["shared"]["root"] == a.root


def test_1_2_name_precedence_option_env_self_file(comm: Comm) -> None:
    a = comm.session("alpha")
    assert a.run("join", "--name", "alpha").code == 0
    # the env name wins over the slot's own handle
    r = a.run("join", env={"SOT_COMM_NAME": "alpha2"})
    assert (r.code, r.out_lines[0]) == (0, "Joined sot-comm as @alpha2  (alpha on testhost)."), r
    # --name wins over the env name; the positional form is the same
    r = a.run("join", "--name", "alpha3", env={"SOT_COMM_NAME": "alpha2"})
    assert (r.code, r.out_lines[0]) == (0, "Joined sot-comm as @alpha3  (alpha on testhost)."), r
    r = a.run("join", "alpha4", env={"SOT_COMM_NAME": "alpha2"})
    assert (r.code, r.out_lines[0]) == (0, "Joined sot-comm as @alpha4  (alpha on testhost)."), r
    # no option, no env: the slot's own handle
    r = a.run("join")
    assert (r.code, r.out_lines[0]) == (0, "Joined sot-comm as @alpha4  (alpha on testhost)."), r


def test_1_2_invalid_sot_comm_name_is_refused(comm: Comm) -> None:
    before = snapshot(comm.home)
    r = comm.session("alpha").run("join", env={"SOT_COMM_NAME": "a..b"})
    assert (r.code, r.out) == (1, ""), r
    assert r.err_lines == [
        "invalid handle 'a..b': a handle is 1-64 bytes of A-Za-z0-9._-, with no '..' and no leading '-'"
    ]
    assert snapshot(comm.home) == before


@pytest.mark.parametrize(
    ("env", "args", "want"),
    [
        ({"SOT_COMM_EXPERTISE": " go ,, rust,  ,c++ ,"}, [], ["go", "rust", "c++"]),
        ({"SOT_COMM_EXPERTISE": "solo"}, [], ["solo"]),
        ({"SOT_COMM_EXPERTISE": " , ,"}, [], []),
        ({}, [], []),
        ({"SOT_COMM_EXPERTISE": "env"}, ["--expertise", " a , b "], ["a", "b"]),
        ({"SOT_COMM_EXPERTISE": "env"}, ["--expertise=x,,y"], ["x", "y"]),
        ({"SOT_COMM_EXPERTISE": "env"}, ["--expertise", ""], []),
    ],
)
def test_1_2_expertise_split_trimmed_empties_dropped(
    comm: Comm, env: dict[str, str], args: list[str], want: list[str]
) -> None:
    r = comm.session("alpha").run("join", "--name", "alpha", *args, env=env)
    assert r.code == 0, r
    assert registry(comm)["agents"]["alpha"]["expertise"] == want


# ------------------------------------------------------------------------------- agent.join warnings


def _row_join(comm: Comm, tmp: str, env: dict[str, str], drop: tuple[str, ...]):
    tree = Tree(os.path.join(tmp, "tree"))
    a = comm.session("alpha")
    cap = ["supervise", os.path.join(tree.ws, "ws-x"), "--start", "--"]
    r = tree.run(
        a,
        [os.path.join(comm.layout.bin_dir, "comm-join.sh"), "--name", "alpha"],
        layers=("claude",),
        env={"SOT_WORKSPACE_ID": "ws-x", **env},
        drop=("SOT_COMM_SELF_FILE", *drop),
        capsule_args=cap,
    )
    return r


def test_1_2_agent_join_not_answered_is_a_warning(comm: Comm, tmp_path: object) -> None:
    sock = os.path.join(comm.work, "nobody-listens.sock")
    r = _row_join(comm, str(tmp_path), {"SOT_SOCKET": sock}, ())
    assert r.code == 0, r
    assert r.out_lines == joined(comm, "alpha", "alpha")
    assert r.err_lines == [
        "comm-join.sh: WARNING — could not declare '@alpha' to the daemon (agent.join); it will retry at the "
        "next comm-session-start."
    ]
    assert registry(comm)["agents"]["alpha"]["workspace_id"] == "ws-x"


def test_1_2_agent_join_with_no_endpoint_is_a_warning(comm: Comm, tmp_path: object) -> None:
    xdg = os.path.join(str(tmp_path), "xdg")
    os.makedirs(xdg)
    r = _row_join(comm, str(tmp_path), {"XDG_RUNTIME_DIR": xdg}, ("SOT_SOCKET",))
    assert r.code == 0, r
    assert r.out_lines == joined(comm, "alpha", "alpha")
    assert r.err_lines == [
        "comm-join.sh: WARNING — this shell's identity names row 'ws-x' but no daemon endpoint could be "
        "resolved; the daemon won't learn '@alpha' until the next comm-session-start."
    ]
