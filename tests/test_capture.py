"""Header-capture analysis on synthetic captures whose answer is known (scapy writes
them), the tcpdump command builder, the scenario key, and the report's graph."""
from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

from rig.description import scenario
from rig.errors import InputError
from rig.orchestration import capture as cap
from rig.results import capture as an

SRV, CLI = "198.18.0.6", "198.18.0.1"
MSS = 1460
SEG = MSS - 12          # timestamps on: 1448 bytes of payload per segment
ISN_S, ISN_C = 4_294_967_000, 1000     # the server's sequence wraps past 2**32


def _pkt(t, src, dst, sport, dport, seq, ack, flags, plen=0, win=500, ts=None, mss=None):
    opts = []
    if mss:
        opts.append(("MSS", mss))
    if ts:
        opts.append(("Timestamp", ts))
    # both MACs given: scapy would otherwise ARP for dst on the host's own network (and hung
    # when a leftover rig veth routed 198.18.0.0/30: the test's addresses)
    p = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src=src, dst=dst) / TCP(sport=sport, dport=dport, seq=seq % 2**32,
                                             ack=ack % 2**32, flags=flags, window=win,
                                             options=opts) / (b"x" * plen)
    p.time = t
    return p


def _flow(tmp_path: Path, *, drop: set[int], gso: int = 1, zero_at: tuple = ()) -> Path:
    """A download of 100 segments (the server sends `gso` segments per packet), as seen
    before the engine (sender side); `drop` segment indexes are sent again after
    segment 99, each 50 ms (one RTT) after the original; ACKs echo each TSval 50 ms on."""
    pk = [_pkt(0.0, CLI, SRV, 40000, 8080, ISN_C, 0, "S", mss=MSS, ts=(1, 0)),
          _pkt(0.05, SRV, CLI, 8080, 40000, ISN_S, ISN_C + 1, "SA", mss=MSS, ts=(7, 1))]
    t, ts = 0.1, 100
    base = ISN_S + 1
    for i in range(0, 100, gso):
        pk.append(_pkt(t, SRV, CLI, 8080, 40000, base + i * SEG, ISN_C + 1, "PA",
                       plen=gso * SEG, ts=(ts, 1)))
        pk.append(_pkt(t + 0.05, CLI, SRV, 40000, 8080, ISN_C + 1, base + (i + gso) * SEG,
                       "A", win=0 if i in zero_at else 500, ts=(2, ts)))
        t, ts = t + 0.001, ts + 1
    for j, i in enumerate(sorted(drop)):
        pk.append(_pkt(t + 0.06 + j * 0.001, SRV, CLI, 8080, 40000, base + i * SEG,
                       ISN_C + 1, "PA", plen=SEG, ts=(ts + j, 1)))
    pk.sort(key=lambda p: p.time)
    f = tmp_path / "c.pcap"
    wrpcap(str(f), pk)
    return f


def _data(res):
    return res.flows[(SRV, 8080, CLI, 40000)]


def test_retransmissions_rtt_and_sequence_wrap(tmp_path):
    res = an.analyse(_flow(tmp_path, drop={3, 40, 77}))
    f = _data(res)
    facts = an.flow_facts((SRV, 8080, CLI, 40000), f)
    assert facts["data_bytes"] == 100 * SEG          # across the 2**32 wrap
    assert facts["mss_bytes"] == SEG
    assert (facts["retrans_packets"], facts["retrans_segs"], facts["ooo_packets"]) == (3, 3, 0)
    assert facts["retrans_bytes"] == 3 * SEG
    assert facts["rtt_samples"] == 100 and facts["rtt_ms_median"] == pytest.approx(50, abs=0.01)
    assert res.truncated is None and res.packets_analysed == 2 + 200 + 3


def test_gso_bursts_count_in_segments(tmp_path):
    # the sender's TSO packets carry 4 segments each; one resent segment counts one
    f = _data(an.analyse(_flow(tmp_path, drop={8, 9}, gso=4)))
    assert (f.retrans_pkts, f.retrans_segs) == (2, 2)
    assert f.max_end == 100 * SEG
    f.data(9.0, 0, 3 * SEG)           # one packet resending three segments: three
    assert (f.retrans_pkts, f.retrans_segs) == (3, 5)


