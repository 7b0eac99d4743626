"""A process's CPU quota and how often it held the process back, from the kernel's own
account of its cgroup (no process is started).

A process in a container or pod with a CPU limit, a systemd slice with CPUQuota= or any
cgroup with a quota may use `quota` microseconds of CPU per `period`; a period in which
its cgroup used it all throttles the cgroup (none of its threads run) until the next
period. The kernel counts that per cgroup:
  limit   cgroup v2 `cpu.max` ("QUOTA PERIOD", "max PERIOD": none); cgroup v1
          `cpu.cfs_quota_us` (-1: none) and `cpu.cfs_period_us`
  stat    `cpu.stat`: nr_periods (periods in which the cgroup had work), nr_throttled
          (periods that ended throttled), throttled_usec (v2) or throttled_time (v1, ns);
          v2's usage_usec (the cgroup's CPU), v1's `cpuacct.usage` (ns) where cpuacct is
          mounted with cpu, or mounted apart with the process in the cgroup of the same
          path (as container runtimes make them)
The cgroup of a process is read from /proc/PID/cgroup (the `cpu` controller's line on
v1, the `0::` line on v2) against /proc/self/mountinfo; a quota can sit on any ancestor
(a pod's limit on the pod, not the container), so every directory from the process's
own up to the hierarchy's root is read, and each one with a quota is kept.

`QuotaWatch` follows processes over a transfer group: each tick reads where each one is
(a process can be moved into a cgroup after it started) and the stat of every cgroup with
a quota seen so far; `finish()` reads them once more and gives, per process key, each
cgroup's readings (`Quota`), whose `over(t0, t1)` is the change of its counters over a
transfer's own window (`QuotaUse`).

Must not import anything above rig.process.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


@dataclass(frozen=True)
class Mount:
    point: Path         # where the hierarchy is mounted
    root: str           # the hierarchy's path mounted there ("/" unless a cgroup namespace)
    v2: bool


def cpu_mounts(proc: Path = PROC) -> tuple[Mount | None, Mount | None]:
    """(the v1 hierarchy of the `cpu` controller, the v2 hierarchy) mounted here, each None
    when absent (mountinfo: the options after ' - ' name a v1 hierarchy's controllers)."""
    v1, v2, _ = _mounts(proc)
    return v1, v2


def _mounts(proc: Path) -> tuple[Mount | None, Mount | None, Mount | None]:
    """(v1 `cpu`, v2, v1 `cpuacct` mounted apart from `cpu`)."""
    v1 = v2 = acct = None
    for line in (_read(proc / "self/mountinfo") or "").splitlines():
        head, sep, tail = line.partition(" - ")
        f, t = head.split(), tail.split()
        if not sep or len(f) < 5 or len(t) < 3:
            continue
        opts = t[2].split(",")
        if t[0] == "cgroup2" and v2 is None:
            v2 = Mount(Path(f[4]), f[3], True)
        elif t[0] == "cgroup" and "cpu" in opts and v1 is None:
            v1 = Mount(Path(f[4]), f[3], False)
        elif t[0] == "cgroup" and "cpuacct" in opts and "cpu" not in opts and acct is None:
            acct = Mount(Path(f[4]), f[3], False)
    return v1, v2, acct


def acct_twin(d: Path, pid: int, proc: Path = PROC) -> Path | None:
    """A v1 `cpu` cgroup's usage counter where cpuacct is mounted apart: the cpuacct
    cgroup of the same path (container runtimes make the two together) when `pid` is in
    it or below it, None otherwise."""
    v1, _, acct = _mounts(proc)
    if v1 is None or acct is None or d == v1.point or v1.point not in d.parents:
        return None
    rel = "/" + str(d.relative_to(v1.point))
    for line in (_read(proc / str(pid) / "cgroup") or "").splitlines():
        _, _, rest = line.partition(":")
        ctl, _, path = rest.partition(":")
        if "cpuacct" in ctl.split(",") and (path == rel or path.startswith(rel + "/")):
            twin = acct.point / rel.strip("/") / "cpuacct.usage"
            return twin if twin.exists() else None
    return None


def cgroup_chain(pid: int, proc: Path = PROC,
                 mounts: tuple[Mount | None, Mount | None] | None = None) -> list[Path]:
    """The directories of `pid`'s cpu cgroup, its own first, up to the hierarchy's root:
    the v1 `cpu` controller's where it is mounted, else v2's. [] when the process is gone
    or no hierarchy holds the cpu controller."""
    text = _read(proc / str(pid) / "cgroup")
    if text is None:
        return []
    v1, v2 = mounts if mounts is not None else cpu_mounts(proc)
    rel = None
    for line in text.splitlines():
        hid, _, rest = line.partition(":")
        ctl, _, path = rest.partition(":")
        if v1 is not None and "cpu" in ctl.split(","):
            rel, m = path, v1
            break
        if hid == "0" and ctl == "" and v2 is not None:
            rel, m = path, v2
    if rel is None:
        return []
    if m.root != "/" and rel.startswith(m.root):
        rel = rel[len(m.root):]
    leaf = m.point / rel.strip("/") if rel.strip("/") else m.point
    chain = [leaf]
    while chain[-1] != m.point and m.point in chain[-1].parents:
        chain.append(chain[-1].parent)
    return chain


@dataclass(frozen=True)
class Limit:
    quota_us: int
    period_us: int
    file: str           # "cpu.max" | "cpu.cfs_quota_us"

    @property
    def cores(self) -> float:
        return self.quota_us / self.period_us


def read_limit(d: Path) -> Limit | None:
    """The cgroup's CPU quota, None when it has none (or none is readable)."""
    text = _read(d / "cpu.max")
    if text is not None:
        f = text.split()
        if len(f) == 2 and f[0] != "max":
            try:
                return Limit(int(f[0]), int(f[1]), "cpu.max")
            except ValueError:
                return None
        return None
    q, p = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
    try:
        quota, period = int((q or "").strip()), int((p or "").strip())
    except ValueError:
        return None
    return Limit(quota, period, "cpu.cfs_quota_us") if quota > 0 and period > 0 else None


@dataclass(frozen=True)
class Stat:
    periods: int
    throttled: int
    throttled_us: float
    usage_us: float | None      # the cgroup's CPU (v2 usage_usec, v1 cpuacct.usage)


def read_stat(d: Path, acct: Path | None = None) -> Stat | None:
    """The cgroup's cpu.stat counters, None when unreadable; `acct`: a cpuacct.usage
    file of the same cgroup (acct_twin) where the directory has none."""
    text = _read(d / "cpu.stat")
    if text is None:
        return None
    kv: dict[str, int] = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) == 2 and f[1].lstrip("-").isdigit():
            kv[f[0]] = int(f[1])
    if "nr_periods" not in kv or "nr_throttled" not in kv:
        return None
    thr = kv["throttled_usec"] if "throttled_usec" in kv else kv.get("throttled_time", 0) / 1e3
    usage: float | None = kv.get("usage_usec")
    if usage is None:
        # v1 with cpu,cpuacct mounted together, or its twin in a cpuacct hierarchy
        text = _read(d / "cpuacct.usage") or (_read(acct) if acct is not None else None)
        usage = int(text) / 1e3 if text and text.strip().isdigit() else None
    return Stat(kv["nr_periods"], kv["nr_throttled"], float(thr),
                None if usage is None else float(usage))


