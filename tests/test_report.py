"""Reports drawn from stored fixture databases alone: files, numbers, Caltech-shaped
tables, bottleneck verdicts, styles, and the report without matplotlib."""
from __future__ import annotations

import ast
import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures_results import Client, DEFAULT_CLIENTS, make_run
from rig.description.linkstats import LATENESS_LABELS
from rig.errors import InputError
from rig.report import load_run, render, verdicts
from rig.report import style
from rig.description.linkstats import load_stats
from rig.report.tables import engine_rows
from rig.report.verdict import engine_issues
from rig.results.store import Store

REPO = Path(__file__).resolve().parents[1]
MIB4 = 4 * 2**20


def _summary(d: Path) -> list[dict]:
    with open(d / "summary.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_render_writes_charts_tables_and_html(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r", concurrency=(1, 2, 4))
    names = {f.name for f in render(run)}
    for stem in ("throughput_vs_rtt", "throughput_vs_concurrency", "throughput_vs_streams",
                 "cpu_per_gb"):
        assert {f"{stem}.png", f"{stem}.svg"} <= names
        assert (run / f"{stem}.png").read_bytes()[:4] == b"\x89PNG"
        assert (run / f"{stem}.png").stat().st_size > 10_000
    assert {"summary.csv", "rtt_table_mean.csv", "rtt_table_mean.md", "rtt_table_max.csv",
            "rtt_table_max.md", "validations.csv", "report.html"} <= names


