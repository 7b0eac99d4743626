"""Header captures (`capture: headers` on a path or a client): tcpdump on both of the
router's interfaces during a transfer group, headers only, bounded in packets and time,
written to the run folder (`captures/stepN/`), then read with scapy
(rig.results.capture) into capture_flows rows.

Why both interfaces: the emulation drops and delays packets between them. The one
facing the data's sender sees what was sent (every retransmission, before the engine's
loss); the one facing the receiver sees what arrived (gaps and their late repair). The
engine's own counters for the data direction are read at the start and the end of the
capture, so its drops over the same window are stored next to the retransmissions.

Cost: tcpdump copies every packet's first SNAPLEN bytes to disk: CPU in the router's
softirq path and up to MAX_PACKETS x (SNAPLEN + 16) bytes per interface and group.
Never on by default.

tcpdump runs through rig.process.proc (argv, its own process group, TERM -> grace ->
KILL), its pid is recorded in the run's state (and it runs inside the router
namespace), so `rig clean` ends it after a SIGKILL of the run.
Must not import reports.
"""
from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from rig.description.linkstats import EmulStats
from rig.errors import RigError
from rig.process import proc
from rig.realization.emul.base import Backend, LinkSite
from rig.results import capture as analysis
from rig.results.store import CaptureFlowRow

SNAPLEN = 128                 # bytes kept per packet: Ethernet + IP + TCP with options
MAX_PACKETS = 1_000_000       # per interface and group (-c): at most ~144 MB on disk
BUFFER_KIB = 16384            # kernel capture buffer (-B): fewer drops at Gbit/s
READY_S = 10.0
# libpcap hands tcpdump whole ring blocks, a block at the latest this long after its
# first packet; a SIGTERM before then loses the block's packets (the end of a transfer).
BLOCK_TIMEOUT_S = 1.0
DRAIN_MAX_S = 5.0
MARGIN_S = 60.0               # the capture's own deadline beyond the transfer timeout

COST_WARNING = ("header capture on: tcpdump copies every packet's first {snap} bytes on "
                "both router interfaces (CPU in the packet path, up to {mb} MB per "
                "interface and group on disk); throughput with a capture is not "
                "comparable with throughput without")


