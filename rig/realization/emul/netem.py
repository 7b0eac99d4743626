"""The netem backend: the kernel's sch_netem on each egress of the router, a TBF child
for rate, all built by pure argv functions (tested without root) and verified with
`tc -j`. Also `kernel_has_netem()`, the probe that decides whether this backend is usable.

netem semantics worth knowing (and mirrored by the userspace engine):
- `limit` is in packets and must hold the bandwidth-delay product or it caps throughput:
  sized by Direction.bdp_packets.
- jitter reorders packets unless netem's own `rate` is set; for order-preserving jitter
  we add a rate far above any real one (100 Gbit/s) so each packet waits for the last.
- loss (and duplication) applies per skb: with TSO/GSO a lost skb is up to ~45 wire
  segments lost together, one congestion event where the scenario meant ~45, and netem
  counts it as one drop while it counts what it passes in segments. The userspace engine
  segments first when loss > 0; netem cannot, so on a path whose ends the rig built the
  senders of a lossy direction send one segment per skb (`gso_max_segs 1` on their
  veths; 65535, Linux's default, again when the loss is gone). A lab's own end hosts are
  left as they are: there, netem's loss stays per skb (docs/emulation.md, before "Each step is
  checked by the emulator's own timing").

Must not import services, orchestration or reports.
"""
from __future__ import annotations

import dataclasses
import json

from rig.process import proc
from rig.errors import RigError, StepAborted
from rig.description.linkstats import EmulStats, StatsFormatError, qdisc_dir_stats
from rig.realization.emul import registry
from rig.realization.emul.base import (LinkSite, egress_direction, ifb_setup_argv,
                                       ifb_teardown_argv, qdisc_del_argv, tbf_argv, where)
from rig.description.profile import Direction, LinkProfile

CMD_TIMEOUT = 20.0
ORDER_RATE_BPS = 100e9        # netem `rate` that only serves to keep packets in order
GSO_MAX_SEGS = 65535          # Linux's default gso_max_segs, a veth's as the rig builds it


def _pct(x: float) -> str:
    return f"{x * 100:.6g}%"


def _us(s: float) -> str:
    return f"{s * 1e6:.0f}us"


def netem_params(d: Direction, rtt_s: float) -> list[str]:
    """The netem option words for one direction (after `netem`)."""
    words = ["limit", str(d.bdp_packets(rtt_s)), "delay", _us(d.delay_s)]
    if d.jitter_s > 0:
        words.append(_us(d.jitter_s))
        if d.jitter_dist == "normal":
            words += ["distribution", "normal"]
    if d.gemodel is not None:
        ge = d.gemodel
        # netem: loss gemodel p r 1-h 1-k (1-h: loss in bad state, 1-k: loss in good)
        words += ["loss", "gemodel", _pct(ge.p), _pct(ge.r), _pct(ge.loss_bad),
                  _pct(ge.loss_good)]
    elif d.loss > 0:
        words += ["loss", "random", _pct(d.loss)]
    if d.duplicate > 0:
        words += ["duplicate", _pct(d.duplicate)]
    if d.jitter_s > 0 and not d.reorder:
        words += ["rate", f"{int(ORDER_RATE_BPS)}bit"]
    return words


def netem_argv(ns: str, dev: str, d: Direction, rtt_s: float) -> list[str]:
    """`tc qdisc replace dev DEV root handle 1: netem ...` inside namespace ns (empty:
    a remote router host's own network)."""
    if not dev:
        raise ValueError("netem needs a device")
    return proc.ns_argv(ns, ["tc", "qdisc", "replace", "dev", dev, "root",
                      "handle", "1:", "netem", *netem_params(d, rtt_s)])


def rate_child_argv(ns: str, dev: str, d: Direction, rtt_s: float) -> list[str]:
    """TBF grafted under netem (delay first, then the bottleneck), as on a WAN path."""
    return tbf_argv(ns, dev, d, rtt_s, parent="1:1", handle="10:")


