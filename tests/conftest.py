"""Shared fixtures: tiers are marked in each test file: `netns` (root, builds namespaces),
`e2e` (root, real servers and clients), `slow` (pure, seconds each: left out of `make
test-fast`). Tests that build anything assert afterwards that none of
their namespaces, mounts or processes remain."""
from __future__ import annotations

import os
import shutil

import pytest

import rig.catalog  # noqa: F401  (every tool, server kind and backend, registered, and the
#   Mininet topology reader: a test that loads every shipped scenario through
#   rig.description alone reads scenarios/mininet-two-bottlenecks.yaml too, as the CLI does)

ROOT = os.geteuid() == 0


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs root: network namespaces, tc, iptables")
    for it in items:
        if not ROOT and ("netns" in it.keywords or "e2e" in it.keywords):
            it.add_marker(skip)


@pytest.fixture(autouse=True)
def _auto_backend_unknown(request, monkeypatch):
    """A pure test's plan does not depend on this host's kernel: `backend: auto` is shown
    as where it cannot be probed (both backends); a run (netns, e2e) probes as it would."""
    if "e2e" in request.keywords or "netns" in request.keywords:
        return
    from rig.orchestration.acts import emulate
    monkeypatch.setattr(emulate, "auto_here", lambda: None)


@pytest.fixture
def run_rig():
    """`rig run SCENARIO --out OUT` as a user runs it, in a subprocess with a deadline;
    asserts it exited 0 (its stderr's tail otherwise) and returns the run's Store."""
    from rigrun import rig_run
    from rig.results.store import Store

    def run(scenario, out, *, timeout: float = 900, check_plan: bool = True):
        rig_run(scenario, out, timeout=timeout, check_plan=check_plan)
        return Store.open(out)
    return run


@pytest.fixture
def require_tools():
    def need(*names: str) -> None:
        missing = [n for n in names if shutil.which(n) is None]
        assert not missing, f"missing tools (make install): {missing}"
    return need


def rig_namespaces_with(prefix: str) -> list[str]:
    from rig.realization import netns
    return [n for n in netns.list_namespaces() if n.startswith(prefix + "-")]
