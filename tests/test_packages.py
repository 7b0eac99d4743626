"""The package map (rig/packages.py): Debian, what CI runs, and the RHEL 9 family, which
no host here can try (the README says so). Pure."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rig import packages as P

REPO = Path(__file__).resolve().parent.parent


def test_make_deps_takes_the_debian_names_from_the_map():
    mk = (REPO / "Makefile").read_text()
    assert "python3 -m rig.packages debian $(FEATURES)" in mk
    assert not re.search(r"^APT_PKGS", mk, re.M)     # one list, the map's
    for p in re.search(r"^APT_LEAN := (.*)$", mk, re.M).group(1).split():
        assert p in P.names("debian"), p


def test_every_need_has_an_el9_name_and_a_repository():
    for need, (deb, el, repo) in P.PACKAGES.items():
        if need == "mininet topologies":        # none on EL9: said in rig/packages.py
            assert deb == "mininet" and el is None and repo is None
            continue
        assert deb and el and repo in ("baseos", "appstream", "epel", "crb"), need
    assert "kernel-modules-extra" in P.names("el9")      # sch_netem lives there on EL9
    assert len(set(P.names("el9"))) == len(P.names("el9"))


@pytest.mark.parametrize("text, fam", [
    ('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n', "debian"),
    ('ID=ubuntu\nID_LIKE=debian\nVERSION_ID="22.04"\n', "debian"),
    ('ID="almalinux"\nID_LIKE="rhel centos fedora"\nVERSION_ID="9.4"\n', "el9"),
    ('ID="rocky"\nID_LIKE="rhel centos fedora"\nVERSION_ID="9.3"\n', "el9"),
    ('ID="rhel"\nID_LIKE="fedora"\nVERSION_ID="9.2"\n', "el9"),
    ('ID="centos"\nID_LIKE="rhel fedora"\nVERSION_ID="9"\n', "el9"),
    ('ID="almalinux"\nID_LIKE="rhel centos fedora"\nVERSION_ID="8.9"\n', None),
    ('ID=fedora\nVERSION_ID=40\n', None),
    ('ID=arch\n', None), ("", None),
])
def test_the_family_from_os_release(text, fam):
    assert P.family(P.os_release(text)) == fam


def test_installed_packages_are_read_from_one_query():
    deb = "curl install ok installed\nwget deinstall ok config-files\nnginx:amd64 install ok installed\n"
    assert P.installed_from("debian", deb) == {"curl", "nginx"}
    rpm = "curl installed\npackage davix is not installed\niperf3 installed\n"
    assert P.installed_from("el9", rpm) == {"curl", "iperf3"}
    have = P.installed_from("el9", rpm)
    miss = P.missing("el9", have.__contains__)
    assert "davix" in miss and "curl" not in miss and "kernel-modules-extra" in miss
    assert P.query_argv("el9")[:4] == ["rpm", "-q", "--qf", "%{NAME} installed\\n"]


def test_dnf_enables_epel_and_crb_only_when_an_epel_package_is_missing():
    assert P.dnf_argv(["davix", "curl"]) == [
        ["dnf", "install", "-y", "epel-release"],
        ["dnf", "config-manager", "--set-enabled", "crb"],
        ["dnf", "install", "-y", "davix", "curl"]]
    assert P.dnf_argv(["curl"]) == [["dnf", "install", "-y", "curl"]]
    assert P.dnf_argv(["libmnl-devel"]) == [               # CRB alone: no EPEL
        ["dnf", "config-manager", "--set-enabled", "crb"],
        ["dnf", "install", "-y", "libmnl-devel"]]
    assert P.dnf_argv([]) == []


def test_make_deps_reads_the_map_with_the_system_python():
    r = subprocess.run([sys.executable, "-m", "rig.packages", "el9"], capture_output=True,
                       text=True, timeout=30, cwd=REPO)
    assert r.returncode == 0 and r.stdout.split() == P.names("el9")
    r = subprocess.run([sys.executable, "-m", "rig.packages", "suse"], capture_output=True,
                       text=True, timeout=30, cwd=REPO)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    # nothing of the rig but itself: it runs before the virtualenv exists
    src = (REPO / "rig/packages.py").read_text()
    assert not re.search(r"^\s*(from rig|import rig)", src, re.M)
