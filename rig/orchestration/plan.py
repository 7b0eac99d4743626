"""`rig plan`: every command a run of a scenario would execute, run nothing.

Uses the same pure builders the run uses; names carry a placeholder prefix (`rig0000`)
and addresses the first range, since the real ones are leased at run time.
Must not import reports.
"""
from __future__ import annotations

import dataclasses
import shlex
from typing import Any
from pathlib import Path

from rig.realization import cgroups, netns, remote_router, tls, tuning

from rig.description import steps as S
from rig.process.proc import ns_argv, pinned_argv
from rig.realization.emul.netem import NetemBackend
from rig.realization.emul.userspace import UserspaceBackend
from rig.errors import printable
from rig.description.scenario import LOCAL, Scenario, path_mtu, server_count, uses_tls
from rig.realization import data
from rig.services import servers
from rig.services import tools
from rig.orchestration import capture, storagecheck
from rig.orchestration.transfer import build_jobs
from rig.orchestration.origins import server_plans
from rig.orchestration.pathcheck import CAPACITY_BUFFER, capacity_timing, iperf3_argv, ping_argv

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
    if sc.tuning.from_profile:
        out.append(_comment(f"tuning profile {sc.tuning.profile}: " + ", ".join(
            sc.tuning.from_profile) + " applied as far as this kernel allows (what it lacks "
            "is said at run time and left out)"))
    if sc.tunes_local():
        out += [_fmt(a) for a in tuning.global_argv(sc.tuning, "<host's list>")]
    for name in sc.remote_hosts():     # rig.realization.remote_tuning: only what differs
        if not any(name in (p.client_host, p.server_host) for p in sc.paths):
            continue                   # a router host only forwards: not tuned
        want = {**tuning.global_wanted(sc.tuning), **tuning.ns_wanted(sc.tuning)}
        mtu = [f"mtu {sc.tuning.mtu} on the path's interface"] if sc.tuning.mtu != 1500 else []
        if want or mtu:
            out.append(f"@{name} " + _comment(
                "tuning, old values recorded first, restored at the end: "
                + ", ".join([f"{k}={v}" for k, v in want.items()] + mtu)))
    if sc.storage.on_disk:
        out += storagecheck.plan_data(sc, PREFIX)
    elif any(p.server_host == LOCAL for p in sc.paths):
        out.append(_fmt(data.mount_argv(PREFIX, wd / "data",
                                        sum(f.size for f in sc.files) + (16 << 20))))
        out += [f"# write {f.name}: {f.size} random bytes" if f.kind == "random" else
                f"# copy {f.name}: ROOT file " + (f.path or f"generated ({f.size} bytes asked, "
                                                    f"{f.branches or 300} branches, seed {f.seed or 0})")
                for f in sc.files]
    out += _replay_plans(sc)
    names = {}
    for i, p in enumerate(sc.paths):
        out.append(f"# path {p.name} ({p.kind})")
        if p.router_host is not None:     # rig.realization.remote_router
            assert p.server_addr is not None
            from rig.orchestration.hosts import make_host
            rsite = remote_router.make_site(PREFIX, i, p, make_host(p.router_host,
                                                                   sc.hosts[p.router_host]))
            n = names[p.name] = dataclasses.replace(netns.real_path(
                i, p.name, client_ns=None, server_ns=None, server_addr=p.server_addr),
                site=rsite)
            if rsite.end:
                out.append(f"@{p.router_host} " + _comment(
                    f"the router role on the {rsite.end} end: check {rsite.to_client_if} "
                    "exists and does not carry the SSH connection; record the NFQUEUE rules "
                    f"and {rsite.ifb} in the run's state; {remote_router.FORWARD} untouched"))
            else:
                out.append(f"@{p.router_host} " + _comment(
                    f"check {rsite.to_client_if} and {rsite.to_server_if} exist and do not "
                    f"carry the SSH connection; record {remote_router.FORWARD} in the run's "
                    "state, then set it to 1 (restored at the end)"))
            swd = _host_wd(sc, p.server_host, wd)
            out += [f"@{p.server_host} # write {swd}/data/{f.name}: {f.size} random bytes"
                    for f in sc.files]
            _servers(sc, out, n, swd, at=_at(p.server_host))
            continue
        if p.kind == "real":
            assert p.server_addr is not None      # the schema requires it on real paths
            n = names[p.name] = netns.real_path(i, p.name, client_ns=p.client_ns,
                                                server_ns=p.server_ns, server_addr=p.server_addr)
            swd = _host_wd(sc, p.server_host, wd)
            if p.server_host != LOCAL:
                out += [f"@{p.server_host} # write {swd}/data/{f.name}: {f.size} random bytes"
                        for f in sc.files]
            _servers(sc, out, n, swd, at=_at(p.server_host))
            continue
        n = netns.lay_out(sc.topology, PREFIX, i, p.name, "198.18.0.0/24", workdir=wd / p.name,
                          servers=server_count(sc), ip=p.ip or 4)
        out += [_fmt(a) for a in netns.build_argv(n, mtu=path_mtu(sc, p))]
        out += [f"# write {netns.ETC_NETNS / ns / 'resolv.conf'} (no resolver in the namespace)"
                for ns in n.namespaces]
        for node in n.nodes:
            if node.role != "router" and node.ns is not None:
                out += [_fmt(a) for a in tuning.ns_argv(sc.tuning, node.ns)]
        names[p.name] = n
        if uses_tls(sc):
            out += _tls(sc, wd, p.name, n.server_addr)
        _servers(sc, out, n, wd)
    for step in S.expand(sc):
        n = names[step.path.name]
        at = _at(step.path.client_host)
        client_ns, addr, site = n.client_ns, n.server_addr, n.site
        out.append(f"# step {step.number}: {step.label()}")
        if site is not None and step.profile is not None:
            rat = _at(step.path.router_host) if step.path.router_host else ""
            out += [ln if ln.startswith("#") else rat + ln for ln in _emulation(step, site)]
        v = sc.validation
        out.append(at + _fmt(ns_argv(client_ns, ping_argv(addr, v.ping_count,
                                                          v.ping_interval_s))))
        secs, omit = capacity_timing(step.rtt_ms, v.iperf_seconds)
        out.append(at + _fmt(ns_argv(client_ns, iperf3_argv(addr, servers.IPERF3_PORT,
                                                             v.iperf_streams, secs, omit=omit)))
                   + ("   # + -w net.core.{r,w}mem_max when it beats the namespace's tcp_rmem"
                      if site is None or (step.rtt_ms or 0.0) < 1.0 else
                      f"   # with tcp_rmem/tcp_wmem max {CAPACITY_BUFFER >> 20} MiB in the client"
                      " and server namespaces for this run only (then the scenario's again);"
                      " -P raised where the windows cannot carry 20 Gbit/s"))
        out += storagecheck.plan_step(sc, step, PREFIX) if sc.storage.on_disk else []
        plans = _server_plans(sc, n, _host_wd(sc, step.path.server_host, wd))
        for g in S.groups(sc, step.path):
            jobs = build_jobs(sc, g, plans, addr, servers.IPERF3_PORT, PREFIX)
            a = tools.get(g.client.tool)
            if site is not None and capture.wanted(step.path.capture, g.client.capture):
                name = capture.group_name(g.client.name, g.streams, g.concurrency,
                                          g.repeat, g.tls)
                folder = Path("OUT/captures") / f"step{step.number}"
                out += [_fmt(ns_argv(site.router_ns, capture.tcpdump_argv(
                    iface, folder / f"{name}-{iface}.pcap",
                    max_s=capture.wait_s(sc.transfer_timeout_s))))
                    + "   # header capture during the group, then read with scapy"
                    for iface in (site.to_server_if, site.to_client_if)]
            shown: dict[str, Any] = {}
            for job in jobs:        # one line per origin the group is spread over
                shown.setdefault(job.origin, job)
            for job in shown.values():
                for path, text in job.files:       # an extreme copy's metalink
                    out.append(f"# write {path}:")
                    out += [f"#   {ln}" for ln in text.strip().splitlines()]
                pre, argv = _pinned(wd.name, f"client-{g.client.name}", g.client.cpus,
                                    a.command(job), local=not at)
                out += pre
                line = at + _fmt(ns_argv(client_ns, argv), a.env(job))
                note = f"   # x{g.concurrency} at once" if g.concurrency > 1 else ""
                if len(shown) > 1:
                    note += f", round-robin over {len(shown)} origins"
                out.append(line + note + f"   # repeat {g.repeat + 1}")
    out.append("# teardown: stop servers and engines, ip netns del every namespace above, "
               "umount the tmpfs, restore host sysctls")
    for p in sc.paths:
        if p.router_host is not None and remote_router.end_of(p):
            out.append(f"@{p.router_host} # teardown: delete the NFQUEUE rules (comment "
                       f"{PREFIX}), stop the engine, delete the root qdisc, the ingress "
                       f"filter, clsact and {remote_router.ifb_name(PREFIX, sc.paths.index(p))}")
        elif p.router_host is not None:
            out.append(f"@{p.router_host} # teardown: delete the NFQUEUE rules (comment "
                       f"{PREFIX}), stop the engine, delete the root qdiscs, restore "
                       f"{remote_router.FORWARD}")
    for name in sc.remote_hosts():
        out.append(f"@{name} # teardown: copy configs and logs back, kill what the pid files "
                   f"in {_host_wd(sc, name, wd)}/pids name, remove that directory")
    return out