def egresses(site: LinkSite, profile: LinkProfile) -> list[tuple[str, str, Direction]]:
    """(direction, egress device, profile): forward leaves towards the server. On an end
    host the direction it receives leaves the IFB its ingress is redirected to."""
    if site.end:
        own = egress_direction(site)
        return [(name, site.to_client_if if name == own else site.ifb, d)
                for name, d in (("forward", profile.forward), ("reverse", profile.reverse))]
    return [("forward", site.to_server_if, profile.forward),
            ("reverse", site.to_client_if, profile.reverse)]


def gso_segs_argv(ns: str, dev: str, segs: int) -> list[str]:
    """At most `segs` segments per skb from this sender (TCP sizes its skbs by it)."""
    return ["ip", "-n", ns, "link", "set", "dev", dev, "gso_max_segs", str(segs)]


def segmenting(site: LinkSite, profile: LinkProfile) -> list[tuple[str, str, bool]]:
    """(namespace, device, one segment per skb?) of every sender the rig built."""
    return [(ns, dev, d.per_segment) for name, _, d in egresses(site, profile)
            for ns, dev in site.senders(name)]


def plan_argv(site: LinkSite, profile: LinkProfile) -> list[list[str]]:
    cmds = ifb_setup_argv(site) if site.end else []
    for _, dev, d in egresses(site, profile):
        cmds.append(netem_argv(site.router_ns, dev, d, profile.rtt_s))
        if d.rate_bps:
            cmds.append(rate_child_argv(site.router_ns, dev, d, profile.rtt_s))
    cmds += [gso_segs_argv(ns, dev, 1) for ns, dev, one in segmenting(site, profile) if one]
    return cmds


def show_argv(ns: str, dev: str) -> list[str]:
    return proc.ns_argv(ns, ["tc", "-s", "-j", "qdisc", "show", "dev", dev])


def parse_qdiscs(stdout: str) -> list[dict]:
    """`tc -s -j qdisc show` output -> list of qdicts (pure)."""
    try:
        data = json.loads(stdout or "[]")
    except ValueError as e:
        raise RigError(f"tc -j: unparsable output: {stdout[:80]!r}") from e
    return data if isinstance(data, list) else []


def netem_stats(per_dir: dict[str, list[dict] | str]) -> EmulStats:
    """Parsed `tc -s -j qdisc show` of each egress (or why it could not be read) ->
    the typed stats every backend returns (pure; see rig.description.linkstats.qdisc_dir_stats)."""
    errors = [f"{d}: {v}" for d, v in per_dir.items() if isinstance(v, str)]
    try:
        dirs = tuple(qdisc_dir_stats(d, v) for d, v in per_dir.items()
                     if not isinstance(v, str))
    except StatsFormatError as e:
        return EmulStats("netem", error=f"tc -j: {e}")
    return EmulStats("netem", dirs, error="; ".join(errors) or None)


