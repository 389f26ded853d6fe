"""The refusals that had no class of their own raise their class with the sentence they always printed.

File: ``tests/unit/test_error_classes_of_refusals.py`` (issue 29 item 1: these were raised as the bare
``SotdError``, code ``error``, so ``except`` on a class could not pick them out). Guarantee: each is its
``sotd.errors`` class, with its code, exit status 1 and the exact sentence (and hint) the command printed
before. What would break it: a raise moved back to the base class, or a sentence changed on the way.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from sotd import errors
from sotd.cli.comm import daemoncall
from sotd.cli.comm.common import Context
from sotd.cli.install import codex_config, mcp, scripts, settings
from sotd.daemon import server

pytestmark = pytest.mark.unit


def _raised(call: object, *args: object) -> errors.SotdError:
    with pytest.raises(errors.SotdError) as got:
        call(*args)  # type: ignore[operator]
    return got.value


def test_a_settings_file_sotd_cannot_edit_is_settings_refused() -> None:
    cases = [
        (settings.load_doc, ("/h/.claude/settings.json", b"[1]"),
         "/h/.claude/settings.json does not hold a JSON object; nothing was changed", None),
        (mcp.merge_claude_json, ({"mcpServers": []}, "/bin/sotd"),
         '~/.claude.json\'s "mcpServers" is not an object; nothing was changed', None),
        (codex_config.set_table, ("/h/.codex/config.toml", {"shell_environment_policy": 3}),
         "/h/.codex/config.toml: shell_environment_policy is not a table; nothing was changed",
         "Make it a [shell_environment_policy] table, then run: sotd comm install --agent-settings"),
    ]  # fmt: skip
    for call, args, sentence, hint in cases:
        e = _raised(call, *args)
        assert type(e) is errors.SettingsRefused and e.code == "settings_refused"
        assert (e.message, e.hint, e.exit_status) == (sentence, hint, 1)


def test_settings_whose_hooks_are_not_an_object_are_refused_by_class() -> None:
    e = _raised(settings.merge_claude_settings, {"hooks": []}, "/h/bin")
    assert type(e) is errors.SettingsRefused
    assert e.message == 'the settings file\'s "hooks" is not an object; nothing was changed'


def test_no_sotd_beside_the_interpreter_is_no_sotd_executable(
    tmp_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = os.path.join(str(tmp_path), "python3")
    monkeypatch.setattr(sys, "executable", python)
    monkeypatch.delenv("SOTD_BIN", raising=False)
    e = _raised(scripts.sotd_executable)
    assert type(e) is errors.NoSotdExecutable and e.code == "no_sotd_executable"
    assert e.message == "sotd comm install: cannot find this installation's sotd beside " + python


def test_an_endpoint_this_version_cannot_dial_is_endpoint_discarded(tmp_path: str) -> None:
    home = os.path.join(str(tmp_path), "comm")
    env = {"SOT_COMM_HOME": home, "SOT_SELF_HOST": "boxa", "PWD": str(tmp_path), "HOME": str(tmp_path)}
    ctx = Context(env)
    e = _raised(daemoncall.call, ctx, "tcp:127.0.0.1:9", "version.query", {})
    assert type(e) is errors.EndpointDiscarded and e.code == "endpoint_discarded"
    assert e.message == "comm-lib: discarding an endpoint this version cannot dial: tcp:127.0.0.1:9"


def test_a_file_where_the_socket_goes_is_socket_path_taken(tmp_path: str) -> None:
    folder = os.path.join(str(tmp_path), "run")
    os.mkdir(folder, 0o700)
    path = os.path.join(folder, "sotd.sock")
    with open(path, "w") as f:
        json.dump({}, f)
    e = _raised(server.prepare_folder, path)
    assert type(e) is errors.SocketPathTaken and e.code == "socket_path_taken"
    assert e.message == f"refusing to serve {path}: something that is not a socket is there"
    assert os.path.isfile(path)  # left as it is
