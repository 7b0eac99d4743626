"""Orchestration: execute the plan `rig plan` prints (rig.orchestration.plan), action
by action, over one typed run context (rig.orchestration.context): build the topology,
start servers, validate every sweep step, run the transfers, store each result as it
lands, tear everything down whatever happens. What each kind of action does is its own
module's (rig.orchestration.acts); this one runs them in order, times them, and turns a
stop in the middle into rows.

Layers it drives: realization (rig.realization.netns, rig.realization.emul, rig.realization.tuning), services (servers,
clients), results. It never imports matplotlib; the report is drawn afterwards by the
CLI through rig.report, which reads only the stored results.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

from rig.description import steps as S, userpath
from rig.description.scenario.document import Scenario
from rig.errors import OutputFull
from rig.orchestration import faults
from rig.orchestration.acts.path import preflight_routers
from rig.orchestration.context import Context, Live, RunState
from rig.orchestration.faults import signals_as_exceptions
from rig.orchestration.plan import build_plan
from rig.orchestration.reporter import Say, stderr_say
from rig.orchestration.samplers import HostCpuMark
from rig.orchestration.timing import ActionClock, Teardown
from rig.process import proc
from rig.realization import netns
from rig.results.store import Store

__all__ = ["HostCpuMark", "Live", "Run", "RunState", "default_out_dir", "run",
           "signals_as_exceptions"]


class Run(Context):
    """One `rig run`: its context, the plan it executes and the clock timing each action."""

    def __init__(self, sc: Scenario, out_dir: Path, *, progress: Say = stderr_say,
                 prefix: str | None = None, corrupt: str | None = None) -> None:
        super().__init__(sc, out_dir, progress=progress, prefix=prefix)
        self.corrupt = corrupt      # `rig run --corrupt FILE` (acts.data)
        self.plan = build_plan(sc)      # what `rig plan` prints, each action executing itself
        self.clock = ActionClock(lambda: self.store, self.run_id, self.say)

    # --- the sweep -----------------------------------------------------------------
    def execute(self) -> Path:
        preflight_routers(self)
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
        self.all_steps = S.expand(self.sc)
        for a in acts[:-1]:
            if a.step is not None and a.step == self.aborted and a.kind != "emulate":
                self.clock.skipped(a)      # its step was aborted: on to the next step
                continue
            try:
                with self.clock.timed(a):
                    a.execute(self, build)
            except BaseException as e:
                if a.step is not None:
                    self._stopped(e, [s for s in self.all_steps if s.index > a.step])
                raise

    def _stopped(self, e: BaseException, later: list[S.Step]) -> None:
        """The run stops in the middle of a step: why, in a row, and a row for each later
        step, which will not run."""
        if isinstance(e, OutputFull):
            self.full = True
            self.fault("output-full", str(e))
        elif isinstance(e, KeyboardInterrupt):
            self.fault("signal", f"interrupted ({e or 'Ctrl-C'})")
        why = faults.one_line(e if str(e) else type(e).__name__)
        for step in later:
            self.event(step, self.lives[step.path_index], "not-run", why)
        if later:
            self.say(f"  {len(later)} later step(s) not run: {why}")

    def _signal_row(self) -> None:
        if self.signals.deferred is not None and self.at is not None:
            self.event(self.at[0], self.at[1], "fault",
                       f"signal: signal {self.signals.deferred} during teardown; the teardown "
                       "finished first")

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


def default_out_dir(sc: Scenario, prefix: str, base: Path | None = None) -> Path:
    base = base or Path(os.environ.get("RIG_REPORTS", Path.cwd() / "reports"))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return base / f"{stamp}-{sc.name}-{prefix}"


def run(sc: Scenario, out_dir: Path | None = None, *, progress: Say = stderr_say,
        corrupt: str | None = None) -> Path:
    prefix = netns.new_prefix()
    out = out_dir or default_out_dir(sc, prefix)
    r = Run(sc, out, progress=progress, prefix=prefix, corrupt=corrupt)
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
