"""One wake attempt on one row's pane (behaviour 3.3 "Hold" and "Outcomes"), blocking.

The daemon decides *whether* to wake (``decide``); this types the line *only if* the screen allows it:
the first frame reads free, rows 0 through the box's lower rule stay identical for the hold (1.5 s), the
live screen reads free again, the line is typed, and Enter follows only once the typed line is seen alone
in main's input box within the op budget (3 s). Run it off the event loop (``asyncio.to_thread``).

What would break it: typing before the hold (a spinner above the box means the agent is working and the
box would swallow the line into its queue), or sending Enter without seeing the line in main's box (focus
may have moved to a dialog, where Enter would answer it).
"""

from __future__ import annotations

import time
from typing import NamedTuple

from sotd.terminal import prompt
from sotd.terminal.tmux import Tmux, TmuxError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

WOKEN = "woken"
REFUSED = "refused"
TYPED_NO_ENTER = "typed_no_enter"
ENTERED = "entered"
ERROR = "error"

MOVED = "moved during the hold"
NOT_IN_MAIN = "typed text not in main's input box"
DID_NOT_SHOW = "did not show in main's input box"
NO_ENTER = "no Enter sent"

POLL_SECS = 0.1
# The hold (behaviour 3.3: the screen must stay still this long before the line is typed) and the budget
# for seeing the typed line in main's box before Enter.
HOLD_SECS = 1.5
OP_BUDGET_SECS = 3.0


class Outcome(NamedTuple):
    """``result`` one of woken / refused / typed_no_enter / entered / error; ``reason`` the logged text;
    ``border`` the box's top border when one was seen (for the refusal-streak line)."""

    result: str
    reason: str | None = None
    border: str | None = None


def _border(screen: prompt.Screen) -> str | None:
    bounds = prompt.box_bounds(screen)
    return None if bounds is None else screen.lines[bounds[0]]


def _read(tmux: Tmux, target: str) -> prompt.Screen:
    return prompt.screen_from_capture(*tmux.capture(target))


def wake(
    tmux: Tmux,
    target: str,
    agent: str,
    *,
    line: str = prompt.WAKE_LINE,
    hold: float = HOLD_SECS,
    budget: float = OP_BUDGET_SECS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Outcome:
    """Hold, type ``line``, confirm, Enter. A typed line counts as the wake whether or not Enter followed."""
    try:
        first = _read(tmux, target)
        free, why = prompt.is_free(first, agent)
        if not free:
            return Outcome(REFUSED, why, _border(first))
        region = prompt.hold_region(first, agent)
        end = clock() + hold
        live = first
        while True:
            sleep(POLL_SECS)
            live = _read(tmux, target)
            if prompt.hold_region(live, agent) != region:
                return Outcome(REFUSED, MOVED, _border(first))
            if clock() >= end:
                break
        free, why = prompt.is_free(live, agent)
        if not free:
            return Outcome(REFUSED, why, _border(live))
        tmux.send_text(target, line)
    except TmuxError as e:
        return Outcome(ERROR, e.message)
    return _confirm_and_enter(
        tmux, target, line, budget=budget, clock=clock, sleep=sleep, typed=True, agent=agent
    )


def complete_enter(
    tmux: Tmux,
    target: str,
    *,
    line: str = prompt.WAKE_LINE,
    budget: float = OP_BUDGET_SECS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    agent: str = "claude",
) -> Outcome:
    """The owed Enter of an earlier wake: sent only when the box holds exactly the wake line."""
    return _confirm_and_enter(
        tmux, target, line, budget=budget, clock=clock, sleep=sleep, typed=False, agent=agent
    )


def _confirm_and_enter(
    tmux: Tmux,
    target: str,
    line: str,
    *,
    budget: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    typed: bool,
    agent: str = "claude",
) -> Outcome:
    end = clock() + budget
    try:
        while True:
            screen = _read(tmux, target)
            if prompt.line_alone_in_box(screen, line, agent):
                tmux.send_enter(target)
                return Outcome(WOKEN if typed else ENTERED, None, _border(screen))
            if clock() >= end:
                return Outcome(TYPED_NO_ENTER if typed else REFUSED, NOT_IN_MAIN, _border(screen))
            sleep(POLL_SECS)
    except TmuxError as e:
        return Outcome(TYPED_NO_ENTER if typed else ERROR, e.message)
