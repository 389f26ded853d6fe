"""The main job: ``scripts/demo`` (``python -m sotd.demo``), printed as a readable transcript.

The default run: a daemon in a throw-away comm folder spawns two rows on its private tmux server, each the
real Claude Code TUI when ``scripts/demo`` finds the pinned install (its model the scripted stand-in
``sotd.demo.scripted_model``), else the scripted Claude-like agent (``sotd.demo.scripted_agent``), under ``sot-capsule``; the
transcript says which ran; mail to an idle row gets the wake
line typed at its prompt, the agent runs ``comm-poll.sh`` and replies, and the transcript shows the
commands, the daemon's wake log lines and screen snapshots. Bounded (well under 60 s); the daemon and its
tmux server are stopped and the folder removed at the end, also after a failure.

``--quick``: the earlier transcript only: two sessions exchange mail through the comm folder library and
the CLI, with no daemon (the demo records this box's inbox lock identity the way a hub daemon does).

``--ocx``: one OCX run end to end (``sotd.demo.ocx_part``): two nodes through a loopback ``fossil server``, the
seed's build example posted, started, ended passed, and the image checked against its hash; then the seed's
agent-session example, its agent the real Claude Code TUI when the pinned install is there (the scripted
agent otherwise; the transcript says which).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile


def _sotd() -> list[str]:
    exe = shutil.which("sotd", path=os.path.dirname(sys.executable))
    return [exe] if exe else [sys.executable, "-m", "sotd.cli.main"]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-h", "--help"):
        print("usage: python -m sotd.demo [--quick | --ocx]")
        return 0
    if "--quick" in args:
        return quick()
    if "--ocx" in args:
        from sotd.demo import ocx_part

        return ocx_part.main()
    from sotd.demo import rows_part

    return rows_part.main()


def quick() -> int:
    from sotd.formats import lockmanager
    from sotd.formats.layout import Layout, ensure_home

    work = tempfile.mkdtemp(prefix="sotd-demo-")
    home = os.path.join(work, "comm")
    lay = Layout(home)
    ensure_home(lay)
    mid = lockmanager.machine_id_or_none()
    ident = lockmanager.lock_manager_of(lay.inbox_dir)
    lockmanager.write_for_hub(lay, ident, mid)
    print(f"# comm folder: {home}")
    print(f"# inbox lock identity recorded as the hub would: {ident}")
    sessions = {}
    for name in ("alpha", "beta"):
        root = os.path.join(work, name)
        os.makedirs(root)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SOT_", "TMUX"))}
        env.update(
            SOT_COMM_HOME=home,
            SOT_SELF_HOST="demo",
            SOT_COMM_SELF_FILE=os.path.join(home, "self", f"{name}-session.txt"),
            PWD=root,
        )
        sessions[name] = (root, env)

    def typed(who: str, *args: str) -> int:
        root, env = sessions[who]
        print(f"\n[{who}]$ sotd comm {' '.join(_shell(a) for a in args)}")
        p = subprocess.run(
            [*_sotd(), "comm", *args], check=False, cwd=root, env=env, capture_output=True, text=True
        )
        for line in (p.stdout + p.stderr).splitlines():
            print(f"  {line}")
        if p.returncode:
            print(f"  (exit {p.returncode})")
        return p.returncode

    steps = [
        ("alpha", "join", "--name", "alpha"),
        ("beta", "join", "--name", "beta"),
        ("alpha", "send", "@beta", "can you review the inbox append? it rolls back on fsync errors"),
        ("beta", "unread", "beta"),
        ("beta", "poll"),
        ("beta", "send", "@alpha", "[question] what happens when the rollback itself fails?"),
        ("alpha", "send", "--broadcast", "stand-up in five minutes"),
        ("alpha", "poll"),
        ("beta", "poll"),
        ("beta", "poll"),
        ("alpha", "send", "@gamma", "anyone there?"),
        ("alpha", "list"),
        ("beta", "leave"),
        ("alpha", "send", "@beta", "still there?"),
    ]
    for who, *args in steps:
        typed(who, *args)
    print(f"\n# inbox files: {sorted(os.listdir(lay.inbox_dir))}")
    shutil.rmtree(work)
    return 0


def _shell(a: str) -> str:
    return a if a and all(c.isalnum() or c in "@-_./=" for c in a) else "'" + a.replace("'", "'\\''") + "'"


if __name__ == "__main__":
    sys.exit(main())
