"""Realization of paths: network namespaces, veth pairs, addresses, forwarding.

One path is three namespaces, client — router — server, joined by two veth pairs; the
router forwards and is where link emulation is applied. Every name carries the run's
prefix ('rig' + 4 hex digits): namespaces `<prefix>-<i>c|r|s`, interfaces
`<prefix><i>cr` etc. (<= 15 characters). Addresses come from 198.18.0.0/15 (RFC 2544,
reserved for benchmarking), one /24 per run, leased through O_EXCL files under
/run/rig/leases so concurrent runs on one host never collide.

Command builders are pure; `path_net()` is the context manager that builds and always
tears down. Must not import services, orchestration or reports.
"""
from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import secrets
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

from . import owner, proc
from .emul.base import LinkSite
from .errors import RigError
from .limits import MAX_PATHS   # stated once, with the scenario's limits

STATE_DIR = Path(os.environ.get("RIG_STATE_DIR", "/run/rig"))
PREFIX_RE = re.compile(r"^rig[0-9a-f]{4}$")
NS_RE = re.compile(r"^(rig[0-9a-f]{4})-[0-9]+[crs]$")
_SUBNETS = [ipaddress.ip_network(f"198.{18 + (n >> 8)}.{n & 255}.0/24") for n in range(512)]
CMD_TIMEOUT = 20.0


def new_prefix() -> str:
    return "rig" + secrets.token_hex(2)


@dataclass(frozen=True)
class PathNames:
    """All names and addresses of path number `index` of a run (pure)."""
    prefix: str
    index: int
    name: str
    subnet: str

    def __post_init__(self) -> None:
        if not PREFIX_RE.match(self.prefix):
            raise ValueError(f"bad prefix {self.prefix!r}")
        if not 0 <= self.index < MAX_PATHS:
            raise ValueError(f"at most {MAX_PATHS} paths per run")

    def ns(self, role: str) -> str:
        return f"{self.prefix}-{self.index}{role}"

    def ifname(self, a: str, b: str) -> str:
        return f"{self.prefix}{self.index}{a}{b}"

    def _addr(self, k: int) -> str:
        net = ipaddress.ip_network(self.subnet)
        return str(net.network_address + 8 * self.index + k)

    @property
    def client_ns(self) -> str:
        return self.ns("c")

    @property
    def router_ns(self) -> str:
        return self.ns("r")

    @property
    def server_ns(self) -> str:
        return self.ns("s")

    @property
    def client_addr(self) -> str:
        return self._addr(1)

    @property
    def router_client_addr(self) -> str:
        return self._addr(2)

    @property
    def router_server_addr(self) -> str:
        return self._addr(5)

    @property
    def server_addr(self) -> str:
        return self._addr(6)

    @property
    def client_net(self) -> str:
        return f"{self._addr(0)}/30"

    @property
    def server_net(self) -> str:
        return f"{self._addr(4)}/30"

    def site(self, workdir: Path) -> LinkSite:
        return LinkSite(path=self.name, prefix=self.prefix, router_ns=self.router_ns,
                        to_client_if=self.ifname("r", "c"), to_server_if=self.ifname("r", "s"),
                        client_net=self.client_net, server_net=self.server_net,
                        queue_base=2 * self.index, workdir=workdir)


