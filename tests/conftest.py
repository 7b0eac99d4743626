"""Shared fixtures: tiers are marked `netns` (root, builds namespaces) and `e2e` (root,
real servers and clients). Tests that build anything assert afterwards that none of
their namespaces, mounts or processes remain."""
from __future__ import annotations

import os
import shutil

import pytest

ROOT = os.geteuid() == 0


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs root: network namespaces, tc, iptables")
    for it in items:
        if not ROOT and ("netns" in it.keywords or "e2e" in it.keywords):
            it.add_marker(skip)


@pytest.fixture
def require_tools():
    def need(*names: str) -> None:
        missing = [n for n in names if shutil.which(n) is None]
        assert not missing, f"missing tools (make install): {missing}"
    return need


def rig_namespaces_with(prefix: str) -> list[str]:
    from rig.realization import netns
    return [n for n in netns.list_namespaces() if n.startswith(prefix + "-")]
