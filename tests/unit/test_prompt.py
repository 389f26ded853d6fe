"""The free prompt (behaviour 3.3): one table of screens with the exact logged reason, plus capture parsing."""

from __future__ import annotations

import pytest

from sotd.terminal.prompt import (
    WAKE_LINE,
    Screen,
    box_bounds,
    hold_region,
    is_border,
    is_free,
    is_placeholder,
    is_working,
    line_alone_in_box,
    screen_from_capture,
)

pytestmark = pytest.mark.unit

NB = "\u00a0"
W = 80
RULE = "─" * W
HEADER = ["╭───╮ Claude Code v2", "", "● I looked at the files.", ""]
FOOTER = ["  ? for shortcuts"]  # the row Claude Code draws under an empty prompt's box


def box(
    row: str,
    x: int | None = 2,
    *,
    above: list[str] | None = None,
    below: list[str] | None = None,
    top: str = RULE,
    bottom: str = RULE,
    dim: set[int] | None = None,
    width: int = W,
) -> Screen:
    lines = [*(HEADER if above is None else above), top, row, bottom, *(FOOTER if below is None else below)]
    y = lines.index(row, len(HEADER if above is None else above))
    return Screen.of(lines, None if x is None else (x, y), width, {y: dim} if dim else None)


def at(lines: list[str], x: int, y: int, width: int = W) -> Screen:
    return Screen.of(lines, (x, y), width)


NAMED = "─" * 30 + " fix-the-build " + "─" * 35
SUGGEST = f'❯{NB}Try "refactor the parser"'
TRY = f'❯{NB}Try "fix lint errors"'
# Claude Code 2.1.197's placeholder: its first letter under the cursor (drawn reverse, not dim), the rest
# dim but the spaces between words (tests/fixtures/screens/claude-try-placeholder.capture)
TRY_DIM = {i for i in range(3, len(TRY)) if TRY[i] != " "}
PANEL_MAIN = ["  ● main", "  ◯ helper-1", "  ◯ helper-2"]

FREE = [
    ("plain prompt, cursor at glyph+2", box(f"❯{NB}")),
    ("cursor at glyph+1", box(f"❯{NB}", 1)),
    ("named-session top border", box(f"❯{NB}", top=NAMED)),
    ("named border below as well", box(f"❯{NB}", top=NAMED, bottom=NAMED)),
    ("dim suggestion reads as empty", box(SUGGEST, dim=set(range(2, len(SUGGEST))))),
    ("placeholder, its first letter under the cursor not dim", box(TRY, dim=TRY_DIM)),
    ("agents panel with its dot on main", box(f"❯{NB}", below=PANEL_MAIN)),
    ("indented glyph", box(f"  ❯{NB}", 4)),
    ("trailing spaces after the NBSP", box(f"❯{NB}     ")),
    ("footer under the box", box(f"❯{NB}", below=["  ? for shortcuts", "  ⏵⏵ accept edits on"])),
    ("lower rule exactly wide enough", box(f"❯{NB}", bottom="─" * (2 + len(WAKE_LINE) + 2))),
    ("spinner line above the box", box(f"❯{NB}", above=["✻ Working… (3s)", ""])),
    ("box at the very top of the screen", Screen.of([RULE, f"❯{NB}", RULE, *FOOTER], (2, 1), W)),
    ("a permission mode's footer", box(f"❯{NB}", below=["  ⏵⏵ accept edits on (shift+tab to cycle)"])),
    ("the working footer quoted above the box", box(f"❯{NB}", above=["● It says esc to interrupt", ""])),
    (
        "a footer that only mentions interrupting",
        box(f"❯{NB}", below=["  ? for shortcuts · esc to interrupt"]),
    ),
]

