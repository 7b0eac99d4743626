"""An end held back by its own CPU quota: the kernel's account of each end's cgroup
(extra.cpu_quota, rig.orchestration.samplers.CpuQuota) turned into a verdict.

A process in a cgroup with a quota (cgroup v2 `cpu.max`, v1 `cpu.cfs_quota_us`: a
container or pod CPU limit, a systemd CPUQuota=) may use `quota` of CPU per `period`;
a period in which the cgroup used it all ends throttled, and the kernel counts it
(cpu.stat nr_throttled of nr_periods). Such an end is bound by its quota whatever else
runs on the host: the host's other work can only make it get less than its quota, and
then the quota is not what bit. An end (a client transfer, a server group) is held by
its quota when, over the transfer:
  throttled   >= THROTTLED_SHARE of its cgroup's periods ended throttled, and at least
              MIN_THROTTLED of them: the quota was reached again and again, not by one
              burst. A process that wants more than its quota all the time is throttled
              in nearly every period; one that runs just under it, never.
  at quota    it used >= QUOTA_USE of the quota's cores over its wall (the cgroup's own
              usage where the kernel gives it, v2 usage_usec or v1 cpuacct.usage in the
              same directory; else its processes' CPU seconds over their wall): the
              rig's "near a bound" margin (verdict.NEAR). A cgroup throttled in bursts
              (a checksum at the end) but idle most of the transfer, waiting for the
              network, was not held by it.
Nested cgroups: a quota can sit on an ancestor (a pod's, a slice's); every directory up
to the root with a quota is recorded, and the tightest one (fewest cores) that
throttled judges. A quota shared with other processes (an ancestor's) is rarely near
its whole size for one end: that end is then not called quota-bound (conservative).

The point's end is quota-bound when most of its transfers (client) or groups (server)
are. Client: single-thread-bound where one thread carries its demand
(rig.report.threads, the rig's existing rule), else client-CPU-bound; server:
server-cpu-bound. The engine's quota is never an end's: it is a note, and an engine late
for it is emulator-limited (its own rule, first).

Pure Python: must not import matplotlib, rig.realization.netns, rig.process.proc,
rig.services or rig.realization.emul.
"""
from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from rig.report.model import Key, Point, Run, _key
from rig.report.threads import ProcUse
from rig.report.threads import evidence as thread_evidence

THROTTLED_SHARE = 0.20
QUOTA_USE = 0.85        # verdict.NEAR: at >= 85 % of a bound, the bound is what limits
MIN_THROTTLED = 2       # one throttled period can be one burst (a start-up, a checksum)
ENDS = ("client", "server", "engine")


@dataclass(frozen=True)
class Held:
    """One end of one transfer (client) or group (server, engine) and its tightest
    quota that throttled."""
    end: str
    path: str
    cores: float
    quota_us: int
    period_us: int
    file: str
    depth: int
    periods: float
    throttled: float
    use_cores: float | None

    @property
    def share(self) -> float:
        return self.throttled / self.periods if self.periods else 0.0

    def bound(self) -> bool:
        return self.throttled >= MIN_THROTTLED and self.share >= THROTTLED_SHARE \
            and self.use_cores is not None and self.use_cores >= QUOTA_USE * self.cores


def _extra(text: Any) -> dict:
    try:
        d = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}


def tightest(records: list[dict], end: str, own_cores: float | None) -> Held | None:
    """The cgroup with the fewest cores among those that throttled (a quota never
    reached holds nothing), its use: the cgroup's own usage over its span where the
    kernel gave it, else `own_cores` (the end's processes)."""
    best: Held | None = None
    for r in records:
        try:
            quota, period = int(r["quota_us"]), int(r["period_us"])
            periods, thr = float(r.get("periods") or 0), float(r.get("throttled") or 0)
        except (KeyError, TypeError, ValueError):
            continue
        if quota <= 0 or period <= 0 or thr <= 0:
            continue
        usage, span = r.get("usage_s"), r.get("span_s")
        use = (float(usage) / float(span) if isinstance(usage, (int, float))
               and isinstance(span, (int, float)) and span > 0 else own_cores)
        h = Held(end, str(r.get("path") or "?"), quota / period, quota, period,
                 str(r.get("file") or "cpu.max"), int(r.get("depth") or 0), periods, thr,
                 use)
        if best is None or (h.cores, -h.share) < (best.cores, -best.share):
            best = h
    return best


@dataclass
class PointQuota:
    client: list[Held | None]
    server: list[Held | None]
    engine: list[Held | None]


def _wall(r) -> float | None:
    w = _extra(r.extra).get("process_wall_s")
    return float(w) if isinstance(w, (int, float)) and w > 0 else (
        float(r.duration_s) if r.duration_s else None)


