"""The property tests' budgets: a ``ci`` profile for every run and a ``long`` one for a release (issue 31).

File: ``tests/hypothesis_profiles.py`` (loaded by ``tests/conftest.py`` before any test module). The unit
and reliability tiers' property tests name no example count of their own (a slow one may name a smaller
count, and keeps it); they take the loaded profile's. ``SOTD_HYPOTHESIS_PROFILE`` chooses it: ``ci`` (the
default: what ``scripts/test`` and CI run, Hypothesis's own 100 examples a test) or ``long`` (ten times
that, ``SOTD_HYPOTHESIS_PROFILE=long scripts/test``, for a release or after a change to a parser). The
fuzz tier keeps its own budget and seed (``tests/fuzz/conftest.py``, ``SOTD_FUZZ_BUDGET``).
Guarantee: every run of a property test draws at least the ``ci`` count (random draws, so each run and
each machine covers new inputs; a failure is kept in ``.hypothesis/`` and replayed first next time).
What would break it: a test that names a large ``max_examples`` again (it would override the profile).
"""

from __future__ import annotations

import os

from hypothesis import settings

PROFILES = {"ci": 100, "long": 1000}
ENV = "SOTD_HYPOTHESIS_PROFILE"


def load() -> str:
    """Register both profiles and load the one ``SOTD_HYPOTHESIS_PROFILE`` names (``ci`` when unset)."""
    for name, examples in PROFILES.items():
        settings.register_profile(name, max_examples=examples)
    chosen = os.environ.get(ENV, "") or "ci"
    if chosen not in PROFILES:
        raise SystemExit(f"{ENV}={chosen!r}: use one of {', '.join(PROFILES)}")
    settings.load_profile(chosen)
    return chosen