def _pinned(prefix: str, what: str, cpus: str | None, argv: list[str],
            local: bool) -> tuple[list[str], list[str]]:
    """A CPU set as the run applies it: a cgroup where this host has a cpuset hierarchy
    (rig.realization.cgroups), else taskset."""
    h = cgroups.detect() if cpus and local else None
    if h is None:
        return [], pinned_argv(cpus, argv)
    d = h.path(cgroups.cgroup_name(prefix, what))
    return [f"# mkdir {d}; cpuset.cpus={cpus}; the process below moved in as it starts "
            f"({h.method})"], list(argv)


def _tls(sc: Scenario, wd: Path, path: str, addr: str) -> list[str]:
    d = wd / "tls"
    ca = tls.Ca(d, d / "ca.pem", d / "ca.key", d / "certs")
    out = [_comment(f"TLS: a CA for this run only in {d}")]
    out += [_fmt(tls.ca_argv(d)), _fmt(tls.hash_argv(ca.cert)),
            f"# copy {ca.cert} to {ca.hashed_dir}/<hash>.0"]
    for spec in sc.servers:
        if servers.get(spec.kind).tls_ports:
            name = f"{path}-{spec.name}"
            out += [_fmt(tls.csr_argv(d, name)),
                    f"# {d / (name + '.ext')}: {tls.san(name, addr)}",
                    _fmt(tls.sign_argv(ca, d, name))]
    return out


