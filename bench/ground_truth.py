"""Ground truth for the verdicts (issue 38, item 1): each bottleneck made on purpose,
the rig run through real namespaces, servers and clients, and its per-point verdicts
(rig.report.verdict, what `rig report` stores and draws) counted against the cause.

The verdict code is never told: the causes live in the scenarios (bench/ground_truth/*.yaml:
tcp_rmem, tcp_wmem, a rate, loss, small synchronous reads) or are injected from outside
while `rig run` runs:
  cpu   the run's processes of one end (client tools in <prefix>-0c, the server in
        <prefix>-0s, the engine in <prefix>-0r) moved into a cgroup v1 `cpu` group of this
        bench's own (named <prefix>-gt-<end>) with cpu.cfs_quota_us set (and into the
        cpuacct group of that name where cpuacct is mounted apart); a client
        process is found within POLL_S of its start. The path check's ping/iperf3 are
        left alone (a capped iperf3 would make the cap the path's "capacity").
  delay the userspace engine reconfigured through its control socket, as soon as the rig
        configured it, to a one-way delay DELAY_EXTRA_MS larger than the step's label.

Each case is one `rig run` of four identical clients (four points, four verdicts); `--runs N`
repeats every case N times. Writes the raw verdicts as JSON and, with --doc, the matrix
to docs/ground-truth.md. `--redraw FILE.json` recomputes the verdicts of the stored runs
with the current rules (no run): the before/after of a rule change.

    flock /tmp/rig-bench.lock .venv/bin/python bench/ground_truth.py [--runs 1] \
        [--only window rate ...] [--json bench/results/ground_truth.json] [--doc]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# GT_RIG_ROOT: another checkout's `rig` (e.g. `git archive main rig`) judges --redraw's
# runs: the rules before a change, on the same runs
sys.path.insert(0, os.environ.get("GT_RIG_ROOT", str(REPO)))

from rig.realization import netns  # noqa: E402
from rig.realization.emul.engine import control  # noqa: E402

SCEN = REPO / "bench/ground_truth"
CPU_ROOT = Path("/sys/fs/cgroup/cpu")       # cgroup v1 cpu controller (this host)
CPU2_ROOT = Path("/sys/fs/cgroup/unified")  # or cgroup v2 where it offers `cpu`
ACCT_ROOT = Path("/sys/fs/cgroup/cpuacct")  # v1 cpuacct mounted apart (this host)
PERIOD_US = 100_000
POLL_S = 0.01
RUN_TIMEOUT_S = 400
DELAY_EXTRA_MS = 15.0        # added each way: the path's RTT becomes label + 30 ms
# processes of the rig's own checks and samplers in a namespace: never capped
LEAVE = {"ping", "iperf3", "ip", "sysctl", "ss", "tcpdump", "sh", "timeout", "tc",
         "iptables", "nft", "sleep", "ethtool"}
RIG_FAULT = "rig fault"


@dataclass(frozen=True)
class Case:
    name: str
    cause: str                    # the injected cause, as the matrix's row
    scenario: str
    want: tuple[str, ...]         # verdict kinds that name the cause
    inject: tuple = ()            # ("cpu", node, cores) | ("delay", extra_ms)
    rig_fault: bool = False       # the rig itself is at fault: never a physical bound


CASES = (
    Case("window", "window (tcp_rmem 1 MiB, 40 ms)", "window.yaml", ("window-limited",)),
    Case("sender-buffer", "sender buffer (tcp_wmem 512 KiB, 40 ms)", "sender-buffer.yaml",
         ("sender-buffer-limited",)),
    Case("rate", "rate (TBF 200 Mbit/s, 20 ms)", "rate.yaml", ("path-limited",)),
    Case("loss", "loss (1 %, 10 ms, cubic)", "loss.yaml", ("loss-limited",)),
    Case("client-cpu", "client CPU (xrdcp -S 4, cpu quota 0.3 core)", "cpu.yaml",
         ("client-CPU-bound", "single-thread-bound"), ("cpu", "c", 0.3)),
    Case("server-cpu", "server CPU (xrootd page checksums, cpu quota 0.2 core)",
         "cpu-server.yaml", ("server-cpu-bound", "server-thread-bound"), ("cpu", "s", 0.2)),
    Case("one-thread", "one thread (curl, cpu quota 0.5 core)", "one-thread.yaml",
         ("single-thread-bound",), ("cpu", "c", 0.5)),
    Case("latency", "latency (storage-mode replay, 20 ms)", "latency.yaml",
         ("latency-bound",)),
    Case("engine-late", "emulator late (engine cpu quota 0.1 core)", "engine.yaml",
         ("emulator-limited",), ("cpu", "r", 0.1), rig_fault=True),
    Case("path-not-claimed", f"path not as labelled (engine +{2 * DELAY_EXTRA_MS:g} ms RTT)",
         "engine.yaml", ("emulator-limited",), ("delay", DELAY_EXTRA_MS), rig_fault=True),
)
# physical bounds: what a rig fault must never be called
PHYSICAL = ("window-limited", "sender-buffer-limited", "path-limited", "loss-limited",
            "cwnd-limited", "client-CPU-bound", "single-thread-bound", "server-cpu-bound",
            "server-thread-bound", "host-CPU-bound", "latency-bound", "storage-bound",
            "application-limited")


class Injector(threading.Thread):
    """Finds the run's prefix from its state file (the pid of `rig run`), then applies
    the case's injection until stopped."""

    def __init__(self, pid: int, inject: tuple) -> None:
        super().__init__(daemon=True)
        self.pid, self.inject = pid, inject
        self.stop = threading.Event()
        self.prefix: str | None = None
        self.cgroup: Path | None = None
        self.acct: Path | None = None
        self.moved: set[int] = set()
        self.log: list[str] = []

    def run(self) -> None:
        try:
            while not self.stop.is_set() and self.prefix is None:
                self.prefix = next((p for p, st in netns.read_states().items()
                                    if st.get("pid") == self.pid), None)
                time.sleep(POLL_S)
            if self.prefix is None:
                return
            if self.inject[0] == "cpu":
                self._cpu(self.inject[1], self.inject[2])
            elif self.inject[0] == "delay":
                self._delay(self.inject[1])
        except Exception as e:          # noqa: BLE001 - said in the record, never silent
            self.log.append(f"injector error: {type(e).__name__}: {e}")

    def _make_cgroup(self, node: str, cores: float) -> Path:
        assert self.prefix
        name = f"{self.prefix}-gt-{node}"
        if (CPU_ROOT / "cpu.cfs_quota_us").exists():
            d = CPU_ROOT / name
            d.mkdir(exist_ok=True)
            (d / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (d / "cpu.cfs_quota_us").write_text(str(int(cores * PERIOD_US)))
            if ACCT_ROOT.is_dir() and ACCT_ROOT != CPU_ROOT:
                # as a v1 container runtime makes it: the same group in cpuacct (its
                # usage counter), the process moved into both
                self.acct = ACCT_ROOT / name
                self.acct.mkdir(exist_ok=True)
        else:
            d = CPU2_ROOT / name
            d.mkdir(exist_ok=True)
            (d / "cpu.max").write_text(f"{int(cores * PERIOD_US)} {PERIOD_US}")
        self.log.append(f"cgroup {d}: {cores:g} core")
        return d

    def _cpu(self, node: str, cores: float) -> None:
        ns = f"{self.prefix}-0{node}"
        self.cgroup = self._make_cgroup(node, cores)
        while not self.stop.is_set():
            if ns in netns.list_namespaces():
                for pid in netns.ns_pids(ns):
                    if pid in self.moved:
                        continue
                    try:
                        comm = Path(f"/proc/{pid}/comm").read_text().strip()
                        if comm in LEAVE:
                            continue
                        (self.cgroup / "cgroup.procs").write_text(str(pid))
                        if self.acct is not None:
                            (self.acct / "cgroup.procs").write_text(str(pid))
                        self.moved.add(pid)
                        self.log.append(f"capped pid {pid} ({comm})")
                    except OSError:
                        continue
            time.sleep(POLL_S)

    def _delay(self, extra_ms: float) -> None:
        """Every engine of the run delays extra_ms more each way than the rig configured:
        re-applied whenever the rig configures it again (a new step)."""
        assert self.prefix
        wd = netns.STATE_DIR / self.prefix
        mine: dict[Path, float] = {}        # socket -> the forward delay this bench set
        while not self.stop.is_set():
            socks = sorted(wd.rglob("*engine.sock")) if wd.exists() else []
            socks += sorted(Path("/tmp").glob(f"{self.prefix}-*-q*.sock"))
            for s in socks:
                try:
                    st = control.stats(s, timeout=1.0)
                    prof = st.get("profile") or (st.get("extra") or {}).get("profile")
                    if not prof or not prof["forward"].get("delay_s") or \
                            abs(prof["forward"]["delay_s"] - mine.get(s, -1.0)) < 1e-9:
                        continue
                    for d in ("forward", "reverse"):
                        prof[d]["delay_s"] += extra_ms / 1e3
                    control.configure(s, prof, timeout=5.0)
                except control.ControlError:
                    continue
                mine[s] = prof["forward"]["delay_s"]
                self.log.append(f"engine {s.name}: one-way delay +{extra_ms:g} ms "
                                f"(now {mine[s] * 1e3:.3g} ms forward)")
            time.sleep(POLL_S)

    def finish(self) -> None:
        self.stop.set()
        self.join(timeout=10)
        for d in (self.cgroup, self.acct):
            if d is None:
                continue
            for _ in range(50):         # its processes exit with the run; then rmdir
                with contextlib.suppress(OSError):
                    d.rmdir()
                    break
                time.sleep(0.1)
            else:
                self.log.append(f"cgroup {d} not removed (still has processes)")


def run_case(case: Case, out: Path) -> dict:
    """One `rig run` of the case's scenario, injected; its verdicts per point."""
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "rig", "run", str(SCEN / case.scenario),
                          "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True, cwd=REPO)
    inj = Injector(p.pid, case.inject) if case.inject else None
    if inj:
        inj.start()
    try:
        stdout, _ = p.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGTERM)     # the run cleans up after itself on SIGTERM
        stdout, _ = p.communicate(timeout=90)
    finally:
        if inj:
            inj.finish()
    rec = {"case": case.name, "out": str(out), "rc": p.returncode,
           "wall_s": round(time.monotonic() - t0, 1),
           "inject": [] if not inj else inj.log[:12],
           "tail": stdout.splitlines()[-6:] if p.returncode else []}
    rec["points"] = verdicts_of(out)
    return rec


