"""The password claims (ocx.md, the `password` step): one run at a time rotates a login on a repository."""

from __future__ import annotations

import os
import threading

import pytest

from sotd.jobs import placeholders, spec
from sotd.jobs.errors import Refused
from sotd.jobs.steps import PasswordClaims, claim_password
from tests.unit.test_jobs_spec import BASE, agent_run, build_run

pytestmark = pytest.mark.unit

R1, R2, R3 = "1" * 64, "2" * 64, "3" * 64


def _run(body: dict[str, object]) -> spec.RunSpec:
    return placeholders.resolve(spec.parse_run(body), BASE)[0]


def test_a_second_rotation_of_the_same_login_is_refused_until_the_first_ends(tmp_path: object) -> None:
    repo = os.path.join(str(tmp_path), "b.fossil")
    claims = PasswordClaims()
    run = _run(agent_run())
    claim_password(claims, run, repo, R1)
    claim_password(claims, run, repo, R1)  # the same run again (an adoption): still its own
    with pytest.raises(Refused) as e:
        claim_password(claims, run, repo, R2)
    assert e.value.message == (
        f"the password of the login 'agent-user' on this repository belongs to run {R1[:12]} until it ends:"
        " another password step now would break that run's clone"
    )
    assert claims.holder(repo, "agent-user") == R1
    claims.release(R2)  # the refused run's end drops nothing of the holder's
    assert claims.holder(repo, "agent-user") == R1
    claims.release(R1)
    claims.release(R1)  # idempotent
    claim_password(claims, run, repo, R2)
    assert claims.holder(repo, "agent-user") == R2


def test_other_logins_other_repositories_and_runs_without_a_password_step_pass(tmp_path: object) -> None:
    top = str(tmp_path)
    claims = PasswordClaims()
    run = _run(agent_run())
    claim_password(claims, run, os.path.join(top, "b.fossil"), R1)
    claim_password(claims, run, os.path.join(top, "c.fossil"), R2)  # another repository
    other_login = agent_run()
    other_login["process"]["user"] = "build-user"
    claim_password(claims, _run(other_login), os.path.join(top, "b.fossil"), R3)
    claim_password(claims, _run(build_run()), os.path.join(top, "b.fossil"), "4" * 64)  # no password step
    assert claims.holder(os.path.join(top, "b.fossil"), "build-user") == R3


def test_the_repository_is_one_file_whatever_path_names_it(tmp_path: object) -> None:
    top = str(tmp_path)
    os.mkdir(os.path.join(top, "real"))
    os.symlink(os.path.join(top, "real"), os.path.join(top, "link"))
    claims = PasswordClaims()
    assert claims.claim(os.path.join(top, "real", "b.fossil"), "u", R1) is None
    assert claims.claim(os.path.join(top, "link", "b.fossil"), "u", R2) == R1
    assert claims.claim(os.path.join(top, "real", ".", "b.fossil"), "u", R3) == R1


def test_concurrent_claims_have_exactly_one_winner() -> None:
    for _ in range(20):  # bounded
        claims = PasswordClaims()
        go = threading.Barrier(8)
        won: list[str] = []

        def one(
            h: str, claims: PasswordClaims = claims, go: threading.Barrier = go, won: list[str] = won
        ) -> None:
            go.wait()
            if claims.claim("/srv/b.fossil", "u", h) is None:
                won.append(h)

        ts = [threading.Thread(target=one, args=(str(i) * 64,)) for i in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(10)
        assert len(won) == 1 and claims.holder("/srv/b.fossil", "u") == won[0]
