"""Issue 13, part 3: ``sotd daemon install`` writes (and, where systemd runs for the user, enables) a
systemd user unit; ``sotd daemon uninstall`` takes it back.

No stand-in: the unit file is written into a temporary ``XDG_CONFIG_HOME``, and ``systemctl --user`` is
called only when a user manager answers here. On a machine without one (a container's root, as in CI)
the test checks the "systemd does not run for this user here" branch and says so in its output.
"""

from __future__ import annotations

import os
import sys

import pytest

from sotd.daemon import unit
from tests.conftest import clean_env
from tests.newcomer.daemons import daemon

pytestmark = pytest.mark.integration


def test_unit_text_quotes_what_systemd_would_read_otherwise() -> None:
    text = unit.unit_text("/opt/py", "/run/a b%/s.sock", {"SOT_COMM_HOME": '/c/"x"', "SOT_OTHER": "no"})
    assert 'Environment="SOT_COMM_HOME=/c/\\"x\\""\n' in text
    assert 'ExecStart="/opt/py" "-m" "sotd.cli.main" "daemon" "run" "--socket" "/run/a b%%/s.sock"\n' in text
    assert "SOT_OTHER" not in text and text.endswith("WantedBy=default.target\n")


def test_install_writes_the_unit_and_uninstall_removes_it(tmp_path: object) -> None:
    work = str(tmp_path)
    env = clean_env()
    sock = os.path.join(work, "run", "sotd.sock")
    env.update(
        XDG_CONFIG_HOME=os.path.join(work, "config"),
        SOT_COMM_HOME=os.path.join(work, "comm"),
        SOT_SOCKET=sock,
    )
    path = os.path.join(work, "config", "systemd", "user", "sotd.service")
    runs, why = unit.user_manager_runs()
    print(f"systemctl --user {'reaches a user manager: enable/disable run for real' if runs else why}")
    try:
        r = daemon(env, "install")
        assert r.returncode == 0, r
        with open(path) as f:
            assert f.read() == unit.unit_text(sys.executable, sock, env)
        assert r.stdout.splitlines()[0] == f"wrote the systemd user unit {path}"
        if runs:
            assert r.stdout.splitlines()[1].startswith("enabled and started sotd.service"), r.stdout
        else:
            assert r.stdout.splitlines()[1:] == [
                f"systemd does not run for this user here: {why}; the unit was written but not enabled.",
                "Instead: every command that needs the daemon starts it (or start it yourself: sotd daemon "
                "start);",
                "where systemd runs for you, enable the unit with: systemctl --user enable --now sotd.service",
            ]
    finally:
        r = daemon(env, "uninstall")
    assert r.returncode == 0, r
    assert f"removed the systemd user unit {path}" in r.stdout.splitlines()
    assert not os.path.exists(path)
    r = daemon(env, "uninstall")
    assert (r.returncode, r.stdout.splitlines()[-1]) == (
        0,
        f"no systemd user unit at {path}: nothing to remove",
    )
