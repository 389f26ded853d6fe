"""The scripted fake Claude Code screen for the terminal-layer tests: a shim that runs ``sotd.demo.scripted_agent``.

The screen, its modes and its options live in one place (``src/sotd/demo/scripted_agent.py``, which the demo and
the rows' tests run as ``python -m sotd.demo.scripted_agent``); this file keeps the path the tests start by name.

    python fake_claude.py [any option of sotd.demo.scripted_agent]
"""

from __future__ import annotations

import sys

from sotd.demo.scripted_agent import main

if __name__ == "__main__":
    sys.exit(main())
