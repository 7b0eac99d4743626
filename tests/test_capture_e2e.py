"""End-to-end header capture (issue #15): scenarios/capture-loss.yaml, curl over 50 ms
with 1 % loss on the data direction, tcpdump on both router interfaces. The
retransmissions the capture finds where the data enters the router (before the engine)
must match the engine's own loss drops in that direction over the capture window, and
nothing of the capture may be left running."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rig.realization import netns
from rig.results.store import Store
from rigrun import rig_run

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parent.parent
SCEN = REPO / "scenarios/capture-loss.yaml"
TOLERANCE = 0.10          # retransmitted segments within 10 % of the engine's drops


def _tcpdumps_writing_to(folder: Path) -> list[int]:
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd and cmd[0].endswith(b"tcpdump") and any(str(folder).encode() in c
                                                        for c in cmd):
            out.append(int(pid))
    return out


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    import shutil
    missing = [t for t in ("tcpdump", "curl", "nginx") if shutil.which(t) is None]
    assert not missing, f"missing tools (make install): {missing}"
    out = tmp_path_factory.mktemp("capture") / "run"
    r = rig_run(SCEN, out, timeout=300)
    assert "WARNING: header capture on" in r.stderr
    assert not _tcpdumps_writing_to(out)
    return out


def _flows(run_dir, side):
    rows = [f for f in Store.open(run_dir).capture_flows() if f.side == side]
    # the data connection: the flow that carried the file (64 MiB)
    return [f for f in rows if f.data_bytes >= 32 << 20]


def test_retransmissions_match_the_engines_drops(run_dir):
    (sent,) = _flows(run_dir, "sender")
    drops, seen = sent.engine_dropped, sent.engine_seen
    assert drops is not None and seen and drops > 100, sent
    # 1 % configured: the engine's own rate, binomial 5 sigma
    assert abs(drops / seen - 0.01) < 5 * (0.01 * 0.99 / seen) ** 0.5 + 0.001
    re = sent.retrans_segs
    assert abs(re - drops) <= TOLERANCE * drops, (
        f"capture found {re} retransmitted segments ({sent.retrans_packets} packets) "
        f"before the engine, which dropped {drops} of {seen} packets in the data "
        f"direction: off by {re - drops:+d}, tolerance {TOLERANCE:.0%} (sender side saw "
        f"{sent.data_bytes} bytes in {sent.packets_analysed} packets, "
        f"{sent.ooo_packets} gaps filled; {sent.truncated or 'read whole'})")
    # the capture before the drop point is whole: no truncation, and a hole later filled
    # (a packet tcpdump missed, or veth/softirq reordering on a loaded host) is rare:
    # one was seen in a fresh-clone CI run beside a scenario run, none in 5 quiet runs
    assert sent.truncated is None
    assert sent.ooo_packets <= max(2, sent.packets_analysed // 1000), sent


def test_receiver_side_sees_the_gaps_repaired(run_dir):
    (got,) = _flows(run_dir, "receiver")
    (sent,) = _flows(run_dir, "sender")
    drops = sent.engine_dropped
    # every dropped segment leaves a gap that a retransmission fills after the engine
    assert abs(got.ooo_packets - drops) <= TOLERANCE * drops, (got.ooo_packets, drops)
    # what arrived: every segment sent less the drops (in packets of the egress)
    assert got.data_bytes == sent.data_bytes


def test_rtt_from_timestamps_is_the_paths(run_dir):
    (sent,) = _flows(run_dir, "sender")
    assert sent.rtt_samples > 100
    # the sender's round trip at the router: 50 ms of emulation, both passes of the
    # engine between the two sightings; the queue the sender builds, delayed ACKs and
    # the TS clock's 1 ms tick only add (2-core VM: up to +60 %). On a quiet host the
    # floor is the path less the pcap clock's resolution (a run here: min 50.041,
    # median 50.514 ms). Under load a sample can read shorter: the engine starts a
    # forwarded TCP packet's delay at its kernel stamp (the sender's departure), while
    # the tap on the router sees it when the router's softirq gets to it (a fresh clone
    # beside other work, load 2.8: min 44.476, median 50.324 ms). Early releases by the
    # engine itself are tests/test_engine_core.py's (nothing leaves before its
    # deadline); here a sample far below the path (a direction not delayed: ~25 ms) or
    # a median below it fails.
    from rig.results.capture import RTT_RESOLUTION_MS
    floor = 50.0 - RTT_RESOLUTION_MS
    print(f"capture RTT min {sent.rtt_ms_min:.3f} median {sent.rtt_ms_median:.3f} ms")
    assert 0.7 * 50.0 <= sent.rtt_ms_min <= 55.0, sent.rtt_ms_min
    assert 0.95 * floor <= sent.rtt_ms_median <= 80.0, sent.rtt_ms_median


def test_captures_stored_bounded_and_drawn(run_dir):
    files = sorted((run_dir / "captures" / "step1").glob("*.pcap"))
    assert len(files) == 2
    for f in files:
        # headers only: 128 bytes + 16 of pcap record header per packet at most
        n = max(r.packets_analysed for r in Store.open(run_dir).capture_flows()
                if r.file == str(f.relative_to(run_dir)))
        assert f.stat().st_size <= 24 + n * (128 + 16)
    (sent,) = _flows(run_dir, "sender")
    g = json.loads(sent.tseq)
    assert len(g["seq"]) > 100 and len(g["retrans"]) == min(sent.retrans_packets, 3000)
    html = (run_dir / "report.html").read_text()
    assert 'href="tseq_step1.svg"' in html and "Time-sequence graph" in html
    assert (run_dir / "tseq_step1.png").stat().st_size > 5000
    assert "<h2>Header captures</h2>" in html


def _start_capturing(tmp_path):
    """A run of the capture scenario, returned once its tcpdumps are running."""
    out = tmp_path / "out"
    p = subprocess.Popen([sys.executable, "-m", "rig", "run", str(SCEN), "--out", str(out)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and p.poll() is None:
        pids = _tcpdumps_writing_to(out)
        if len(pids) == 2:
            return p, out, pids
        time.sleep(0.05)
    p.kill()
    pytest.fail(f"no capture seen running (rc {p.poll()}): {p.stderr.read()[-2000:]}")


def _gone(pids):
    return [pid for pid in pids if os.path.exists(f"/proc/{pid}")
            and b"tcpdump" in Path(f"/proc/{pid}/cmdline").read_bytes()]


def test_sigterm_stops_the_capture(tmp_path):
    p, out, pids = _start_capturing(tmp_path)
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=90)
    assert p.returncode != 0
    assert not _gone(pids) and not _tcpdumps_writing_to(out)
    prefix = Store.open(out).environment()["prefix"]
    assert not [n for n in netns.list_namespaces() if n.startswith(prefix)]


def test_sigkill_then_rig_clean_ends_the_capture(tmp_path):
    p, out, pids = _start_capturing(tmp_path)
    os.killpg(p.pid, signal.SIGKILL)
    p.communicate(timeout=30)
    assert _gone(pids), "the kill left no tcpdump: nothing to test"
    prefix = Store.open(out).environment()["prefix"]
    r = subprocess.run([sys.executable, "-m", "rig", "clean"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert not _gone(pids) and not _tcpdumps_writing_to(out)
    assert not [n for n in netns.list_namespaces() if n.startswith(prefix)]
