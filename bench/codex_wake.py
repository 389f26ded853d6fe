"""The wake of a real Codex row (issue 12): filed -> the wake line submitted at the real idle composer.

A real daemon and its private tmux server; one row runs the pinned Codex TUI (``scripts/codex.pin``,
installed by ``scripts/setup``) with the real-agent tier's kit (``tests/realagent/codex_kit.py``): a temp
``CODEX_HOME``, sotd's hooks installed and trusted, the Responses stand-in as its model. Each round files
one message to the row through the daemon (``comm.file``, via ``sotd comm send``; the clock starts when
the send returns) and stops when the stand-in receives the model request whose newest input is the wake
line, i.e. once the wake's Enter submitted it. The model then polls (``comm-poll.sh``) and ends its turn
with a closing line, so the next round starts from an idle composer with no unread mail. Rounds are
spaced 1-2.5 s apart (rotating) so they fall at different points of the daemon's 2 s tick.

The end point differs from ``bench/wake.py``'s (the scripted agent's own log of the Enter): here it is the
model request that Enter caused, which adds Codex's own submit-to-request time (a few ms on loopback).

Usage: ``python -m bench.codex_wake [--quick] [--rounds N]``; writes ``bench/results/codex_wake.json``.
Bounded: every wait has a deadline; the daemon, tmux server and stand-in are stopped at the end.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

from bench import common

TARGET_MEDIAN_S = 2.5
GAPS = (1.0, 1.75, 2.5)


def main() -> int:
    ap = common.base_parser(__doc__ or "codex_wake")
    ap.add_argument("--rounds", type=int, default=None, help="rounds (default 12; quick 3)")
    args = ap.parse_args()
    if shutil.which("tmux") is None:
        return common.finish("codex_wake", {"not_run": "tmux is not installed"}, args.no_write, args.quick)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tests.realagent import codex_kit
    from tests.realagent.codex_standin import CodexStandIn, bash, text

    from sotd.daemon.decide import TICK_SECS
    from sotd.terminal.attempt import HOLD_SECS
    from sotd.terminal.prompt import WAKE_LINE

    try:
        codex_kit.codex_exe()
    except AssertionError as e:
        return common.finish("codex_wake", {"not_run": str(e)}, args.no_write, args.quick)
    rounds = args.rounds or (3 if args.quick else 12)
    model = CodexStandIn().start()
    root = tempfile.mkdtemp(prefix="scw-", dir="/tmp")
    home = codex_kit.CodexHome(root, model)
    box = codex_kit.CodexBox(home, model)
    latencies: list[float] = []
    try:
        box.install("--agent-settings")
        home.trust_hooks(box.project("cw"))
        box.start()
        assert box.sotd("join", "--name", "you").returncode == 0
        pane = str(box.spawn("cw")["pane"])
        common_wait(lambda: (box.row("cw") or {}).get("handle") == "cw", 60, "the row's join")
        box.wait_idle(pane, 60)
        for i in range(rounds):
            time.sleep(GAPS[i % len(GAPS)])
            seen = len(model.main_requests())
            model.add(bash("comm-poll.sh", when="you have mail"), text(f"SITREP: round {i} read"))
            p = box.sotd("send", "@cw", f"round {i}")
            t0 = time.monotonic()
            assert p.stdout == "  filed -> @cw\n", p
            woke = common_wait(
                lambda seen=seen: next(
                    (r for r in model.main_requests()[seen:] if r.newest_user_text == WAKE_LINE), None
                ),
                30,
                f"round {i}'s wake",
            )
            latencies.append(woke.at - t0)
            box.wait_screen(pane, lambda t, i=i: f"SITREP: round {i} read" in t, f"round {i}'s end", 60)
            box.wait_idle(pane, 60)
        wakes = sum(1 for ln in box.wake_lines() if "comm wake: woke @cw" in ln)
    finally:
        box.close()
        model.stop()
        shutil.rmtree(root, ignore_errors=True)
    result: dict[str, object] = {
        "machine": common.machine(tempfile.gettempdir()),
        "params": {
            "rounds": rounds,
            "hold_s": HOLD_SECS,
            "tick_s": TICK_SECS,
            "codex": codex_kit.pin(),
            "target_median_s": TARGET_MEDIAN_S,
        },
        "latency_s": common.summary(latencies),
        "wakes": wakes,
    }
    result["pass_median"] = common.summary(latencies)["median"] < TARGET_MEDIAN_S
    result["pass_once_per_batch"] = wakes == rounds
    result["pass"] = bool(result["pass_median"] and result["pass_once_per_batch"])
    return common.finish("codex_wake", result, args.no_write, args.quick)


def common_wait(pred, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


if __name__ == "__main__":
    sys.exit(main())
