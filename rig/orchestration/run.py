"""Orchestration: build the topology, start servers, validate every sweep step, run the
transfers, store each result as it lands, tear everything down whatever happens.

Layers it drives: realization (rig.realization.netns, rig.realization.emul, rig.realization.tuning), services (servers,
clients), results. It never imports matplotlib; the report is drawn afterwards by the
CLI through rig.report, which reads only the stored results.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rig.orchestration import capture, faults, hostinfo, hosts, origins, tcpsample, transfer
from rig.orchestration import storagecheck, xcache
from rig.orchestration.actions import Action
from rig.orchestration.faults import signals_as_exceptions
from rig.orchestration.plan import build_plan
from rig.orchestration.timing import ActionClock, Teardown

from rig.realization import certs, cgroups, netns, remote_router, remote_tuning, tls, tuning

from rig.process import cputree, owner, proc
from rig.orchestration import threadsample      # per-thread CPU (issue 27)

from rig.description import steps as S, userpath
from rig.realization.emul.base import Backend, LinkSite
from rig.realization.emul import chain
from rig.realization.emul.choose import make_backend
from rig.realization.emul.none import NoneBackend
from rig.errors import OutputFull, RigError, StepAborted
from rig.description.linkstats import EmulStats, emulation_late, late_wakeups, wire_audit
from rig.orchestration.reporter import Reporter, Say, stderr_say
from rig.results.store import BackgroundRow, EngineStatsRow, Store, ValidationRow
from rig.description.scenario import (LOCAL, PathSpec, Scenario, background_on,
                                      client_concurrency, client_directions, path_mtu,
                                      path_tuning,
                                      runs_on, server_count, uses_tls)
from rig.process.remote import Host
from rig.realization import data
from rig.services import servers, tools
from rig.services.servers.start import start_iperf3_server, start_server
from rig.services.tools import iperf3 as iperf3_tool
from rig.orchestration.pathcheck import capacity_source, validate_path
from rig.orchestration import sides
from rig.orchestration.sides import Here, Side, There



@dataclass(frozen=True)
class HostCpuMark:
    """A group's start or end for its host CPU columns (Runner._host_cpu)."""
    t: float                                # monotonic
    client: cputree.HostCpu | None          # the client's host
    server: cputree.HostCpu | None          # the server's, when another host
    engine: tuple[float, float] | None      # the engine's (user, sys) so far, here


@dataclass
class Live:
    """A path during a run: its names and addresses (netns.RealizedPath) plus the
    runtime state: backend, whether the emulation is applied, its servers."""
    spec: PathSpec
    path: netns.RealizedPath
    backend: Backend
    client: Side           # where its clients run (rig.orchestration.sides)
    server: Side           # where its servers run
    servers: dict[str, list[servers.ServerPlan]] = field(default_factory=dict)
    server_pids: dict[str, int] = field(default_factory=dict)   # origin -> pid, for CPU
    server_ids: dict[str, str] = field(default_factory=dict)    # origin -> pid file (remote)
    iperf_port: int = 0
    applied: bool = False
    last_stats: EmulStats | None = None     # the engine's previous snapshot (per-step deltas)
    server_svcs: dict[str, proc.Service] = field(default_factory=dict)  # origin -> (this host)
    stalls: list[float] = field(default_factory=list)   # watchdog pings >= faults.STALL_S
    bg_ports: dict[str, int] = field(default_factory=dict)   # competing flow -> its server

    client_host = property(lambda self: self.client.host)   # None: this host
    server_host = property(lambda self: self.server.host)
    index = property(lambda self: self.path.index)
    client_ns = property(lambda self: self.path.client_ns)
    server_ns = property(lambda self: self.path.server_ns)
    server_addr = property(lambda self: self.path.server_addr)

    @property
    def site(self) -> LinkSite | None:
        return self.path.site


class RunState:
    """What `rig clean` needs to undo this run after a SIGKILL: its prefix and owner
    pid, host sysctls recorded before they were written, pids of host-side servers.
    Saved (atomically) every time it changes."""

    def __init__(self, prefix: str, out: Path) -> None:
        self.prefix = prefix
        self.data: dict = {"prefix": prefix, "pid": os.getpid(), "kind": "run",
                           "pid_start": owner.start_time(os.getpid()),
                           "out": str(out), "sysctls_restore": {}, "mounts": []}

    def save(self) -> None:
        netns.write_state(self.prefix, self.data)

    def drop(self) -> None:
        netns.drop_state(self.prefix)

    def record_sysctls(self, before: dict, wrote: dict) -> None:
        self.data["sysctls_restore"], self.data["sysctls_wrote"] = before, wrote
        self.save()

    def record_pid(self, svc: proc.Service) -> None:
        """So `rig clean` can kill it after a SIGKILL of this run (host-side servers)."""
        self.data.setdefault("pids", []).append([svc.pid, svc.argv[0]])
        # apart from "pids", whose [pid, argv0] pairs an older `rig clean` unpacks
        if svc.pid is not None:
            self.data.setdefault("pid_starts", {})[str(svc.pid)] = owner.start_time(svc.pid)
        self.save()