@pytest.mark.slow
def test_render_into_other_dir_leaves_run_dir_alone(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r")
    files = render(run, tmp_path / "out")
    assert all(f.parent == tmp_path / "out" for f in files)
    # SQLite's read-only WAL open may leave -wal/-shm sidecars (rig.results.store' business)
    left = {p.name for p in run.iterdir() if not p.name.endswith(("-wal", "-shm"))}
    assert left == {"results.sqlite"}


@pytest.mark.slow
def test_summary_numbers_come_from_the_database(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r", noise=0.05, repeats=4)
    render(run)
    st = Store.open(run)
    rows = [r for r in st.transfers() if r.client == "curl" and r.rtt_ms_configured == 60]
    st.close()
    gbps = [r.aggregate_bps / 1e9 for r in rows]
    line = next(r for r in _summary(run) if r["client"] == "curl" and r["rtt_ms"] == "60")
    assert int(line["n"]) == 4
    assert float(line["mean_gbps"]) == pytest.approx(statistics.fmean(gbps), rel=1e-3)
    assert float(line["min_gbps"]) == pytest.approx(min(gbps), rel=1e-3)
    assert float(line["max_gbps"]) == pytest.approx(max(gbps), rel=1e-3)
    assert float(line["std_gbps"]) == pytest.approx(statistics.stdev(gbps), rel=1e-3)
    assert list(_summary(run)[0])[:7] == ["client", "rtt_ms", "n", "mean_gbps", "min_gbps",
                                          "max_gbps", "std_gbps"]


def test_concurrency_rows_count_once_per_repeat(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r", concurrency=(4,), repeats=2, rtts=(60,))
    pts = load_run(run).points
    assert all(p.n == 2 for p in pts)
    p = next(p for p in pts if p.key.client == "xrdcp")
    assert p.mean_bps == pytest.approx(4 * MIB4 * 8 / 0.06005, rel=0.05)


@pytest.mark.slow
def test_caltech_table_has_a_row_per_client_and_a_column_per_rtt(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r", noise=0.0)
    render(run)
    with open(run / "rtt_table_mean.csv") as f:
        table = list(csv.reader(f))
    assert table[0] == ["client \\ RTT (ms) [Gbit/s]", "0", "20", "60", "120"]
    assert [r[0] for r in table[1:]] == [c.name for c in DEFAULT_CLIENTS]
    curl = next(r for r in table if r[0] == "curl")
    assert float(curl[3]) == pytest.approx(MIB4 * 8 / 0.06005 / 1e9, rel=0.01)   # Gbit/s
    md = (run / "rtt_table_max.md").read_text()
    assert "| curl |" in md and "Highest" in md


def _verdict_of(run_dir: Path, client: str, rtt: float) -> str:
    run = load_run(run_dir)
    v = verdicts(run)
    return next(v[p.key] for p in run.points
                if p.key.client == client and p.key.rtt_ms == rtt).kind


def test_verdicts_window_path_cpu_and_emulator(tmp_path: Path) -> None:
    clients = DEFAULT_CLIENTS + (Client("fdt-8", "fdt", 8, cpu_ceiling_bps=2e9),)
    run = make_run(tmp_path / "r", clients=clients, flagged_steps=[3])
    assert _verdict_of(run, "curl", 60) == "window-limited"
    assert _verdict_of(run, "xrdcp", 20) == "window-limited"
    assert _verdict_of(run, "davix-get", 0) == "path-limited"
    assert _verdict_of(run, "xrdcp-S4", 20) == "path-limited"
    assert _verdict_of(run, "fdt-8", 20) == "client-CPU-bound"
    # a ping flag alone (engine clean) is a note with its size, not a relabelling
    assert _verdict_of(run, "curl", 120) == "window-limited"


@pytest.mark.slow
def test_verdict_unexplained_and_failed(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r", failing=[("davix-get", 20.0)],
                   factor=lambda c, rtt, s, n: 0.5 if (c, rtt) == ("curl", 60.0) else 1.0)
    assert _verdict_of(run, "curl", 60) == "unexplained"
    assert _verdict_of(run, "davix-get", 20) == "failed"
    assert _verdict_of(run, "xrdcp", 60) == "window-limited"
    line = next(r for r in _summary(render(run)[0].parent)
                if r["client"] == "curl" and r["rtt_ms"] == "60")
    assert "50% of window bound" in line["detail"]


def test_window_below_the_configured_one_is_found_from_bytes_in_flight(
        tmp_path: Path) -> None:
    # a window at 46 % of tcp_rmem_max at every RTT, as measured here (autotuning)
    run = make_run(tmp_path / "r", factor=lambda c, rtt, s, n: 0.46 if c == "curl" else 1.0)
    r = load_run(run)
    v = verdicts(r)
    curl = [p for p in r.points if p.key.client == "curl" and p.key.rtt_ms]
    assert {v[p.key].kind for p in curl} == {"window-limited"}
    assert "46% of the configured bound" in v[curl[-1].key].detail
    # a constant rate (CPU, path) at several RTTs is not a window
    cpu = make_run(tmp_path / "c", clients=(Client("fdt-8", "fdt", 8, cpu_ceiling_bps=1e9),),
                   rtts=(20, 60))
    assert {x.kind for x in verdicts(load_run(cpu)).values()} == {"client-CPU-bound"}


def test_engine_stats_make_a_step_emulator_limited(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r", engine_stats={"forward": {"seen": 10_000,
                                                             "dropped_queue": 12}})
    assert _verdict_of(run, "curl", 60) == "emulator-limited"


def _issues(stats: dict, rtt_ms: float, loss: float) -> list[str]:
    """Old (stats_version 1) free-form JSON, through the adapter, judged as typed stats."""
    return engine_issues(load_stats(json.dumps(stats), "userspace"), rtt_ms, loss)


def test_engine_issues_reads_userspace_engine_and_netem_stats() -> None:
    lane = {"seen": 10_000, "released": 10_000, "dropped_loss": 50, "dropped_queue": 0,
            "late_mean_s": 30e-6, "late_max_s": 4e-3,
            "late_hist": {"0..50us": 9990, "2..5ms": 10}}
    ok = {"backend": "userspace", "alive": True, "forward": lane, "reverse": lane,
          "kernel_queues": [{"queue": 1, "queue_dropped": 0, "user_dropped": 0}]}
    assert _issues(ok, 60, 0.005) == []
    assert _issues({**ok, "forward": {**lane, "dropped_queue": 3}}, 60, 0.005) == [
        "engine dropped_queue=3 (forward)"]
    assert _issues({**ok, "forward": {**lane, "dropped_loss": 300}}, 60, 0.005) == [
        "engine dropped_loss=300 is 3.00% of packets (configured loss 0.50%) (forward)"]
    assert _issues({**ok, "forward": {**lane, "late_mean_s": 4e-3}}, 60, 0.005) == [
        "engine adds 4.03 ms mean release lateness per round trip, > 3 ms"]
    assert _issues({**ok, "forward": {**lane, "late_mean_s": 0.5e-3}}, 60, 0.005) == []
    assert _issues({**ok, "kernel_queues": [{"queue": 1, "queue_dropped": 7}]}, 60, 0.005) == [
        "engine queue_dropped=7 (queue 1)"]
    # with the lanes' queue numbers (as the engine stored them) the kernel's drops are
    # attributed to the direction reading that queue
    named = {**ok, "forward": {**lane, "queue": 0}, "reverse": {**lane, "queue": 1},
             "kernel_queues": [{"queue": 1, "queue_dropped": 0, "user_dropped": 9}]}
    assert _issues(named, 60, 0.005) == ["engine user_dropped=9 (reverse)"]
    assert _issues({"backend": "userspace", "alive": False}, 60, 0) == ["engine not alive"]
    assert _issues({"error": "engine control /x: timed out"}, 60, 0) == [
        "engine error: engine control /x: timed out"]
    # netem counts its TBF child's drops in its own `drops` (sch_netem.c netem_dequeue):
    # 40 drops at both is the rate limiter's queue, the path's bottleneck, not netem's
    netem = {"backend": "netem", "forward": {"netem": {"packets": 1000, "drops": 40},
                                            "tbf": {"packets": 1000, "drops": 40}}}
    assert _issues(netem, 60, 0.0) == []
    netem["forward"]["netem"]["drops"] = 80
    assert _issues(netem, 60, 0.0) == [
        "engine netem drops=40 is 3.70% of packets (configured loss 0.00%) (forward)"]


def test_engine_stats_are_differenced_per_step() -> None:
    prev = load_stats({"pid": 7, "forward": {"seen": 1000, "released": 1000,
                                             "dropped_queue": 5, "late_mean_s": 0.01,
                                             "late_hist": {"0..50us": 1000}}}, "userspace")
    cur = load_stats({"pid": 7, "forward": {"seen": 3000, "released": 3000,
                                            "dropped_queue": 5, "late_mean_s": 0.0034,
                                            "late_hist": {"0..50us": 3000}}}, "userspace")
    d = cur.since(prev).direction("forward")
    assert d.seen == 2000 and d.dropped_queue == 0
    assert d.lateness.mean_s == pytest.approx(0.0001)
    assert d.lateness.hist[LATENESS_LABELS.index("0..50us")] == 2000
    assert sum(d.lateness.hist) == 2000
    assert engine_issues(cur.since(prev), 60, 0.0) == []
    assert engine_issues(cur, 60, 0.0)          # the cumulative view would blame this step
    other = load_stats({"pid": 8, "forward": {"seen": 10}}, "userspace")
    assert cur.since(other) is cur              # another engine: nothing to difference


@pytest.mark.slow
def test_engine_table_in_report_reads_typed_and_old_rows(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r", rtts=(20,),
                   engine_stats={"forward": {"seen": 10_000, "released": 9_988,
                                             "dropped_queue": 12}})
    rows = engine_rows(load_run(run))
    assert [(r["direction"], r["seen"], r["dropped_queue"]) for r in rows] == [
        ("forward", "10000", "12")]
    assert rows[0]["engine"] == "(stats v1)"
    # not JSON at all is a defect of the folder (rig.results.check refuses it); JSON that
    # is not a stats object of any known version is shown as unreadable
    bad = make_run(tmp_path / "b", rtts=(20,), engine_stats={"stats_version": 2, "backend": 7})
    (row,) = engine_rows(load_run(bad))
    assert row["engine"].startswith("unreadable: "), row
    render(bad)                                  # an unreadable row does not stop a report
    assert row["engine"] in (bad / "report.html").read_text()


def test_charts_not_drawn_when_nothing_varies_say_why(tmp_path: Path) -> None:
    clients = (Client("curl", "curl", 1), Client("davix-get", "davix-get", 1))
    run = make_run(tmp_path / "r", clients=clients)
    names = {f.name for f in render(run)}
    assert "throughput_vs_rtt.png" in names
    assert "throughput_vs_concurrency.png" not in names
    assert "throughput_vs_streams.png" not in names
    assert "one concurrency" in (run / "report.html").read_text()


@pytest.mark.slow
def test_streams_sweep_draws_streams_chart(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r", clients=(Client("xrdcp-S", "xrdcp"),),
                   streams_sweep=(1, 2, 4, 8, 16))
    assert "throughput_vs_streams.png" in {f.name for f in render(run)}
    table = (run / "rtt_table_mean.md").read_text()
    assert "xrdcp-S (16 streams)" in table


@pytest.mark.slow
def test_report_html_is_self_contained(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r", flagged_steps=[1])
    files = render(run)
    page = (run / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == sum(f.suffix == ".png" for f in files)
    assert "http://" not in page and "https://" not in page
    assert "FLAGGED" in page and "emulator-limited" in page
    assert "name: synthetic" in page            # scenario text
    assert "6.1.0-synthetic" in page            # kernel


def test_render_rejects_a_directory_without_results(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        render(tmp_path)
    (tmp_path / "results.sqlite").write_text("not a database")
    with pytest.raises(InputError):
        render(tmp_path)


def test_styles_are_stable_and_distinct() -> None:
    names = [c.name for c in DEFAULT_CLIENTS] + ["fdt-8", "iperf3"]
    styles = [style.style_for(n) for n in names]
    assert len({(s.color, s.marker) for s in styles}) == len(names)
    assert style.style_for("xrdcp-S7", "xrdcp") == style.style_for("xrdcp-S7", "xrdcp")
    assert style.style_for("xrdcp-S7", "xrdcp").color in style.FAMILIES["xrdcp"]
    script = "from rig.report.style import style_for; print(style_for('my-client-x'))"
    outs = {subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           env={"PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert len(outs) == 1 and "Style(" in outs.pop()


def test_report_works_without_matplotlib(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r")
    script = ("import sys; sys.modules['matplotlib'] = None\n"
              "from rig.report import render\n"
              f"files = render({str(run)!r})\n"
              "print(sorted(f.name for f in files))\n"
              "assert 'matplotlib' not in [m for m in sys.modules if sys.modules[m]]\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert ".png" not in done.stdout and "summary.csv" in done.stdout
    assert "matplotlib is not available" in (run / "report.html").read_text()


FORBIDDEN = ("rig.realization", "rig.process", "rig.services", "rig.orchestration", "rig.cli")


def _imports(path: Path) -> set[str]:
    """Absolute module names a file imports (relative imports resolved under rig)."""
    tree = ast.parse(path.read_text())
    pkg = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            out |= {base} | {f"{base}.{a.name}" for a in node.names}
    return out


@pytest.mark.parametrize("path", sorted((REPO / "rig" / "report").glob("*.py")),
                         ids=lambda p: p.name)
def test_reports_never_import_realization_or_services(path: Path) -> None:
    bad = {m for m in _imports(path) if m.startswith(FORBIDDEN)}
    assert bad == set()


def test_import_checker_sees_relative_imports() -> None:
    mods = _imports(REPO / "rig" / "report" / "model.py")
    assert "rig.results.store.Store" in mods and "rig.errors.InputError" in mods


def test_pure_report_modules_do_not_import_matplotlib() -> None:
    for name in ("model.py", "verdict.py", "tables.py", "style.py", "html.py", "page.py",
                 "captures.py", "__init__.py", "compare_report.py"):
        mods = _imports(REPO / "rig" / "report" / name)
        top_level = {m for m in mods if m.startswith("matplotlib")}
        assert not top_level, name
    assert not any(m.startswith("matplotlib")
                   for m in _imports(REPO / "rig" / "report" / "compare.py"))


@pytest.mark.slow
def test_validation_csv_lists_every_check(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r", flagged_steps=[2])
    render(run)
    with open(run / "validations.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 8
    assert [r["flagged"] for r in rows if r["step"] == "3"] == ["FLAGGED", "FLAGGED"]  # from 1
    assert json.dumps(rows)  # plain strings only


def _host_cpu(run: Path, client: str, rtt: float, share: float, irq: float = 0.2) -> None:
    """Give one point's rows a host CPU record (as Runner._host_cpu_columns writes it)."""
    import sqlite3
    with sqlite3.connect(run / "results.sqlite") as db:
        n = db.execute("UPDATE transfers SET host_cpu_share = ?, host_cpus = 2, "
                       "host_irq_share = ?, host_steal_share = 0.05, "
                       "host_cpu_wall_s = duration_s, engine_cpu_s = 0.5 * duration_s, "
                       "cpu_user_s = 0.1 * duration_s, cpu_sys_s = 0.1 * duration_s "
                       "WHERE client = ? AND rtt_ms_configured = ?",
                       (share, irq, client, rtt)).rowcount
    assert n > 0


def test_a_saturated_host_explains_what_no_other_bound_does(tmp_path: Path) -> None:
    """curl at half its window bound is unexplained; the same with the host's CPUs 95 %
    busy is host-CPU-bound, citing the cores; at 60 % busy it stays unexplained."""
    slow = lambda c, rtt, s, n: 0.5 if (c, rtt) == ("curl", 60.0) else 1.0   # noqa: E731
    busy = make_run(tmp_path / "busy", factor=slow)
    _host_cpu(busy, "curl", 60.0, 0.95)
    r = load_run(busy)
    v = next(verdicts(r)[p.key] for p in r.points
             if p.key.client == "curl" and p.key.rtt_ms == 60)
    assert v.kind == "host-CPU-bound", v.text()
    # 1.90 cores busy: client 0.20, engine 0.50, interrupts 0.40, steal 0.10 -> others 0.70
    assert "2 CPUs were 95% busy" in v.detail and "engine 0.50" in v.detail, v.detail
    assert "client 0.20" in v.detail and "interrupts 0.40" in v.detail
    assert "steal 0.10" in v.detail and "other processes 0.70" in v.detail
    assert "busy with other work" not in v.detail
    other = make_run(tmp_path / "other", factor=slow)
    _host_cpu(other, "curl", 60.0, 0.95, irq=0.0)     # others 1.10 of 1.90 cores
    r = load_run(other)
    v = next(verdicts(r)[p.key] for p in r.points
             if p.key.client == "curl" and p.key.rtt_ms == 60)
    assert "other processes 1.10" in v.detail and "busy with other work" in v.detail
    spare = make_run(tmp_path / "spare", factor=slow)
    _host_cpu(spare, "curl", 60.0, 0.60)
    assert _verdict_of(spare, "curl", 60) == "unexplained"
    # marks spanning four times the transfer (a short replay in a long process) say
    # nothing of it: no host-CPU bound
    import sqlite3
    short = make_run(tmp_path / "short", factor=slow)
    _host_cpu(short, "curl", 60.0, 0.95)
    with sqlite3.connect(short / "results.sqlite") as db:
        db.execute("UPDATE transfers SET host_cpu_wall_s = 4 * duration_s")
    assert _verdict_of(short, "curl", 60) == "unexplained"
    # a bound that holds stays the verdict: the window-limited point with a busy host
    _host_cpu(spare, "curl", 20.0, 0.97)
    assert _verdict_of(spare, "curl", 20) == "window-limited"


def _waited(run: Path, client: str, rtt: float, cpu: float, wait: float) -> None:
    """Give one point's rows the client's own CPU and run-queue wait over its wall (as a
    replay reports them: cpu_user_s, cpu_sys_s, extra.cpu_wait_s)."""
    import sqlite3
    with sqlite3.connect(run / "results.sqlite") as db:
        n = db.execute("UPDATE transfers SET cpu_user_s = ? * duration_s, cpu_sys_s = 0, "
                       "extra = json_object('cpu_wait_s', ? * duration_s) "
                       "WHERE client = ? AND rtt_ms_configured = ?",
                       (cpu, wait, client, rtt)).rowcount
    assert n > 0


@pytest.mark.parametrize("cpu,wait,kind", [
    (0.76, 0.20, "host-CPU-bound"),     # runnable 96 %: on a CPU or waiting for one
    (0.76, 0.04, "unexplained"),        # 80 % runnable: it waited for the network too
    (0.82, 0.04, "unexplained"),        # 86 % runnable, but 4 % waiting is not the host
    (0.50, 0.20, "unexplained"),        # 70 % runnable
    (0.90, 0.00, "client-CPU-bound"),   # its own CPU, no contention
])
def test_a_client_kept_from_a_cpu_is_host_cpu_bound(tmp_path: Path, cpu: float, wait: float,
                                                    kind: str) -> None:
    """A transfer too short for the host's /proc/stat marks says by itself whether it
    waited for the network: runnable (on a CPU or in a run queue) >= 85 % of its wall,
    >= 5 % of it waiting, is the host's CPUs; otherwise it stays what it was."""
    slow = lambda c, rtt, s, n: 0.5 if (c, rtt) == ("curl", 60.0) else 1.0   # noqa: E731
    run = make_run(tmp_path / "r", factor=slow)
    _waited(run, "curl", 60.0, cpu, wait)
    r = load_run(run)
    v = next(verdicts(r)[p.key] for p in r.points
             if p.key.client == "curl" and p.key.rtt_ms == 60)
    assert v.kind == kind, v.text()
    if kind == "host-CPU-bound":
        assert "runnable 96% of its wall: on a CPU 76%, waiting in a run queue for one " \
               "20%" in v.detail, v.detail
    if kind == "unexplained":
        assert f"waiting for a CPU {wait:.0%} of wall" in v.detail, v.detail


@pytest.mark.slow
def test_cpu_per_gb_note_only_without_cpu_times(tmp_path):
    """Issue 41: the note 'cpu_per_gb not drawn' belonged to the TLS test's else: every run
    without TLS printed it under a drawn cpu_per_gb chart."""
    from fixtures_results import make_run

    from rig.report import charts, load_run, verdicts
    run = load_run(make_run(tmp_path / "run"))          # CPU times, no TLS
    (tmp_path / "out").mkdir()
    files, notes = charts.draw_all(run, tmp_path / "out", verdicts(run))
    assert any(f.name == "cpu_per_gb.png" for f in files)
    assert not any(n.startswith("cpu_per_gb not drawn") for n in notes), notes
