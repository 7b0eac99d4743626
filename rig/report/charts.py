"""Charts of one run (matplotlib, Agg canvas, no pyplot global state), PNG and SVG.

Every chart shows what the network allows next to what was measured: the configured
path rate, the validated iperf3 capacity, and each configuration's window bound
(concurrency x streams x window / RTT); the CPU chart shows instead the CPU cost at
which one core could not keep up with the path rate.

  throughput_vs_rtt        per client configuration, mean with min-max bars where there are
                           repeats (seed 003)
  throughput_vs_concurrency aggregate throughput vs concurrent transfers (seed 000 fig 8)
  throughput_vs_streams    throughput vs streams, one panel per RTT (seed 000 figs 9, 12)
  cpu_per_gb               client CPU seconds per GB moved, user and system
  throughput_vs_cores_PATH throughput vs the origins' cores, a line per origin count

Throughput is drawn in the run's unit (Run.unit, the scenario's `report.unit`); the series
of a chart get distinct colours (style.distinct_styles).

Must not import rig.realization.netns, rig.process.proc, rig.services or rig.realization.emul; only reports import it.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Iterable

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from rig.description.units import DEFAULT_THROUGHPUT_UNIT, in_unit
from rig.report import caching_chart, origins_cores, style, tcptrace, timeline, tls_cost
from rig.report.figure import DPI, gbit, mib, new_figure, save  # noqa: F401  (re-exported)
from rig.report.model import Point, Run, series_id, series_labels

MAX_PANELS = 4
LOG_RATIO = 10.0      # throughput_vs_rtt switches to a log axis above this max/min span


def errorbar(ax: Axes, pts: list[Point], x: list[float], label: str, st: style.Style,
             linestyle: str | None = None, hollow: bool = False,
             unit: str = DEFAULT_THROUGHPUT_UNIT) -> None:
    """Means with min-max bars where a point has repeats (none where every point has one)."""
    ok = [(xi, p) for xi, p in zip(x, pts) if p.n]
    if not ok:
        return
    xs = [xi for xi, _ in ok]
    ys = [in_unit(p.mean_bps, unit) for _, p in ok]
    lo = [in_unit(p.mean_bps - p.min_bps, unit) for _, p in ok]
    hi = [in_unit(p.max_bps - p.mean_bps, unit) for _, p in ok]
    bars = [lo, hi] if any(p.n > 1 for _, p in ok) else None
    ax.errorbar(xs, ys, yerr=bars, label=label, color=st.color, marker=st.marker,
                linestyle=linestyle or st.linestyle, capsize=3, markersize=6,
                linewidth=1.8, markerfacecolor="white" if hollow else st.color)


def reference_lines(ax: Axes, pts: list[Point], *, with_capacity: bool = True,
                    unit: str = DEFAULT_THROUGHPUT_UNIT) -> None:
    """Configured path rate (solid black) and mean validated capacity (dashed gray)."""
    rates = {p.rate_bps for p in pts if p.rate_bps}
    for i, r in enumerate(sorted(rates)):
        ax.axhline(in_unit(r, unit), color=style.PATH_RATE.color, linewidth=1.2,
                   label="path rate (configured)" if i == 0 else None)
    caps = [p.capacity_bps for p in pts if p.capacity_bps]
    if with_capacity and caps:
        ax.axhline(in_unit(sum(caps) / len(caps), unit), color=style.CAPACITY.color, linewidth=1.0,
                   linestyle=style.CAPACITY.linestyle, label="path capacity (iperf3)")


def y_top(pts: Iterable[Point], extra: Iterable[float | None] = (),
          unit: str = DEFAULT_THROUGHPUT_UNIT) -> float:
    vals = [in_unit(p.max_bps, unit) for p in pts if p.n]
    vals += [in_unit(p.rate_bps, unit) for p in pts if p.rate_bps]
    vals += [in_unit(p.capacity_bps, unit) for p in pts if p.capacity_bps]
    vals += [in_unit(v, unit) for v in extra if v]
    return max(vals, default=1.0) * 1.15 or 1.0


def bound_groups(pts: list[Point], labels: dict) -> dict[tuple[int, int], list[str]]:
    """Configurations sharing one window bound: (streams x concurrency, window) -> names."""
    groups: dict[tuple[int, int], list[str]] = defaultdict(list)
    for p in pts:
        if p.window_bytes:
            g = groups[(p.key.streams * p.key.concurrency, p.window_bytes)]
            name = labels[series_id(p.key)]
            if name not in g:
                g.append(name)
    return groups


def per_series(pts: list[Point], labels: dict) -> dict[str, list[Point]]:
    out: dict[str, list[Point]] = defaultdict(list)
    for p in pts:
        out[labels[series_id(p.key)]].append(p)
    return out


def lowest_concurrency(points: list[Point]) -> list[Point]:
    low: dict[str, int] = {}
    for p in points:
        low[p.key.client] = min(low.get(p.key.client, p.key.concurrency), p.key.concurrency)
    return [p for p in points if p.key.concurrency == low[p.key.client]]


def mark_flagged(ax: Axes, pts: list[Point], x: list[float], verdicts: dict,
                 unit: str = DEFAULT_THROUGHPUT_UNIT) -> bool:
    flagged = [(xi, in_unit(p.mean_bps, unit)) for xi, p in zip(x, pts)
               if p.n and verdicts.get(p.key) and verdicts[p.key].kind == "emulator-limited"]
    if flagged:
        ax.scatter([f[0] for f in flagged], [f[1] for f in flagged], s=160,
                   facecolors="none", edgecolors=style.REGRESSION_COLOR, linewidths=1.5,
                   zorder=5)
    return bool(flagged)


def finish(ax: Axes, fig: Figure, title: str, subtitle: str, flagged: bool,
           extra: list[Patch] | None = None) -> None:
    """Title, subtitle and one legend outside the plot area, so it never hides data."""
    seen: dict[str, Any] = {str(p.get_label()): p for p in extra or []}
    for a in fig.axes:
        for h, lab in zip(*a.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    handles, lbls = list(seen.values()), list(seen)
    if flagged:
        handles.append(Line2D([], [], marker="o", markersize=11, markerfacecolor="none",
                              markeredgecolor=style.REGRESSION_COLOR, linestyle=""))
        lbls.append("emulator-limited (step flagged)")
    fig.legend(handles, lbls, loc="outside right upper", fontsize=8, frameon=False,
               title=subtitle or None, title_fontsize=8, alignment="left")
    # left-aligned so a long run id never runs into the legend column on the right
    fig.suptitle(title, fontsize=12, fontweight="bold", x=0.01, ha="left")
    for a in fig.axes:
        a.grid(True, alpha=0.3)


def draw_window_bounds_rtt(ax: Axes, pts: list[Point], labels: dict, x_max: float,
                           y_max: float, unit: str = DEFAULT_THROUGHPUT_UNIT,
                           y_min: float | None = None) -> None:
    """Each configuration's window bound over RTT, labelled where it crosses a staggered
    height below the capacity line (`y_min`: the bottom of a log axis, where the heights
    are spread over its decades instead)."""
    positive = sorted({p.x_rtt_ms for p in pts if p.x_rtt_ms > 0})
    if not positive:
        return
    lo = max(positive[0] / 4, 0.5)
    grid = [lo + (x_max - lo) * i / 300 for i in range(301)]
    for i, ((mult, window), names) in enumerate(sorted(bound_groups(pts, labels).items())):
        ys = [in_unit(mult * window * 8 / (r / 1e3), unit) for r in grid]
        ax.plot(grid, ys, color=style.CAPACITY.color, linestyle=style.WINDOW_LINESTYLE,
                linewidth=1.1, label="window bound (streams x window / RTT)" if i == 0 else None)
        # label each curve where it crosses a staggered height, on a white box
        target = (y_max * (0.66 - 0.1 * (i % 6)) if not y_min else
                  y_max * (y_min / y_max) ** (0.25 + 0.1 * (i % 6)))
        x_txt = next((r for r, y in zip(grid, ys) if y <= target), None)
        if x_txt is not None:
            ax.annotate(f"{mult} x {mib(window)} / RTT ({', '.join(names[:3])})",
                        (x_txt, target), xytext=(5, 0), textcoords="offset points",
                        fontsize=7, color="#333333", va="center",
                        bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none",
                              "alpha": 0.8})


def throughput_vs_rtt(run: Run, out_dir: Path, verdicts: dict) -> list[Path]:
    pts = lowest_concurrency(run.points)
    labels = series_labels(run.points)
    u = run.unit
    fig, (ax,) = new_figure()
    series = per_series(pts, labels)
    ordered = sorted(series.items(), key=lambda kv: style.sort_key(kv[1][0].key.client))
    styles = style.distinct_styles([name for name, _ in ordered])
    for name, sp in ordered:
        sp.sort(key=lambda p: p.x_rtt_ms)
        errorbar(ax, sp, [p.x_rtt_ms for p in sp], name, styles[name], unit=u)
    reference_lines(ax, pts, with_capacity=False, unit=u)
    caps = sorted({(p.x_rtt_ms, p.capacity_bps) for p in pts if p.capacity_bps})
    if caps:
        ax.plot([c[0] for c in caps], [in_unit(c[1], u) for c in caps],
                color=style.CAPACITY.color, linestyle=style.CAPACITY.linestyle,
                marker=style.CAPACITY.marker, linewidth=1.0, label="path capacity (iperf3)")
    top = y_top(pts, unit=u)
    x_max = max((p.x_rtt_ms for p in pts), default=1.0) or 1.0
    low = min((in_unit(p.min_bps, u) for p in pts if p.n and p.min_bps > 0), default=0.0)
    log = bool(low and top / low > LOG_RATIO)
    draw_window_bounds_rtt(ax, pts, labels, x_max, top, u, low / 1.6 if log else None)
    flagged = mark_flagged(ax, pts, [p.x_rtt_ms for p in pts], verdicts, u)
    ax.set_xlim(-0.03 * x_max, x_max * 1.05)
    ax.set_xticks(sorted({p.x_rtt_ms for p in pts}))
    ax.set_xlabel("round-trip time (ms)")
    if log:
        # 1/RTT spans decades: a linear axis would flatten every long-RTT point to zero
        ax.set_yscale("log")
        ax.set_ylim(low / 1.6, top)
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_ylabel(f"throughput ({u}, log scale)")
    else:
        ax.set_ylim(0, top)
        ax.set_ylabel(f"throughput ({u})")
    finish(ax, fig, f"Throughput vs RTT - run {run.run_id}",
           f"{repeats_legend(pts)}\nlowest concurrency per client", flagged)
    return save(fig, out_dir, "throughput_vs_rtt")


def repeats_legend(pts: list[Point]) -> str:
    """What the markers and bars are: bars only where a point has repeats."""
    reps = max((p.n for p in pts), default=0)
    if reps <= 1:
        return "one repeat per point: no error bars"
    few = min((p.n for p in pts if p.n), default=reps)
    n = f"{reps}" if few == reps else f"{few}-{reps}"
    return f"mean of {n} repeats, bars: min-max of the repeats"


def panel_rtts(pts: list[Point]) -> list[float]:
    rtts = sorted({p.x_rtt_ms for p in pts})
    if len(rtts) <= MAX_PANELS:
        return rtts
    idx = sorted({round(i * (len(rtts) - 1) / (MAX_PANELS - 1)) for i in range(MAX_PANELS)})
    return [rtts[i] for i in idx]


def _bound_line(ax: Axes, xs: list[int], per_x: float, label: str | None,
                unit: str = DEFAULT_THROUGHPUT_UNIT) -> None:
    ax.plot(xs, [in_unit(x * per_x, unit) for x in xs], color=style.CAPACITY.color,
            linestyle=style.WINDOW_LINESTYLE, linewidth=1.1, label=label)


def _panel(ax: Axes, pts: list[Point], rtt: float, verdicts: dict,
           x_of: Callable[[Point], float], ticks: list, bound_xs: list,
           windows_bytes: list[int], xlabel: str, top: float, bound_label: str,
           unit: str = DEFAULT_THROUGHPUT_UNIT) -> bool:
    """The common part of one RTT panel: the network's reference lines, one bound line
    per window (bytes in flight / RTT), flagged points, title, axes. True if flagged."""
    reference_lines(ax, pts, unit=unit)
    for i, w in enumerate(windows_bytes):
        if rtt > 0:
            _bound_line(ax, bound_xs, w * 8 / (rtt / 1e3), bound_label if i == 0 else None,
                        unit)
    flagged = mark_flagged(ax, pts, [x_of(p) for p in pts], verdicts, unit)
    ax.set_title(f"RTT {rtt:g} ms", fontsize=10)
    ax.set_xticks(ticks)
    ax.set_xlabel(xlabel)
    ax.set_ylim(0, top)
    return flagged


def throughput_vs_concurrency(run: Run, out_dir: Path, verdicts: dict) -> list[Path]:
    concs = sorted({p.key.concurrency for p in run.points})
    rtts = panel_rtts(run.points)
    fig, axes = new_figure(len(rtts), height=5.0)
    labels = series_labels(run.points, with_concurrency=False)
    u = run.unit
    top = y_top(run.points, unit=u)
    everyone = per_series(run.points, labels)
    styles = style.distinct_styles(sorted(everyone, key=lambda n: style.sort_key(
        everyone[n][0].key.client)))
    flagged = False
    for ax, rtt in zip(axes, rtts):
        pts = [p for p in run.points if p.x_rtt_ms == rtt]
        for name, sp in sorted(per_series(pts, labels).items(),
                               key=lambda kv: style.sort_key(kv[1][0].key.client)):
            sp.sort(key=lambda p: p.key.concurrency)
            errorbar(ax, sp, [p.key.concurrency for p in sp], name, styles[name], unit=u)
        windows = sorted({(p.key.streams, p.window_bytes) for p in pts if p.window_bytes})
        flagged |= _panel(ax, pts, rtt, verdicts, lambda p: p.key.concurrency, concs, concs,
                          [s * w for s, w in windows], "concurrent transfers", top,
                          "window bound (N x streams x window / RTT)", u)
    axes[0].set_ylabel(f"aggregate throughput ({u})")
    finish(axes[-1], fig, f"Aggregate throughput vs concurrent transfers - run {run.run_id}",
           repeats_legend(run.points), flagged)
    return save(fig, out_dir, "throughput_vs_concurrency")


def streams_series(points: list[Point]) -> dict[tuple[str, int], str]:
    """(client, streams) -> line name: a client swept over streams is its own line;
    configurations that differ only in stream count (xrdcp, xrdcp-S4) share one."""
    per_client: dict[str, set[int]] = defaultdict(set)
    for p in points:
        per_client[p.key.client].add(p.key.streams)
    groups: dict[str, list[str]] = defaultdict(list)
    for c, s in per_client.items():
        if len(s) == 1:
            groups[style.base_name(c)].append(c)
    out = {}
    for c, s in per_client.items():
        name = c
        members = groups.get(style.base_name(c), [])
        if len(s) == 1 and len(members) > 1:
            values = [next(iter(per_client[m])) for m in members]
            if len(set(values)) == len(values):
                name = style.base_name(c)
        for n in s:
            out[(c, n)] = name
    return out


def throughput_vs_streams(run: Run, out_dir: Path, verdicts: dict) -> list[Path]:
    pts_all = lowest_concurrency(run.points)
    names = streams_series(pts_all)
    rtts = panel_rtts(pts_all)
    fig, axes = new_figure(len(rtts), height=5.0)
    u = run.unit
    top = y_top(pts_all, unit=u)
    streams = sorted({p.key.streams for p in pts_all})
    styles = style.distinct_styles(sorted(set(names.values()), key=style.sort_key))
    flagged = False
    for ax, rtt in zip(axes, rtts):
        pts = [p for p in pts_all if p.x_rtt_ms == rtt]
        lines: dict[str, list[Point]] = defaultdict(list)
        for p in pts:
            lines[names[(p.key.client, p.key.streams)]].append(p)
        for name, sp in sorted(lines.items(), key=lambda kv: style.sort_key(kv[0])):
            sp.sort(key=lambda p: p.key.streams)
            errorbar(ax, sp, [p.key.streams for p in sp], name, styles[name], unit=u)
        windows = sorted({p.window_bytes for p in pts if p.window_bytes})
        flagged |= _panel(ax, pts, rtt, verdicts, lambda p: p.key.streams, streams,
                          [0] + streams, windows, "TCP streams per transfer", top,
                          "window bound (streams x window / RTT)", u)
        ax.set_xlim(0, max(streams) * 1.05 + 0.5)
    axes[0].set_ylabel(f"throughput ({u})")
    finish(axes[-1], fig, f"Throughput vs streams - run {run.run_id}",
           f"{repeats_legend(pts_all)}\nlowest concurrency per client", flagged)
    return save(fig, out_dir, "throughput_vs_streams")


def cpu_per_gb(run: Run, out_dir: Path) -> list[Path]:
    labels = series_labels(run.points)
    series = per_series([p for p in run.points if p.cpu_s and p.bytes_ok], labels)
    order = sorted(series, key=lambda n: style.sort_key(series[n][0].key.client))
    fig, (ax,) = new_figure(width=max(8.5, 1.1 * len(order) + 4), height=5.0)
    styles = style.distinct_styles(order)
    u = run.unit
    for i, name in enumerate(order):
        sp = series[name]
        gb = sum(p.bytes_ok for p in sp) / 1e9
        total = sum(sum(p.cpu_s) for p in sp) / gb
        sys_s = sum(p.cpu_sys_s for p in sp) / gb
        st = styles[name]
        ax.bar(i - 0.2, total - sys_s, width=0.4, color=st.color)
        ax.bar(i - 0.2, sys_s, width=0.4, bottom=total - sys_s, color=st.color, alpha=0.45,
               hatch="//", edgecolor="white")
        srv = [p for p in sp if p.server_cpu_s]
        if srv:     # the server's CPU for the same bytes, grey, right of the client's
            sgb = sum(p.bytes_ok for p in srv) / 1e9
            stot = sum(sum(p.server_cpu_s) for p in srv) / sgb
            ssys = sum(p.server_cpu_sys_s for p in srv) / sgb
            ax.bar(i + 0.2, stot - ssys, width=0.4, color="#888888")
            ax.bar(i + 0.2, ssys, width=0.4, bottom=stot - ssys, color="#888888", alpha=0.45,
                   hatch="//", edgecolor="white")
            ax.annotate(f"server\n{stot:.2g}", (i + 0.2, stot), xytext=(0, 2),
                        textcoords="offset points", ha="center", fontsize=6)
        per_rtt = [c for c in (p.cpu_s_per_gb() for p in sp) if c]
        ax.scatter([i] * len(per_rtt), per_rtt, color="black", s=10, zorder=4,
                   label="per RTT point" if i == 0 else None)
        ax.annotate(f"{total:.2g} s/GB\n1 core: {in_unit(8e9 / total, u):.3g} {u}",
                    (i, max([total] + per_rtt)),
                    xytext=(0, 4), textcoords="offset points", ha="center", fontsize=7)
    legend = [Patch(color="#666666", label="user"),
              Patch(facecolor="#666666", alpha=0.45, hatch="//", edgecolor="white",
                    label="system")]
    rates = sorted({p.rate_bps for p in run.points if p.rate_bps})
    caps = sorted({p.capacity_bps for p in run.points if p.capacity_bps})
    path, what = (rates[-1], "path rate") if rates else (caps[-1] if caps else None,
                                                        "validated capacity")
    if path:
        ax.axhline(8e9 / path, color=style.PATH_RATE.color, linewidth=1.2,
                   label=f"1 core at {what} ({in_unit(path, u):.3g} {u})")
    ax.set_xticks(range(len(order)), order, rotation=20, ha="right")
    legend.append(Patch(color="#888888", label="server (right bar)"))
    ax.set_ylabel("CPU seconds per GB (user + system): client, server")
    ax.margins(y=0.2)
    finish(ax, fig, f"Client and server CPU cost per GB - run {run.run_id}",
           "above the black line, one core\ncannot keep up with the path", False, legend)
    return save(fig, out_dir, "cpu_per_gb")


def draw_all(run: Run, out_dir: Path, verdicts: dict) -> tuple[list[Path], list[str]]:
    """Draw every chart the run's data supports; return (files, notes on skipped ones)."""
    files: list[Path] = []
    notes: list[str] = []
    if not any(p.n for p in run.points):
        return files, ["no successful transfer: no chart drawn"]
    files += throughput_vs_rtt(run, out_dir, verdicts)
    if len({p.key.concurrency for p in run.points}) > 1:
        files += throughput_vs_concurrency(run, out_dir, verdicts)
    else:
        notes.append("throughput_vs_concurrency not drawn: the run has one concurrency")
    if any(len(v) > 1 for v in _streams_per_line(run.points).values()):
        files += throughput_vs_streams(run, out_dir, verdicts)
    else:
        notes.append("throughput_vs_streams not drawn: no client varies its streams")
    files += caching_chart.draw(run, out_dir)
    if any(p.cpu_s for p in run.points):
        files += cpu_per_gb(run, out_dir)
    else:
        notes.append("cpu_per_gb not drawn: no CPU times recorded")
    if tls_cost.has_tls(run):
        files += tls_cost_chart(run, out_dir)
    if run.tcp:
        files += timeline.draw(run, out_dir)
    else:
        notes.append("no TCP timelines: the run has no tcp_samples (sampling off, or "
                     "written before issue #15)")
    if run.captures:
        files += tcptrace.draw(run, out_dir)
    if origins_cores.rows(run):
        files += throughput_vs_cores(run, out_dir, verdicts)
    return files, notes