def _at(host: str) -> str:
    """The host a line runs on: `@dtn1 ` for a remote one (over its SSH connection)."""
    return "" if host == LOCAL else f"@{host} "


def _host_wd(sc: Scenario, host: str, wd: Path) -> Path:
    return wd if host == LOCAL else Path(sc.hosts[host].rundir, PREFIX)


def _server_plans(sc: Scenario, n: netns.RealizedPath,
                  wd: Path) -> dict[str, list[servers.ServerPlan]]:
    """The run's server plans (rig.orchestration.origins), with the TLS files a run that
    uses TLS gives each server (placeholders here: the CA is made at run time)."""
    on = uses_tls(sc)

    def ports(kind: str, k: int, ns: str | None, addr: str,
              avoid: frozenset[int]) -> dict[str, int]:
        return servers.default_ports(kind, k, tls=on, avoid=avoid)
    plans = server_plans(sc, n, wd, storagecheck.data_folder(sc, wd, PREFIX), ports)
    if not on:
        return plans

    def with_tls(p: servers.ServerPlan) -> servers.ServerPlan:
        if not servers.get(p.spec.kind).tls_ports:
            return p
        return dataclasses.replace(p, tls=servers.TlsFiles(
            "<certificate signed by the run's CA>", "<its key>",
            str(wd / "tls" / "ca.pem"), str(wd / "tls" / "certs")))
    return {name: [with_tls(p) for p in ps] for name, ps in plans.items()}


def _servers(sc: Scenario, out: list[str], n: netns.RealizedPath, wd: Path,
             at: str = "") -> None:
    for plans in _server_plans(sc, n, wd).values():
        for plan in plans:
            out += [at + _fmt(a) for a in plan.kind.prepare_argv(plan)]
            for name, text in servers.server_files(plan).items():
                out.append(f"{at}# {plan.workdir / name}:")
                out += [f"#   {ln}" for ln in text.strip().splitlines()]
            pre, argv = _pinned(wd.name, plan.workdir.name, plan.cpus,
                                servers.server_argv(plan), local=not at)
            out += pre
            out.append(at + _fmt(ns_argv(plan.ns, argv)))
    out.append(at + _fmt(ns_argv(n.server_ns, servers.iperf3_server_argv(
        n.server_addr, servers.IPERF3_PORT))))


def _emulation(step: S.Step, site) -> list[str]:
    be = step.path.backend
    out: list[str] = []
    if step.profile is None:
        return out
    if be in ("auto", "netem"):
        out.append("# backend netem" + (" (auto: where the kernel has sch_netem)" if be == "auto" else ""))
        out += [_fmt(a) for a in NetemBackend().plan(site, step.profile)]
    if be in ("auto", "userspace"):
        out.append("# backend userspace" + (" (auto: where the kernel lacks sch_netem)" if be == "auto" else ""))
        out += [_fmt(a) for a in UserspaceBackend().plan(site, step.profile)]
    return out


def _replay_plans(sc: Scenario) -> list[str]:
    """Each replay client's read plan summary (computed from the ROOT file's baskets; a
    generated file is made once, into the cache, to read them)."""
    from rig.realization.data import root_source
    from rig.services.tools.replay import plan_for
    out, seen = [], set()
    for g in S.groups(sc):
        c = g.client
        if c.tool != "replay" or c.name in seen:
            continue
        seen.add(c.name)
        assert c.file is not None, "a replay client names its file"
        f = sc.file(c.file)
        src = root_source(f, generate=False)
        if src is None:       # never generate here: a plan may name any size
            g = f.root_spec()
            out.append(_comment(
                f"replay {c.name}: {f.name} is not generated yet (rig run makes it once); "
                f"to see the plan now: rig plan --generate --size {g.size_bytes} "
                f"--nbranches {g.n_branches} --cluster {g.cluster_bytes} --seed {g.seed} "
                f"--mode {c.mode} --percent {(c.branches or 1.0) * 100:g}"))
            continue
        p = plan_for(c, str(src))
        out.append(_comment(f"replay {c.name} ({c.library}, {c.server}):"))
        out += [_comment("  " + line) for line in p.summary().splitlines()]
    return out
