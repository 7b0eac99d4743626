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
from rig.process.proc import ns_argv, pinned_argv
from rig.realization.emul.netem import NetemBackend
from rig.realization.emul.userspace import UserspaceBackend
from rig.errors import printable
from rig.description.scenario import Scenario, server_count
from rig.realization import data
from rig.services import servers
from rig.services import tools
from rig.orchestration.transfer import build_jobs
from rig.orchestration.origins import server_plans
from rig.orchestration.pathcheck import iperf3_argv, ping_argv

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
            continue
        n = netns.lay_out(sc.topology, PREFIX, i, p.name, "198.18.0.0/24", workdir=wd / p.name,
                          servers=server_count(sc))
        out += [_fmt(a) for a in netns.build_argv(n, mtu=sc.tuning.mtu)]
        out += [f"# write {netns.ETC_NETNS / ns / 'resolv.conf'} (no resolver in the namespace)"
                for ns in n.namespaces]
        for node in n.nodes:
            if node.role != "router":
                out += [_fmt(a) for a in tuning.ns_argv(sc.tuning, node.ns)]
        names[p.name] = n
        _servers(sc, out, n, wd)
    for step in S.expand(sc):
        n = names[step.path.name]
        client_ns, addr, site = n.client_ns, n.server_addr, n.site
        out.append(f"# step {step.index + 1}: {step.label()}")
        if site is not None and step.profile is not None:
            out += _emulation(step, site)
        v = sc.validation
        out.append(_fmt(ns_argv(client_ns, ping_argv(addr, v.ping_count, v.ping_interval_s))))
        out.append(_fmt(ns_argv(client_ns, iperf3_argv(addr, servers.IPERF3_PORT, v.iperf_streams,
                                                         v.iperf_seconds))))
        plans = server_plans(sc, n, wd, wd / "data")
        for g in S.groups(sc):
            jobs = build_jobs(sc, g, plans, addr, servers.IPERF3_PORT)
            a = tools.get(g.client.tool)
            shown: dict[str, object] = {}
            for job in jobs:        # one line per origin the group is spread over
                shown.setdefault(job.origin, job)
            for job in shown.values():
                for path, text in job.files:       # an extreme copy's metalink
                    out.append(f"# write {path}:")
                    out += [f"#   {ln}" for ln in text.strip().splitlines()]
                line = _fmt(ns_argv(client_ns, pinned_argv(g.client.cpus, a.argv(job))),
                            a.env(job))
                note = f"   # x{g.concurrency} at once" if g.concurrency > 1 else ""
                if len(shown) > 1:
                    note += f", round-robin over {len(shown)} origins"
                out.append(line + note + f"   # repeat {g.repeat + 1}")
    out.append("# teardown: stop servers and engines, ip netns del every namespace above, "
               "umount the tmpfs, restore host sysctls")
    return out


def _servers(sc: Scenario, out: list[str], n: netns.RealizedPath, wd: Path) -> None:
    for plans in server_plans(sc, n, wd, wd / "data").values():
        for plan in plans:
            for name, text in servers.server_files(plan).items():
                out.append(f"# {plan.workdir / name}:")
                out += [f"#   {ln}" for ln in text.strip().splitlines()]
            out.append(_fmt(ns_argv(plan.ns, pinned_argv(plan.cpus, servers.server_argv(plan)))))
    out.append(_fmt(ns_argv(n.server_ns, servers.iperf3_server_argv(n.server_addr,
                                                                    servers.IPERF3_PORT))))


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
