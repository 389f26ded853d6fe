"""The tmux argv builders and output parsers (pure): exact argv, always ``-S <socket>``."""

from __future__ import annotations

import pytest

from sotd.terminal import tmux as t

pytestmark = pytest.mark.unit

S = "/run/sotd/tmux.sock"


def test_new_session_argv() -> None:
    argv = t.new_session_argv(
        S, "sotd", "ws-1", "/p", env={"B": "2", "A": "x y"}, argv=["claude", "--x"], size=(120, 40)
    )
    assert argv == [
        "tmux", "-S", S, "new-session", "-d", "-P", "-F", "#{pane_id}", "-s", "sotd", "-n", "ws-1",
        "-c", "/p", "-x", "120", "-y", "40", "-e", "A=x y", "-e", "B=2", "--", "claude", "--x",
    ]  # fmt: skip


def test_new_session_argv_with_config_and_single_word_command_quoted() -> None:
    argv = t.new_session_argv(S, "sotd", "w", "/p", env={}, argv=["/opt/my agent"], config="/dev/null")
    assert argv[:5] == ["tmux", "-S", S, "-f", "/dev/null"]
    assert argv[-2:] == ["--", "'/opt/my agent'"]


def test_new_window_argv() -> None:
    assert t.new_window_argv(S, "sotd", "ws-2", "/q", env={"K": "v"}, argv=["sot-capsule", "supervise", "/s/workspaces/ws-2"]) == [
        "tmux", "-S", S, "new-window", "-d", "-P", "-F", "#{pane_id}", "-t", "=sotd:", "-n", "ws-2",
        "-c", "/q", "-e", "K=v", "--", "sot-capsule", "supervise", "/s/workspaces/ws-2",
    ]  # fmt: skip


def test_capture_argv_is_one_call_for_frame_and_cursor() -> None:
    assert t.capture_argv(S, "%3") == [
        "tmux", "-S", S, "capture-pane", "-e", "-p", "-t", "%3", ";",
        "display-message", "-p", "-t", "%3", "#{cursor_x} #{cursor_y} #{pane_width}",
    ]  # fmt: skip


def test_send_and_kill_argv() -> None:
    assert t.send_text_argv(S, "%3", "-x") == ["tmux", "-S", S, "send-keys", "-t", "%3", "-l", "--", "-x"]
    assert t.send_enter_argv(S, "%3") == ["tmux", "-S", S, "send-keys", "-t", "%3", "Enter"]
    assert t.kill_window_argv(S, "%3") == ["tmux", "-S", S, "kill-window", "-t", "%3"]
    assert t.kill_server_argv(S) == ["tmux", "-S", S, "kill-server"]
    assert t.list_windows_argv(S) == ["tmux", "-S", S, "list-windows", "-a", "-F", t.WINDOW_FORMAT]
    assert t.attach_argv(S, "=sotd") == ["tmux", "-S", S, "attach-session", "-t", "=sotd"]


def test_every_builder_names_the_socket() -> None:
    for argv in (
        t.new_session_argv(S, "s", "w", "/", env={}, argv=["a", "b"]),
        t.new_window_argv(S, "s", "w", "/", env={}, argv=["a"]),
        t.capture_argv(S, "%1"),
        t.send_text_argv(S, "%1", "x"),
        t.send_enter_argv(S, "%1"),
        t.kill_window_argv(S, "%1"),
        t.list_windows_argv(S),
        t.kill_server_argv(S),
        t.attach_argv(S),
    ):
        assert argv[:3] == ["tmux", "-S", S]


def test_clean_environ_drops_tmux_variables() -> None:
    env = t.clean_environ({"TMUX": "/tmp/x,1,0", "TMUX_PANE": "%1", "TMUX_TMPDIR": "/t", "PATH": "/bin"})
    assert env == {"TMUX_TMPDIR": "/t", "PATH": "/bin"}


def test_parse_capture() -> None:
    assert t.parse_capture("a\n\x1b[2mb\x1b[0m\n2 1 80\n") == ("a\n\x1b[2mb\x1b[0m\n", 2, 1, 80)
    assert t.parse_capture("0 0 10\n") == ("", 0, 0, 10)
    with pytest.raises(t.TmuxError):
        t.parse_capture("a\nb\n")


def test_parse_windows() -> None:
    out = "sotd\t@1\tws-1\t%1\t4242\t0\nsotd\t@2\tws-2\t%2\t4243\t1\nbroken line\n"
    assert t.parse_windows(out) == [
        t.Window("sotd", "@1", "ws-1", "%1", 4242, False),
        t.Window("sotd", "@2", "ws-2", "%2", 4243, True),
    ]


def test_parse_environment() -> None:
    out = "A=1\n-B\nC=x=y\nD=\nthe rest of a value that held a newline\n-\n"
    assert t.parse_environment(out) == {"A": "1", "B": None, "C": "x=y", "D": ""}


def test_environment_sync_argv() -> None:
    """Issue 27 item 5: set what differs, unset what the new environment lacks, clear the session's own
    copies; a word ending in ``;`` is written with ``\\;`` (tmux would take the ``;`` for a separator)."""
    argv = t.environment_sync_argv(
        S,
        "sotd",
        {"A": "1", "B": "2", "GONE": "x", "MARKED": None},
        {"SSH_AUTH_SOCK": "/old"},
        {"A": "1", "B": "3;", "NEW": "a\\;"},
    )
    assert argv == [
        "tmux", "-S", S,
        "set-environment", "-g", "B", "3\\;", ";",
        "set-environment", "-g", "NEW", "a\\\\;", ";",
        "set-environment", "-g", "-u", "GONE", ";",
        "set-environment", "-t", "=sotd", "-u", "SSH_AUTH_SOCK",
    ]  # fmt: skip
    assert t.environment_sync_argv(S, "sotd", {"A": "1", "M": None}, {}, {"A": "1"}) is None


def test_show_environment_argv() -> None:
    assert t.show_environment_argv(S) == ["tmux", "-S", S, "show-environment", "-g"]
    assert t.show_environment_argv(S, "sotd") == ["tmux", "-S", S, "show-environment", "-t", "=sotd"]


@pytest.mark.parametrize(
    ("why", "again"),
    [
        ("tmux failed: no server running on /run/sotd/tmux.sock", True),
        ("tmux failed: server exited unexpectedly", True),
        ("tmux failed: error connecting to /run/sotd/tmux.sock (No such file or directory)", True),
        ("tmux failed: duplicate session: sotd", True),
        ("tmux failed: can't find pane: %9", False),
        ("tmux failed: exit 1", False),
        ("tmux new-window timed out after 5.0s", False),
        ("cannot run tmux: No such file or directory", False),
    ],
)
def test_lost_race_table(why: str, again: bool) -> None:
    assert t.lost_race(why) is again
