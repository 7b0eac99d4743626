"""`rig plan`: every command a run of a scenario would execute, run nothing.

Uses the same pure builders the run uses; names carry a placeholder prefix (`rig0000`)
and addresses the first range, since the real ones are leased at run time.
Must not import reports.
"""
from __future__ import annotations

import shlex
from pathlib import Path

from rig.realization import netns, tuning

from rig.description import steps as S
from rig.process.proc import ns_argv
from rig.realization.emul.netem import NetemBackend
from rig.realization.emul.userspace import UserspaceBackend
from rig.errors import printable
from rig.description.scenario import Scenario
from rig.realization import data
from rig.services import servers
from rig.services import tools
from rig.orchestration.transfer import build_jobs
from rig.orchestration.pathcheck import capacity_timing, iperf3_argv, ping_argv

PREFIX = "rig0000"


def _fmt(argv: list[str], env: dict | None = None) -> str:
    """One line safe to paste into a shell: every token, env keys too, through shlex.quote
    (keys are identifiers once loaded; quoting them anyway keeps a bad one inert)."""
    pre = " ".join(f"{shlex.quote(k)}={shlex.quote(v)}" for k, v in (env or {}).items())
    return (pre + " " if pre else "") + shlex.join(argv)


def _comment(text: str) -> str:
    """A `# ...` line whose text cannot end the comment (no newline reaches the shell)."""
    return "# " + printable(text)


def plan_lines(sc: Scenario) -> list[str]:
    out: list[str] = [_comment(f"scenario {sc.name} ({sc.source}); prefix {PREFIX} stands for "
                               "the run's")]
    wd = netns.STATE_DIR / PREFIX
    out += [_fmt(a) for a in tuning.global_argv(sc.tuning, "<host's list>")]
    out.append(_fmt(data.mount_argv(PREFIX, wd / "data", sum(f.size for f in sc.files) + (16 << 20))))
    out += [f"# write {f.name}: {f.size} random bytes" for f in sc.files]
    names = {}
    for i, p in enumerate(sc.paths):
        out.append(f"# path {p.name} ({p.kind})")
        if p.kind == "real":
            names[p.name] = netns.real_path(i, p.name, client_ns=p.client_ns,
                                            server_ns=p.server_ns, server_addr=p.server_addr)
            _servers(sc, out, p.name, p.server_ns, p.server_addr, wd)   # started there too
            continue
        n = netns.lay_out(sc.topology, PREFIX, i, p.name, "198.18.0.0/24", workdir=wd / p.name)
        out += [_fmt(a) for a in netns.build_argv(n, mtu=sc.tuning.mtu)]
        out += [f"# write {netns.ETC_NETNS / ns / 'resolv.conf'} (no resolver in the namespace)"
                for ns in n.namespaces]
        for node in n.nodes:
            if node.role != "router":
                out += [_fmt(a) for a in tuning.ns_argv(sc.tuning, node.ns)]
        names[p.name] = n
        _servers(sc, out, p.name, n.server_ns, n.server_addr, wd)
    for step in S.expand(sc):
        n = names[step.path.name]
        client_ns, server_ns, addr, site = n.client_ns, n.server_ns, n.server_addr, n.site
        out.append(f"# step {step.index + 1}: {step.label()}")
        if site is not None and step.profile is not None:
            out += _emulation(step, site)
        v = sc.validation
        out.append(_fmt(ns_argv(client_ns, ping_argv(addr, v.ping_count, v.ping_interval_s))))
        secs, omit = capacity_timing(step.rtt_ms, v.iperf_seconds)
        out.append(_fmt(ns_argv(client_ns, iperf3_argv(addr, servers.IPERF3_PORT, v.iperf_streams,
                                                         secs, omit=omit)))
                   + "   # + -w net.core.{r,w}mem_max when it beats the namespace's tcp_rmem")
        plans = _server_plans(sc, server_ns, addr, wd, step.path.name)
        for g in S.groups(sc):
            job = build_jobs(sc, g, plans, addr, servers.IPERF3_PORT)[0]
            a = tools.get(g.client.tool)
            line = _fmt(ns_argv(client_ns, a.argv(job)), a.env(job))
            out.append(line + (f"   # x{g.concurrency} at once" if g.concurrency > 1 else "")
                       + f"   # repeat {g.repeat + 1}")
    out.append("# teardown: stop servers and engines, ip netns del every namespace above, "
               "umount the tmpfs, restore host sysctls")
    return out


def _server_plans(sc: Scenario, ns: str | None, addr: str, wd: Path,
                  path: str) -> dict[str, servers.ServerPlan]:
    return {spec.name: servers.ServerPlan(spec, ns, addr, servers.default_ports(spec.kind, k),
                                          wd / f"{path}-{spec.name}", wd / "data")
            for k, spec in enumerate(sc.servers)}


def _servers(sc: Scenario, out: list[str], path: str, ns: str, addr: str, wd: Path) -> None:
    for plan in _server_plans(sc, ns, addr, wd, path).values():
        for name, text in servers.server_files(plan).items():
            out.append(f"# {plan.workdir / name}:")
            out += [f"#   {ln}" for ln in text.strip().splitlines()]
        out.append(_fmt(ns_argv(ns, servers.server_argv(plan))))
    out.append(_fmt(ns_argv(ns, servers.iperf3_server_argv(addr, servers.IPERF3_PORT))))


def _emulation(step: S.Step, site) -> list[str]:
    be = step.path.backend
    out = []
    if be in ("auto", "netem"):
        out.append("# backend netem" + (" (auto: where the kernel has sch_netem)" if be == "auto" else ""))
        out += [_fmt(a) for a in NetemBackend().plan(site, step.profile)]
    if be in ("auto", "userspace"):
        out.append("# backend userspace" + (" (auto: where the kernel lacks sch_netem)" if be == "auto" else ""))
        out += [_fmt(a) for a in UserspaceBackend().plan(site, step.profile)]
    return out
