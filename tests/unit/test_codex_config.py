"""``sotd.cli.install.codex_config``: the bash functions ``--agent-settings`` adds under Codex's
``[shell_environment_policy.set]`` (issue 12, a Codex session outside a row). Exact bytes in and out:
the user's text is kept, a second run adds nothing, bad TOML and a form that cannot take our keys are
refused with the sentence and the next step, and removal gives back exactly what was there."""

from __future__ import annotations

import tomllib

import pytest

from sotd.cli.install import codex_config as cc
from sotd.errors import SotdError

pytestmark = pytest.mark.unit

BIN = "/home/u/.sot-comm/bin"
FUNCS = cc.shell_functions(BIN, ["comm-poll.sh", "comm-send.sh"])
POLL = '"BASH_FUNC_comm-poll.sh%%" = "() { \'/home/u/.sot-comm/bin/comm-poll.sh\' \\"$@\\"; }"'
SEND = '"BASH_FUNC_comm-send.sh%%" = "() { \'/home/u/.sot-comm/bin/comm-send.sh\' \\"$@\\"; }"'
P = "/home/u/.codex/config.toml"


def test_one_function_per_script_calls_it_by_full_path_with_the_same_arguments() -> None:
    assert cc.shell_functions("/a b/it's", ["comm-poll.sh"]) == {
        "BASH_FUNC_comm-poll.sh%%": "() { '/a b/it'\\''s/comm-poll.sh' \"$@\"; }"
    }
    assert cc.function_lines(FUNCS) == [POLL, SEND]


@pytest.mark.parametrize(
    ("before", "after"),
    [
        # no file (or an empty one): the table is made
        ("", f"[shell_environment_policy.set]\n{cc.MARK}\n{POLL}\n{SEND}\n"),
        # other tables, the policy table without `set`, no final newline: appended after a blank line
        (
            'model = "m"\n\n[shell_environment_policy]\ninherit = "all"\n\n[projects."/x"]\ntrust_level = "trusted"',
            'model = "m"\n\n[shell_environment_policy]\ninherit = "all"\n\n[projects."/x"]\ntrust_level = "trusted"'
            f"\n\n[shell_environment_policy.set]\n{cc.MARK}\n{POLL}\n{SEND}\n",
        ),
        # the user's own set table: our keys go right under its header, theirs stay
        (
            '[shell_environment_policy.set]  # mine\nFOO = "1"\n\n[tui]\nx = 1\n',
            f'[shell_environment_policy.set]  # mine\n{cc.MARK}\n{POLL}\n{SEND}\nFOO = "1"\n\n[tui]\nx = 1\n',
        ),
    ],
)
def test_the_lines_are_added_keeping_every_byte_of_the_users_text(before: str, after: str) -> None:
    new, added, foreign = cc.add_functions(P, before, FUNCS)
    assert new == after
    assert foreign == []
    again, more, _ = cc.add_functions(P, new, FUNCS)  # idempotent
    assert (again, more) == (new, [])
    assert cc.remove_functions(P, new, added, list(FUNCS)) == (before if before.endswith("\n") or not before
                                                                else before + "\n")  # fmt: skip


def test_a_key_the_user_set_to_something_else_is_left_and_named() -> None:
    before = '[shell_environment_policy.set]\n"BASH_FUNC_comm-poll.sh%%" = "() { echo mine; }"\n'
    new, added, foreign = cc.add_functions(P, before, FUNCS)
    assert foreign == ["BASH_FUNC_comm-poll.sh%%"]
    assert added == [cc.MARK, SEND]
    assert (
        tomllib.loads(new)["shell_environment_policy"]["set"]["BASH_FUNC_comm-poll.sh%%"]
        == "() { echo mine; }"
    )


def test_bad_toml_is_refused_with_the_reason_and_the_command_to_run_after_fixing_it() -> None:
    with pytest.raises(SotdError) as e:
        cc.add_functions(P, "model = [1,\n", FUNCS)
    assert (
        e.value.message == f"{P} is not valid TOML (Invalid value (at end of document)); nothing was changed"
    )
    assert e.value.hint == "Fix that line, then run: sotd comm install --agent-settings"


def test_an_inline_set_table_cannot_take_our_keys_and_nothing_is_written() -> None:
    before = '[shell_environment_policy]\nset = { PATH = "/usr/bin" }\n'
    with pytest.raises(SotdError) as e:
        cc.add_functions(P, before, FUNCS)
    assert e.value.message == (
        f"{P}: sotd cannot add its lines under [shell_environment_policy.set] safely (Cannot declare "
        "('shell_environment_policy', 'set') twice (at line 4, column 30)); nothing was changed"
    )
    assert e.value.hint and "sotd comm install" in e.value.hint


def test_a_policy_that_is_not_a_table_is_refused() -> None:
    with pytest.raises(SotdError) as e:
        cc.add_functions(P, 'shell_environment_policy = "all"\n', FUNCS)
    assert e.value.message == f"{P}: shell_environment_policy is not a table; nothing was changed"


def test_removal_after_codex_wrote_more_takes_out_exactly_our_lines() -> None:
    before = 'model = "m"\n'
    new, added, _ = cc.add_functions(P, before, FUNCS)
    later = new + '\n[hooks.state."/h/hooks.json:stop:0:0"]\ntrusted_hash = "sha256:ab"\n'
    assert cc.remove_functions(P, later, added, list(FUNCS)) == (
        'model = "m"\n\n[hooks.state."/h/hooks.json:stop:0:0"]\ntrusted_hash = "sha256:ab"\n'
    )


def test_removal_line_by_line_when_the_block_was_split_and_none_when_nothing_is_ours() -> None:
    before = '[shell_environment_policy.set]\nFOO = "1"\n'
    new, added, _ = cc.add_functions(P, before, FUNCS)
    split = new.replace(f"{POLL}\n", f'{POLL}\nBAR = "2"\n')
    assert (
        cc.remove_functions(P, split, added, list(FUNCS))
        == '[shell_environment_policy.set]\nBAR = "2"\nFOO = "1"\n'
    )
    assert cc.remove_functions(P, before, added, list(FUNCS)) is None
