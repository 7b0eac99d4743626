"""Several emulated links on one path (a Mininet topology's links with options): one
backend (netem or the userspace engine) applied to each link's own site with that link's
own, fixed profile. The step's profile is the path's sum (RTT, smallest rate) that the
path check expects; it is not applied (the links' options are the topology's).

`over(backend, site)` gives the backend itself for a path with one site, else a Chain
with the same contract (rig.realization.emul.base.Backend): apply, update, check, stats
and remove cover every link; a failure while applying removes what was applied.
Stats of the links are summed per direction (counters and CPU; lateness histograms merged;
`applied_delay_mean_s` summed: the path's delay); `extra.hops` has each link's own.
Must not import services, orchestration or reports.
"""
from __future__ import annotations

from typing import Any

from rig.description.linkstats import DirStats, EmulStats, Lateness
from rig.description.profile import LinkProfile
from rig.realization.emul.base import Backend, LinkSite

_COUNTS = ("seen", "released", "held", "duplicated", "dropped_loss", "dropped_queue",
           "nfq_queue_dropped", "nfq_user_dropped", "dropped_unattributed",
           "dropped_rate_limiter")


def over(backend: Backend, site: LinkSite | None) -> Any:
    """`backend` for a plain site, a Chain of it for a site with hops."""
    return Chain(backend) if site is not None and site.hops else backend


def _sum(vals: list[Any]) -> Any:
    have = [v for v in vals if v is not None]
    return sum(have) if have else None


def merge_lateness(ls: list[Lateness]) -> Lateness | None:
    if not ls:
        return None
    n = sum(x.count for x in ls)
    hist = tuple(sum(col) for col in zip(*(x.hist for x in ls)))   # one width: linkstats
    tols = {x.tol_s for x in ls}
    over = [x.over_tol for x in ls]
    mins = [x.min_s for x in ls if x.min_s is not None]
    return Lateness(count=n, mean_s=sum(x.mean_s * x.count for x in ls) / n if n else 0.0,
                    max_s=max(x.max_s for x in ls), hist=hist,
                    tol_s=tols.pop() if len(tols) == 1 else None,
                    over_tol=sum(o for o in over if o is not None)
                    if len(tols) <= 1 and None not in over else None,
                    min_s=min(mins) if mins else None)


def merge_dirs(name: str, ds: list[DirStats]) -> DirStats:
    counts = {k: _sum([getattr(d, k) for d in ds]) for k in _COUNTS}
    return DirStats(direction=name, **counts,
                    applied_delay_mean_s=_sum([d.applied_delay_mean_s for d in ds]),
                    lateness=merge_lateness([d.lateness for d in ds if d.lateness]))


def merge(backend: str, names: list[str], sts: list[EmulStats]) -> EmulStats:
    """One path's stats from its links' (pure)."""
    dirs = []
    for dn in dict.fromkeys(d.direction for s in sts for d in s.directions):
        dirs.append(merge_dirs(dn, [d for s in sts if (d := s.direction(dn))]))
    alive = [s.alive for s in sts if s.alive is not None]
    errors = [f"{n}: {s.error}" for n, s in zip(names, sts) if s.error]
    inst = [s.instance for s in sts]
    return EmulStats(
        backend, tuple(dirs), alive=all(alive) if alive else None,
        error="; ".join(errors) or None,
        # the counters can be differenced while every link's instance is the same: their
        # sum identifies the set (a restarted engine changes its pid)
        instance=sum(i for i in inst if i is not None) if all(i is not None for i in inst)
        else None,
        cpu_user_s=_sum([s.cpu_user_s for s in sts]), cpu_sys_s=_sum([s.cpu_sys_s for s in sts]),
        run_s=_sum([s.run_s for s in sts]), run_wait_s=_sum([s.run_wait_s for s in sts]),
        wall_s=max((s.wall_s for s in sts if s.wall_s is not None), default=None),
        steal_s=next((s.steal_s for s in sts if s.steal_s is not None), None),
        extra={"hops": {n: s.to_dict() for n, s in zip(names, sts)}})


class Chain:
    """The Backend contract over every link of a path with several emulated links."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.name = inner.name

    def plan(self, site: LinkSite, profile: LinkProfile) -> list[list[str]]:
        return [a for hop, prof in site.hops for a in self.inner.plan(hop, prof)]

    def apply(self, site: LinkSite, profile: LinkProfile) -> None:
        done: list[LinkSite] = []
        try:
            for hop, prof in site.hops:
                self.inner.apply(hop, prof)
                done.append(hop)
        except BaseException:
            for hop in reversed(done):
                self.inner.remove(hop)
            raise

    def update(self, site: LinkSite, profile: LinkProfile) -> None:
        for hop, prof in site.hops:
            self.inner.update(hop, prof)

    def check(self, site: LinkSite) -> None:
        for hop, _ in site.hops:
            self.inner.check(hop)

    def stats(self, site: LinkSite) -> EmulStats:
        return merge(self.name, [h.path for h, _ in site.hops],
                     [self.inner.stats(h) for h, _ in site.hops])

    def remove(self, site: LinkSite) -> None:
        for hop, _ in reversed(site.hops):
            self.inner.remove(hop)

    def stalls(self, site: LinkSite) -> list[float]:
        fn = getattr(self.inner, "stalls", None)
        return [x for h, _ in site.hops for x in fn(h)] if fn else []

    def engine_pids(self, site: LinkSite) -> list[int]:
        return [p for h, _ in site.hops for p in self.inner.engine_pids(h)]