NOT_FREE = [
    (
        "a Claude Code box read with Codex's predicate",
        box(f"❯{NB}", below=[]),
        "codex",
        "no idle footer (a dialog, view or overlay is open)",
    ),
    ("unknown agent has no predicate", box(f"❯{NB}"), "aider", "no wake predicate for this agent"),
    ("no cursor", box(f"❯{NB}", None), "claude", "no cursor"),
    ("cursor below the last row", Screen.of([RULE, f"❯{NB}", RULE], (2, 3), W), "claude", "no cursor"),
    ("cursor right of the width", Screen.of([RULE, f"❯{NB}", RULE], (80, 1), W), "claude", "no cursor"),
    (
        "cursor on the top border",
        Screen.of(["", RULE, f"❯{NB}", RULE], (2, 1), W),
        "claude",
        "not in an input box",
    ),
    (
        "permission dialog",
        at(["  Bash command", "  rm -rf build", "  Allow this action? (y/n)", "❯ 1. Yes", "  2. No"], 2, 3),
        "claude",
        "not in an input box",
    ),
    (
        "permission dialog, cursor on its question",
        at(["Allow this action? (y/n)", ""], 24, 0),
        "claude",
        "not in an input box",
    ),
    ("numbered menu in a box", box("❯ 1. Yes"), "claude", "input not empty"),
    (
        "AskUserQuestion menu",
        at([RULE, "☐ Approach", "", "Which parser?", "", "❯ 1. Hand-written", "  2. Generated", RULE], 2, 5),
        "claude",
        "not in an input box",
    ),
    ("dialog input", box("❯ press 1-3 or type your answer"), "claude", "input not empty"),
    (
        "quoted prompt in the transcript, outside a box",
        at(["> earlier:", f"❯{NB}", "● Done.", RULE, f"❯{NB}hello", RULE], 2, 1),
        "claude",
        "not in an input box",
    ),
    ("glyph, ASCII space, text", box("❯ hello"), "claude", "input not empty"),
    (
        "working turn, spinner still (reduced motion)",
        box(f"❯{NB}", above=["● Working…", ""], below=["  esc to interrupt · ← for agents"]),
        "claude",
        "agent is working",
    ),
    (
        "working footer below a draft",
        box(f"❯{NB}later", 7, below=["  esc to interrupt"]),
        "claude",
        "agent is working",
    ),
    (
        "working footer with no indent",
        box(f"❯{NB}", below=["esc to interrupt"]),
        "claude",
        "agent is working",
    ),
    # issue 25: a working screen whose footer row is blank, cut short or cut off read as free
    ("footer row blank", box(f"❯{NB}", below=["   "]), "claude", "no footer under the box"),
    (
        "footer row blank, a panel below it",
        box(f"❯{NB}", below=["", *PANEL_MAIN]),
        "claude",
        "no footer under the box",
    ),
    ("no row under the box", box(f"❯{NB}", below=[]), "claude", "no footer under the box"),
    ("working footer cut short", box(f"❯{NB}", below=["  esc to in"]), "claude", "agent is working"),
    ("working footer cut to its first letter", box(f"❯{NB}", below=["  e"]), "claude", "agent is working"),
    ("draft", box(f"❯{NB}hello", 8), "claude", "input not empty"),
    (
        "draft with no footer (Claude Code hides it)",
        box(f"❯{NB}hello", 8, below=[]),
        "claude",
        "input not empty",
    ),
    ("draft with the cursor moved home", box(f"❯{NB}hello", 2), "claude", "input not empty"),
    ("placeholder with colour off (nothing dim)", box(TRY), "claude", "input not empty"),
    ("one-letter draft, cursor moved home", box(f"❯{NB}f", 2), "claude", "input not empty"),
    ("placeholder-like row, cursor at its end", box(TRY, len(TRY), dim=TRY_DIM), "claude", "input not empty"),
    ("placeholder-like row, cursor on the NBSP", box(TRY, 1, dim=TRY_DIM), "claude", "input not empty"),
    ("placeholder-like row, one letter not dim", box(TRY, dim=TRY_DIM - {9}), "claude", "input not empty"),
    (
        "draft followed by a dim suggestion",
        box(f"❯{NB}fix it please", dim={9, 10, 11, 12, 13, 14}),
        "claude",
        "input not empty",
    ),
    ("bare glyph (Linux needs the NBSP)", box("❯"), "claude", "input not empty"),
    ("glyph and ASCII spaces only", box("❯   "), "claude", "input not empty"),
    ("box without a glyph", box(f"{NB}"), "claude", "no prompt glyph"),
    ("Windows glyph on Linux", box(f">{NB}"), "claude", "no prompt glyph"),
    ("text before the glyph", box(f"x ❯{NB}", 4), "claude", "text before the glyph"),
    ("cursor two cells too far", box(f"❯{NB}", 3), "claude", "cursor not at the prompt"),
    ("cursor on the glyph", box(f"❯{NB}", 0), "claude", "cursor not at the prompt"),
    ("lower rule one short", box(f"❯{NB}", bottom="─" * 45), "claude", "pane too narrow for the wake line"),
    (
        "indent makes it too narrow",
        box(f"  ❯{NB}", 4, bottom="─" * 47, width=47),
        "claude",
        "pane too narrow for the wake line",
    ),
    (
        "panel focused",
        box(f"❯{NB}", below=["❯ ● main", "  ◯ helper-1"]),
        "claude",
        "agents panel focused or unrecognised",
    ),
    (
        "panel line without indent",
        box(f"❯{NB}", below=[" ● main"]),
        "claude",
        "agents panel focused or unrecognised",
    ),
    (
        "panel dot on a helper",
        box(f"❯{NB}", below=["  ◯ main", "  ● helper-1"]),
        "claude",
        "the panel's dot is not on main",
    ),
    (
        "panel with no dot",
        box(f"❯{NB}", below=["  ◯ main", "  ◯ helper-1"]),
        "claude",
        "the panel's dot is not on main",
    ),
    (
        "panel dot line with extra text",
        box(f"❯{NB}", below=["  ● main (3)"]),
        "claude",
        "the panel's dot is not on main",
    ),
    (
        "two-character border label",
        box(f"❯{NB}", top="─" * 10 + " ab " + "─" * 66),
        "claude",
        "not in an input box",
    ),
    ("two labels in the border", box(f"❯{NB}", top="─── abc ─── def ───"), "claude", "not in an input box"),
    ("indented border", box(f"❯{NB}", top=" " + "─" * 79), "claude", "not in an input box"),
    ("label without its spaces", box(f"❯{NB}", top="───abc───"), "claude", "not in an input box"),
]