def test_receiver_side_gap_filled_is_out_of_order(tmp_path):
    # after the engine: segments 3 and 40 never arrived the first time
    res = an.analyse(_flow(tmp_path, drop={3, 40}))
    f = an.Flow()
    for t, s, n in [(0, 0, SEG), (1, SEG, SEG), (2, 3 * SEG, SEG), (3, 2 * SEG, SEG),
                    (4, 2 * SEG, SEG)]:
        f.data(t, s, n)
    # the gap [2 SEG, 3 SEG) filled once (out of order), then sent again (retransmission)
    assert (f.ooo_pkts, f.retrans_pkts, f.max_end) == (1, 1, 4 * SEG)
    assert _data(res).ooo_pkts == 0


def test_zero_window_episodes(tmp_path):
    f = _data(an.analyse(_flow(tmp_path, drop=set(), zero_at=(10, 11, 12, 50))))
    assert f.zero_window == 2


def test_analysis_is_bounded(tmp_path):
    res = an.analyse(_flow(tmp_path, drop={5}), max_packets=50)
    assert res.packets_analysed == 50 and res.truncated == "stopped at 50 packets"


def test_time_sequence_graph_is_decimated():
    s = an._Series(cap=100)
    for i in range(10_000):
        s.add(float(i), i)
    assert len(s.pts) < 100 and s.pts[-1][1] >= 9_800 - s.stride


def test_tcpdump_argv_is_bounded():
    argv = cap.tcpdump_argv("rig1234rs", Path("/out/captures/step1/a-x.pcap"), max_s=150)
    assert argv[:3] == ["tcpdump", "-i", "rig1234rs"]
    for flag, want in (("-s", "128"), ("-c", str(cap.MAX_PACKETS)), ("-G", "150"),
                       ("-W", "1"), ("-Z", "root")):
        assert argv[argv.index(flag) + 1] == want
    with pytest.raises(ValueError):
        cap.tcpdump_argv("x", Path("/out/%Y.pcap"), max_s=150)
    assert "header capture on" in cap.warning() and "128 bytes" in cap.warning()


def _scen(path_extra: str = "", client_extra: str = "") -> str:
    return f"""
name: t
paths: [{{name: wan, rtt: [10ms]{path_extra}}}]
files: [{{name: f, size: 1MiB}}]
servers: [{{name: ng, kind: nginx}}]
clients: [{{name: c, tool: curl, file: f{client_extra}}}]
"""


def _parse(text: str):
    from rig.description import safeyaml
    return scenario.parse(safeyaml.load(text, "t.yaml"), source="t.yaml")


def test_scenario_capture_key():
    assert _parse(_scen()).paths[0].capture is None            # never on by default
    assert _parse(_scen(", capture: headers")).paths[0].capture == "headers"
    assert _parse(_scen(client_extra=", capture: headers")).clients[0].capture == "headers"
    with pytest.raises(InputError, match=r"paths\[0\]\.capture"):
        _parse(_scen(", capture: full"))
    real = _scen().replace("rtt: [10ms]", "kind: real, server_addr: 192.0.2.1") \
        .replace("}]\nfiles", ", capture: headers}]\nfiles", 1)
    with pytest.raises(InputError, match="emulated path"):
        _parse(real)


def test_shipped_capture_scenario_asks_for_it():
    sc = scenario.load(Path(__file__).resolve().parent.parent / "scenarios/capture-loss.yaml")
    p = sc.paths[0]
    assert (p.capture, p.loss, p.rtts_s) == ("headers", 0.01, [0.05])


def test_unreadable_file_is_said_not_raised(tmp_path):
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"not a capture at all")
    res = an.analyse(bad)
    assert res.packets_analysed == 0 and res.truncated.startswith("unreadable after 0")