@dataclass
class QuotaUse:
    """One cgroup with a quota that held a tracked process: its counters' change over a
    window (the counters read at a tick are taken linearly between ticks)."""
    path: str
    limit: Limit
    periods: float = 0.0
    throttled: float = 0.0
    throttled_s: float = 0.0
    usage_s: float | None = None
    span_s: float = 0.0
    depth: int = 0          # 0: the process's own cgroup, 1: its parent, ...

    def to_json(self) -> dict:
        return {"path": self.path, "quota_us": self.limit.quota_us,
                "period_us": self.limit.period_us, "file": self.limit.file,
                "depth": self.depth, "periods": round(self.periods, 1),
                "throttled": round(self.throttled, 1),
                "throttled_s": round(self.throttled_s, 6),
                "usage_s": None if self.usage_s is None else round(self.usage_s, 6),
                "span_s": round(self.span_s, 4)}


def _at(samples: list[tuple[float, Stat]], t: float) -> Stat:
    """The counters at t: linear between the two readings around it (t inside them)."""
    lo = samples[0]
    for hi in samples[1:]:
        if hi[0] >= t:
            if hi[0] <= lo[0]:
                return hi[1]
            f = (t - lo[0]) / (hi[0] - lo[0])
            a, b = lo[1], hi[1]
            return Stat(a.periods + f * (b.periods - a.periods),     # type: ignore[arg-type]
                        a.throttled + f * (b.throttled - a.throttled),  # type: ignore[arg-type]
                        a.throttled_us + f * (b.throttled_us - a.throttled_us),
                        None if a.usage_us is None or b.usage_us is None
                        else a.usage_us + f * (b.usage_us - a.usage_us))
        lo = hi
    return samples[-1][1]