def throughput_vs_cores(run: Run, out_dir: Path, verdicts: dict) -> list[Path]:
    """sweep.origins x sweep.server_cpus: throughput against the cores the origins could
    use, one line per (client, concurrency, origin count), a panel per RTT, a figure per
    swept path (seed 002: "1 x 128 vs 2 x 64 vs 4 x 16")."""
    ser = origins_cores.series(run)
    files: list[Path] = []
    for path in sorted({k[0] for k in ser}):
        rtts = sorted({k[1] for k in ser if k[0] == path}, key=lambda r: r or 0.0)[:MAX_PANELS]
        fig, axes = new_figure(len(rtts))
        top = 0.0
        for ax, rtt in zip(axes, rtts):
            for (pth, r, client, conc), by_o in sorted(ser.items(), key=lambda kv: str(kv[0])):
                if pth != path or r != rtt:
                    continue
                for o, rs in sorted(by_o.items()):
                    rs = sorted(rs, key=lambda x: x.total_cores)
                    ys = [in_unit(x.point.mean_bps, run.unit) for x in rs]
                    top = max(top, *ys)
                    ax.plot([x.total_cores for x in rs], ys, marker="o",
                            label=f"{client} x{conc}, {o} origin{'s' if o > 1 else ''}")
                    bad = [x for x in rs if verdicts.get(x.point.key) is not None
                           and verdicts[x.point.key].kind.startswith("server-")]
                    if bad:       # the origins' CPU was the ceiling there
                        ax.scatter([x.total_cores for x in bad],
                                   [in_unit(x.point.mean_bps, run.unit) for x in bad], s=120,
                                   facecolors="none", edgecolors="red")
            ax.set_title("real path" if rtt is None else f"RTT {rtt:g} ms")
            ax.set_xlabel("cores the origins could use")
            ax.xaxis.set_major_locator(LogLocator(base=2))
            ax.grid(True, alpha=0.3)
        axes[0].set_ylabel(f"throughput ({run.unit})")
        axes[0].set_ylim(0, top * 1.15 or 1.0)
        axes[-1].legend(fontsize=8)
        fig.suptitle(f"{path}: throughput vs origins and cores (red ring: a server-CPU "
                     "verdict)")
        files += save(fig, out_dir, f"throughput_vs_cores_{path}")
    return files