def evidence(run: Run) -> dict[Key, PointQuota]:
    """Per point: each transfer's client, each group's server and engine (Held, or None
    where the end had a quota that never throttled); ends without a quota are left out.
    Cached on the run."""
    cached = getattr(run, "_quota_evidence", None)
    if cached is not None:
        return cached
    groups: dict[tuple, list] = defaultdict(list)
    for t in run.transfers:
        if t.ok and "cpu_quota" in _extra(t.extra):
            groups[(_key(t), int(t.step), int(t.repeat or 0))].append(t)
    out: dict[Key, PointQuota] = defaultdict(lambda: PointQuota([], [], []))
    for (key, _, _), rows in groups.items():
        q = [_extra(r.extra)["cpu_quota"] for r in rows]
        # the client processes' cores per cgroup path (concurrent instances share one)
        shared: dict[str, float] = defaultdict(float)
        for r, qq in zip(rows, q):
            w = _wall(r)
            cpu = (r.cpu_user_s or 0.0) + (r.cpu_sys_s or 0.0)
            for rec in qq.get("client") or []:
                if w:
                    shared[str(rec.get("path"))] += cpu / w
        for qq in q:
            recs = qq.get("client") or []
            if recs:
                h = tightest(recs, "client", None)
                if h is not None and h.use_cores is None:
                    h = Held(**{**h.__dict__, "use_cores": shared.get(h.path)})
                out[key].client.append(h)
        wall = rows[0].host_cpu_wall_s or max((_wall(r) or 0.0) for r in rows) or None
        srv = sum((r.server_cpu_user_s or 0.0) + (r.server_cpu_sys_s or 0.0) for r in rows)
        have_srv = any(r.server_cpu_user_s is not None for r in rows)
        for end, own in (("server", srv / wall if wall and have_srv else None),
                         ("engine", (rows[0].engine_cpu_s / wall)
                          if wall and rows[0].engine_cpu_s is not None else None)):
            recs = q[0].get(end) or []
            if recs:
                getattr(out[key], end).append(tightest(recs, end, own))
    cached = dict(out)
    run._quota_evidence = cached        # type: ignore[attr-defined]
    return cached


def _held(obs: list[Held | None]) -> list[Held]:
    """The observations quota-bound, when they are most of them; else []."""
    hits = [h for h in obs if h is not None and h.bound()]
    return hits if obs and len(hits) * 2 > len(obs) else []


def text(hits: list[Held], n: int) -> str:
    """'client capped at 0.30 core by cpu.max of its cgroup (...), throttled in 87% of
    periods, using 0.29 core (97% of it) (4 of 4 transfers)'."""
    h = hits[0]
    share = statistics.median(x.share for x in hits)
    uses = [x.use_cores for x in hits if x.use_cores is not None]
    use = statistics.median(uses) if uses else None
    where = "its cgroup" if h.depth == 0 else f"an ancestor cgroup ({h.depth} up)"
    unit = "transfers" if h.end == "client" else "groups"
    return (f"{h.end} capped at {h.cores:.2f} core by {h.file} of {where} ({h.quota_us} of "
            f"{h.period_us} us, {h.path}), throttled in {share:.0%} of periods"
            + (f", using {use:.2f} core ({use / h.cores:.0%} of it)" if use is not None
               else "")
            + f" ({len(hits)} of {n} {unit})")


def bound(point: Point, run: Run) -> tuple[str, str] | None:
    """(kind, detail) when the point's client or server was held by its own quota; the
    end throttled in the larger share of its periods when both were."""
    p = evidence(run).get(point.key)
    if p is None:
        return None
    found = [(end, hits, len(obs)) for end, obs in (("client", p.client),
                                                   ("server", p.server))
             if (hits := _held(obs))]
    if not found:
        return None
    end, hits, n = max(found, key=lambda f: statistics.median(h.share for h in f[1]))
    detail = text(hits, n)
    if end == "server":
        return "server-cpu-bound", detail
    th = thread_evidence(run).get(point.key)
    uses = [u for u in (th.client if th else []) if u.about_transfer()]
    ones = [t for u in uses if (t := ProcUse.one_thread(u))]
    if uses and len(ones) * 2 > len(uses):
        return "single-thread-bound", (
            f"{detail}; one thread carries it: '{ones[0].name.split('[')[0]}' on a CPU "
            f"{statistics.median(t.cpu for t in ones):.0%} (+"
            f"{statistics.median(t.wait for t in ones):.0%} waiting) of its busy time, "
            f"the others idle")
    return "client-CPU-bound", detail


def engine_note(point: Point, run: Run) -> str | None:
    """The engine held by its own quota (a note: it is never an end's bound)."""
    p = evidence(run).get(point.key)
    hits = _held(p.engine) if p is not None else []
    return f"the emulation {text(hits, len(p.engine))}" if hits and p else None
