"""``sotd doctor``: placeholder replaced below."""

from __future__ import annotations


def run(argv: list[str]) -> int:
    return 0