def _streams_per_line(points: list[Point]) -> dict[str, set[int]]:
    out: dict[str, set[int]] = defaultdict(set)
    for (_client, streams), name in streams_series(lowest_concurrency(points)).items():
        out[name].add(streams)
    return out


_TLS_DASH = {"off": "-", "all": "--", "control": ":"}


def tls_cost_chart(run: Run, out_dir: Path) -> list[Path]:
    """tls_cost.png: aggregate throughput vs concurrency per TLS mode, a panel per RTT."""
    cs = tls_cost.cells(run)
    rtts: list[float | None] = [*sorted({c[1] for c in cs if c[1] is not None})] or [None]
    fig, axes = new_figure(ncols=len(rtts), height=5.0)
    lines: dict[tuple[float | None, str, str], list[Point]] = defaultdict(list)
    for (_path, rtt, client, _streams, _conc), by in cs.items():
        for mode, p in by.items():
            if p.n:
                lines[(rtt, client, mode)].append(p)
    for ax, rtt in zip(axes, rtts):
        for (r, client, mode), pts in sorted(lines.items(), key=lambda kv: kv[0][1:]):
            if r != rtt:
                continue
            pts.sort(key=lambda p: p.key.concurrency)
            st = style.style_for(client, pts[0].tool)
            ax.plot([p.key.concurrency for p in pts], [in_unit(p.mean_bps, run.unit) for p in pts],
                    linestyle=_TLS_DASH.get(mode, "-"), marker=st.marker, color=st.color,
                    label=f"{client} tls={mode}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent transfers")
        ax.set_title(f"RTT {rtt:g} ms" if rtt is not None else "real path", fontsize=9)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel(f"aggregate throughput ({run.unit})")
    axes[-1].legend(fontsize=7, loc="best")
    fig.suptitle(f"Throughput with and without TLS - run {run.run_id} "
                 "(CPU per GB: tls_cost.md)", fontsize=10)
    return save(fig, out_dir, "tls_cost")
