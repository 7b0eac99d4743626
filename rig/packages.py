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
    # `auth: x509` (rig.realization.x509, rig.services.servers.xrootd): voms-proxy-fake,
    # and xrootd's VOMS attribute extractors (libXrdVoms, libXrdHttpVOMS)
    "voms proxies":       ("voms-clients", "voms-clients-cpp", "epel"),
    "xrootd voms":        ("xrootd-voms-plugins", "xrootd-voms", "epel"),
}
# EL9 only: the kernel's netem lives outside the base kernel package there
EL9_EXTRA = {"kernel netem (sch_netem)": ("kernel-modules-extra", "baseos")}
FAMILIES = ("debian", "el9")

# What each need is for (issue 41 item 6: a lean install). `core` is what every scenario
# needs (paths, xrootd with root:// and HTTP, xrdcp, davix-get, curl, iperf3's path check:
# the default scenario, scenarios/quick.yaml); every other feature installs only where the
# user asks for it (`make install FEATURES="nginx apache"`, or `all`), and `rig doctor` says
# which feature lacks which package. `make test` installs all of them. Every need is in a
# feature, a core one in no other (a compiler serves two builds; tests/test_install_quiet.py).
FEATURES: dict[str, tuple[str, tuple[str, ...]]] = {
    "core": ("paths, xrootd (root:// and HTTP), xrdcp, davix-get, curl, iperf3, the report",
             ("xrootd server", "xrootd client", "davix", "curl", "iperf3", "iptables", "ping",
              "ps, pgrep", "ip, tc", "python venv", "pip", "openssl", "make")),
    "nginx": ("server kind nginx", ("nginx",)),
    "apache": ("server kind apache", ("apache",)),
    "scp": ("client tool scp (server kind sshd)", ("sshd",)),
    "wget": ("client tool wget", ("wget",)),
    "replay": ("caching-mode replays over HTTP (tools/rig-replay-http, built from source)",
               ("c++ compiler", "pkg-config", "davix headers", "libcurl headers", "zlib headers")),
    "capture": ("capture: headers (tcpdump in the router)", ("tcpdump",)),
    "mininet": ("Mininet topologies", ("mininet topologies",)),
    "remote": ("paths and servers on other hosts (sudo there)", ("sudo",)),
    "browser": ("the report's browser check (tests only)", ("chromium",)),
    "x509": ("auth: x509 (GSI and VOMS proxies: voms-proxy-fake, xrootd's VOMS extractors)",
             ("voms proxies", "xrootd voms")),
    "engine": ("the emulation engine's native data path (tools/rig-emul-engine, built from "
               "source; RIG_ENGINE=native)",
               ("c++ compiler", "pkg-config", "nfqueue headers", "libmnl headers",
                "json headers")),
}


def feature_names(features: list[str] | None = None) -> list[str]:
    """`core` and the features asked for, in the map's order (None or `all`: every one);
    an unknown name raises ValueError naming the known ones."""
    if features is None or "all" in features:
        return list(FEATURES)
    bad = [f for f in features if f not in FEATURES]
    if bad:
        raise ValueError(f"no feature {bad[0]!r} (known: all, {', '.join(FEATURES)})")
    return [f for f in FEATURES if f == "core" or f in features]


def needs_of(features: list[str] | None = None) -> list[str]:
    """The needs (keys of PACKAGES) of `core` and the features asked for, in the map's order."""
    want = {n for f in feature_names(features) for n in FEATURES[f][1]}
    return [n for n in PACKAGES if n in want]


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


def names(fam: str, features: list[str] | None = None) -> list[str]:
    """The packages of family `fam` for `core` and `features` (None: every feature), in
    the map's order."""
    needs = needs_of(features)
    if fam == "debian":
        return [PACKAGES[n][0] for n in needs]
    if fam == "el9":
        return ([PACKAGES[n][1] for n in needs if PACKAGES[n][1]]
                + [e for e, _ in EL9_EXTRA.values()])
    raise ValueError(f"no package map for {fam!r} (known: {', '.join(FAMILIES)})")


def missing_by_feature(fam: str, installed: Callable[[str], bool]) -> dict[str, list[str]]:
    """Each feature whose packages `installed(name)` says are not all there, with those
    packages (`rig doctor`)."""
    col = {"debian": 0, "el9": 1}[fam]
    out: dict[str, list[str]] = {}
    for f, (_, needs) in FEATURES.items():
        pkgs = [PACKAGES[n][col] for n in needs if PACKAGES[n][col]]
        if fam == "el9" and f == "core":
            pkgs += [e for e, _ in EL9_EXTRA.values()]
        miss = [p for p in pkgs if not installed(p)]
        if miss:
            out[f] = miss
    return out


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
    """`python3 -m rig.packages debian|el9 [FEATURE...]`: the family's package names for
    `core` and the features named (none named, or `all`: every feature), one per line."""
    if not argv or argv[0] not in FAMILIES:
        print(f"usage: python3 -m rig.packages {'|'.join(FAMILIES)} [all | FEATURE...]",
              file=sys.stderr)
        return 2
    try:
        out = names(argv[0], argv[1:] or None)
    except ValueError as e:
        print(f"rig.packages: {e}", file=sys.stderr)
        return 2
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