def verdicts_of(out: Path) -> list[dict]:
    """Each point's verdict as `rig report` gives it (rig.report.verdict), from the
    stored results alone."""
    from rig.report.model import load_run
    from rig.report.verdict import host_busy, verdicts
    if not (out / "results.sqlite").exists():
        return []
    run = load_run(out)
    vs = verdicts(run)
    return [{"point": p.key.label(), "gbit": round(p.mean_bps / 1e9, 4) if p.n else None,
             "kind": vs[p.key].kind, "text": vs[p.key].text()[:600],
             # the host's CPUs saturated with others' work during the point (the rig's
             # own reading, verdict.host_busy): a cause this bench did not make
             "others": OTHERS in (host_busy(p) or "")}
            for p in run.points]


OTHERS = "the host was busy with other work"


def matrix(records: list[dict]) -> tuple[str, dict]:
    """The markdown matrix (cause x verdict, counts) and its totals."""
    by_case = {c.name: c for c in CASES}
    counts: dict[str, Counter] = defaultdict(Counter)
    quiet: dict[str, Counter] = defaultdict(Counter)    # points without others' load
    for r in records:
        for pt in r["points"]:
            counts[r["case"]][pt["kind"]] += 1
            if not pt.get("others"):
                quiet[r["case"]][pt["kind"]] += 1
        if not r["points"]:
            counts[r["case"]]["(no result)"] += 1
    kinds = sorted({k for c in counts.values() for k in c})
    hit = total = bad = faults = qhit = qtotal = 0
    lines = ["| injected cause | points | " + " | ".join(kinds) + " | as injected | "
             "without others' load |",
             "|---|---|" + "---|" * len(kinds) + "---|---|"]
    for name in (c.name for c in CASES):
        if name not in counts:
            continue
        c, case = counts[name], by_case[name]
        n = sum(c.values())
        ok = sum(v for k, v in c.items() if k in case.want)
        hit, total = hit + ok, total + n
        if case.rig_fault:
            faults += n
            bad += sum(v for k, v in c.items() if k in PHYSICAL)
        q = quiet[name]
        qn, qok = sum(q.values()), sum(v for k, v in q.items() if k in case.want)
        qhit, qtotal = qhit + qok, qtotal + qn
        cells = [f"**{c[k]}**" if k in case.want and c[k] else (str(c[k]) if c[k] else "")
                 for k in kinds]
        lines.append(f"| {case.cause} | {n} | " + " | ".join(cells) + f" | {ok}/{n} | "
                     f"{qok}/{qn} |")
    tot = {"hit": hit, "total": total, "rig_fault_points": faults,
           "rig_fault_as_physical": bad, "quiet_hit": qhit, "quiet_total": qtotal}
    lines.append("")
    lines.append(f"As injected: {hit}/{total} ({hit / total:.0%}); on points whose host was "
                 f"not busy with others' work (the rig's own reading: {OTHERS}): "
                 f"{qhit}/{qtotal} ({qhit / max(1, qtotal):.0%}); rig faults labelled a "
                 f"physical bound: {bad} of {faults}." if total else "No points.")
    return "\n".join(lines), tot


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=1, help="rig runs per case (4 points each)")
    ap.add_argument("--only", nargs="*", choices=[c.name for c in CASES])
    ap.add_argument("--out", type=Path, default=Path("/tmp/rig-ground-truth"),
                    help="where the runs' folders go")
    ap.add_argument("--json", type=Path, default=REPO / "bench/results/ground_truth.json")
    ap.add_argument("--redraw", type=Path, nargs="+",
                    help="recompute the verdicts of stored JSONs' runs (together)")
    ap.add_argument("--doc", action="store_true", help="write docs/ground-truth.md's matrix")
    a = ap.parse_args()
    if a.redraw:
        records = [r for f in a.redraw for r in json.loads(f.read_text())["records"]]
        for r in records:
            r["points"] = verdicts_of(Path(r["out"]))
    else:
        if os.geteuid() != 0:
            print("bench/ground_truth.py: needs root (namespaces, cgroups)", file=sys.stderr)
            return 2
        records = []
        stamp = time.strftime("%Y%m%dT%H%M%S")
        for i in range(a.runs):
            for case in CASES:
                if a.only and case.name not in a.only:
                    continue
                out = a.out / f"{stamp}-{case.name}-{i + 1}"
                rec = run_case(case, out)
                kinds = Counter(pt["kind"] for pt in rec["points"])
                print(f"{case.name} #{i + 1}: rc {rec['rc']}, {rec['wall_s']} s, "
                      f"{dict(kinds)}", flush=True)
                records.append(rec)
                save(a.json, records)       # as it goes: a partial matrix survives
    table, _ = matrix(records)
    print(table)
    save(a.json, records)
    if a.doc:
        write_doc(table)
    return 0


def save(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                "totals": matrix(records)[1], "records": records}, indent=1))


def write_doc(table: str) -> None:
    doc = REPO / "docs/ground-truth.md"
    text = doc.read_text() if doc.exists() else ""
    start, end = "<!-- matrix -->", "<!-- /matrix -->"
    block = f"{start}\n{table}\n{end}"
    if start in text and end in text:
        text = text.split(start)[0] + block + text.split(end, 1)[1]
    else:
        text += "\n" + block + "\n"
    doc.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
