"""A lean install (issue 41 item 6): what `make deps` installs does not leave a web server
of its own on port 80, and the package map's features cover every need once.

The services check judges only what the rig's `make deps` installed (it lists them in
.deps-installed): an nginx or apache2 that was on the machine before is the user's, and
not this test's to judge (said in the skip). Reads the host's sockets (`ss`), starts
nothing."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from rig import packages as P

REPO = Path(__file__).resolve().parent.parent
QUIET = ("nginx", "apache2")


def _ours() -> set[str]:
    f = REPO / ".deps-installed"
    return set(f.read_text().split()) if f.exists() else set()


def _listeners_on_80() -> list[str]:
    r = subprocess.run(["ss", "-H", "-ltnp", "sport = :80"], capture_output=True, text=True,
                       timeout=30, check=True)
    return [line for line in r.stdout.splitlines() if line.strip()]


@pytest.mark.parametrize("svc", QUIET)
def test_a_web_server_the_install_brought_is_not_left_on_port_80(svc):
    if svc not in _ours():
        pytest.skip(f"{svc} was not installed by this checkout's make deps (not in "
                    ".deps-installed): the machine's own, not the rig's to judge")
    if not shutil.which("ss"):
        pytest.fail("ss (iproute2, a core package) is missing")
    owners = [line for line in _listeners_on_80() if f'"{svc}"' in line]
    assert not owners, f"{svc}, installed by make deps, listens on port 80: {owners}"
    if shutil.which("systemctl") and Path("/run/systemd/system").is_dir():
        r = subprocess.run(["systemctl", "is-enabled", svc], capture_output=True, text=True,
                           timeout=30)
        assert r.stdout.strip() != "enabled", f"{svc}, installed by make deps, is enabled"


def test_every_need_is_in_a_feature_and_a_core_one_in_no_other():
    seen: dict[str, list[str]] = {}
    for f, (what, needs) in P.FEATURES.items():
        assert what and needs, f
        for n in needs:
            assert n in P.PACKAGES, (f, n)
            seen.setdefault(n, []).append(f)
    assert set(seen) == set(P.PACKAGES)
    assert not [n for n, fs in seen.items() if "core" in fs and len(fs) > 1]
    # a compiler serves both builds: each feature installs what its build needs
    assert "c++ compiler" in P.FEATURES["replay"][1] and "c++ compiler" in P.FEATURES["engine"][1]


def test_the_core_is_what_the_default_scenario_runs_and_no_more():
    core = P.names("debian", [])
    for need in ("xrootd-server", "xrootd-client", "davix", "curl", "iperf3", "iproute2"):
        assert need in core
    for extra in ("nginx", "apache2", "chromium", "mininet", "g++", "tcpdump", "openssh-server"):
        assert extra not in core
    assert P.names("debian", ["nginx"]) == [p for p in P.names("debian") if p in core + ["nginx"]]


def test_an_unknown_feature_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="no feature 'web'.*known: all, core, nginx"):
        P.names("debian", ["web"])


def test_missing_by_feature_names_the_feature_of_each_missing_package():
    have = set(P.names("debian")) - {"nginx", "chromium", "curl"}
    miss = P.missing_by_feature("debian", have.__contains__)
    assert miss == {"core": ["curl"], "nginx": ["nginx"], "browser": ["chromium"]}
    assert P.missing_by_feature("debian", set(P.names("debian")).__contains__) == {}


def test_the_port_80_check_fails_on_a_listening_server_it_installed(monkeypatch):
    """The check above, where the answer is no: nginx installed by make deps and on :80."""
    mod = __import__(__name__, fromlist=["_ours"])
    monkeypatch.setattr(mod, "_ours", lambda: {"nginx"})
    monkeypatch.setattr(mod, "_listeners_on_80", lambda: [
        'LISTEN 0 511 0.0.0.0:80 0.0.0.0:* users:(("nginx",pid=1,fd=6))'])
    with pytest.raises(AssertionError, match="listens on port 80"):
        test_a_web_server_the_install_brought_is_not_left_on_port_80("nginx")
    monkeypatch.setattr(mod, "_listeners_on_80", lambda: [
        'LISTEN 0 511 0.0.0.0:80 0.0.0.0:* users:(("lighttpd",pid=1,fd=6))'])
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/ss" if name == "ss" else None)
    test_a_web_server_the_install_brought_is_not_left_on_port_80("nginx")
