"""The hooks' own files in ``state/`` are never read or appended through a link (issue 25 problem 2):
``read_tick`` reads a planted link as no tick, and the Stop hook's effort count and feedback appends
refuse one, leaving the link's target as it was."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sotd.cli.comm.hooks import shared, tool
from sotd.formats.layout import Layout

pytestmark = pytest.mark.unit


def _precious(tmp_path: Path) -> Path:
    target = tmp_path / "precious"
    target.write_bytes(b"keep me\n")
    os.utime(target, (1_000_000, 1_000_000))
    return target


def test_read_tick_reads_a_link_as_no_tick(tmp_path: Path) -> None:
    target = _precious(tmp_path)
    tick = tmp_path / "stop.tick"
    tick.symlink_to(target)
    assert shared.read_tick(str(tick)) == ""
    real = tmp_path / "real.tick"
    real.write_bytes(b"42\n")
    assert shared.read_tick(str(real)) == "42"


def test_the_call_count_is_never_appended_through_a_link(tmp_path: Path) -> None:
    lay = Layout(str(tmp_path / "comm"))
    os.makedirs(lay.state_dir, mode=0o700)
    target = _precious(tmp_path)
    os.symlink(target, lay.state("calls-k.count"))
    tool._count_call(lay, "k")
    assert target.read_bytes() == b"keep me\n"
    assert target.stat().st_mtime == 1_000_000
    os.unlink(lay.state("calls-k.count"))
    tool._count_call(lay, "k")
    with open(lay.state("calls-k.count"), "rb") as f:
        assert f.read() == b"."