@registry.register
class NetemBackend:
    """Backend protocol implementation on sch_netem (+ TBF)."""

    name = "netem"
    auto_rank = 0                  # auto: netem where the kernel has it
    auto_note = "where the kernel has sch_netem"
    needs = "sch_netem"
    doctor_key = "kernel_netem"
    takes_options = False

    @staticmethod
    def usable() -> bool:
        return kernel_has_netem()

    def __init__(self) -> None:
        self._rated: dict[str, set[str]] = {}
        self._ifbs: set[str] = set()
        self._segmented: set[tuple[str, str]] = set()    # senders at gso_max_segs 1
        self._per_skb: dict[str, str] = {}     # sender -> why its loss stays per skb

    def plan(self, site: LinkSite, profile: LinkProfile) -> list[list[str]]:
        return plan_argv(site, profile)

    def apply(self, site: LinkSite, profile: LinkProfile) -> None:
        try:
            self._install(site, profile)
        except BaseException:
            self.remove(site)
            raise

    def _install(self, site: LinkSite, profile: LinkProfile) -> None:
        if site.end and site.ifb not in self._ifbs:     # an end host's ingress: its IFB
            self._ifbs.add(site.ifb)
            for argv in ifb_setup_argv(site):
                proc.run(argv, timeout=CMD_TIMEOUT, check=True, host=site.host)
        rated = self._rated.setdefault(site.router_ns, set())
        for _, dev, d in egresses(site, profile):
            if dev in rated and not d.rate_bps:
                # drop the TBF child: replace the whole root
                proc.run(qdisc_del_argv(site.router_ns, dev), timeout=CMD_TIMEOUT, host=site.host)
                rated.discard(dev)
            proc.run(netem_argv(site.router_ns, dev, d, profile.rtt_s), timeout=CMD_TIMEOUT,
                     check=True, host=site.host)
            if d.rate_bps:
                proc.run(rate_child_argv(site.router_ns, dev, d, profile.rtt_s),
                         timeout=CMD_TIMEOUT, check=True, host=site.host)
                rated.add(dev)
        for ns, dev, one in segmenting(site, profile):
            if one != ((ns, dev) in self._segmented):
                r = proc.run(gso_segs_argv(ns, dev, 1 if one else GSO_MAX_SEGS),
                             timeout=CMD_TIMEOUT)
                if not r.ok:        # a kernel that sets it at creation only (before 5.19)
                    self._per_skb[dev] = f"gso_max_segs not set on {dev}: {r.tail(120)}"
                    continue
                (self._segmented.add if one else self._segmented.discard)((ns, dev))

    def update(self, site: LinkSite, profile: LinkProfile) -> None:
        self._install(site, profile)

    def _qdiscs(self, site: LinkSite, dev: str) -> list[dict]:
        res = proc.run(show_argv(site.router_ns, dev), timeout=CMD_TIMEOUT, host=site.host)
        if not res.ok:
            raise StepAborted(f"{where(site)}: cannot read qdiscs of {dev}: {res.tail()}")
        return parse_qdiscs(res.stdout)

    def check(self, site: LinkSite) -> None:
        for direction, dev, _ in egresses(site, LinkProfile()):
            if not any(q.get("kind") == "netem" and q.get("root")
                       for q in self._qdiscs(site, dev)):
                raise StepAborted(f"{where(site)}: {direction} netem qdisc on {dev} missing")

    def stats(self, site: LinkSite) -> EmulStats:
        per_dir: dict[str, list[dict] | str] = {}
        for direction, dev, _ in egresses(site, LinkProfile()):
            try:
                per_dir[direction] = self._qdiscs(site, dev)
            except StepAborted as e:
                per_dir[direction] = str(e)
        st = netem_stats(per_dir)
        if self._per_skb:       # said with every snapshot: its loss counts whole skbs
            st = dataclasses.replace(st, extra={**st.extra, "loss_per_skb": sorted(
                self._per_skb.values())})
        return st

    def engine_pids(self, site: LinkSite) -> list[int]:
        return []          # the kernel emulates: its CPU is softirq time, in the host's

    def remove(self, site: LinkSite) -> None:
        for _, dev, _ in egresses(site, LinkProfile()):
            proc.run(qdisc_del_argv(site.router_ns, dev), timeout=CMD_TIMEOUT, host=site.host)
        for ns, dev in [*site.client_ends, *site.server_ends]:
            if (ns, dev) in self._segmented:      # the namespace may already be gone
                proc.run(gso_segs_argv(ns, dev, GSO_MAX_SEGS), timeout=CMD_TIMEOUT)
                self._segmented.discard((ns, dev))
        self._rated.pop(site.router_ns, None)
        if site.end and site.ifb in self._ifbs:
            self._ifbs.discard(site.ifb)
            for argv in ifb_teardown_argv(site):
                proc.run(argv, timeout=CMD_TIMEOUT, host=site.host)


def netem_probe_argv() -> list[str]:
    """Create a netem qdisc on `lo` of a throwaway anonymous namespace (unshare): the
    namespace vanishes with the process, nothing on the host is touched or left behind."""
    return ["unshare", "--net", "--", "tc", "qdisc", "add", "dev", "lo", "root",
            "netem", "delay", "1ms"]


def kernel_has_netem(timeout: float = 10.0) -> bool:
    """True when the running kernel can create a netem qdisc (module built in or
    loadable); False here, where sch_netem does not exist."""
    try:
        return proc.run(netem_probe_argv(), timeout=timeout).ok
    except RigError:
        return False