def warning() -> str:
    return COST_WARNING.format(snap=SNAPLEN, mb=MAX_PACKETS * (SNAPLEN + 16) // 10**6)


def tcpdump_argv(iface: str, pcap: Path, *, max_s: float, snaplen: int = SNAPLEN,
                 max_packets: int = MAX_PACKETS) -> list[str]:
    """tcpdump of one interface's TCP headers into `pcap`, ending by itself after
    `max_packets` packets or about `max_s` seconds (-G with -W 1: one file, then exit)."""
    if snaplen < 64 or max_packets < 1 or max_s < 1 or "%" in str(pcap):
        raise ValueError(f"bad capture bounds ({snaplen}, {max_packets}, {max_s}, {pcap})")
    return ["tcpdump", "-i", iface, "-n", "-s", str(snaplen), "-B", str(BUFFER_KIB),
            "-c", str(max_packets), "-G", str(int(max_s)), "-W", "1", "-Z", "root",
            "-w", str(pcap), "tcp"]


def wanted(path_capture: str | None, client_capture: str | None) -> bool:
    return "headers" in (path_capture, client_capture)


@dataclass
class Capture:
    """One group's captures: (interface, side, pcap) and the engine before it began."""
    files: list[tuple[str, str, Path]]
    data_direction: str               # the engine's name for the data direction
    before: EmulStats | None
    services: list[proc.Service] = field(default_factory=list)
    engine: tuple[int | None, int | None] = (None, None)   # seen, dropped_loss
    kernel_drops: dict[str, str] = field(default_factory=dict)


def _stats(backend: Backend, site: LinkSite) -> EmulStats | None:
    try:
        return backend.stats(site)
    except RigError:
        return None


def _ready(log: Path) -> bool:
    try:
        return "listening on" in log.read_text(errors="replace")
    except OSError:
        return False


def _drain(pcaps: list[Path]) -> None:
    """Until the files stopped growing for longer than libpcap's block timeout (at most
    DRAIN_MAX_S): every packet of the group handed to tcpdump before it is stopped."""
    def sizes() -> list[int]:
        return [p.stat().st_size if p.exists() else 0 for p in pcaps]
    t0 = last_change = time.monotonic()
    seen = sizes()
    while time.monotonic() - last_change < BLOCK_TIMEOUT_S + 0.3:
        if time.monotonic() - t0 > DRAIN_MAX_S:
            return
        time.sleep(0.1)
        now = sizes()
        if now != seen:
            seen, last_change = now, time.monotonic()


def _probe(log: Path) -> Callable[[], bool]:
    return lambda: _ready(log)


@contextlib.contextmanager
def capturing(site: LinkSite, backend: Backend, folder: Path, name: str, *, sender: str,
              logdir: Path, max_s: float,
              record: Callable[[proc.Service], None]) -> Iterator[Capture]:
    """tcpdump on both router interfaces for the duration of the block; always stopped."""
    folder.mkdir(parents=True, exist_ok=True)
    logdir.mkdir(parents=True, exist_ok=True)
    data_in = site.to_server_if if sender == "server" else site.to_client_if
    cap = Capture([(i, "sender" if i == data_in else "receiver", folder / f"{name}-{i}.pcap")
                   for i in (site.to_server_if, site.to_client_if)],
                  "reverse" if sender == "server" else "forward", None)
    try:
        for iface, _, pcap in cap.files:
            log = logdir / f"tcpdump-{name}-{iface}.log"
            log.unlink(missing_ok=True)
            svc = proc.Service(tcpdump_argv(iface, pcap, max_s=max_s), netns=site.router_ns,
                               log_path=log, name=f"tcpdump {iface}").start()
            cap.services.append(svc)
            record(svc)
            proc.wait_until(_probe(log), timeout=READY_S,
                            what=f"tcpdump on {iface}", service=svc)
        cap.before = _stats(backend, site)
        yield cap
    finally:
        after = _stats(backend, site) if cap.before is not None else None
        _drain([p for _, _, p in cap.files])
        for svc in cap.services:
            svc.stop()
            m = re.search(r"(\d+) packets? dropped by kernel", svc.log_tail(2000))
            if m:
                cap.kernel_drops[svc.argv[2]] = m.group(1)
        if after is not None:
            d = after.since(cap.before).direction(cap.data_direction)
            if d is not None:
                cap.engine = (d.seen, d.dropped_loss)


def flow_rows(cap: Capture, common: dict, out: Path) -> tuple[list[CaptureFlowRow], str]:
    """Analyse the group's files: a row per data flow per interface (the sender side's
    slowest data flow carries its time-sequence graph), and a one-line summary."""
    rows: list[CaptureFlowRow] = []
    said = []
    for iface, side, pcap in cap.files:
        if not pcap.is_file():
            said.append(f"{iface}: no capture file")
            continue
        res = analysis.analyse(pcap)
        lost = cap.kernel_drops.get(iface, "0")
        if lost != "0":          # the capture itself is incomplete: say so on its rows
            res.truncated = "; ".join(filter(None, (
                res.truncated, f"tcpdump: {lost} packets dropped by the kernel")))
        flows = analysis.data_flows(res)
        slowest = None
        if side == "sender":
            big = [kf for kf in flows if kf[1].max_end >= 1 << 20] or flows[:1]
            slowest = min(big, key=lambda kf: analysis.flow_facts(*kf)["goodput_bps"]
                          or float("inf"), default=None)
        for k, f in flows:
            rows.append(CaptureFlowRow(
                **common, file=str(pcap.relative_to(out)), iface=iface, side=side,
                **analysis.flow_facts(k, f), packets_analysed=res.packets_analysed,
                truncated=res.truncated, engine_seen=cap.engine[0],
                engine_dropped=cap.engine[1],
                tseq=analysis.tseq_json(f) if slowest is not None and k == slowest[0]
                else None))
        re_segs = sum(f.retrans_segs for _, f in flows)
        said.append(f"{side} side {iface}: {res.packets_analysed} packets, {len(flows)} data "
                    f"flows, {re_segs} segments retransmitted, "
                    f"{sum(f.ooo_pkts for _, f in flows)} out of order"
                    + (f" ({res.truncated})" if res.truncated else "")
                    + f" [{res.seconds:.1f} s]")
    eng = (f"; engine dropped {cap.engine[1]} of {cap.engine[0]} packets ({cap.data_direction})"
           if cap.engine[1] is not None else "")
    return rows, "; ".join(said) + eng


def group_name(client: str, streams: int, concurrency: int, repeat: int, tls: str) -> str:
    tl = "" if tls == "off" else f"-{tls}"
    return f"{client}-s{streams}-x{concurrency}-r{repeat + 1}{tl}"


def wait_s(transfer_timeout_s: float) -> float:
    return transfer_timeout_s + MARGIN_S

