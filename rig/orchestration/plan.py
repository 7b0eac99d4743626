"""`rig plan`: every command a run of a scenario would execute, run nothing.

Uses the same pure builders the run uses; names carry a placeholder prefix (`rig0000`)
and addresses the first range, since the real ones are leased at run time.
Must not import reports.
"""
from __future__ import annotations

import dataclasses
from typing import Any
from pathlib import Path

from rig.realization import cgroups, netns, remote_router, tls, tuning

from rig.description import steps as S
from rig.process.proc import ns_argv, pinned_argv
from rig.description.kinds import AUTO
from rig.realization.emul import chain
from rig.realization.emul import registry as emul_registry
from rig.description.scenario import (LOCAL, Scenario, background_on, path_mtu, path_tuning,
                                      runs_on, server_count, upload_servers, uses_tls)
from rig.services.tools.iperf3 import background_argv
from rig.realization import data
from rig.services import servers
from rig.services import tools
from rig.orchestration import capture, storagecheck
from rig.orchestration.actions import Action, Item, Plan, cmd, comment, fmt, text
from rig.orchestration.transfer import build_jobs
from rig.orchestration.origins import server_plans
from rig.orchestration.pathcheck import (CAPACITY_BUFFER, capacity_source, capacity_timing,
                                         iperf3_argv, ping_argv)

PREFIX = "rig0000"

_fmt, _comment = fmt, comment      # the names older callers import


def plan_lines(sc: Scenario) -> list[str]:
    """What `rig plan` prints: the plan's lines."""
    return build_plan(sc).lines()