def build_argv(n: PathNames, *, mtu: int = 1500) -> list[list[str]]:
    """Every command that builds path `n`, in order."""
    c, r, s = n.client_ns, n.router_ns, n.server_ns
    cr, rc, rs, sr = n.ifname("c", "r"), n.ifname("r", "c"), n.ifname("r", "s"), n.ifname("s", "r")
    cmds: list[list[str]] = [["ip", "netns", "add", ns] for ns in (c, r, s)]
    cmds += [
        ["ip", "link", "add", cr, "netns", c, "type", "veth", "peer", "name", rc, "netns", r],
        ["ip", "link", "add", rs, "netns", r, "type", "veth", "peer", "name", sr, "netns", s],
    ]
    for ns, dev, addr in ((c, cr, n.client_addr), (r, rc, n.router_client_addr),
                          (r, rs, n.router_server_addr), (s, sr, n.server_addr)):
        cmds += [["ip", "-n", ns, "addr", "add", f"{addr}/30", "dev", dev],
                 ["ip", "-n", ns, "link", "set", dev, "mtu", str(mtu), "up"]]
    cmds += [["ip", "-n", ns, "link", "set", "lo", "up"] for ns in (c, r, s)]
    cmds += [["ip", "-n", c, "route", "add", "default", "via", n.router_client_addr],
             ["ip", "-n", s, "route", "add", "default", "via", n.router_server_addr],
             ["ip", "netns", "exec", r, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"]]
    return cmds


def teardown_argv(n: PathNames) -> list[list[str]]:
    return [["ip", "netns", "del", ns] for ns in (n.client_ns, n.router_ns, n.server_ns)]


# --- leases and state ---------------------------------------------------------------

def lease_subnet(prefix: str) -> str:
    """Claim a /24 no other live run uses; stale leases (their namespaces gone) are reused."""
    d = STATE_DIR / "leases"
    d.mkdir(parents=True, exist_ok=True)
    live = set(list_namespaces())
    for net in _SUBNETS:
        f = d / str(net.network_address)
        try:
            fd = os.open(f, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = f.read_text().strip() if f.exists() else ""
            if holder and not any(ns.startswith(holder + "-") for ns in live) \
                    and not (STATE_DIR / f"{holder}.json").exists():
                with contextlib.suppress(FileNotFoundError):
                    f.unlink()
            continue
        with os.fdopen(fd, "w") as fh:
            fh.write(prefix)
        return str(net)
    raise RigError("no free address range in 198.18.0.0/15 (run `rig clean`?)")


def release_subnet(prefix: str) -> None:
    d = STATE_DIR / "leases"
    if not d.is_dir():
        return
    for f in d.iterdir():
        with contextlib.suppress(OSError):
            if f.read_text().strip() == prefix:
                f.unlink()


def list_namespaces() -> list[str]:
    try:
        names = os.listdir("/run/netns")
    except FileNotFoundError:
        return []
    return sorted(n for n in names if NS_RE.match(n))


def ns_pids(ns: str) -> list[int]:
    res = proc.run(["ip", "netns", "pids", ns], timeout=CMD_TIMEOUT)
    return [int(x) for x in res.stdout.split() if x.isdigit()]


def write_state(prefix: str, data: dict) -> Path:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    p = STATE_DIR / f"{prefix}.json"
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(p)
    return p


def read_states() -> dict[str, dict]:
    out = {}
    if STATE_DIR.is_dir():
        for p in STATE_DIR.glob("rig*.json"):
            if PREFIX_RE.match(p.stem):
                with contextlib.suppress(ValueError, OSError):
                    out[p.stem] = json.loads(p.read_text())
    return out


def drop_state(prefix: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        (STATE_DIR / f"{prefix}.json").unlink()


@contextlib.contextmanager
def registry_lock(timeout: float = 10.0) -> Iterator[None]:
    """Serialize check-then-write on the state files (e.g. `rig net up`'s unique names).
    Held for milliseconds; the deadline only guards against a wedged holder."""
    import fcntl
    import time
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    fd = os.open(STATE_DIR / "registry.lock", os.O_CREAT | os.O_RDWR, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RigError(f"{STATE_DIR}/registry.lock held for over {timeout:g} s") \
                        from None
                time.sleep(0.01)
        yield
    finally:
        os.close(fd)     # releases the lock


def prefix_in_use(prefix: str) -> bool:
    return (STATE_DIR / f"{prefix}.json").exists() or \
        any(ns.startswith(prefix + "-") for ns in list_namespaces())


# --- realization ---------------------------------------------------------------------

@dataclass(frozen=True)
class PathNet:
    names: PathNames
    site: LinkSite

    @property
    def client_ns(self) -> str:
        return self.names.client_ns

    @property
    def router_ns(self) -> str:
        return self.names.router_ns

    @property
    def server_ns(self) -> str:
        return self.names.server_ns

    @property
    def client_addr(self) -> str:
        return self.names.client_addr

    @property
    def server_addr(self) -> str:
        return self.names.server_addr

    def describe(self) -> dict:
        return {"name": self.names.name, "client_ns": self.client_ns,
                "router_ns": self.router_ns, "server_ns": self.server_ns,
                "client_addr": self.client_addr, "server_addr": self.server_addr}


ETC_NETNS = Path("/etc/netns")


def isolate_resolver(ns: str) -> None:
    """Give the namespace an empty resolv.conf (`ip netns exec` bind-mounts
    /etc/netns/NS/* over /etc/*). The host's resolver is unreachable from the rig's
    namespaces; without this every lookup waits 5 s for it (seen: xrdcp 5.5 opening
    its -S streams, and two xrdcp at once, each stalled 5 s)."""
    d = ETC_NETNS / ns
    d.mkdir(parents=True, exist_ok=True)
    (d / "resolv.conf").write_text("# rig: no resolver inside the rig's namespaces\n")


def forget_resolver(ns: str) -> None:
    if not NS_RE.match(ns):
        raise ValueError(f"refusing to touch {ns!r}: not the rig's")
    shutil.rmtree(ETC_NETNS / ns, ignore_errors=True)


def kill_ns_processes(ns: str) -> None:
    """SIGKILL whatever still runs inside one of the rig's own namespaces."""
    if not NS_RE.match(ns):
        raise ValueError(f"refusing to touch namespace {ns!r}: not the rig's")
    import signal
    for pid in ns_pids(ns):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def destroy(names: PathNames) -> None:
    for ns in (names.client_ns, names.router_ns, names.server_ns):
        if ns in list_namespaces():
            kill_ns_processes(ns)
            proc.run(["ip", "netns", "del", ns], timeout=CMD_TIMEOUT)
        forget_resolver(ns)


def build(names: PathNames, *, workdir: Path, mtu: int = 1500) -> PathNet:
    """Build one path; on failure remove whatever part of it was made, then raise."""
    try:
        for argv in build_argv(names, mtu=mtu):
            proc.run(argv, timeout=CMD_TIMEOUT, check=True)
        for ns in (names.client_ns, names.router_ns, names.server_ns):
            isolate_resolver(ns)
    except BaseException:
        destroy(names)
        raise
    workdir.mkdir(parents=True, exist_ok=True)
    return PathNet(names, names.site(workdir))


@contextlib.contextmanager
def path_net(prefix: str, name: str, index: int, *, workdir: Path, mtu: int = 1500,
             subnet: str | None = None) -> Iterator[PathNet]:
    """Build one client—router—server path and always tear it down (incl. its lease)."""
    own_state = not (STATE_DIR / f"{prefix}.json").exists()
    if own_state:   # a live owner: a concurrent `rig clean` leaves this path alone
        write_state(prefix, {"kind": "run", "prefix": prefix, "pid": os.getpid(),
                             "pid_start": owner.start_time(os.getpid())})
    own_lease = subnet is None
    try:
        subnet = subnet or lease_subnet(prefix)
        names = PathNames(prefix, index, name, subnet)
        try:
            yield build(names, workdir=workdir, mtu=mtu)
        finally:
            destroy(names)
    finally:
        if own_lease:
            release_subnet(prefix)
        if own_state:
            drop_state(prefix)


def names_dict(n: PathNames) -> dict:
    return asdict(n)