PLACEHOLDER = [
    ("the placeholder", box(TRY, dim=TRY_DIM), True),
    ("its first letter dim as well", box(TRY, dim=TRY_DIM | {2}), True),
    ("indented glyph", box(f"  {TRY}", 4, dim={i + 2 for i in TRY_DIM}), True),
    ("nothing dim (colour off, or a draft moved home)", box(TRY), False),
    ("one letter, nothing after it", box(f"❯{NB}f", 2), False),
    ("a space under the cursor", box(f"❯{NB} x", 2, dim={3}), False),
    ("the cursor after the first letter", box(TRY, 3, dim=TRY_DIM), False),
    ("an ASCII space after the glyph", box(TRY.replace(NB, " "), dim=TRY_DIM), False),
    ("a letter not dim", box(TRY, dim=TRY_DIM - {len(TRY) - 1}), False),
    ("no cursor", box(TRY, None, dim=TRY_DIM), False),
]


@pytest.mark.parametrize(("name", "screen", "want"), PLACEHOLDER, ids=[c[0] for c in PLACEHOLDER])
def test_is_placeholder(name: str, screen: Screen, want: bool) -> None:
    glyph = screen.lines[screen.cursor[1]].find("❯") if screen.cursor else 0
    assert is_placeholder(screen, glyph) is want


@pytest.mark.parametrize(("name", "screen"), FREE, ids=[c[0] for c in FREE])
def test_free(name: str, screen: Screen) -> None:
    assert is_free(screen, "claude") == (True, None)


@pytest.mark.parametrize(("name", "screen", "agent", "reason"), NOT_FREE, ids=[c[0] for c in NOT_FREE])
def test_not_free(name: str, screen: Screen, agent: str, reason: str) -> None:
    assert is_free(screen, agent) == (False, reason)


@pytest.mark.parametrize(
    ("below", "working"),
    [
        (["  esc to interrupt · ← for agents"], True),
        (["  ? for shortcuts", "  esc to interrupt"], True),
        (["esc to interrupt"], True),
        (["  ? for shortcuts · ← for agents"], False),
        (["  press esc to interrupt"], False),
        (["  esc to inter"], True),
        (["  e"], True),
        (["  ⏵⏵ accept edits on"], False),
        ([], False),
    ],
)
def test_is_working_reads_the_footer_below_the_lower_rule(below: list[str], working: bool) -> None:
    s = box(f"❯{NB}", below=below)
    assert is_working(s, len(HEADER) + 2) is working
    above = box(f"❯{NB}", above=[*below, ""])
    assert is_working(above, len(below) + 3) is False


def test_table_is_large_enough() -> None:
    assert len(FREE) + len(NOT_FREE) >= 30


def test_windows_accepts_angle_glyph_and_bare_glyph() -> None:
    assert is_free(box(f">{NB}"), "claude", windows=True) == (True, None)
    assert is_free(box("❯"), "claude", windows=True) == (True, None)
    assert is_free(box("> hi"), "claude", windows=True) == (False, "input not empty")


def test_named_border_shape() -> None:
    assert is_border("─" * 5)
    assert is_border(NAMED)
    assert is_border("─ a b c ─")
    assert not is_border("")
    assert not is_border("─── ab ───")
    assert not is_border("───  abc ───")
    assert not is_border("abc ───")
    assert not is_border("─── a─bc ───")