@dataclass
class Quota:
    """A cgroup with a quota seen holding a tracked process, and its readings."""
    path: Path
    limit: Limit
    depth: int
    samples: list[tuple[float, Stat]]      # (monotonic time, counters)
    acct: Path | None = None

    def over(self, t0: float | None = None, t1: float | None = None) -> QuotaUse:
        """The counters' change over [t0, t1] (monotonic; clipped to the readings, all of
        them by default)."""
        first, last = self.samples[0][0], self.samples[-1][0]
        lo = first if t0 is None else min(max(t0, first), last)
        hi = last if t1 is None else min(max(t1, lo), last)
        a, b = _at(self.samples, lo), _at(self.samples, hi)
        return QuotaUse(str(self.path), self.limit, max(0.0, b.periods - a.periods),
                        max(0.0, b.throttled - a.throttled),
                        max(0.0, b.throttled_us - a.throttled_us) / 1e6,
                        None if a.usage_us is None or b.usage_us is None
                        else max(0.0, b.usage_us - a.usage_us) / 1e6, hi - lo, self.depth)


@dataclass
class QuotaWatch:
    """The quota cgroups of tracked processes (key: a client instance, "server", ...)."""
    proc: Path = PROC
    mounts: tuple[Mount | None, Mount | None] | None = None
    seen: dict[str, dict[Path, Quota]] = field(default_factory=dict)
    pids: dict[int, str] = field(default_factory=dict)
    reads: int = 0

    def __post_init__(self) -> None:
        if self.mounts is None:
            self.mounts = cpu_mounts(self.proc)

    def add(self, pid: int, key: str) -> None:
        self.pids[pid] = key
        self.seen.setdefault(key, {})

    def tick(self, now: float | None = None) -> None:
        """Where each live tracked process is now, and every known cgroup's counters."""
        now = time.monotonic() if now is None else now
        fresh: set[Path] = set()
        for pid, key in list(self.pids.items()):
            chain = cgroup_chain(pid, self.proc, self.mounts)
            if not chain:
                del self.pids[pid]          # gone: its cgroups are still read below
                continue
            mine = self.seen[key]
            for depth, d in enumerate(chain):
                if d in mine:
                    continue
                lim = read_limit(d)
                acct = acct_twin(d, pid, self.proc) if lim is not None else None
                st = read_stat(d, acct) if lim is not None else None
                self.reads += 1
                if lim is not None and st is not None:
                    mine[d] = Quota(d, lim, depth, [(now, st)], acct)
                    fresh.add(d)
        self._restat(now, fresh)

    def _restat(self, now: float, skip: set[Path] | None = None) -> None:
        for mine in self.seen.values():
            for d, q in mine.items():
                if skip and d in skip:
                    continue
                st = read_stat(d, q.acct)
                self.reads += 1
                if st is not None:
                    q.samples.append((now, st))

    def finish(self, now: float | None = None) -> dict[str, list[Quota]]:
        """Each key's quota cgroups (own first, then ancestors), read once more."""
        self._restat(time.monotonic() if now is None else now)
        return {key: sorted(mine.values(), key=lambda q: q.depth)
                for key, mine in self.seen.items()}
