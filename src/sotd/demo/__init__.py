"""sotd.demo: the README's main job (``python -m sotd.demo``, ``scripts/demo``) and the stand-ins it runs.

- ``__main__``: the entry: the rows demo by default, ``--quick`` (no daemon), ``--ocx`` (one OCX run);
- ``rows_part``: a daemon, two rows, mail and the wake;
- ``ocx_part``: one OCX run end to end between two nodes, and an agent session;
- ``scripted_agent``: the scripted Claude-like terminal screen, the agent of the demo and of every wake
  test (also copied alone into an OCX release folder, so it imports nothing of sotd);
- ``scripted_model``: the scripted Messages API on 127.0.0.1 that the real Claude Code TUI talks to.

Nothing in the product imports this package (import-linter: only tests and bench do).
"""