def test_box_bounds_and_hold_region() -> None:
    s = box(f"❯{NB}", below=["  ? for shortcuts"])
    assert box_bounds(s) == (4, 6)
    assert hold_region(s) == (*HEADER, RULE, f"❯{NB}", RULE)
    ticking = box(f"❯{NB}", below=["  ? for shortcuts 12:01"])
    assert hold_region(ticking) == hold_region(s)
    spinner = box(f"❯{NB}", above=["✻ Working… (4s)", "", "", ""])
    assert hold_region(spinner) != hold_region(s)
    assert box_bounds(box(f"❯{NB}", None)) is None
    assert hold_region(at(["Allow this action? (y/n)"], 0, 0)) is None


def test_line_alone_in_box() -> None:
    typed = box(f"❯{NB}{WAKE_LINE}", 2 + len(WAKE_LINE))
    assert line_alone_in_box(typed, WAKE_LINE)
    assert line_alone_in_box(box(f"❯ {WAKE_LINE}"), WAKE_LINE)
    assert line_alone_in_box(box(f"❯{NB}{WAKE_LINE}", None, below=PANEL_MAIN), WAKE_LINE)
    # appended to a draft, or another line in the box, or focus in a helper's box
    assert not line_alone_in_box(box(f"❯{NB}draft{WAKE_LINE}"), WAKE_LINE)
    assert not line_alone_in_box(box(f"❯{NB}{WAKE_LINE}x"), WAKE_LINE)
    two = Screen.of([RULE, f"❯{NB}draft", f"  {WAKE_LINE}", RULE], (44, 2), W)
    assert not line_alone_in_box(two, WAKE_LINE)
    assert not line_alone_in_box(box(f"❯{NB}{WAKE_LINE}", below=["  ◯ main", "  ● helper"]), WAKE_LINE)
    # the line echoed in the transcript (outside a box) does not count
    echoed = Screen.of([f"❯{NB}{WAKE_LINE}", "● Polling.", RULE, f"❯{NB}", RULE], (2, 3), W)
    assert not line_alone_in_box(echoed, WAKE_LINE)


# ------------------------------------------------------------------------------------------ capture


def test_capture_tracks_dim_and_skips_colour_parameters() -> None:
    text = "\x1b[2mdim\x1b[0m\x1b[39m\x1b[49m norm \x1b[38;2;2;2;2mcol\n\x1b[1;2m\x1b[39mbd\x1b[0m\x1b[39m\x1b[49m x\n"
    s = screen_from_capture(text, 0, 2, 80)
    assert s.lines == ("dim norm col", "bd x")
    assert s.dim == (frozenset({0, 1, 2}), frozenset({0, 1}))
    assert s.cursor == (0, 2)
    assert s.width == 80


def test_capture_dim_state_carries_across_lines_until_reset() -> None:
    s = screen_from_capture("a\x1b[2mb\ncd\x1b[22me\nf\x1b[2mg\x1b[mh\n", 0, 0, 10)
    assert s.lines == ("ab", "cde", "fgh")
    assert s.dim == (frozenset({1}), frozenset({0, 1}), frozenset({1}))


def test_capture_colour_forms_are_not_dim() -> None:
    s = screen_from_capture("\x1b[38;5;2mx\x1b[48;2;2;2;2my\x1b[38:2::2:2:2mz\x1b[4:3mw\n", 0, 0, 10)
    assert s.lines == ("xyzw",)
    assert s.dim == (frozenset(),)


def test_capture_drops_osc_hyperlinks_and_other_csi() -> None:
    s = screen_from_capture(
        "\x1b]8;;https://x.example\x1b\\link\x1b]8;;\x1b\\ \x1b[?25h\x1b[Kok\x1b]0;t\x07!\n", 0, 0, 20
    )
    assert s.lines == ("link ok!",)


def test_capture_trims_ascii_spaces_keeps_nbsp_and_masks_past_the_end() -> None:
    s = screen_from_capture(f"❯{NB}\x1b[2m  \x1b[0m   \n", 2, 0, 20)
    assert s.lines == (f"❯{NB}",)
    assert s.dim == (frozenset(),)


def test_captured_prompt_with_dim_suggestion_is_free() -> None:
    rule = "─" * 60
    text = (
        "\x1b[38;5;174m✻\x1b[39m Welcome\n"
        "\n"
        f"\x1b[38;5;244m{rule}\x1b[39m\n"
        f'❯{NB}\x1b[2mTry "write a test"\x1b[0m\n'
        f"\x1b[38;5;244m{rule}\x1b[39m\n"
        "  \x1b[2m? for shortcuts\x1b[0m\n"
    )
    s = screen_from_capture(text, 2, 3, 60)
    assert is_free(s, "claude") == (True, None)
    draft = text.replace('\x1b[2mTry "write a test"\x1b[0m', "hello")
    assert is_free(screen_from_capture(draft, 7, 3, 60), "claude") == (False, "input not empty")