def build_plan(sc: Scenario) -> Plan:
    """The run's actions in the order `rig run` executes them (rig.orchestration.run)."""
    acts: list[Action] = []

    def add(id: str, kind: str, items: list[Item] | None = None, **kw: Any) -> str:
        deps = kw.pop("deps", None)
        acts.append(Action(id, kind, tuple(items or ()),
                           deps=tuple(deps if deps is not None else
                                      ([acts[-1].id] if acts else ())), **kw))
        return id
    header: tuple[str, ...] = (comment(f"scenario {sc.name} ({sc.source}); prefix {PREFIX} stands for "
                      "the run's"),)
    wd = netns.STATE_DIR / PREFIX
    if sc.tuning.from_profile:
        header += (comment(f"tuning profile {sc.tuning.profile}: " + ", ".join(
            sc.tuning.from_profile) + " applied as far as this kernel allows (what it lacks "
            "is said at run time and left out)"),)
    add("prepare", "prepare")      # results store, environment, the run's subnet
    if sc.tunes_local():
        own_cc = tuple(p.tuning.congestion_control for p in sc.paths
                       if p.tuning is not None and p.tuning.congestion_control)
        add("tune", "tune", [cmd(a) for a in tuning.global_argv(sc.tuning, "<host's list>",
                                                                own_cc)])
    if sc.remote_hosts():
        out: list[Item] = []
        for name in sc.remote_hosts():     # rig.realization.remote_tuning: only what differs
            if not any(name in (p.client_host, p.server_host) for p in sc.paths):
                continue                   # a router host only forwards: not tuned
            want = {**tuning.global_wanted(sc.tuning), **tuning.ns_wanted(sc.tuning)}
            mtu = [f"mtu {sc.tuning.mtu} on the path's interface"] if sc.tuning.mtu != 1500 else []
            if want or mtu:
                out.append(text(f"@{name} " + comment(
                    "tuning, old values recorded first, restored at the end: "
                    + ", ".join([f"{k}={v}" for k, v in want.items()] + mtu))))
        add("hosts", "hosts", out)      # SSH connections, run directories, data, tuning there
    if any(p.server_host == LOCAL for p in sc.paths):
        if sc.storage.on_disk:          # rig.orchestration.storagecheck
            out = [text(ln) for ln in storagecheck.plan_data(sc, PREFIX)]
        else:
            out = [cmd(data.mount_argv(PREFIX, wd / "data",
                                       sum(f.size for f in sc.files) + (16 << 20)))]
            out += [text(f"# write {f.name}: {f.size} random bytes" if f.kind == "random" else
                         f"# copy {f.name}: ROOT file " + (
                             f.path or f"generated ({f.size} bytes asked, "
                                       f"{f.branches or 300} branches, seed {f.seed or 0})"))
                    for f in sc.files]
            if upload_servers(sc):
                out.append(text(f"# mkdir {servers.UPLOAD_DIR}/ (mode 1777): uploads land there,"
                                " each checked (size, adler32) and removed after its group"))
        add("data", "data", out)
    replay = _replay_plans(sc)
    if replay:
        add("note:replay", "note", [text(ln) for ln in replay], deps=())
    setup = [a.id for a in acts if a.runs]
    if any(s.cpus for s in sc.servers) or any(c.cpus for c in sc.clients):
        add("pinning", "pinning", deps=setup)
        setup.append("pinning")
    names = {}
    for i, p in enumerate(sc.paths):
        out = [text(f"# path {p.name} ({p.kind})")]
        if p.tuning is not None:
            own = tuning.ns_wanted(p.tuning)
            out.append(text("# its own tuning over the scenario's: " + (", ".join(
                f"{k}={v}" for k, v in own.items()) or "nothing") + (
                f" (profile {p.tuning.profile}: as far as this kernel allows; its host-global "
                "keys are the scenario's tuning:)" if p.tuning.profile else "")))
        if p.router_host is not None:     # rig.realization.remote_router
            assert p.server_addr is not None
            from rig.orchestration.hosts import make_host
            rsite = remote_router.make_site(PREFIX, i, p, make_host(p.router_host,
                                                                   sc.hosts[p.router_host]))
            n = names[p.name] = dataclasses.replace(netns.real_path(
                i, p.name, client_ns=None, server_ns=None, server_addr=p.server_addr),
                site=rsite)
            if rsite.end:
                out.append(text(f"@{p.router_host} " + comment(
                    f"the router role on the {rsite.end} end: check {rsite.to_client_if} "
                    "exists and does not carry the SSH connection; record the NFQUEUE rules "
                    f"and {rsite.ifb} in the run's state; {remote_router.FORWARD} untouched")))
            else:
                out.append(text(f"@{p.router_host} " + comment(
                    f"check {rsite.to_client_if} and {rsite.to_server_if} exist and do not "
                    f"carry the SSH connection; record {remote_router.FORWARD} in the run's "
                    "state, then set it to 1 (restored at the end)")))
            swd = _host_wd(sc, p.server_host, wd)
            out += [text(f"@{p.server_host} # write {swd}/data/{f.name}: {f.size} random bytes")
                    for f in sc.files]
            add(f"path:{p.name}", "path", out, host=p.router_host, path=p.name, deps=setup)
            add(f"servers:{p.name}", "servers", _servers(sc, n, swd, at=_at(p.server_host)),
                host=p.server_host, path=p.name)
            continue
        if p.kind == "real":
            assert p.server_addr is not None      # the schema requires it on real paths
            n = names[p.name] = netns.real_path(i, p.name, client_ns=p.client_ns,
                                                server_ns=p.server_ns, server_addr=p.server_addr)
            swd = _host_wd(sc, p.server_host, wd)
            if p.server_host != LOCAL:
                out += [text(f"@{p.server_host} # write {swd}/data/{f.name}: {f.size} "
                             "random bytes") for f in sc.files]
            add(f"path:{p.name}", "path", out, path=p.name, deps=setup)
            add(f"servers:{p.name}", "servers", _servers(sc, n, swd, at=_at(p.server_host)),
                host=p.server_host, path=p.name)
            continue
        n = netns.lay_out(sc.topology, PREFIX, i, p.name, "198.18.0.0/24", workdir=wd / p.name,
                          servers=server_count(sc, p), ip=p.ip or 4)
        out += [cmd(a) for a in netns.build_argv(n, mtu=path_mtu(sc, p))]
        out += [text(f"# write {netns.ETC_NETNS / ns / 'resolv.conf'} (no resolver in the "
                     "namespace)") for ns in n.namespaces]
        for node in n.nodes:
            if node.role not in ("router", "switch") and node.ns is not None:
                out += [cmd(a) for a in tuning.ns_argv(path_tuning(sc, p), node.ns)]
        names[p.name] = n
        add(f"path:{p.name}", "path", out, path=p.name, deps=setup)
        if uses_tls(sc):
            add(f"tls:{p.name}", "tls", _tls(sc, wd, p.name, n.server_addr), path=p.name)
        add(f"servers:{p.name}", "servers", _servers(sc, n, wd), path=p.name)
    last: dict[str, str] = {}        # path -> its latest action
    steps = S.expand(sc)
    v = sc.validation

    def before(step: S.Step) -> None:
        n = names[step.path.name]
        host = step.path.client_host
        client_ns, addr, site = n.client_ns, n.server_addr, n.site
        k = step.index
        prev = [last.get(step.path.name, f"servers:{step.path.name}")] + (
            [acts[-1].id] if acts[-1].id != last.get(step.path.name) else [])
        out = [text(f"# step {step.number}: {step.label()}")]
        if site is not None and step.profile is not None:
            rhost = step.path.router_host or LOCAL
            out += [i if not i.argv else dataclasses.replace(i, host=rhost)
                    for i in _emulation(step, site)]
        add(f"step:{k}:emulate", "emulate", out, host=step.path.router_host or LOCAL,
            path=step.path.name, step=k, deps=list(dict.fromkeys(prev)))
        secs, omit = capacity_timing(step.rtt_ms, v.iperf_seconds)
        ping = cmd(ns_argv(client_ns, ping_argv(addr, v.ping_count, v.ping_interval_s)), host)
        src = capacity_source(steps, step, v.capacity)
        check = [ping, text(comment(
            f"capacity: step {S.shown_step(src)}'s (validation.capacity: once; measured here "
            "if it had none or the ping flags this step)")) if src is not None else
                 cmd(ns_argv(client_ns, iperf3_argv(addr, servers.IPERF3_PORT, v.iperf_streams,
                                                    secs, omit=omit)), host, note=(
                     "   # + -w net.core.{r,w}mem_max when it beats the namespace's tcp_rmem"
                     if site is None or (step.rtt_ms or 0.0) < 1.0 else
                     f"   # with tcp_rmem/tcp_wmem max {CAPACITY_BUFFER >> 20} MiB in the client"
                     " and server namespaces for this run only (then the scenario's again);"
                     " -P raised where the windows cannot carry 20 Gbit/s"))]
        if sc.storage.on_disk:          # the storage check and the page-cache drops
            check += [text(ln) for ln in storagecheck.plan_step(sc, step, PREFIX)]
        add(f"step:{k}:check-before", "check", check, host=host, path=step.path.name, step=k)
        flows = background_on(sc, step.path)
        if flows:                   # competing flows over the step's transfers (issue 30)
            add(f"step:{k}:background:start", "background", [
                *(cmd(ns_argv(client_ns, background_argv(
                    addr, servers.BACKGROUND_PORT + i, b.streams, b.congestion, b.rate_bps)),
                    host, note=f"   # {b.name}, until stopped") for i, b in enumerate(flows)),
                text(comment("then max(1 s, 20 RTT) for them to settle"))],
                host=host, path=step.path.name, step=k)

    def group_items(step: S.Step, g: S.Group) -> list[Item]:
        n = names[step.path.name]
        host = step.path.client_host
        plans = _server_plans(sc, n, _host_wd(sc, step.path.server_host, wd))
        return _group(sc, g, plans, n, step, wd, _at(host), host)

    def after(step: S.Step) -> None:
        k, host = step.index, step.path.client_host
        if background_on(sc, step.path):
            add(f"step:{k}:background:stop", "background", [text(comment(
                "stop them (TERM: iperf3 prints its summary), a background row each; then "
                "max(1 s, 10 RTT) for the queue to drain"))],
                host=host, path=step.path.name, step=k)
        last[step.path.name] = add(
            f"step:{k}:check-after", "check",
            [text(comment(f"again after step {step.number}'s transfers: the same ping and "
                          "iperf3 (its check)" if v.after == "full" else
                          f"again after step {step.number}'s transfers: the same ping only "
                          "(validation.after: ping; the iperf3 too if the ping or the "
                          "engine's counters flag the step)"))],
            host=host, path=step.path.name, step=k)

    for step in steps:
        if step.joint is not None and step.joint != step.index:
            continue                  # run with the first of its joint set
        ms = S.members(steps, step)
        for m in ms:
            before(m)
        k = step.index
        if step.joint is None:
            for gi, g in enumerate(S.groups(sc, step.path)):
                add(f"step:{k}:group:{gi}", "group", group_items(step, g),
                    host=step.path.client_host, path=step.path.name, step=k, group=gi)
        else:                         # `together:` each group on every path at once
            for gi, g in enumerate(S.joint_groups(sc, ms)):
                items = [text(comment(f"at once on paths {', '.join(m.path.name for m in ms)}"
                                      f" (steps {', '.join(str(m.number) for m in ms)})"))]
                for m in ms:
                    if runs_on(g.client, m.path):
                        items += group_items(m, g)
                add(f"step:{k}:group:{gi}", "group", items, host=step.path.client_host,
                    path=step.path.name, step=k, group=gi)
        for m in ms:
            after(m)
    out = [text("# teardown: stop servers and engines, ip netns del every namespace above, "
                "umount the tmpfs, restore host sysctls")]
    for p in sc.paths:
        if p.router_host is not None and remote_router.end_of(p):
            out.append(text(f"@{p.router_host} # teardown: delete the NFQUEUE rules (comment "
                            f"{PREFIX}), stop the engine, delete the root qdisc, the ingress "
                            f"filter, clsact and "
                            f"{remote_router.ifb_name(PREFIX, sc.paths.index(p))}"))
        elif p.router_host is not None:
            out.append(text(f"@{p.router_host} # teardown: delete the NFQUEUE rules (comment "
                            f"{PREFIX}), stop the engine, delete the root qdiscs, restore "
                            f"{remote_router.FORWARD}"))
    for name in sc.remote_hosts():
        out.append(text(f"@{name} # teardown: copy configs and logs back, kill what the pid "
                        f"files in {_host_wd(sc, name, wd)}/pids name, remove that directory"))
    # it undoes what the setup built, once the last action is done
    add("teardown", "teardown", out, deps=list(dict.fromkeys(
        [a.id for a in acts if a.phase == "setup"] + [acts[-1].id])))
    plan = Plan(header, tuple(acts))
    plan.check()
    return plan


