"""The typed run context: what one `rig run` knows and holds while it executes its plan.

`Context` is the state every action kind (rig.orchestration.acts) reads and writes: the
scenario (as tuned and as the data turned out), the store, the state file `rig clean`
reads, the paths built so far (`Live`) and the few helpers every kind shares (rows of a
step, faults, the watchdog). rig.orchestration.run drives it through the plan.
"""
from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rig.description import steps as S
from rig.description.linkstats import EmulStats
from rig.description.scenario.document import Scenario
from rig.description.scenario.paths import LOCAL, PathSpec
from rig.description.scenario.queries import sweep_notes, uses_tls, uses_x509
from rig.errors import RigError, StepAborted
from rig.orchestration import capture, faults, storagecheck, threadsample
from rig.orchestration.actions import Action
from rig.orchestration.reporter import Reporter, Say, stderr_say
from rig.orchestration.sides import Here, Side, There
from rig.process import owner, proc
from rig.process.remote import Host
from rig.realization import cgroups, netns, tls, x509
from rig.realization.emul.base import Backend, LinkSite
from rig.results.store import Store, ValidationRow
from rig.services import servers


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
    # an external endpoint behind the path's server namespace (acts.endpoint.EndpointState)
    endpoint: Any = None

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



class Context:
    """One run's state, typed: set up by the setup actions, read by the sweep's."""

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
        self.tcp_cost: dict[str, Any] = {"interval_s": sc.sampling.tcp_info_s, "groups": 0,
                                         "ticks": 0, "cpu_s": 0.0, "wall_s": 0.0,
                                         "samples": 0, "errors": 0}
        self.thread_cost = threadsample.Cost()      # per-thread CPU sampling (issue 27)
        self.sent_adler32: dict[str, str] = {}      # uploads: each sent file's checksum
        # each file's adler32 as the rig made it: checksum: true clients are checked against it
        self.file_adler32: dict[str, str] = {}
        self.keep_dir: str | None = None    # the downloads tmpfs (kept copies, checked)
        self.corrupt: str | None = None     # `rig run --corrupt FILE` (a self-test)
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
        self.at: tuple[S.Step, Live] | None = None    # the step running (fault rows)
        self.full = False      # the output folder filled up: the reserve is for the rows
        self.all_steps: list[S.Step] = []
        self.swept = False             # the sweep's first action has run
        self.aborted: int | None = None   # the step whose emulation died mid-way
        self.commons: dict[int, dict] = {}    # step -> its rows' shared fields
        self.capacities: dict[int, float | None] = {}   # step -> its capacity run's figure
        self.subnet = ""
        self.datadir = self.workdir / "data"
        self.disk_written: dict = {}
        self.disk = storagecheck.DiskHooks(sc, self.datadir, self.say, self.disk_written)

    @property
    def store(self) -> Store:
        assert self._store is not None, "execute() opens the store first"
        return self._store

    def live(self, path: str) -> Live:
        return next(lv for lv in self.lives if lv.spec.name == path)

    def side(self, host: str) -> Side:
        """Where a path's end runs: this host, or a scenario host (its data directory
        there once written)."""
        if host == LOCAL:
            return self.here
        return There(self.hosts[host], self.prefix, lambda: self.remote_data[host])

    def cgroup(self, stack: contextlib.ExitStack, what: str, cpus: str | None) -> Path | None:
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

    def make_ca(self) -> None:
        if self.ca is None and uses_tls(self.sc):  # in the workdir: removed with it
            rsa = uses_x509(self.sc)
            self.ca = tls.make_ca(self.workdir / "tls", rsa=rsa)
            self.say(f"tls: a CA for this run only, {self.ca.cert}")
            if rsa:
                d = x509.make(self.ca)
                self.say(f"x509: a user, its VOMS proxies (valid, expired, foreign) in {d}")

    def step_of(self, a: Action) -> S.Step:
        step = self.all_steps[a.step or 0]
        assert step.index == a.step
        if not self.swept:          # the paths are up: the sweep starts
            self.swept = True
            self.store.set_env("backends", {lv.spec.name: lv.backend.name for lv in self.lives})
            if any(p.capture for p in self.sc.paths) or any(c.capture for c in self.sc.clients):
                self.say(f"WARNING: {capture.warning()}")
            for n in sweep_notes(self.sc):       # as the plan's header says them
                self.say(f"note: {n}")
            kinds = [group_kind(g) for s in self.all_steps for g in S.groups(self.sc, s.path)]
            self.reporter.start(len(kinds), kinds)
        return step

    def step_fields(self, step: S.Step, live: Live) -> dict:
        """Columns every row of a step shares (transfers and validations)."""
        return {"run_id": self.run_id, "step": step.index, "path": live.spec.name,
                "backend": live.backend.name, "rtt_ms_configured": step.rtt_ms,
                "loss_configured": live.spec.loss if step.profile else None,
                "rate_bps_configured": live.spec.rate_bps}

    # --- faults (rig.orchestration.faults) ---------------------------------------------
    def event(self, step: S.Step, live: Live, phase: str, reason: str) -> None:
        """A fault or a step not run, as a validations row (docs/results-format.md)."""
        try:
            self.store.add_validation(ValidationRow(**self.step_fields(step, live), phase=phase,
                                                    flagged=True, flag_reason=reason,
                                                    started_at=time.time()))
        except RigError as e:      # still full: the console line is all that is left
            self.say(f"  not stored ({phase}: {reason}): {e}")

    def fault(self, kind: str, message: str) -> None:
        """One console line and one row for a fault seen during the current step."""
        self.say(f"  FAULT ({kind}): {message}")
        if self.at is not None:
            self.event(self.at[0], self.at[1], "fault", f"{kind}: {message}")

    def watch(self, live: Live) -> None:
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

    def background_halt(self) -> None:
        """Competing flows still running (a step aborted, or the run ends): stopped."""
        running, self.bg_running = self.bg_running, []
        for _, _, svc, _ in running:
            svc.stop()


def group_kind(g: S.Group) -> tuple[str, str]:
    """What makes groups alike in time for the progress line's estimate: the client
    configuration and its TLS mode."""
    return (g.client.name, g.tls)
