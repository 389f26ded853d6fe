"""The wake with the real Claude Code (issue 11 part 3): filed -> the wake line submitted at the real idle
prompt, beside the scripted agent's in the same run, and the Stop hook's wall time per turn end with no mail.

One ``sotd daemon run`` (the real-agent tier's ``tests.realagent.kit.Box``: a temp HOME with Claude Code's
first run answered, the model the scripted stand-in ``sotd.demo.scripted_model`` on 127.0.0.1) runs two rows:

- **real**: ``sotd comm spawn`` of the pinned Claude Code (``scripts/claude-code.pin``, installed by
  ``scripts/setup``), joined by its SessionStart hook. Each round files one message through the daemon
  (``comm.file``; the clock starts when the answer is back) and stops when the stand-in model receives the
  turn the wake submitted (the main request whose prompt is the wake line: Enter was pressed and Claude
  Code sent it on). The model answers ``comm-poll.sh`` and then ``SITREP: read``, so the turn ends with
  no unread mail; the next round waits for the prompt to be free again.
- **scripted**: the scripted Claude-like screen ``sotd.demo.scripted_agent`` (as ``bench/wake.py`` runs it), its
  clock stopped at its own log of the submitted line. Rounds alternate real, scripted.
- **Stop hook**: the real row's Stop hook command is wrapped (in this run's own ``claude-settings.json``)
  to log its start and end; every real round's turn end is one sample (no mail: the model polled), so the
  number is what a joined session pays at each turn end, run by Claude Code itself.

Usage: ``python -m bench.realwake [--quick] [--rounds N]``; writes ``bench/results/realwake.json``. Needs
the pinned Claude Code (``scripts/setup``); without it the result says ``not_run`` and why. Bounded: every
wait has a deadline; the daemon, its tmux server and the stand-in are stopped at the end.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import tempfile
import time

from bench import common

TARGET_MEDIAN_S = 2.5


def _wait(pred, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")


def _wrap_stop_hook(settings_path: str, times_log: str) -> str:
    """Wrap the Stop hook command of ``settings_path`` so each run appends ``start end`` (ns) to
    ``times_log``; the hook's stdin, stdout and exit status pass through. The original command."""
    with open(settings_path, encoding="utf-8") as f:
        doc = json.load(f)
    entry = doc["hooks"]["Stop"][0]["hooks"][0]
    original = entry["command"]
    entry["command"] = (
        f's=$(date +%s%N); {original}; rc=$?; echo "$s $(date +%s%N)" >> {shlex.quote(times_log)}; exit $rc'
    )
    with open(settings_path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
    return str(original)


def main() -> int:
    ap = common.base_parser(__doc__ or "realwake")
    ap.add_argument("--rounds", type=int, default=None, help="rounds per agent (default 12; quick 3)")
    args = ap.parse_args()
    rounds = args.rounds or (3 if args.quick else 12)
    sys.path.insert(0, common.ROOT)
    from tests.realagent import kit

    from sotd.daemon.decide import TICK_SECS
    from sotd.demo import scripted_model
    from sotd.terminal.attempt import HOLD_SECS
    from sotd.terminal.prompt import WAKE_LINE

    try:
        kit.claude_exe()
    except kit.NotInstalled as e:
        return common.finish("realwake", {"not_run": str(e)}, args.no_write, args.quick)
    model = scripted_model.StandIn(idle_text="SITREP: read").start()
    root = tempfile.mkdtemp(prefix="srw-", dir="/tmp")
    home = kit.ClaudeHome(os.path.join(root, "claude"))
    box = kit.Box(home, model)
    try:
        box.install()
        times_log = os.path.join(box.work, "stop-hook.times")
        hook = _wrap_stop_hook(os.path.join(box.comm, "bin", "claude-settings.json"), times_log)
        box.start()
        result: dict[str, object] = {"machine": common.machine(box.work)}
        result["params"] = {
            "rounds": rounds,
            "hold_s": HOLD_SECS,
            "tick_s": TICK_SECS,
            "claude_code": kit.pin(),
            "stop_hook": os.path.basename(hook.strip("'")),
            "target_median_s": TARGET_MEDIAN_S,
        }
        if box.sotd("join", "--name", "bench").returncode:
            raise RuntimeError("the bench session could not join")
        pane = box.spawn("real")["pane"]
        box.wait_idle(pane, timeout=60)
        _wait(lambda: (box.row("real") or {}).get("handle") == "real", 30, "the real row to join")
        slog = os.path.join(box.work, "scripted.agent.log")
        sroot = box.project("scripted")
        argv = [common.PYTHON, "-m", "sotd.demo.scripted_agent", "--log", slog, "--work", "0.3", "--at-start", "comm-join.sh",
                "--log-keys", "--times"]  # fmt: skip
        p = box.sotd("spawn", sroot, "--name", "scripted", "--command", shlex.join(argv))
        if p.returncode:
            raise RuntimeError(f"spawn scripted: {p.stderr}")
        _wait(lambda: (box.row("scripted") or {}).get("handle") == "scripted", 30, "the scripted row to join")
        time.sleep(6.0)  # past the real TUI's one-off first-seconds footer hint

        def scripted_lines() -> list[dict[str, object]]:
            try:
                with open(slog, encoding="utf-8") as f:
                    evs = [json.loads(x) for x in f if x.strip()]
            except OSError:
                return []
            return [e for e in evs if e.get("event") == "line" and e.get("text") == WAKE_LINE]

        real: list[float] = []
        scripted: list[float] = []
        for i in range(rounds):
            model.add(
                scripted_model.bash("comm-poll.sh", when=WAKE_LINE),
                scripted_model.text("SITREP: read", when="round"),
            )
            seen = len(model.main_requests())
            sent = box.sotd("send", "@real", f"round {i}")
            filed = time.monotonic()
            if sent.returncode:
                raise RuntimeError(f"send: {sent.stderr}")
            woke = _wait(
                lambda s=seen: next(
                    (r for r in model.main_requests()[s:] if r.newest_user_text.rstrip().endswith(WAKE_LINE)),
                    None,
                ),
                30,
                f"the real row's wake (round {i})",
            )
            real.append(woke.at - filed)
            box.wait_screen(pane, lambda t: "SITREP: read" in t, f"real round {i}'s end", timeout=30)
            box.wait_idle(pane, timeout=30)
            before = len(scripted_lines())
            answer = box.sotd("send", "@scripted", f"round {i}")
            filed_wall = time.time()
            if answer.returncode:
                raise RuntimeError(f"send: {answer.stderr}")
            _wait(lambda n=before: len(scripted_lines()) > n, 30, f"the scripted row's wake (round {i})")
            scripted.append(float(scripted_lines()[before]["t"]) - filed_wall)  # type: ignore[arg-type]
            time.sleep(1.0 + 0.5 * (i % 4))
        stops: list[float] = []
        with open(times_log, encoding="utf-8") as f:
            for line in f:
                a, b = line.split()
                stops.append((int(b) - int(a)) / 1e9)
        result["real"] = {"latency_s": common.summary(real), "samples_s": [round(x, 3) for x in real]}
        result["scripted"] = {
            "latency_s": common.summary(scripted),
            "samples_s": [round(x, 3) for x in scripted],
        }
        result["stop_hook"] = {"wall_ms": common.summary(stops, 1000), "turn_ends": len(stops)}
        result["wake_log"] = [ln.split(" INFO ", 1)[-1] for ln in box.wake_lines()][-3:]
    finally:
        box.close()
        model.stop()
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    result["machine"]["load_avg_end"] = common.load_avg()  # type: ignore[index]
    med = result["real"]["latency_s"]["median"]  # type: ignore[index]
    result["pass_median"] = med <= TARGET_MEDIAN_S
    result["pass"] = bool(result["pass_median"])
    return common.finish("realwake", result, args.no_write, args.quick)


if __name__ == "__main__":
    sys.exit(main())