def _group(sc: Scenario, g: S.Group, plans: dict, n: netns.RealizedPath, step: S.Step,
           wd: Path, at: str, host: str) -> list[Item]:
    """A transfer group's lines: its capture, one client command per origin."""
    out: list[Item] = []
    site, addr = n.site, n.server_addr
    jobs = build_jobs(sc, g, plans, addr, servers.IPERF3_PORT, PREFIX)
    a = tools.get(g.client.tool)
    if site is not None and capture.wanted(step.path.capture, g.client.capture):
        name = capture.group_name(g.client.name, g.streams, g.concurrency, g.repeat, g.tls)
        folder = Path("OUT/captures") / f"step{step.number}"
        out += [cmd(ns_argv(site.router_ns, capture.tcpdump_argv(
            iface, folder / f"{name}-{iface}.pcap",
            max_s=capture.wait_s(sc.transfer_timeout_s))),
            note="   # header capture during the group, then read with scapy")
            for iface in (site.to_server_if, site.to_client_if)]
    shown: dict[str, Any] = {}
    for job in jobs:        # one line per origin the group is spread over
        shown.setdefault(job.origin, job)
    for job in shown.values():
        for path, body in job.files:       # an extreme copy's metalink
            out.append(text(f"# write {path}:"))
            out += [text(f"#   {ln}") for ln in body.strip().splitlines()]
        one = g.client.cpus if isinstance(g.client.cpus, str) else None
        pre, argv = _pinned(wd.name, f"client-{g.client.name}", one or job.cpus,
                            a.command(job), local=not at and one is not None)
        if isinstance(g.client.cpus, tuple):
            out.append(text(f"# instance i on CPU set i of {', '.join(g.client.cpus[:g.concurrency])}"
                            " (taskset -c each)"))
        out += [text(x) for x in pre]
        note = f"   # x{g.concurrency} at once" if g.concurrency > 1 else ""
        if len(shown) > 1:
            note += f", round-robin over {len(shown)} origins"
        out.append(cmd(ns_argv(n.client_ns, argv), host, a.env(job),
                       note + f"   # repeat {g.repeat + 1}"))
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


