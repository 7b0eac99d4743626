"""The report's "Header captures" section: a table of what the captures found per data
flow (capture_flows: retransmissions against the engine's drops, out-of-order arrivals,
zero windows, RTT from TCP timestamps), and which flow of each step tcptrace draws.

Pure Python (the time-sequence graphs are drawn by rig.report.tcptrace).
Must not import rig.realization, rig.services, rig.process or rig.orchestration.
"""
from __future__ import annotations

from collections import defaultdict

from rig.description.steps import shown_step
from rig.report.model import Run
from rig.report.page import table
from rig.results.store import CaptureFlowRow

MIN_BYTES = 1 << 20          # flows below this carried requests, not the data

CAPTION = ("Time-sequence graph (tcptrace's view) of the step's slowest data flow, as "
           "the router saw it arrive from the sender (before the emulation's loss): "
           "highest sequence sent (blue), ACKs coming back (grey), retransmissions (red).")

COLUMNS = ["step", "rtt_ms", "client", "repeat", "side", "flow", "MiB", "Mbit/s",
           "retrans segs", "engine drops", "out of order", "zero window", "rtt ms (min/med/p90)",
           "analysed"]


def slowest(run: Run) -> dict[int, CaptureFlowRow]:
    """Per step: the sender-side flow with a time-sequence graph and the lowest goodput."""
    out: dict[int, CaptureFlowRow] = {}
    for f in run.captures:
        if f.side != "sender" or not f.tseq or not f.goodput_bps:
            continue
        cur = out.get(f.step)
        if cur is None or f.goodput_bps < (cur.goodput_bps or 0):
            out[f.step] = f
    return out


def rows(run: Run) -> list[list[str]]:
    """The table: each data flow of each capture (sender side first)."""
    out = []
    flows = [f for f in run.captures if (f.data_bytes or 0) >= MIN_BYTES]
    by: dict[tuple, list[CaptureFlowRow]] = defaultdict(list)
    for f in flows:
        by[(f.step, f.client, f.streams, f.concurrency, f.repeat)].append(f)
    for key in sorted(by):
        for f in sorted(by[key], key=lambda f: (f.side != "sender", f.sport, f.dport)):
            rtt = [f.rtt_ms_min, f.rtt_ms_median, f.rtt_ms_p90]
            out.append([
                str(shown_step(f.step)), "" if f.rtt_ms_configured is None
                else f"{f.rtt_ms_configured:g}", f.client, str(f.repeat + 1),
                f"{f.side} ({f.iface})", f"{f.src}:{f.sport} > {f.dst}:{f.dport}",
                f"{(f.data_bytes or 0) / 2**20:.1f}",
                f"{(f.goodput_bps or 0) / 1e6:.1f}", str(f.retrans_segs),
                "" if f.engine_dropped is None else str(f.engine_dropped),
                str(f.ooo_packets), str(f.zero_window),
                "/".join("-" if v is None else f"{v:.1f}" for v in rtt) if f.rtt_samples
                else "-",
                f"{f.packets_analysed} pkts" + (f", {f.truncated}" if f.truncated
                                                     else "")])
    return out


def section(run: Run) -> list[str]:
    """The section of report.html; [] when the run captured nothing."""
    if not run.captures:
        return []
    return ["<h2>Header captures</h2>",
            "<p>tcpdump in the router (headers only), read with scapy. Sender side: where "
            "the data entered the router, before the emulation's loss; a retransmission "
            "there is a segment the sender sent again (counted in MSS-sized segments), set "
            "against the engine's loss drops in the data direction over the same window. "
            "Receiver side: what left towards the receiver; out of order = a gap (a "
            "dropped segment) filled later.</p>",
            table(COLUMNS, rows(run))]