class Run:
    def __init__(self, sc: Scenario, out_dir: Path, *, progress: Say = stderr_say,
                 prefix: str | None = None) -> None:
        self.sc, self.out = sc, out_dir
        self.reporter = Reporter(progress)
        self.say = self.reporter.say
        self.prefix = prefix or netns.new_prefix()
        self.run_id = out_dir.name
        self.workdir = netns.STATE_DIR / self.prefix
        self._store: Store | None = None
        self.lives: list[Live] = []
        self.state = RunState(self.prefix, out_dir)
        # plain downloads' files (`dest_dir`): `rig clean` removes <prefix>-* there
        self.state.data["dest_dirs"] = sorted({c.option("dest_dir") for c in sc.clients
                                                   if c.option("dest_dir")})
        self.tcp_cost: dict[str, Any] = {"interval_s": sc.sampling.tcp_info_s, "groups": 0, "ticks": 0,
                         "cpu_s": 0.0, "wall_s": 0.0, "samples": 0, "errors": 0}
        self.thread_cost = threadsample.Cost()      # per-thread CPU sampling (issue 27)
        self.sent_adler32: dict[str, str] = {}      # uploads: each sent file's checksum
        self.bg_running: list = []          # competing flows of the current step
        self.ca: tls.Ca | None = None
        self.hosts: dict[str, Host] = {}
        self.remote_data: dict[str, str] = {}      # host -> its data directory
        self.tuning_hosts: dict[str, dict] = {}    # host -> what tuning changed there
        self.origins_env: dict[str, dict] = {}
        self.pinning: cgroups.Hierarchy | None = None   # where `cpus:` become cgroups
        self.client_cgroups: dict[str, Path] = {}
        self.pin_env: dict[str, Any] = {"method": "taskset", "cgroups": {}}
        self.here = Here(lambda: self.pin_env["method"])    # this host, as a path's end
        self.router_backends: dict[str, str] = {}  # path -> backend on its router host
        self.signals = faults.Signals()     # run() shares its own: deferred during teardown
        self._at: tuple[S.Step, Live] | None = None    # the step running (fault rows)
        self.full = False      # the output folder filled up: the reserve is for the rows
        self.plan = build_plan(sc)      # what `rig plan` prints, executed by _do
        self.clock = ActionClock(lambda: self.store, self.run_id, self.say)
        self.all_steps: list[S.Step] = []
        self._swept = False             # the sweep's first action has run
        self._aborted: int | None = None   # the step whose emulation died mid-way
        self._commons: dict[int, dict] = {}    # step -> its rows' shared fields
        self.capacities: dict[int, float | None] = {}   # step -> its capacity run's figure

    @property
    def store(self) -> Store:
        assert self._store is not None, "execute() opens the store first"
        return self._store

    # --- setup ---------------------------------------------------------------------
    def _env_snapshot(self, stack: contextlib.ExitStack) -> None:
        st = self.store
        info = hostinfo.summary()
        for k in ("kernel", "machine", "hostname", "cpus", "tools"):
            st.set_env(k, info[k])
        st.set_env("sysctls_before", info["sysctls"])
        st.set_env("scenario_text", self.sc.text)
        st.set_env("scenario_file", self.sc.source)
        if self.sc.reference is not None:   # `rig report` redraws "against the study" from it
            st.set_env("reference", {"file": self.sc.reference.source,
                                     "text": self.sc.reference.text})
        st.set_env("tuning", dataclasses.asdict(self.sc.tuning))
        if any(p.tuning is not None for p in self.sc.paths):   # paths tuned their own way
            st.set_env("path_tuning", {p.name: dataclasses.asdict(path_tuning(self.sc, p))
                                       for p in self.sc.paths if p.tuning is not None})
        st.set_env("prefix", self.prefix)
        swept = {p.name: {"path": p.copy_of, "origins": p.origins, "server_cpus": p.server_cpus}
                 for p in self.sc.paths if p.origins or p.server_cpus}
        if swept:       # sweep.origins / server_cpus: each copy's configuration (the report)
            st.set_env("server_sweep", swept)
        if self.sc.together:    # paths run together: which steps ran at once (the report)
            steps = S.expand(self.sc)
            st.set_env("together", {"paths": self.sc.together, "sets": [
                [m.index for m in S.members(steps, s)] for s in steps if s.joint == s.index]})
        stack.callback(lambda: st.set_env("sysctls_after", hostinfo.sysctls()))

    def _global_tuning(self, stack: contextlib.ExitStack) -> None:
        if not self.sc.tunes_local():    # every path between remote hosts: tuned there
            return
        t, lacking = tuning.as_far_as_kernel_allows(self.sc.tuning, self.sc.source)
        for k, why in lacking.items():
            self.say(f"tuning: {k} not applied ({why}; it came from profile {t.profile})")
        paths = []
        for i, p in enumerate(self.sc.paths):      # a path's own tuning, the same way
            if p.tuning is not None:
                pt, lack = tuning.as_far_as_kernel_allows(p.tuning, self.sc.source,
                                                          at=f"paths[{i}].tuning")
                for k, why in lack.items():
                    self.say(f"path {p.name}: tuning {k} not applied ({why}; it came from "
                             f"profile {pt.profile})")
                    lacking[f"{p.name}.{k}"] = why
                p = dataclasses.replace(p, tuning=pt)
            paths.append(p)
        self.store.set_env("tuning_not_applied", lacking)
        self.sc = dataclasses.replace(self.sc, tuning=t, paths=paths)
        own_cc = tuple(p.tuning.congestion_control for p in paths
                       if p.tuning is not None and p.tuning.congestion_control)
        for ti in (self.sc.tuning, *(p.tuning for p in paths if p.tuning is not None)):
            tuning.check_cc_available(ti)
        wrote = tuning.global_wanted(self.sc.tuning, tuning.host_allowed_cc(), own_cc)
        before = tuning.read(wrote)
        # recorded before writing, so `rig clean` can restore after a SIGKILL at any point
        self.state.record_sysctls(before, wrote)
        stack.callback(tuning.restore_global, before, wrote)
        tuning.apply_global(wrote)

    def _preflight_routers(self) -> None:
        """Router hosts checked before anything is created on any host (interfaces,
        the SSH connection's interface, the engine installed): one line, nothing left."""
        for i, p in enumerate(self.sc.paths):
            if p.router_host is not None:
                h = hosts.make_host(p.router_host, self.sc.hosts[p.router_host])
                self.router_backends[p.name] = remote_router.check(h, p, i, self.sc.source,
                                                                   p.backend)

    def _router_path(self, stack: contextlib.ExitStack, i: int, p: PathSpec) -> Live:
        """An emulated path between two remote hosts through a router host: the ends are
        used as a real path's, the emulation lives on the router host's interfaces."""
        assert p.router_host is not None and p.server_addr is not None
        h = self.hosts[p.router_host]
        site = remote_router.make_site(self.prefix, i, p, h)
        name = self.router_backends[p.name]
        backend = make_backend(name, **({"local_logs": self.workdir / "router"}
                                        if name == "userspace" else {}))
        live = Live(p, dataclasses.replace(netns.real_path(
            i, p.name, client_ns=None, server_ns=None, server_addr=p.server_addr), site=site),
            backend, client=self._side(p.client_host), server=self._side(p.server_host))
        # an end host does not forward: its ip_forward is never read or written
        before = None if site.end else remote_router.read_forwarding(h)
        # recorded before anything is made there: `rig clean` undoes it after a SIGKILL
        self.state.data["hosts"][h.name].setdefault("router", {})[p.name] = \
            remote_router.record(site, before)
        self.state.save()
        stack.callback(self._unroute, h, p.name, before)
        if site.end:
            self.say(f"host {h.name}: emulates path {p.name} on its {site.end} end "
                     f"({site.to_client_if}, ingress through {site.ifb})")
        else:
            remote_router.set_forwarding(h, "1")
        stack.callback(self._remove_backend, live)
        if not site.end:
            self.say(f"host {h.name}: routes path {p.name} ({site.to_client_if} <-> "
                     f"{site.to_server_if}), {remote_router.FORWARD}=1 (was {before})")
        return live

    def _unroute(self, h: Host, path: str, before: str | None) -> None:
        try:
            if before is not None:
                remote_router.set_forwarding(h, before)
        except RigError as e:
            self.say(f"host {h.name}: {remote_router.FORWARD} not restored ({e}); "
                     "`rig clean` retries")
            return
        self.state.data["hosts"].get(h.name, {}).get("router", {}).pop(path, None)
        self.state.save()

    def _build_path(self, stack: contextlib.ExitStack, i: int, p: PathSpec) -> Live:
        if p.router_host is not None:
            live = self._router_path(stack, i, p)
        elif p.kind == "real":
            assert p.server_addr is not None      # the schema requires it on real paths
            live = Live(p, netns.real_path(i, p.name, client_ns=p.client_ns,
                                           server_ns=p.server_ns, server_addr=p.server_addr),
                        NoneBackend(), client=self._side(p.client_host),
                        server=self._side(p.server_host))
        else:
            path = stack.enter_context(netns.path_net(
                self.prefix, p.name, i, workdir=self.workdir / p.name,
                mtu=path_mtu(self.sc, p), subnet=self.subnet, topology=self.sc.topology,
                servers=server_count(self.sc, p), ip=p.ip or 4))
            for node in path.nodes:
                if node.role not in ("router", "switch") and node.ns is not None:
                    tuning.apply_ns(path_tuning(self.sc, p), node.ns)
            live = Live(p, path, chain.over(make_backend(p.backend), path.site),
                        client=self.here, server=self.here)
            stack.callback(self._remove_backend, live)
        self.say(f"path {p.name}: client {live.client_ns or 'host'} on {p.client_host} -> "
                 f"server {live.server_addr} ({live.server_ns or 'host'}) on {p.server_host}, "
                 f"backend {live.backend.name}")
        return live

    @staticmethod
    def _remove_backend(live: Live) -> None:
        if live.site is not None and live.applied:
            live.backend.remove(live.site)

    def _side(self, host: str) -> Side:
        """Where a path's end runs: this host, or a scenario host (its data directory
        there once written)."""
        if host == LOCAL:
            return self.here
        return There(self.hosts[host], self.prefix, lambda: self.remote_data[host])

    def _ports(self, live: Live, kind: str, k: int, ns: str | None,
               addr: str, avoid: frozenset[int] = frozenset()) -> dict[str, int]:
        want = servers.default_ports(kind, k, tls=self.ca is not None, avoid=avoid)
        return live.server.ports(want, ns, addr, avoid)

    def _server_tls(self, live: Live, p: servers.ServerPlan) -> servers.TlsFiles | None:
        """Certificate for the server's address and a name of its own, from the run's CA."""
        if self.ca is None or not servers.get(p.spec.kind).tls_ports:
            return None
        cert, key = tls.server_cert(self.ca, f"{live.spec.name}-{p.origin}", p.addr)
        return servers.TlsFiles(cert, key, str(self.ca.cert), str(self.ca.hashed_dir))

    def _start_servers(self, stack: contextlib.ExitStack, live: Live, datadir: Path) -> None:
        side = live.server
        live.servers = origins.server_plans(
            self.sc, live.path, self.workdir, datadir,
            lambda kind, k, ns, addr, avoid: self._ports(live, kind, k, ns, addr, avoid))
        # where the server side keeps its files (a remote host: its run directory and data)
        live.servers = {name: [dataclasses.replace(side.place(p), tls=self._server_tls(live, p))
                               for p in ps] for name, ps in live.servers.items()}
        self._tls_identity(live)
        effective = {}
        for plans in live.servers.values():
            for plan in plans:
                cg = side.cgroup(functools.partial(self._cgroup, stack, plan.workdir.name,
                                                   plan.cpus))
                rs = start_server(plan, self.workdir / plan.workdir.name, cgroup=cg)
                stack.callback(rs.stop)
                self.state.record_pid(rs.service)
                side.track(plan.origin, rs.service, live.server_pids, live.server_ids,
                           live.server_svcs)
                effective[plan.origin] = side.cpus_allowed(rs.service)
                pin = f", cpus {effective[plan.origin]}" if plan.cpus else ""
                self.say(f"server {plan.origin} ({plan.spec.kind}) ready on {plan.addr} ports "
                         + ", ".join(f"{k}={v}" for k, v in plan.ports.items()) + pin)
        self.origins_env[live.spec.name] = {
            p.origin: {"server": p.spec.name, "ns": p.ns, "addr": p.addr, "cpus": p.cpus,
                       "cpus_effective": effective[p.origin], "ports": p.ports,
                       "pinned_by": side.pinned_by if p.cpus else None}
            for ps in live.servers.values() for p in ps}
        self.store.set_env("origins", self.origins_env)   # where each instance ran, pinned
        iperf_port = self._ports(live, "iperf3", 0, live.server_ns, live.server_addr)["iperf3"]
        live.iperf_port = iperf_port
        svc = start_iperf3_server(live.server_ns, live.server_addr, iperf_port,
                                  self.workdir / live.spec.name, **side.run_kw())
        stack.callback(svc.stop)
        self.state.record_pid(svc)
        for k, b in enumerate(background_on(self.sc, live.spec)):   # local paths only
            port = iperf_port - servers.IPERF3_PORT + servers.BACKGROUND_PORT + k
            s3 = start_iperf3_server(live.server_ns, live.server_addr, port,
                                     self.workdir / live.spec.name)
            stack.callback(s3.stop)
            self.state.record_pid(s3)
            live.bg_ports[b.name] = port
        iperfs = [c for c in self.sc.clients
                  if tools.get(c.tool).caps.uses_iperf_servers and runs_on(c, live.spec)]
        most = max((n for c in iperfs for n in client_concurrency(self.sc, c)), default=1)
        for extra in range(1, most):
            if iperfs:
                s2 = start_iperf3_server(live.server_ns, live.server_addr, iperf_port + extra,
                                         self.workdir / live.spec.name, **side.run_kw())
                stack.callback(s2.stop)
                self.state.record_pid(s2)

    def _open_hosts(self, stack: contextlib.ExitStack) -> None:
        """One SSH connection per remote host, the run's directory there, the data files
        on server hosts. Every host is in the state file before anything touches it."""
        self.hosts = hosts.hosts_of(self.sc, self.workdir)
        if not self.hosts:
            return
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.state.data["hosts"] = {n: dict(hosts.to_state(h), rundir=h.rundir(self.prefix))
                                    for n, h in self.hosts.items()}
        self.state.save()
        servers_on = {p.server_host for p in self.sc.paths}
        info = {}
        for n, h in self.hosts.items():
            master = proc.open_master(h)
            stack.callback(master.stop)
            self.state.record_pid(master)      # `rig clean` ends it after a SIGKILL
            rd = h.rundir(self.prefix)
            stack.callback(self._leave_host, h, rd)
            info[n] = {k: v for k, v in proc.remote_op(h, {"op": "info"}, timeout=30).items()
                       if k in ("kernel", "machine", "hostname", "cpus", "python")}
            self.say(f"host {n}: connected ({h.ssh}, {info[n]['hostname']}, kernel "
                     f"{info[n]['kernel']}), run directory {rd}")
            hosts.check_tools(h, self.sc)
            if n in servers_on:
                self.remote_data[n] = hosts.write_data(h, rd, self.sc.files)
                self.say(f"data: {len(self.sc.files)} file(s) in {self.remote_data[n]} on {n}")
            self._tune_host(stack, n, h)
        self.store.set_env("hosts", info)
        self.store.set_env("tuning_hosts", self.tuning_hosts)

    def _tune_host(self, stack: contextlib.ExitStack, n: str, h: Host) -> None:
        """The scenario's tuning on host n: recorded in the state file before it is
        written (`rig clean` restores it after a SIGKILL), restored at the end."""
        ends = [(p.server_addr or "", p.server_host == n) for p in self.sc.paths
                if n in (p.server_host, p.client_host)]
        if not ends:         # a router host only forwards: its TCP is not the path's
            return
        rec = remote_tuning.plan(h, self.sc.tuning, ends)
        self.tuning_hosts[n] = rec
        if not rec["sysctls_wrote"] and not rec["mtu_wrote"]:
            return
        self.state.data["hosts"][n]["tuning"] = rec
        self.state.save()
        stack.callback(self._untune_host, n, h, rec)
        remote_tuning.apply(h, rec)
        self.say(f"host {n}: tuned " + ", ".join(
            [f"{k}={v}" for k, v in rec["sysctls_wrote"].items()]
            + [f"{d} mtu {m}" for d, m in rec["mtu_wrote"].items()]))

    def _untune_host(self, n: str, h: Host, rec: dict) -> None:
        try:
            done = remote_tuning.restore(h, rec)
        except RigError as e:
            self.say(f"host {n}: tuning not restored ({e}); `rig clean` retries")
            return
        self.tuning_hosts[n]["restored"] = done
        self.store.set_env("tuning_hosts", self.tuning_hosts)
        self.state.data["hosts"].get(n, {}).pop("tuning", None)
        self.state.save()

    def _leave_host(self, h: Host, rundir: str) -> None:
        """Its configs and logs into the output folder, then nothing of the run left."""
        hosts.fetch_logs(h, rundir, self.out / "logs")
        try:
            hosts.clean_host(h, rundir)
        except RigError as e:
            self.say(f"host {h.name}: not cleaned ({e}); `rig clean` retries")
            return
        self.state.data["hosts"].pop(h.name, None)
        self.state.save()

    def _incoming(self) -> dict:
        """Room for third-party copies: every TPC client's file, at the highest
        concurrency (each instance overwrites its own name group after group)."""
        tpc = [c for c in self.sc.clients if c.source]
        need = sum(self.sc.file(c.file).size * max(client_concurrency(self.sc, c)) for c in tpc
                   if c.file)
        owners = {servers.get(s.kind).run_as for s in self.sc.servers if s.tpc}
        return {"incoming_bytes": need, "incoming_owner": next(iter(owners - {None}), None)}

    def _uploads(self) -> dict:
        """Room for uploads: the largest group of them (each file removed after its
        group, once its checksum was compared)."""
        need = max((self.sc.file(c.file).size * max(client_concurrency(self.sc, c))
                    for c in self.sc.clients
                    if c.file and "upload" in client_directions(self.sc, c)), default=0)
        return {"upload_bytes": need, "upload_dir": servers.UPLOAD_DIR}

    def _cgroup(self, stack: contextlib.ExitStack, what: str, cpus: str | None) -> Path | None:
        """A cgroup pinned to `cpus` (None: no CPU set, or no cpuset hierarchy here, then
        taskset pins). In the state file before it exists, so `rig clean` finds it; removed
        after the processes inside were stopped (registered before them: LIFO)."""
        if cpus is None or self.pinning is None:
            return None
        d = self.pinning.path(cgroups.cgroup_name(self.prefix, what))
        self.state.data.setdefault("cgroups", []).append(str(d))
        self.state.save()
        cgroups.make(self.pinning, d.name, cpus)
        stack.callback(cgroups.drop, d)
        self.pin_env["cgroups"][what] = str(d)
        self.store.set_env("cpu_pinning", self.pin_env)
        return d

    def _pinning(self, stack: contextlib.ExitStack) -> None:
        """cgroup v2 or v1 cpusets where this host has them, else taskset; the clients'
        cgroups (local ones) are made here, the servers' as they start."""
        if not any(s.cpus for s in self.sc.servers) and not any(c.cpus for c in self.sc.clients):
            return
        self.pinning = cgroups.detect()
        if self.pinning is not None:
            self.pin_env["method"] = self.pinning.method
        self.store.set_env("cpu_pinning", self.pin_env)
        self.say(f"cpus: pinned by {self.pin_env['method']}"
                 + (f" ({self.pinning.root})" if self.pinning else ""))
        local = {p.client_host for p in self.sc.paths} == {LOCAL}
        for c in self.sc.clients:
            # one set for every instance: a cgroup; one per instance: taskset each
            cg = (self._cgroup(stack, f"client-{c.name}", c.cpus)
                  if local and isinstance(c.cpus, str) else None)
            if cg is not None:
                self.client_cgroups[c.name] = cg

    def _record_disk(self, d: Path) -> None:
        """A disk data folder, named in the state before it is made (`rig clean`)."""
        self.state.data["disk_data"] = str(d)
        self.state.save()

    def _tls_identity(self, live: Live) -> None:
        """The throw-away certificate a TPC server needs (rig.realization.certs)."""
        plans = [p for ps in live.servers.values() for p in ps if p.tls_dir and p.tls is None]
        if plans and plans[0].tls_dir is not None:
            certs.make_identity(plans[0].tls_dir, [p.addr for p in plans],
                                owner=plans[0].kind.run_as)

    def _keep_logs(self) -> None:
        """Server and engine logs move to the output folder before the workdir goes."""
        if not self.workdir.is_dir():
            return
        if self.full:
            self.say(f"logs not kept in {self.out / 'logs'}: the output folder is full")
            return
        dest = self.out / "logs"
        for f in self.workdir.rglob("*.log"):
            if f.is_file() and f.stat().st_size:
                rel = "-".join(f.relative_to(self.workdir).parts)
                try:
                    dest.mkdir(exist_ok=True)
                    shutil.copyfile(f, dest / rel)
                except OSError as e:     # a full output folder: the teardown goes on
                    self.say(f"logs not kept in {dest} ({e.strerror or e})")
                    return

    # --- the sweep -----------------------------------------------------------------
    def execute(self) -> Path:
        self._preflight_routers()
        self.out.mkdir(parents=True, exist_ok=True)
        userpath.check_out_dir(self.out, key="--out")    # a FIFO there would hang sqlite
        self._store = Store.create(self.out / "results.sqlite", self.run_id, reserve=True)
        (self.out / "scenario.yaml").write_text(self.sc.text)
        self.state.save()
        with contextlib.ExitStack() as stack:
            stack.callback(self.store.finish)
            stack.callback(self._signal_row)
            stack.callback(self.reporter.close)
            try:
                self._setup_and_sweep(stack)
            finally:     # from here on a signal waits until the teardown is done
                self.signals.deferring = True
        return self.out

    def _setup_and_sweep(self, stack: contextlib.ExitStack) -> None:
        """Execute the plan `rig plan` prints (rig.orchestration.plan), action by action,
        each timed into the `actions` table; the teardown is the unwinding of what the
        actions built, in reverse (its own action, timed too)."""
        self.reporter.open_command_log(self.out / "commands.log")
        acts = self.plan.executed()
        assert acts[-1].kind == "teardown"
        build = stack.enter_context(Teardown(self.clock, acts[-1]))
        build.callback(self.state.drop)
        build.callback(shutil.rmtree, self.workdir, True)
        build.callback(self._keep_logs)
        build.callback(netns.release_subnet, self.prefix)
        self.datadir = self.workdir / "data"
        self.disk_written: dict = {}
        self.disk = storagecheck.DiskHooks(self.sc, self.datadir, self.say, self.disk_written)
        self.all_steps = S.expand(self.sc)
        for a in acts[:-1]:
            if a.step is not None and a.step == self._aborted and a.kind != "emulate":
                self.clock.skipped(a)      # its step was aborted: on to the next step
                continue
            try:
                with self.clock.timed(a):
                    self._do(build, a)
            except BaseException as e:
                if a.step is not None:
                    self._stopped(e, [s for s in self.all_steps if s.index > a.step])
                raise

    def _do(self, stack: contextlib.ExitStack, a: Action) -> None:
        """One action of the plan (rig.orchestration.actions), by its kind."""
        k = a.kind
        if k == "prepare":
            self._env_snapshot(stack)
            self.subnet = netns.lease_subnet(self.prefix)
        elif k == "tune":
            self._global_tuning(stack)
        elif k == "hosts":
            self._open_hosts(stack)
        elif k == "data":
            self._data(stack)
        elif k == "pinning":
            self._pinning(stack)
        elif k == "tls":
            self._make_ca()
        elif k == "path":
            i = next(j for j, p in enumerate(self.sc.paths) if p.name == a.path)
            self.lives.append(self._build_path(stack, i, self.sc.paths[i]))
        elif k == "servers":
            self._make_ca()
            live = next(lv for lv in self.lives if lv.spec.name == a.path)
            self._start_servers(stack, live, self.datadir)
        elif k == "emulate":
            self._background_halt()           # a step aborted before its flows stopped
            self._emulate(self._step_of(a))
        elif k == "background" and a.id.endswith(":start"):
            stack.callback(self._background_halt)
            self._background_start(self._step_of(a))
        elif k == "background":
            self._background_stop(self._step_of(a))
        elif k == "check" and a.id.endswith("check-before"):
            self._check_before(self._step_of(a))
        elif k == "check":
            self._check_after(self._step_of(a))
        elif k == "group":
            self._run_group(self._step_of(a), a.group or 0)
        else:
            raise AssertionError(f"no executor for action {a.id} ({k})")

    def _data(self, stack: contextlib.ExitStack) -> None:
        self.datadir = stack.enter_context(data.data_dir(
            self.prefix, self.datadir, self.sc.files, **self._incoming(), **self._uploads(),
            storage=self.sc.storage,
            record=self._record_disk, say=self.say, written=self.disk_written))
        self.say(f"data: {len(self.sc.files)} file(s) on {self.sc.storage.kind} {self.datadir}")
        # a generated ROOT file's size is only near the asked one: use the real one
        self.sc = dataclasses.replace(self.sc, files=[
            dataclasses.replace(f, size=(self.datadir / f.name).stat().st_size)
            for f in self.sc.files])
        self.disk = storagecheck.DiskHooks(self.sc, self.datadir, self.say, self.disk_written)

    def _make_ca(self) -> None:
        if self.ca is None and uses_tls(self.sc):  # in the workdir: removed with it
            self.ca = tls.make_ca(self.workdir / "tls")
            self.say(f"tls: a CA for this run only, {self.ca.cert}")

    def _step_of(self, a: Action) -> S.Step:
        step = self.all_steps[a.step or 0]
        assert step.index == a.step
        if not self._swept:          # the paths are up: the sweep starts
            self._swept = True
            self.store.set_env("backends", {l.spec.name: l.backend.name for l in self.lives})
            if any(p.capture for p in self.sc.paths) or any(c.capture for c in self.sc.clients):
                self.say(f"WARNING: {capture.warning()}")
            self.reporter.start(sum(len(S.groups(self.sc, s.path)) for s in self.all_steps))
        return step

    # --- faults (rig.orchestration.faults) ---------------------------------------------
    def _event(self, step: S.Step, live: Live, phase: str, reason: str) -> None:
        """A fault or a step not run, as a validations row (docs/results-format.md)."""
        try:
            self.store.add_validation(ValidationRow(**self._step_fields(step, live), phase=phase,
                                                    flagged=True, flag_reason=reason,
                                                    started_at=time.time()))
        except RigError as e:      # still full: the console line is all that is left
            self.say(f"  not stored ({phase}: {reason}): {e}")

    def _fault(self, kind: str, message: str) -> None:
        """One console line and one row for a fault seen during the current step."""
        self.say(f"  FAULT ({kind}): {message}")
        if self._at is not None:
            self._event(self._at[0], self._at[1], "fault", f"{kind}: {message}")

    def _stopped(self, e: BaseException, later: list[S.Step]) -> None:
        """The run stops in the middle of a step: why, in a row, and a row for each later
        step, which will not run."""
        if isinstance(e, OutputFull):
            self.full = True
            self._fault("output-full", str(e))
        elif isinstance(e, KeyboardInterrupt):
            self._fault("signal", f"interrupted ({e or 'Ctrl-C'})")
        why = faults.one_line(e if str(e) else type(e).__name__)
        for step in later:
            self._event(step, self.lives[step.path_index], "not-run", why)
        if later:
            self.say(f"  {len(later)} later step(s) not run: {why}")

    def _signal_row(self) -> None:
        if self.signals.deferred is not None and self._at is not None:
            self._event(self._at[0], self._at[1], "fault",
                        f"signal: signal {self.signals.deferred} during teardown; the teardown "
                        "finished first")

    def _origins_alive(self, live: Live) -> None:
        """An origin server of this host that died during the step stops the run: every
        later transfer to it would only measure a refused connection."""
        for origin, pid, how in faults.dead_origins(live.server_svcs):
            del live.server_svcs[origin]
            msg = f"origin {origin} (pid {pid}) on path {live.spec.name} died ({how})"
            self._fault("origin-died", msg)
            raise RigError(msg + "; the run cannot go on without it")

    # --- competing flows (`background:`, issue 30) ------------------------------------
    SETTLE_RTTS = 20       # a competing flow is past its start-up before the transfers begin

    def _background_start(self, step: S.Step) -> None:
        """Each competing flow of the step's path: iperf3 -R until stopped, in the client
        namespace, through the same emulation; then a settle time, max(1 s, 20 RTT)."""
        live = self.lives[step.path_index]
        self._background_halt()
        for b in background_on(self.sc, live.spec):
            argv = iperf3_tool.background_argv(live.server_addr, live.bg_ports[b.name],
                                               b.streams, b.congestion, b.rate_bps)
            log = self.workdir / live.spec.name / f"background-{b.name}-{step.index}.json"
            svc = proc.Service(argv, netns=live.client_ns, log_path=log,
                               name=f"background:{b.name}").start()
            self.bg_running.append((step, b, svc, time.time()))
        names = ", ".join(b.name for _, b, _, _ in self.bg_running)
        self.say(f"  background: {names} started")
        time.sleep(max(1.0, self.SETTLE_RTTS * (step.rtt_s or 0.0)))

    def _background_stop(self, step: S.Step) -> None:
        """Stop the flows (TERM: iperf3 prints its summary) and store a row each; then
        max(1 s, 10 RTT) for the servers to notice and the queue to drain before the
        path check after (seen without it: ping 22.4 +- 7.0 ms on a 20 ms path)."""
        running, self.bg_running = self.bg_running, []
        for st, b, svc, t0 in running:
            alive = svc.alive()
            svc.stop()
            got = iperf3_tool.parse_background(svc.log_tail(1 << 20))
            err = got.get("error") or (None if alive else "exited before it was stopped")
            bps = (got["bytes"] * 8 / got["seconds"]) if got.get("seconds") else None
            self.store.add_background(BackgroundRow(
                run_id=self.run_id, step=st.index, path=st.path.name, flow=b.name,
                tool=b.tool, congestion=b.congestion, congestion_used=got.get("congestion_used"),
                streams=b.streams, rate_bps_configured=b.rate_bps, started_at=t0,
                bytes=got.get("bytes"), seconds=got.get("seconds"), throughput_bps=bps,
                error=err, argv=json.dumps(svc.argv)))
            self.say(f"  background {b.name}: " + (f"{bps / 1e9:.3f} Gbit/s over "
                                                    f"{got['seconds']:.1f} s" if bps else
                                                    f"no figure ({err})"))
        if running:
            time.sleep(max(1.0, 10 * (step.rtt_s or 0.0)))

    def _background_halt(self) -> None:
        """Competing flows still running (a step aborted, or the run ends): stopped."""
        running, self.bg_running = self.bg_running, []
        for _, _, svc, _ in running:
            svc.stop()

    def _emulate(self, step: S.Step) -> None:
        live = self.lives[step.path_index]
        self._at = (step, live)
        self.say(f"[step {step.number}/{len(self.all_steps)}] {step.label()}: applying "
                 f"{live.backend.name} emulation")
        if live.site is not None and step.profile is not None:
            if live.applied:
                live.backend.update(live.site, step.profile)
            else:
                live.backend.apply(live.site, step.profile)
                live.applied = True

    def _check_before(self, step: S.Step) -> None:
        live = self.lives[step.path_index]
        self._commons[step.index] = common = self._common_of(step, live)
        src = capacity_source(self.all_steps, step, self.sc.validation.capacity)
        bps = self.capacities.get(src) if src is not None else None
        v = self._validate(step, live, "before", common, **(
            {"ping_only": "validation.capacity: once", "reused": (S.shown_step(src), bps)}
            if src is not None and bps else {}))
        if src is None:
            self.capacities[step.index] = v["capacity_bps"]
        self._engine_stats(step, live, "check-before")
        self.disk.check(step, self._step_fields(step, live), self.store)    # storage: disk
        common["rtt_ms_measured"] = v["rtt_ms_measured"]

    def _run_group(self, step: S.Step, gi: int) -> None:
        if step.joint is not None:
            return self._run_joint_group(step, gi)
        live = self.lives[step.path_index]
        gs = S.groups(self.sc, step.path)
        try:
            self._group(step, live, gs[gi], self._commons[step.index], f"{gi + 1}/{len(gs)}")
            self._origins_alive(live)
        except StepAborted as e:
            self._step_aborted(step, live, e)

    def _step_aborted(self, step: S.Step, live: Live, e: StepAborted) -> None:
        self.say(f"  step aborted: {faults.one_line(e)}")
        self.store.add_validation(ValidationRow(**self._step_fields(step, live),
                                                phase="aborted", flagged=True,
                                                flag_reason=str(e), started_at=time.time()))
        # its later groups and check (a joint set's: every path's later groups) are skipped
        self._aborted = step.index if step.joint is None else step.joint
        self._recover(live, step)

    JOINT_START_S = 120.0      # a joint set's paths wait this long for each other to start

    def _run_joint_group(self, step: S.Step, gi: int) -> None:
        """`together:` one group on every path of the joint set at once: a thread per path
        runs its part (its own samplers, rows and checks); all start their clients past
        one barrier, so the transfers overlap as one site's do over several links."""
        ms = S.members(self.all_steps, step)
        gs = S.joint_groups(self.sc, ms)
        g = gs[gi]
        runs = [m for m in ms if runs_on(g.client, m.path)]
        start = threading.Barrier(len(runs), timeout=self.JOINT_START_S)
        failed: list[BaseException] = []

        def one(m: S.Step) -> None:
            live = self.lives[m.path_index]
            try:
                self._group(m, live, g, self._commons[m.index],
                            f"{gi + 1}/{len(gs)} {m.path.name}", start=start)
                self._origins_alive(live)
            except StepAborted as e:
                start.abort()
                self._step_aborted(m, live, e)
            except threading.BrokenBarrierError:    # another path of the set stopped first
                self.say(f"  {m.path.name}: group not started (another path of the joint "
                         "set stopped before the start)")
            except BaseException as e:  # noqa: BLE001 - raised again below, in this thread
                start.abort()
                failed.append(e)
        threads = [threading.Thread(target=one, args=(m,), daemon=True) for m in runs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if failed:
            raise failed[0]

    def _check_after(self, step: S.Step) -> None:
        live = self.lives[step.path_index]
        late = self._engine_stats(step, live, "transfers")
        if self.sc.validation.after == "ping":
            self._validate(step, live, "after", self._commons[step.index],
                           ping_only="validation.after: ping",
                           escalate="the engine was late during the transfers" if late else None)
        else:
            self._validate(step, live, "after", self._commons[step.index])
        self._engine_stats(step, live, "check-after")

    def _recover(self, live: Live, step: S.Step) -> None:
        """After the emulation died mid-step: rebuild it for the next step, or stop."""
        if live.site is None or step.profile is None:
            return
        live.backend.remove(live.site)
        live.applied = False
        lost = faults.gone(n.ns for n in live.path.nodes)
        if lost:
            raise RigError(f"emulation on path {live.spec.name} cannot be restored: namespace "
                           f"{', '.join(lost)} was deleted under the run (not by the rig)")
        try:
            live.backend.apply(live.site, step.profile)
            live.applied = True
        except RigError as e:
            raise RigError(f"emulation on path {live.spec.name} cannot be restored: "
                           f"{faults.one_line(e)}") from e

    def _step_fields(self, step: S.Step, live: Live) -> dict:
        """Columns every row of a step shares (transfers and validations)."""
        return {"run_id": self.run_id, "step": step.index, "path": live.spec.name,
                "backend": live.backend.name, "rtt_ms_configured": step.rtt_ms,
                "loss_configured": live.spec.loss if step.profile else None,
                "rate_bps_configured": live.spec.rate_bps}

    def _validate(self, step: S.Step, live: Live, phase: str, common: dict,
                  **only: Any) -> dict:
        """The path check (`only`: validate_path's ping_only, reused, escalate)."""
        self._check(live)
        v = validate_path(client_ns=live.client_ns, server_addr=live.server_addr, **only,
                          iperf_port=live.iperf_port, configured_rtt_ms=step.rtt_ms,
                          v=self.sc.validation, rate_bps=live.spec.rate_bps,
                          jitter_ms=live.spec.jitter_s * 1e3 if step.profile else 0.0,
                          own_ns=() if live.spec.kind == "real" else tuple(
                              ns for ns in (live.client_ns, live.server_ns) if ns),
                          **live.client.run_kw())
        self._check(live)
        if v["flagged"] and live.site is not None and live.applied:
            # what the wire audit saw meanwhile: the engine's releases, measured by the
            # kernel, beside the RTT the check measured (issue 42)
            try:
                audit = wire_audit(live.backend.stats(live.site).since(live.last_stats))
            except RigError:
                audit = None
            if audit:
                v["flag_reason"] = f"{v['flag_reason']} ({audit})"
        self.store.add_validation(ValidationRow(**self._step_fields(step, live), phase=phase, **v))
        rtt = f"{v['rtt_ms_measured']:.3f} ms" if v["rtt_ms_measured"] is not None else "n/a"
        flag = f"  FLAGGED: {v['flag_reason']}" if v["flagged"] else "  ok"
        if v["iperf_streams"] is None:        # a ping-only check
            reused = only.get("reused")
            cap = (f"capacity {v['capacity_bps'] / 1e9:.2f} Gbit/s of step {reused[0]}"
                   if reused else f"capacity {v['capacity_note']}")
            self.say(f"  validate ({phase}): ping {rtt} (±{v['rtt_ms_stddev'] or 0:.3f}), "
                     f"{cap}{flag}")
            return v
        cap = f"{v['iperf_bps'] / 1e9:.2f} Gbit/s" if v["iperf_bps"] else "n/a"
        if v.get("capacity_note"):
            cap += f" (capacity {v['capacity_note']})"
        srtt = f"{v['iperf_srtt_ms']:.2f} ms" if v["iperf_srtt_ms"] else "n/a"
        self.say(f"  validate ({phase}): ping {rtt} (±{v['rtt_ms_stddev'] or 0:.3f}), "
                 f"iperf3 -P {v['iperf_streams']} {cap} srtt {srtt}{flag}")
        return v

    def _tcp_cost(self, smp: tcpsample.GroupSampler, wall_s: float) -> None:
        """The sampler's own CPU time against the wall time it ran, per run."""
        c = self.tcp_cost
        c["groups"] += 1
        c["ticks"] += smp.ticks
        c["cpu_s"] = round(c["cpu_s"] + smp.cpu_s, 6)
        c["wall_s"] = round(c["wall_s"] + wall_s, 6)
        c["errors"] += smp.errors
        c["cpu_share"] = round(c["cpu_s"] / c["wall_s"], 6) if c["wall_s"] else None
        self.store.set_env("tcp_sampling", c)

    def _check(self, live: Live) -> None:
        """The emulation still in force (the watchdog, every WATCH_INTERVAL_S); a deleted
        namespace of the run is named."""
        if live.site is None or not live.applied:
            return
        try:
            live.backend.check(live.site)
        except StepAborted as e:
            lost = faults.gone(n.ns for n in live.path.nodes)
            if lost:
                raise StepAborted(f"namespace {', '.join(lost)} was deleted under the run "
                                  f"(not by the rig): {faults.one_line(e)}") from e
            raise
        stalls = getattr(live.backend, "stalls", None)    # the userspace engine's
        if stalls is not None:
            live.stalls += stalls(live.site)

    def _engine_stats(self, step: S.Step, live: Live, phase: str) -> bool:
        """One row per phase of a step (check-before, transfers, check-after): the path
        check's iperf3 moves 5-10x the transfers' packets, so a step judged as a whole
        hid what happened during its transfers. True: the engine was late in it."""
        if live.site is None or not live.applied:
            return False
        try:
            stats = live.backend.stats(live.site)
        except RigError as e:
            stats = EmulStats(live.backend.name, error=str(e))
        # the engine counts from its start: judge this phase on what happened since the last
        phase_stats = stats.since(live.last_stats)
        late = emulation_late(phase_stats, None if step.rtt_ms is None else step.rtt_ms / 1e3)
        if late and phase_stats.steal_s:     # the VM lost its CPUs meanwhile: say how long
            late.append(f"host steal {phase_stats.steal_s * 1e3:.0f} ms in this phase")
        if late and (wake := late_wakeups(stats, live.last_stats)):
            late.append(wake)            # guest CPU wait or wake-ups late before it
        if live.stalls:      # its own counters miss a stop: packets waited in the kernel
            late.append(f"engine did not answer for {max(live.stalls):.1f} s "
                        f"({len(live.stalls)} watchdog check(s) >= {faults.STALL_S:g} s): "
                        "stopped or starved of CPU, packets held that much longer")
            live.stalls.clear()
        live.last_stats = stats
        self.store.add_engine_stats(EngineStatsRow(
            run_id=self.run_id, step=step.index, path=live.spec.name, backend=live.backend.name,
            taken_at=time.time(), stats=stats.to_json(), emulation_late=bool(late),
            emulation_late_reason="; ".join(late) or None, phase=phase))
        if late and phase == "transfers":
            self.say(f"  EMULATION LATE (transfers): {'; '.join(late)}")
        elif late:   # the check's iperf3 loads the path to its capacity on purpose
            self.say(f"  emulation late during the path check ({phase.removeprefix('check-')}"
                     f"; its capacity is the engine's under that load): {'; '.join(late)}")
        return bool(late)

    def _common_of(self, step: S.Step, live: Live) -> dict:
        return {**self._tuned(step, live), "client_host": live.spec.client_host,
                "server_host": live.spec.server_host}

    def _tuned(self, step: S.Step, live: Live) -> dict:
        """The TCP settings the step's rows record, read where each end runs."""
        t = self.sc.tuning
        c = live.client.tcp(live.client_ns)
        rmem = _max_of(c["net.ipv4.tcp_rmem"]) or t.tcp_rmem_max
        scale = c["net.ipv4.tcp_adv_win_scale"]
        return {**self._step_fields(step, live),
                "jitter_ms_configured": live.spec.jitter_s * 1e3 if step.profile else None,
                "congestion_control": c["net.ipv4.tcp_congestion_control"],
                "tcp_rmem_max": rmem,
                "tcp_wmem_max": _max_of(live.server.tcp(live.server_ns)["net.ipv4.tcp_wmem"])
                or t.tcp_wmem_max,
                "window_bytes": tuning.window_bytes(rmem, int(scale) if scale else None)}

    def _group(self, step: S.Step, live: Live, g: S.Group, common: dict, pos: str,
               start: threading.Barrier | None = None) -> None:
        ids: list[tuple[int, int, float]] = []      # (instance, rowid, start): thread rows
        self._check(live)
        self.disk.before_group(g)       # storage: disk: the file's page cache dropped
        jobs = transfer.build_jobs(self.sc, g, live.servers, live.server_addr, live.iperf_port,
                                   self.prefix)
        # the server's CPU from /proc: only where the server runs on this host
        # the server's CPU from /proc (every origin of it): where it runs on this host
        spids = [live.server_pids[p.origin] for p in live.servers.get(g.client.server or "", [])
                 if p.origin in live.server_pids]
        sids = [live.server_ids[p.origin] for p in live.servers.get(g.client.server or "", [])
                if p.origin in live.server_ids]
        sender = "client" if g.client.direction == "upload" else tools.get(g.client.tool).caps.sender
        cache = xcache.begin(g, jobs, live.servers, live.path, say=self.say,
                             timeout_s=self.sc.transfer_timeout_s)    # a cold or warm cache
        # after a warm cache's fill: its read is not the group's
        cpu0 = live.server.server_cpu(spids, sids)
        host0 = self._host_cpu(live)
        t0 = time.monotonic()
        # tcp_info is sampled on this host only: the sender's sockets and the client's
        # pids must be here (a remote host's are not seen from here)
        here = live.client.local and (sender == "client" or live.server.local)
        src = live.servers.get(g.client.source or "", [])[:1]   # third-party copy: at the source
        with self._capture(step, live, g, sender) as cap, \
                tcpsample.sampling(src[0].ns if src else live.server_ns if sender == "server"
                                   else live.client_ns, live.client_ns, sender=sender,
                                   interval_s=self.sc.sampling.tcp_info_s
                                   if here and not (src and src[0].host) else None,
                                   tpc_source=list(src[0].ports.values()) if src else None
                                   ) as smp, \
                threadsample.group(self.sc.sampling.threads_s, spids, cost=self.thread_cost,
                                   client_local=live.client.local,
                                   server_local=bool(spids)) as thr:
            if start is not None:       # a joint set: every path's clients start together
                start.wait()
            outcomes, alive_after = transfer.run_group(
                jobs, live.client_ns, watchdog=lambda: self._check(live),
                on_start=threadsample.on_start(smp.track if smp else None,
                                               thr.track if thr else None),
                **live.client.run_kw(),
                cgroup=live.client.cgroup(lambda: self.client_cgroups.get(g.client.name)))
        if cap is not None:
            self._capture_rows(step, live, g, cap)
        cpu1 = live.server.server_cpu(spids, sids)
        server_cpu = None
        if cpu0 is not None and cpu1 is not None:
            server_cpu = (cpu1[0] - cpu0[0], cpu1[1] - cpu0[1])
        if alive_after is None:
            try:
                self._check(live)
            except StepAborted as e:
                alive_after = e
        rows = transfer.rows(outcomes, dict(
            common, concurrency=g.concurrency, repeat=g.repeat,
            server=g.client.server, **self._host_cpu_columns(live, host0)),
            server_cpu=server_cpu)
        if cache is not None:
            cache.annotate(rows)       # bytes the cache fetched from its origin
        transfer.verify_uploads(outcomes, rows, self.sent_adler32)   # then removed
        if thr is not None:       # where each instance really ran (per-instance pinning)
            for r in rows:
                seen = sorted({s.cpus_allowed for s in thr.of(str(r.instance))
                               if s.cpus_allowed})
                r.client_cpus_seen = ";".join(seen) or None
        for r in rows:
            if alive_after is not None:   # never store an undelayed measurement as good
                r.ok, r.error = False, f"emulation not in force: {faults.one_line(alive_after)}"
            tid = self.store.add_transfer(r)
            ids.append((r.instance, tid, outcomes[r.instance].t_start))
            if smp is not None:
                samples = tcpsample.sample_rows(smp.connections(r.instance), tid,
                                                outcomes[r.instance].t_start)
                self.store.add_tcp_samples(samples)
                self.tcp_cost["samples"] += len(samples)
        if smp is not None:
            self._tcp_cost(smp, time.monotonic() - t0)
        threadsample.store_rows(self.store, thr, ids, self.thread_cost)
        ok = [r for r in rows if r.ok]
        pos = f"{pos}, {self.reporter.group_done()}"
        if ok:
            agg = rows[0].aggregate_bps or sum(r.throughput_bps or 0 for r in ok)
            cpu = sum((r.cpu_user_s or 0) + (r.cpu_sys_s or 0) for r in ok)
            lag = max(json.loads(r.extra or "{}").get("exit_lag_s", 0) or 0 for r in ok)
            note = f", exit lag {lag:.1f}s" if lag > 1.0 else ""
            tls_note = f" tls={g.tls}" if g.tls != "off" else ""
            scpu = (f", server cpu {server_cpu[0] + server_cpu[1]:.2f}s"
                    if server_cpu is not None else "")
            self.say(f"  [{pos}] {g.client.name}{tls_note} streams={g.streams} x{g.concurrency} "
                     f"rep={g.repeat + 1}: {agg / 1e9:.3f} Gbit/s, "
                     f"{rows[0].duration_s or 0:.2f}s, cpu {cpu:.2f}s{scpu}{note}"
                     + ("" if len(ok) == len(rows) else f" ({len(rows) - len(ok)} failed)"))
        else:
            self.say(f"  [{pos}] {g.client.name}{' tls=' + g.tls if g.tls != 'off' else ''} "
                     f"streams={g.streams} x{g.concurrency} "
                     f"rep={g.repeat + 1}: FAILED: {faults.one_line(rows[0].error)}")
        if alive_after is not None:
            raise alive_after

    def _host_cpu(self, live: Live) -> HostCpuMark:
        """The hosts' and the engine's CPU so far, before a group (_host_cpu_columns)."""
        other = live.server.host != live.client.host
        pids = live.backend.engine_pids(live.site) if live.site is not None else []
        return HostCpuMark(time.monotonic(), live.client.host_cpu(),
                           live.server.host_cpu() if other else None,
                           sides.tree_cpu(pids) if pids else None)

    def _host_cpu_columns(self, live: Live, before: HostCpuMark) -> dict:
        """The group's host CPU columns (the same on each of its rows): how busy the
        client's host was over the group (of it: interrupts, steal), the server's host's
        share when another host, the client's host's CPU count, the wall time between the two marks, and the engine's CPU over it."""
        after = self._host_cpu(live)
        def share(a: cputree.HostCpu | None, b: cputree.HostCpu | None,
                  what: str = "busy_s") -> float | None:
            return b.share_since(a, what) if a is not None and b is not None else None
        eng = (sum(after.engine) - sum(before.engine)
               if before.engine is not None and after.engine is not None else None)
        return {"host_cpu_share": share(before.client, after.client),
                "host_irq_share": share(before.client, after.client, "irq_s"),
                "host_steal_share": share(before.client, after.client, "steal_s"),
                "host_cpus": after.client.cpus if after.client else None,
                "server_host_cpu_share": share(before.server, after.server),
                "host_cpu_wall_s": after.t - before.t,
                "engine_cpu_s": max(0.0, eng) if eng is not None else None}

    def _capture(self, step: S.Step, live: Live, g: S.Group,
                 sender: str) -> contextlib.AbstractContextManager[capture.Capture | None]:
        """The group's header capture (rig.orchestration.capture), when asked for."""
        if live.site is None or not capture.wanted(live.spec.capture, g.client.capture):
            return contextlib.nullcontext()
        name = capture.group_name(g.client.name, g.streams, g.concurrency, g.repeat, g.tls)
        return capture.capturing(live.site, live.backend,
                                 self.out / "captures" / f"step{step.number}", name,
                                 sender=sender, logdir=self.workdir / "captures",
                                 max_s=capture.wait_s(self.sc.transfer_timeout_s),
                                 record=self.state.record_pid)

    def _capture_rows(self, step: S.Step, live: Live, g: S.Group,
                      cap: capture.Capture) -> None:
        f = self._step_fields(step, live)
        common = {k: f[k] for k in ("run_id", "step", "path", "rtt_ms_configured",
                                    "loss_configured")}
        rows, summary = capture.flow_rows(cap, dict(
            common, client=g.client.name, streams=g.streams, concurrency=g.concurrency,
            repeat=g.repeat), self.out)
        for r in rows:
            self.store.add_capture_flow(r)
        self.say(f"  capture: {summary}")


def _max_of(tcp_mem: str | None) -> int | None:
    """The maximum of a tcp_rmem/tcp_wmem triple ("min default max")."""
    return int(tcp_mem.split()[2]) if tcp_mem else None


def default_out_dir(sc: Scenario, prefix: str, base: Path | None = None) -> Path:
    base = base or Path(os.environ.get("RIG_REPORTS", Path.cwd() / "reports"))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return base / f"{stamp}-{sc.name}-{prefix}"


def run(sc: Scenario, out_dir: Path | None = None, *, progress: Say = stderr_say) -> Path:
    prefix = netns.new_prefix()
    out = out_dir or default_out_dir(sc, prefix)
    r = Run(sc, out, progress=progress, prefix=prefix)
    with signals_as_exceptions(progress) as sig:
        r.signals = sig
        try:
            done = r.execute()
        except BaseException:
            proc.kill_all_live()
            raise
        if sig.deferred is not None:
            raise KeyboardInterrupt(f"signal {sig.deferred} during teardown; the teardown "
                                    "finished first, every step's rows are stored")
        return done