def _tls(sc: Scenario, wd: Path, path: str, addr: str) -> list[Item]:
    d = wd / "tls"
    ca = tls.Ca(d, d / "ca.pem", d / "ca.key", d / "certs")
    out = [text(comment(f"TLS: a CA for this run only in {d}"))]
    out += [cmd(tls.ca_argv(d)), cmd(tls.hash_argv(ca.cert)),
            text(f"# copy {ca.cert} to {ca.hashed_dir}/<hash>.0")]
    for spec in sc.servers:
        if servers.get(spec.kind).tls_ports:
            name = f"{path}-{spec.name}"
            out += [cmd(tls.csr_argv(d, name)),
                    text(f"# {d / (name + '.ext')}: {tls.san(name, addr)}"),
                    cmd(tls.sign_argv(ca, d, name))]
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


def _servers(sc: Scenario, n: netns.RealizedPath, wd: Path, at: str = "") -> list[Item]:
    host = at[1:].strip() if at else LOCAL
    out: list[Item] = []
    for plans in _server_plans(sc, n, wd).values():
        for plan in plans:
            out += [cmd(a, host) for a in plan.kind.prepare_argv(plan)]
            for name, body in servers.server_files(plan).items():
                out.append(text(f"{at}# {plan.workdir / name}:"))
                out += [text(f"#   {ln}") for ln in body.strip().splitlines()]
            pre, argv = _pinned(wd.name, plan.workdir.name, plan.cpus,
                                servers.server_argv(plan), local=not at)
            out += [text(x) for x in pre]
            out.append(cmd(ns_argv(plan.ns, argv), host))
    out.append(cmd(ns_argv(n.server_ns, servers.iperf3_server_argv(
        n.server_addr, servers.IPERF3_PORT)), host))
    for i, b in enumerate(background_on(sc, sc.paths[n.index])):   # one per competing flow
        out.append(cmd(ns_argv(n.server_ns, servers.iperf3_server_argv(
            n.server_addr, servers.BACKGROUND_PORT + i)), host, note=f"   # for {b.name}"))
    return out


def _emulation(step: S.Step, site) -> list[Item]:
    be = step.path.backend
    out: list[Item] = []
    if step.profile is None:
        return out
    shown = emul_registry.ranked() if be == AUTO else [emul_registry.get(be)]
    for b in shown:
        lines = chain.over(b(), site).plan(site, step.profile)
        if lines:
            out.append(text(f"# backend {b.name}" + (f" (auto: {b.auto_note})"
                                                     if be == AUTO else "")))
            out += [cmd(a) for a in lines]
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
            out.append(comment(
                f"replay {c.name}: {f.name} is not generated yet (rig run makes it once); "
                f"to see the plan now: rig plan --generate --size {g.size_bytes} "
                f"--nbranches {g.n_branches} --cluster {g.cluster_bytes} --seed {g.seed} "
                f"--mode {c.option('mode')} --percent {(c.option('branches') or 1.0) * 100:g}"))
            continue
        p = plan_for(c, str(src))
        out.append(comment(f"replay {c.name} ({c.option('library')}, {c.server}):"))
        out += [comment("  " + line) for line in p.summary().splitlines()]
    return out
