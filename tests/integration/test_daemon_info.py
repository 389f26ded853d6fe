"""``cli.comm.daemoncall.daemon_info``: what spawn and despawn both ask a daemon first (``version.query``) and
the host it declares (issue 16: one home for what two verbs share). A scripted daemon on a real Unix
socket (``tests.fakes.fake_daemon``) answers; the verbs decide what an empty host means.
"""

from __future__ import annotations

import pytest

from sotd.cli.comm import daemoncall
from sotd.cli.comm.common import Context
from sotd.errors import SotdError
from sotd.wire import payloads
from tests.fakes.fake_daemon import FakeDaemon

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

CASES = [
    ("a declared host", {"daemon": {"host": "boxb", "send_command": "s"}}, "boxb"),
    ("no host", {"daemon": {"send_command": "s"}}, ""),
    ("an empty host", {"daemon": {"host": ""}}, ""),
    ("a host that is not a string", {"daemon": {"host": 7}}, ""),
    ("no daemon object", {"ok": True}, ""),
]


@pytest.mark.parametrize(("name", "answer", "host"), CASES, ids=[c[0] for c in CASES])
def test_the_daemon_object_and_its_declared_host(tmp_path, name: str, answer: dict, host: str) -> None:
    ctx = Context({"SOT_SELF_HOST": "boxa", "SOT_COMM_HOME": str(tmp_path / "comm"), "HOME": str(tmp_path)})
    with FakeDaemon(str(tmp_path / "d.sock")) as d:
        d.answer = answer
        info, got = daemoncall.daemon_info(ctx, f"unix:{d.path}")
    assert (info, got) == (answer.get("daemon"), host)
    assert [r.get("op") for r in d.received if r.get("op") != "hello"] == [payloads.VERSION_QUERY]


def test_a_daemon_that_does_not_answer_raises(tmp_path) -> None:
    ctx = Context({"SOT_SELF_HOST": "boxa", "SOT_COMM_HOME": str(tmp_path / "comm"), "HOME": str(tmp_path)})
    with FakeDaemon(str(tmp_path / "d.sock")) as d:
        d.mode = "close"
        with pytest.raises(SotdError):
            daemoncall.daemon_info(ctx, f"unix:{d.path}")
