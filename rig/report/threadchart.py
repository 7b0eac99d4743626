"""Per-thread timeline charts (seed 000 Fig. 10's inset): for a chosen transfer, its
client's threads and its group's server threads on the y axis, time on the x axis, the
share of a core each thread was on a CPU in each sample interval as colour.

Which transfer: per point (up to MAX_CHARTS), the ok transfer whose busiest client
thread had the highest share (the one a verdict cites). `rig report` redraws them from
results.sqlite alone.

Must not import rig.realization.netns, rig.process.proc, rig.services or rig.realization.emul; only reports import it.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rig.report.figure import DPI, save
from rig.report.model import Key, Run, _key, key_order
from rig.report.threads import evidence, matrix
from rig.results.store import ThreadCpu

MAX_CHARTS = 8
MAX_THREADS = 24        # per end; the rest (least CPU) are summed into one row
CAPTION = ("Per-thread timeline of one transfer (the point's transfer with the busiest "
           "client thread): each row a thread (name[tid], busiest on top), colour the "
           "share of a core it was on a CPU in each sample interval (schedstat); top: "
           "the client process, bottom: the server during the transfer's group.")


def chosen(run: Run) -> list[tuple[Key, int, int | None]]:
    """(point key, client transfer_id, server transfer_id) of each chart."""
    ev = evidence(run)
    server_of: dict[tuple, int] = {}
    meta: dict[int, tuple] = {}
    for r in run.threads:
        k = (_key(r), r.step, r.repeat)
        meta[int(r.transfer_id)] = k
        if r.side == "server":
            server_of[k] = int(r.transfer_id)
    out = []
    for key in sorted(ev, key=key_order):
        cl = ev[key].client
        if not cl:
            continue
        best = max(cl, key=lambda u: u.threads[0].cpu if u.threads else 0.0)
        out.append((key, best.transfer_id, server_of.get(meta.get(best.transfer_id, ()))))
    return out[:MAX_CHARTS]


def _panel(ax, rows: list[ThreadCpu], title: str, fig,
           xlabel: str = "seconds since the client process started") -> None:
    grid, rows, cpu, _ = matrix(rows)
    if len(grid) < 2:
        ax.set_title(f"{title}: fewer than two samples")
        return
    order = sorted(range(len(rows)), key=lambda i: -sum(cpu[i]))
    names = [f"{rows[i].comm}[{'main' if rows[i].pid == rows[i].tid else rows[i].tid}]"
             for i in order]
    data = [cpu[i] for i in order]
    if len(data) > MAX_THREADS:
        rest = [sum(col) for col in zip(*data[MAX_THREADS - 1:])]
        n = len(data) - MAX_THREADS + 1
        data = data[:MAX_THREADS - 1] + [rest]
        names = names[:MAX_THREADS - 1] + [f"{n} others (sum)"]
    mesh = ax.pcolormesh(grid, list(range(len(data) + 1)), data, cmap="Blues", vmin=0.0,
                         vmax=1.0, shading="flat")
    ax.set_yticks([i + 0.5 for i in range(len(names))], names, fontsize=7)
    ax.invert_yaxis()
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel)
    fig.colorbar(mesh, ax=ax, label="share of a core on a CPU", fraction=0.04)


def draw(run: Run, out_dir: Path) -> list[Path]:
    by: dict[int, dict[str, list[ThreadCpu]]] = defaultdict(lambda: defaultdict(list))
    for r in run.threads:
        by[int(r.transfer_id)][r.side].append(r)
    files: list[Path] = []
    for n, (key, ctid, stid) in enumerate(chosen(run)):
        client = by[ctid]["client"]
        server = by[stid]["server"] if stid is not None else []
        panels = 2 if server else 1
        h = 1.2 + 0.18 * (min(len(client), MAX_THREADS) + min(len(server), MAX_THREADS))
        fig = Figure(figsize=(10, max(3.0, h + 1.0 * panels)), dpi=DPI, layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(panels, 1, squeeze=False)[:, 0]
        _panel(axes[0], client, f"client {key.label()} (transfer {ctid})", fig)
        if server:
            _panel(axes[1], server, "server threads during the group", fig,
                   "seconds since the group's first client process started")
        files += save(fig, out_dir, f"threads_{n + 1}")
    return files
