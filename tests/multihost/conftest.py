"""Fixtures for the multihost tier: boxes in network namespaces with their own sshd (see netns.py)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator

import pytest

from tests.multihost.netns import Net, unavailable


def build_net(names: list[str], **kw: object) -> Iterator[Net]:
    why = unavailable()
    if why:
        pytest.skip(why)
    # A short base folder: AF_UNIX paths (daemon sockets, ControlPath) are bounded at 108 bytes.
    with tempfile.TemporaryDirectory(prefix="sotd-mh-", dir="/tmp") as base:
        with Net(names, base, **kw) as net:  # type: ignore[arg-type]
            yield net
