"""What the rig needs from the distribution, per family: Debian (apt, the one CI runs)
and the RHEL 9 family (Alma, Rocky, RHEL: dnf, with EPEL and CRB).

Pure data and text: `make deps` asks `python3 -m rig.packages dnf` for the names to give
dnf (this module starts no process and imports nothing from the rig, so the system's
python3, 3.9 on EL9, runs it before the rig's virtualenv exists); `rig doctor` reads
the family and what is missing through `missing()`, with a checker that runs dpkg/rpm.

What an EL9 host still lacks (no EL9 host was at hand to try it): the Apache server kind
writes Debian's layout (apache2, /usr/lib/apache2/modules, user www-data; EL9: httpd,
/usr/lib64/httpd/modules, user apache) and nginx runs as www-data (EL9: nginx); the qemu
netem tier needs TCG (EL9's qemu-kvm has none). Kernel netem is in kernel-modules-extra.
"""
from __future__ import annotations

import sys
from typing import Callable

# need -> (Debian package, EL9 package or None: none there, EL9 repository)
# The Debian names are the Makefile's APT_PKGS (tests/test_packages.py keeps them equal).
PACKAGES: dict = {
    "xrootd server":      ("xrootd-server", "xrootd-server", "epel"),
    "xrootd client":      ("xrootd-client", "xrootd-client", "epel"),
    "davix":              ("davix", "davix", "epel"),
    "curl":               ("curl", "curl", "baseos"),
    "wget":               ("wget", "wget", "appstream"),
    "iperf3":             ("iperf3", "iperf3", "appstream"),
    "iptables":           ("iptables", "iptables-nft", "baseos"),
    "ping":               ("iputils-ping", "iputils", "baseos"),
    "nginx":              ("nginx", "nginx", "appstream"),
    "sshd":               ("openssh-server", "openssh-server", "baseos"),
    "ps, pgrep":          ("procps", "procps-ng", "baseos"),
    "ip, tc":             ("iproute2", "iproute-tc", "baseos"),
    "python venv":        ("python3-venv", "python3.11", "appstream"),
    "pip":                ("python3-pip", "python3.11-pip", "appstream"),
    "chromium":           ("chromium", "chromium", "epel"),
    "apache":             ("apache2", "httpd", "appstream"),
    "openssl":            ("openssl", "openssl", "baseos"),
    "tcpdump":            ("tcpdump", "tcpdump", "appstream"),
    "c++ compiler":       ("g++", "gcc-c++", "appstream"),
    "make":               ("make", "make", "baseos"),
    "pkg-config":         ("pkg-config", "pkgconf-pkg-config", "baseos"),
    "davix headers":      ("davix-dev", "davix-devel", "epel"),
    "libcurl headers":    ("libcurl4-openssl-dev", "libcurl-devel", "appstream"),
    "zlib headers":       ("zlib1g-dev", "zlib-devel", "appstream"),
    "sudo":               ("sudo", "sudo", "baseos"),
    # the emulation engine's native data path (tools/rig-emul-engine)
    "nfqueue headers":    ("libnetfilter-queue-dev", "libnetfilter_queue-devel", "crb"),
    "libmnl headers":     ("libmnl-dev", "libmnl-devel", "crb"),
    "json headers":       ("nlohmann-json3-dev", "json-devel", "epel"),
    # Mininet topologies (rig.description.mininet): its Topo API under /usr/bin/python3;
    # EL9 has no package (pip's mininet under the system python3 would do)
    "mininet topologies": ("mininet", None, None),
}
# EL9 only: the kernel's netem lives outside the base kernel package there
EL9_EXTRA = {"kernel netem (sch_netem)": ("kernel-modules-extra", "baseos")}
FAMILIES = ("debian", "el9")


def os_release(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep and k.strip():
            out[k.strip()] = v.strip().strip('"').strip("'")
    return out


def family(release: dict[str, str]) -> str | None:
    """debian | el9 | None (a family the rig has no package map for)."""
    ids = {release.get("ID", "")} | set(release.get("ID_LIKE", "").split())
    major = release.get("VERSION_ID", "").split(".")[0]
    if ids & {"debian", "ubuntu"}:
        return "debian"
    if ids & {"rhel", "centos", "fedora", "almalinux", "rocky"} and major == "9":
        return "el9"
    return None


def names(fam: str) -> list[str]:
    """Every package of family `fam`, in the map's order."""
    if fam == "debian":
        return [d for d, _, _ in PACKAGES.values()]
    if fam == "el9":
        return [e for _, e, _ in PACKAGES.values() if e] + [e for e, _ in EL9_EXTRA.values()]
    raise ValueError(f"no package map for {fam!r} (known: {', '.join(FAMILIES)})")


def dnf_argv(missing: list[str]) -> list[list[str]]:
    """The commands that install `missing` on EL9: EPEL and CRB first (davix, xrootd,
    chromium and davix-devel come from EPEL, which needs CRB)."""
    out: list[list[str]] = []
    repos = {PACKAGES[k][2] for k in PACKAGES if PACKAGES[k][1] in missing}
    if "epel" in repos:
        out += [["dnf", "install", "-y", "epel-release"]]
    if repos & {"epel", "crb"}:     # EPEL needs CRB; the -devel of libmnl/nfqueue live there
        out += [["dnf", "config-manager", "--set-enabled", "crb"]]
    return out + ([["dnf", "install", "-y", *missing]] if missing else [])


def missing(fam: str, installed: Callable[[str], bool]) -> list[str]:
    """Packages of `fam` that `installed(name)` says are absent."""
    return [n for n in names(fam) if not installed(n)]


def query_argv(fam: str) -> list[str]:
    """One command listing the family's packages with their state (`installed_from`)."""
    if fam == "debian":
        return ["dpkg-query", "-W", "-f", "${Package} ${Status}\\n", *names(fam)]
    return ["rpm", "-q", "--qf", "%{NAME} installed\\n", *names(fam)]


def installed_from(fam: str, stdout: str) -> set[str]:
    """The installed packages in query_argv's output (dpkg-query: `NAME install ok
    installed`; rpm: `NAME installed`, and `package NAME is not installed` for others)."""
    out = set()
    for line in stdout.splitlines():
        w = line.split()
        if fam == "debian" and len(w) >= 4 and w[1:4] == ["install", "ok", "installed"]:
            out.add(w[0].split(":")[0])
        elif fam == "el9" and len(w) == 2 and w[1] == "installed":
            out.add(w[0])
    return out


def main(argv: list[str]) -> int:
    """`python3 -m rig.packages debian|el9`: the family's package names, one per line."""
    if len(argv) != 1 or argv[0] not in FAMILIES:
        print(f"usage: python3 -m rig.packages {'|'.join(FAMILIES)}", file=sys.stderr)
        return 2
    print("\n".join(names(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
