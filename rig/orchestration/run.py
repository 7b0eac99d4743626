"""Orchestration: build the topology, start servers, validate every sweep step, run the
transfers, store each result as it lands, tear everything down whatever happens.

Layers it drives: realization (rig.realization.netns, rig.realization.emul, rig.realization.tuning), services (servers,
clients), results. It never imports matplotlib; the report is drawn afterwards by the
CLI through rig.report, which reads only the stored results.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from rig.orchestration import hostinfo, transfer

from rig.realization import netns, tuning

from rig.process import owner, proc

from rig.description import steps as S
from rig.realization.emul.base import Backend, LinkSite
from rig.realization.emul.choose import make_backend
from rig.realization.emul.none import NoneBackend
from rig.errors import RigError, StepAborted
from rig.description.linkstats import EmulStats, emulation_late
from rig.orchestration.reporter import Reporter, Say, stderr_say
from rig.results.store import EngineStatsRow, Store, ValidationRow
from rig.description.scenario import PathSpec, Scenario
from rig.realization import data
from rig.services import servers
from rig.services.servers.start import start_iperf3_server, start_server
from rig.orchestration.pathcheck import validate_path



@dataclass
class Live:
    """A path during a run: its names and addresses (netns.RealizedPath) plus the
    runtime state: backend, whether the emulation is applied, its servers."""
    spec: PathSpec
    path: netns.RealizedPath
    backend: Backend
    servers: dict[str, servers.ServerPlan] = field(default_factory=dict)
    iperf_port: int = 0
    applied: bool = False
    last_stats: EmulStats | None = None     # the engine's previous snapshot (per-step deltas)

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
        self.store: Store | None = None
        self.lives: list[Live] = []
        self.state = RunState(self.prefix, out_dir)

    # --- setup ---------------------------------------------------------------------
    def _env_snapshot(self, stack: contextlib.ExitStack) -> None:
        st = self.store
        info = hostinfo.summary()
        for k in ("kernel", "machine", "hostname", "cpus", "tools"):
            st.set_env(k, info[k])
        st.set_env("sysctls_before", info["sysctls"])
        st.set_env("scenario_text", self.sc.text)
        st.set_env("scenario_file", self.sc.source)
        st.set_env("tuning", dataclasses.asdict(self.sc.tuning))
        st.set_env("prefix", self.prefix)
        stack.callback(lambda: st.set_env("sysctls_after", hostinfo.sysctls()))

    def _global_tuning(self, stack: contextlib.ExitStack) -> None:
        tuning.check_cc_available(self.sc.tuning)
        wrote = tuning.global_wanted(self.sc.tuning, tuning.host_allowed_cc())
        before = tuning.read(wrote)
        # recorded before writing, so `rig clean` can restore after a SIGKILL at any point
        self.state.record_sysctls(before, wrote)
        stack.callback(tuning.restore_global, before, wrote)
        tuning.apply_global(wrote)

    def _build_path(self, stack: contextlib.ExitStack, i: int, p: PathSpec) -> Live:
        if p.kind == "real":
            live = Live(p, netns.real_path(i, p.name, client_ns=p.client_ns,
                                           server_ns=p.server_ns, server_addr=p.server_addr),
                        NoneBackend())
        else:
            path = stack.enter_context(netns.path_net(
                self.prefix, p.name, i, workdir=self.workdir / p.name,
                mtu=self.sc.tuning.mtu, subnet=self.subnet, topology=self.sc.topology))
            for node in path.nodes:
                if node.role != "router":
                    tuning.apply_ns(self.sc.tuning, node.ns)
            live = Live(p, path, make_backend(p.backend))
            stack.callback(self._remove_backend, live)
        self.say(f"path {p.name}: client {live.client_ns or 'host'} -> server "
                 f"{live.server_addr} ({live.server_ns or 'host'}), backend {live.backend.name}")
        return live

    @staticmethod
    def _remove_backend(live: Live) -> None:
        if live.site is not None and live.applied:
            live.backend.remove(live.site)

    def _ports(self, live: Live, kind: str, k: int) -> dict[str, int]:
        ports = {}
        for proto, port in servers.default_ports(kind, k).items():
            if live.server_ns is None:  # the host: find a free port, never steal one
                from rig.process.nsprobe import port_free
                while not port_free(None, live.server_addr, port):
                    port += 1
            ports[proto] = port
        return ports

    def _start_servers(self, stack: contextlib.ExitStack, live: Live, datadir: Path) -> None:
        for k, spec in enumerate(self.sc.servers):
            plan = servers.ServerPlan(spec, live.server_ns, live.server_addr,
                                      self._ports(live, spec.kind, k),
                                      self.workdir / f"{live.spec.name}-{spec.name}", datadir)
            rs = start_server(plan)
            stack.callback(rs.stop)
            self.state.record_pid(rs.service)
            live.servers[spec.name] = plan
            self.say(f"server {spec.name} ({spec.kind}) ready on {plan.addr} ports "
                     + ", ".join(f"{k}={v}" for k, v in plan.ports.items()))
        iperf_port = self._ports(live, "iperf3", 0)["iperf3"]
        live.iperf_port = iperf_port
        svc = start_iperf3_server(live.server_ns, live.server_addr, iperf_port,
                                          self.workdir / live.spec.name)
        stack.callback(svc.stop)
        self.state.record_pid(svc)
        for extra in range(1, max(self.sc.sweep.concurrency)):
            if any(c.tool == "iperf3" for c in self.sc.clients):
                s2 = start_iperf3_server(live.server_ns, live.server_addr,
                                                 iperf_port + extra, self.workdir / live.spec.name)
                stack.callback(s2.stop)
                self.state.record_pid(s2)

    def _keep_logs(self) -> None:
        """Server and engine logs move to the output folder before the workdir goes."""
        if not self.workdir.is_dir():
            return
        dest = self.out / "logs"
        for f in self.workdir.rglob("*.log"):
            if f.is_file() and f.stat().st_size:
                dest.mkdir(exist_ok=True)
                rel = "-".join(f.relative_to(self.workdir).parts)
                shutil.copyfile(f, dest / rel)

    # --- the sweep -----------------------------------------------------------------
    def execute(self) -> Path:
        self.out.mkdir(parents=True, exist_ok=True)
        self.store = Store.create(self.out / "results.sqlite", self.run_id)
        (self.out / "scenario.yaml").write_text(self.sc.text)
        self.state.save()
        with contextlib.ExitStack() as stack:
            stack.callback(self.store.finish)
            stack.callback(self.reporter.close)
            self.reporter.open_command_log(self.out / "commands.log")
            stack.callback(self.state.drop)
            stack.callback(shutil.rmtree, self.workdir, True)
            stack.callback(self._keep_logs)
            stack.callback(netns.release_subnet, self.prefix)
            self._env_snapshot(stack)
            self.subnet = netns.lease_subnet(self.prefix)
            self._global_tuning(stack)
            datadir = stack.enter_context(data.data_dir(self.prefix, self.workdir / "data",
                                                        self.sc.files))
            self.say(f"data: {len(self.sc.files)} file(s) on tmpfs {datadir}")
            for i, p in enumerate(self.sc.paths):
                live = self._build_path(stack, i, p)
                self._start_servers(stack, live, datadir)
                self.lives.append(live)
            self.store.set_env("backends", {l.spec.name: l.backend.name for l in self.lives})
            all_steps = S.expand(self.sc)
            self.reporter.start(len(all_steps) * len(S.groups(self.sc)))
            for step in all_steps:
                self._step(step, len(all_steps))
        return self.out

    def _step(self, step: S.Step, total: int) -> None:
        live = self.lives[step.path_index]
        self.say(f"[step {step.index + 1}/{total}] {step.label()}: applying "
                 f"{live.backend.name} emulation")
        if live.site is not None and step.profile is not None:
            if live.applied:
                live.backend.update(live.site, step.profile)
            else:
                live.backend.apply(live.site, step.profile)
                live.applied = True
        common = self._common(step, live)
        v = self._validate(step, live, "before", common)
        common["rtt_ms_measured"] = v["rtt_ms_measured"]
        gs = S.groups(self.sc)
        try:
            for gi, g in enumerate(gs):
                self._group(step, live, g, common, f"{gi + 1}/{len(gs)}")
        except StepAborted as e:
            self.say(f"  step aborted: {e}")
            self.store.add_validation(ValidationRow(**self._step_fields(step, live),
                                                    phase="aborted", flagged=True,
                                                    flag_reason=str(e), started_at=time.time()))
            self._recover(live, step)
            return
        self._engine_stats(step, live)
        self._validate(step, live, "after", common)

    def _recover(self, live: Live, step: S.Step) -> None:
        """After the emulation died mid-step: rebuild it for the next step, or stop."""
        if live.site is None:
            return
        live.backend.remove(live.site)
        live.applied = False
        try:
            live.backend.apply(live.site, step.profile)
            live.applied = True
        except RigError as e:
            raise RigError(f"emulation on path {live.spec.name} cannot be restored: {e}") from e

    def _step_fields(self, step: S.Step, live: Live) -> dict:
        """Columns every row of a step shares (transfers and validations)."""
        return {"run_id": self.run_id, "step": step.index, "path": live.spec.name,
                "backend": live.backend.name, "rtt_ms_configured": step.rtt_ms,
                "loss_configured": live.spec.loss if step.profile else None,
                "rate_bps_configured": live.spec.rate_bps}

    def _validate(self, step: S.Step, live: Live, phase: str, common: dict) -> dict:
        self._check(live)
        v = validate_path(client_ns=live.client_ns, server_addr=live.server_addr,
                          iperf_port=live.iperf_port, configured_rtt_ms=step.rtt_ms,
                          v=self.sc.validation, rate_bps=live.spec.rate_bps)
        self._check(live)
        self.store.add_validation(ValidationRow(**self._step_fields(step, live), phase=phase, **v))
        rtt = f"{v['rtt_ms_measured']:.3f} ms" if v["rtt_ms_measured"] is not None else "n/a"
        cap = f"{v['iperf_bps'] / 1e9:.2f} Gbit/s" if v["iperf_bps"] else "n/a"
        if v.get("capacity_note"):
            cap += f" (capacity {v['capacity_note']})"
        srtt = f"{v['iperf_srtt_ms']:.2f} ms" if v["iperf_srtt_ms"] else "n/a"
        flag = f"  FLAGGED: {v['flag_reason']}" if v["flagged"] else "  ok"
        self.say(f"  validate ({phase}): ping {rtt} (±{v['rtt_ms_stddev'] or 0:.3f}), "
                 f"iperf3 -P{self.sc.validation.iperf_streams} {cap} srtt {srtt}{flag}")
        return v

    def _check(self, live: Live) -> None:
        if live.site is not None and live.applied:
            live.backend.check(live.site)

    def _engine_stats(self, step: S.Step, live: Live) -> None:
        if live.site is None or not live.applied:
            return
        try:
            stats = live.backend.stats(live.site)
        except RigError as e:
            stats = EmulStats(live.backend.name, error=str(e))
        # the engine counts from its start: judge this step on what happened since the last
        late = emulation_late(stats.since(live.last_stats),
                              None if step.rtt_ms is None else step.rtt_ms / 1e3)
        live.last_stats = stats
        self.store.add_engine_stats(EngineStatsRow(
            run_id=self.run_id, step=step.index, path=live.spec.name, backend=live.backend.name,
            taken_at=time.time(), stats=stats.to_json(), emulation_late=bool(late),
            emulation_late_reason="; ".join(late) or None))
        if late:
            self.say(f"  EMULATION LATE: {'; '.join(late)}")

    def _common(self, step: S.Step, live: Live) -> dict:
        t = self.sc.tuning
        return {**self._step_fields(step, live),
                "jitter_ms_configured": live.spec.jitter_s * 1e3 if step.profile else None,
                "congestion_control": tuning.effective_cc(live.client_ns),
                "tcp_rmem_max": tuning.effective_rmem_max(t, live.client_ns),
                "tcp_wmem_max": tuning.effective_wmem_max(t, live.server_ns),
                "window_bytes": tuning.effective_window(t, live.client_ns)}

    def _group(self, step: S.Step, live: Live, g: S.Group, common: dict, pos: str) -> None:
        self._check(live)
        jobs = transfer.build_jobs(self.sc, g, live.servers, live.server_addr, live.iperf_port)
        outcomes, alive_after = transfer.run_group(jobs, live.client_ns,
                                                   watchdog=lambda: self._check(live))
        if alive_after is None:
            try:
                self._check(live)
            except StepAborted as e:
                alive_after = e
        rows = transfer.rows(outcomes, dict(
            common, concurrency=g.concurrency, repeat=g.repeat,
            server=g.client.server))
        for r in rows:
            if alive_after is not None:   # never store an undelayed measurement as good
                r.ok, r.error = False, f"emulation not in force: {alive_after}"
            self.store.add_transfer(r)
        ok = [r for r in rows if r.ok]
        pos = f"{pos}, {self.reporter.group_done()}"
        if ok:
            agg = rows[0].aggregate_bps or sum(r.throughput_bps or 0 for r in ok)
            cpu = sum((r.cpu_user_s or 0) + (r.cpu_sys_s or 0) for r in ok)
            lag = max(json.loads(r.extra or "{}").get("exit_lag_s", 0) or 0 for r in ok)
            note = f", exit lag {lag:.1f}s" if lag > 1.0 else ""
            self.say(f"  [{pos}] {g.client.name} streams={g.streams} x{g.concurrency} "
                     f"rep={g.repeat + 1}: {agg / 1e9:.3f} Gbit/s, "
                     f"{rows[0].duration_s or 0:.2f}s, cpu {cpu:.2f}s{note}"
                     + ("" if len(ok) == len(rows) else f" ({len(rows) - len(ok)} failed)"))
        else:
            self.say(f"  [{pos}] {g.client.name} streams={g.streams} x{g.concurrency} "
                     f"rep={g.repeat + 1}: FAILED: {rows[0].error}")
        if alive_after is not None:
            raise alive_after


@contextlib.contextmanager
def signals_as_exceptions() -> Iterator[None]:
    """SIGTERM (and SIGHUP) take the same path as Ctrl-C: KeyboardInterrupt unwinds
    every context manager, which tears down what was built."""
    import signal
    old = {}

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    for s in (signal.SIGTERM, signal.SIGHUP):
        old[s] = signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def default_out_dir(sc: Scenario, prefix: str, base: Path | None = None) -> Path:
    base = base or Path(os.environ.get("RIG_REPORTS", Path.cwd() / "reports"))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return base / f"{stamp}-{sc.name}-{prefix}"


def run(sc: Scenario, out_dir: Path | None = None, *, progress: Say = stderr_say) -> Path:
    prefix = netns.new_prefix()
    out = out_dir or default_out_dir(sc, prefix)
    r = Run(sc, out, progress=progress, prefix=prefix)
    with signals_as_exceptions():
        try:
            return r.execute()
        except BaseException:
            proc.kill_all_live()
            raise
