"""The default socket follows the comm folder (issue 27 item 5), and ``sotd session-socket-path`` answers it
(issue 28 item 1; behaviour 2.2): ``sotd.runtime.socket_leaf``, ``default_socket``, and the folder check of
``sotd daemon start|status`` (``sotd.daemon.command.folder_mismatch``). Pure rules, table tests."""

from __future__ import annotations

import hashlib
import os

import pytest

from sotd import runtime
from sotd.cli import sessionsocket
from sotd.daemon import command

pytestmark = pytest.mark.unit


def _h8(path: str) -> str:
    return hashlib.sha256(path.encode()).hexdigest()[:8]


@pytest.mark.parametrize(
    ("label", "folder", "default", "want"),
    [
        ("sot", "/home/u/.sot-comm", "/home/u/.sot-comm", "sotd-sot"),  # the default folder keeps its path
        ("sot", "/srv/team", "/home/u/.sot-comm", f"sotd-sot-{_h8('/srv/team')}"),
        ("x", "/srv/team", "/home/u/.sot-comm", f"sotd-x-{_h8('/srv/team')}"),
        ("sot", "/srv/other", "/home/u/.sot-comm", f"sotd-sot-{_h8('/srv/other')}"),
    ],
)
def test_socket_leaf(label: str, folder: str, default: str, want: str) -> None:
    assert runtime.socket_leaf(label, folder, default) == want


def test_two_folders_two_sockets_one_folder_one_socket(tmp_path: object) -> None:
    base = str(tmp_path)
    home = os.path.join(base, "home")
    os.makedirs(os.path.join(base, "real"))
    os.makedirs(home)
    os.symlink(os.path.join(base, "real"), os.path.join(base, "link"))
    env = {"HOME": home, "XDG_RUNTIME_DIR": "/run/user/7"}
    default = runtime.default_socket(env)
    assert default == "/run/user/7/sotd-sot/sotd.sock"
    assert runtime.default_socket({**env, "SOT_COMM_HOME": os.path.join(home, ".sot-comm")}) == default
    real = runtime.default_socket({**env, "SOT_COMM_HOME": os.path.join(base, "real")})
    assert real == f"/run/user/7/sotd-sot-{_h8(os.path.join(base, 'real'))}/sotd.sock"
    # a folder is its real path: spelled through a link, it is the same folder and the same socket
    assert runtime.default_socket({**env, "SOT_COMM_HOME": os.path.join(base, "link")}) == real
    assert runtime.default_socket({**env, "SOT_BACKEND_LABEL": "b"}) == "/run/user/7/sotd-b/sotd.sock"
    assert runtime.default_socket({**env, "SOT_BACKEND_LABEL": "b"}, "sot") == default


def test_session_socket_path_is_sot_socket_else_the_label_s_default() -> None:
    env = {"HOME": "/home/u", "XDG_RUNTIME_DIR": "/run/user/7"}
    assert sessionsocket.socket_for("sot", env) == "/run/user/7/sotd-sot/sotd.sock"
    assert sessionsocket.socket_for("other", env) == "/run/user/7/sotd-other/sotd.sock"
    assert sessionsocket.socket_for("sot", {**env, "SOT_SOCKET": "/x/s.sock"}) == "/x/s.sock"


@pytest.mark.parametrize(
    ("info", "want"),
    [
        ({"comm_folder": "/a"}, None),
        ({"comm_folder": "/b"}, "/b"),
        ({}, None),  # a daemon older than the check says nothing: taken at its word
        ({"comm_folder": ""}, None),
        ({"comm_folder": 5}, None),
    ],
)
def test_folder_mismatch(info: dict[str, object], want: str | None) -> None:
    assert command.folder_mismatch(info, "/a") == want
