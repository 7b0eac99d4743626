"""The userspace engine's sans-IO core and netlink message codec, driven by a fake clock
(explicit `now` values). Pure: no root, no sockets."""
from __future__ import annotations

import random
import struct

import pytest

from rig.realization.emul.engine import nfq
from rig.realization.emul.engine.core import (DROP_LOSS, DROP_QUEUE, HOLD, HOLD_DUP, DirectionQueue,
                                  WakeCompensator)
from rig.description.profile import Direction, GilbertElliott
from rig.description.linkstats import LATENESS_LABELS


def q(**kw) -> DirectionQueue:
    limit = kw.pop("limit", 10_000)
    return DirectionQueue(Direction(**kw), limit=limit, rng=random.Random(1))


def test_fixed_delay_releases_exactly_when_due():
    dq = q(delay_s=0.020)
    assert dq.arrive(1, 10.000) == HOLD
    assert dq.arrive(2, 10.001) == HOLD
    assert dq.next_deadline() == pytest.approx(10.020)
    assert dq.release(10.0199) == ([], [])
    assert dq.release(10.020) == ([1], [])
    assert dq.release(10.0215) == ([2], [])
    assert dq.held == 0
    assert dq.stats.released == 2
    assert dq.stats.report("forward", 0).applied_delay_mean_s == pytest.approx(0.020)


def test_nothing_leaves_before_its_deadline_and_lateness_is_binned():
    """Issue 31: release(upto) pops only packets due by upto (no early window), and
    the lateness histogram bins early releases as finely as late ones."""
    dq = q(delay_s=0.010)
    for i in range(5):
        dq.arrive(i, 1.0 + i * 1e-5)
    ids, _ = dq.release(1.010 + 25e-6)               # ids 0..2 are due; 3, 4 not yet
    assert ids == [0, 1, 2]
    ids, _ = dq.release(1.0113)                      # 1.27 / 1.26 ms late
    assert ids == [3, 4]
    late = dq.stats.report("forward", dq.held).lateness
    hist = dict(zip(LATENESS_LABELS, late.hist))
    assert hist["0..50us"] == 3 and hist["1..2ms"] == 2
    assert sum(late.hist[:LATENESS_LABELS.index("0..50us")]) == 0     # none early
    assert late.min_s == pytest.approx(5e-6) and late.max_s == pytest.approx(0.00127)
    assert late.count == 5 and late.share_late(1e-3) == pytest.approx(2 / 5)
    assert late.share_early() == 0.0
    # quantiles: upper edge of the bin holding them, never above the measured max
    assert late.p50_s == pytest.approx(50e-6) and late.p99_s == pytest.approx(0.00127)


def test_early_releases_are_binned_per_bin_and_counted_as_early():
    """A caller that counts lateness at a `now` before the deadline (a release that
    reached the wire early) is binned per early bin, like a late one."""
    from rig.description.linkstats import lateness_bin
    dq = q(delay_s=0.010)
    early = (-30e-6, -70e-6, -150e-6, -300e-6, -700e-6, -1.5e-3, -3e-3, -7e-3, -12e-3)
    for i, e in enumerate(early):
        dq.arrive(i, 1.0)
        dq.release(1.010, now=1.010 + e)
    late = dq.stats.report("forward", dq.held).lateness
    for e in early:
        assert late.hist[lateness_bin(e)] == 1, (e, late.hist)
    assert [LATENESS_LABELS[lateness_bin(e)] for e in early] == [
        "-50..0us", "-100..-50us", "-200..-100us", "-500..-200us", "-1..-0.5ms",
        "-2..-1ms", "-5..-2ms", "-10..-5ms", "<-10ms"]
    assert late.min_s == pytest.approx(-12e-3)
    assert late.share_early() == pytest.approx(8 / 9)      # all but the -30 us one


@pytest.mark.parametrize("dist", ["uniform", "normal"])
def test_jitter_distribution_mean_and_spread(dist):
    dq = q(delay_s=0.050, jitter_s=0.005, jitter_dist=dist, reorder=True)
    now = 0.0
    for i in range(20_000):
        dq.arrive(i, now)
    deadlines = sorted(d for d, _, _ in dq._heap)
    n = len(deadlines)
    mean = sum(deadlines) / n
    sd = (sum((d - mean) ** 2 for d in deadlines) / n) ** 0.5
    assert mean == pytest.approx(0.050, abs=2e-4)
    expected_sd = 0.005 / 3 ** 0.5 if dist == "uniform" else 0.005
    assert sd == pytest.approx(expected_sd, rel=0.05)
    if dist == "uniform":
        assert deadlines[0] >= 0.045 and deadlines[-1] <= 0.055


def test_reorder_releases_in_deadline_order_not_arrival_order():
    dq = q(delay_s=0.010, jitter_s=0.009, reorder=True)
    for i in range(200):
        dq.arrive(i, i * 1e-4)
    ids, _ = dq.release(1.0)
    assert sorted(ids) == list(range(200))
    assert ids != list(range(200))                 # some overtaking happened


def test_order_preserving_jitter_never_reorders_and_reports_ratchet():
    dq = q(delay_s=0.010, jitter_s=0.005)
    for i in range(2000):                          # one packet every 10 us: dense
        dq.arrive(i, i * 1e-5)
    out = []
    t = 0.0
    while dq.held:
        t += 1e-4
        out += dq.release(t)[0]
    assert out == list(range(2000))
    mean = dq.stats.report("forward", 0).applied_delay_mean_s
    assert 0.0125 < mean <= 0.0151                 # ratcheted towards delay + jitter


def test_random_loss_rate():
    dq = q(delay_s=0.001, loss=0.05, limit=100_000)
    verdicts = [dq.arrive(i, 0.0) for i in range(40_000)]
    lost = verdicts.count(DROP_LOSS)
    assert lost / 40_000 == pytest.approx(0.05, rel=0.06)
    assert dq.held == 40_000 - lost
    s = dq.stats.report("forward", dq.held)
    assert s.dropped_loss / s.seen == pytest.approx(lost / 40_000)


def test_gilbert_elliott_mean_loss_and_bursts():
    ge = GilbertElliott(p=0.01, r=0.2, loss_bad=0.8, loss_good=0.001)
    dq = q(delay_s=0.001, gemodel=ge)
    lost = [dq.arrive(i, 0.0) == DROP_LOSS for i in range(200_000)]
    rate = sum(lost) / len(lost)
    assert rate == pytest.approx(ge.mean_loss(), rel=0.1)
    # bursty: P(loss | previous lost) far above the mean loss
    after = [b for a, b in zip(lost, lost[1:]) if a]
    assert sum(after) / len(after) > 5 * rate


def test_queue_limit_drops_and_recovers():
    dq = q(delay_s=0.010, limit=3)
    assert [dq.arrive(i, 0.0) for i in range(5)] == [HOLD, HOLD, HOLD, DROP_QUEUE, DROP_QUEUE]
    assert dq.stats.dropped_queue == 2
    assert dq.release(0.010)[0] == [0, 1, 2]
    assert dq.arrive(5, 0.011) == HOLD


def test_duplicate_marks_packets():
    dq = q(delay_s=0.001, duplicate=0.25)
    codes = [dq.arrive(i, 0.0) for i in range(8000)]
    ids, dups = dq.release(1.0)
    assert len(dups) == codes.count(HOLD_DUP)
    assert len(dups) / 8000 == pytest.approx(0.25, rel=0.1)
    assert set(dups) <= set(ids)
    assert dq.stats.duplicated == len(dups)


def test_reconfigure_keeps_held_packets_and_switches_discipline():
    dq = q(delay_s=0.050)
    dq.arrive(1, 0.0)
    dq.configure(Direction(delay_s=0.010, jitter_s=0.005, reorder=True), limit=100)
    assert dq.reorder and dq.held == 1
    dq.arrive(2, 0.0)
    ids, _ = dq.release(0.016)
    assert ids == [2]                                # new profile applies to new packets
    assert dq.release(0.050)[0] == [1]               # the old one kept its release time
    dq.configure(Direction(delay_s=0.0), limit=100)
    assert not dq.reorder
    assert dq.arrive(3, 1.0) == HOLD and dq.release(1.0)[0] == [3]


def test_zero_delay_is_immediate():
    dq = q()
    dq.arrive(7, 5.0)
    assert dq.release(5.0)[0] == [7]


def test_wake_compensator_tracks_median_latency_and_ignores_spikes():
    c = WakeCompensator(step_s=2e-6, cap_s=1e-3, initial_s=0.0)
    rng = random.Random(3)
    for i in range(3000):
        # mostly ~100 us, one wake-up in ten overshoots by 2-5 ms
        c.observe(rng.uniform(2e-3, 5e-3) if i % 10 == 0 else rng.uniform(80e-6, 120e-6))
    assert c.value_s == pytest.approx(100e-6, abs=15e-6)
    for _ in range(50):
        c.observe(10.0)                              # a long stall
    assert c.value_s <= 1e-3


# --- netlink codec --------------------------------------------------------------------

def _packet_msg(pid: int, *, ts: tuple[int, int] | None = None, cap: int | None = None) -> bytes:
    attrs = nfq._attr(nfq.NFQA_PACKET_HDR, struct.pack("!IHB", pid, 0x0800, 2))
    if ts:
        attrs += nfq._attr(nfq.NFQA_TIMESTAMP, struct.pack("!QQ", *ts))
    if cap:
        attrs += nfq._attr(nfq.NFQA_CAP_LEN, struct.pack("!I", cap))
    return nfq._msg(nfq.NFQNL_MSG_PACKET, 0, 3, attrs)


def test_parse_packets_reads_ids_timestamps_and_lengths():
    buf = _packet_msg(41) + _packet_msg(42, ts=(1700000000, 250000), cap=65226)
    out: list = []
    assert nfq.parse_packets(buf, len(buf), out) == 0
    assert out[0] == (41, 0, None, None)
    assert out[1][0] == 42 and out[1][1] == 65226
    assert out[1][2] == pytest.approx(1700000000.25)


def test_parse_reports_netlink_error():
    err = struct.pack("=IHHIIi", 36, nfq.NLMSG_ERROR, 0, 0, 0, -16) + b"\0" * 16
    assert nfq.parse_packets(err, len(err), []) == 16          # EBUSY


def test_batch_verdict_layout():
    m = nfq.verdict(5, 1234, True, batch=True)
    length, mtype, flags, _, _ = struct.unpack_from("=IHHII", m)
    assert length == len(m) == 32
    assert mtype == (nfq.NFNL_SUBSYS_QUEUE << 8) | nfq.NFQNL_MSG_VERDICT_BATCH
    assert struct.unpack_from("!H", m, 18)[0] == 5             # res_id = queue number
    assert struct.unpack_from("!II", m, 24) == (nfq.NF_ACCEPT, 1234)
    d = nfq.verdict(5, 9, False)
    assert struct.unpack_from("=H", d, 4)[0] & 0xFF == nfq.NFQNL_MSG_VERDICT
    assert struct.unpack_from("!II", d, 24) == (nfq.NF_DROP, 9)


def test_config_never_fails_open_and_sets_gso():
    m = nfq.config_params(0, copy_mode=nfq.NFQNL_COPY_META, copy_range=0,
                          maxlen=1_000_000, gso=True)
    attrs = {}
    off = 20
    while off < len(m):
        alen, atype = struct.unpack_from("=HH", m, off)
        attrs[atype] = m[off + 4:off + alen]
        off += (alen + 3) & ~3
    assert struct.unpack("!I", attrs[nfq.NFQA_CFG_QUEUE_MAXLEN])[0] == 1_000_000
    assert attrs[nfq.NFQA_CFG_PARAMS][4] == nfq.NFQNL_COPY_META
    mask = struct.unpack("!I", attrs[nfq.NFQA_CFG_MASK])[0]
    flags = struct.unpack("!I", attrs[nfq.NFQA_CFG_FLAGS])[0]
    assert mask & nfq.NFQA_CFG_F_FAIL_OPEN and not flags & nfq.NFQA_CFG_F_FAIL_OPEN
    assert flags & nfq.NFQA_CFG_F_GSO


def test_arrive_many_fast_path_equals_arrive():
    a, b = q(delay_s=0.005), q(delay_s=0.005)
    pkts = [(i, 1.0 + i * 1e-6) for i in range(100)] + [(100, 0.5)]   # one stale stamp
    assert a.arrive_many(pkts) == []
    for pid, t in pkts:
        b.arrive(pid, t)
    assert list(a._fifo) == list(b._fifo)
    assert a.stats.report("forward", a.held) == b.stats.report("forward", b.held)
    lossy = q(delay_s=0.005, loss=0.5, limit=3)
    codes = dict(lossy.arrive_many([(i, 0.0) for i in range(50)]))
    assert set(codes.values()) == {DROP_LOSS, DROP_QUEUE} and lossy.held == 3


def _slots(msgs: list[bytes], slot: int = 256) -> memoryview:
    return memoryview(b"".join(m[:slot].ljust(slot, b"\0") for m in msgs))


def test_parse_slots_uses_plausible_kernel_timestamps():
    now, wall = 1000.0, 1_700_000_000.0 - 1000.0
    view = _slots([_packet_msg(1, ts=(1_700_000_000, 0), cap=1)      # wall stamp == now
                   + b"",
                   _packet_msg(2, ts=(999, 900_000)),                 # monotonic EDT stamp
                   _packet_msg(3, ts=(1_600_000_000, 0)),             # implausible: ignored
                   _packet_msg(4)])
    hint = [0, 0]
    ids, times, used = nfq.parse_slots(view, 4, 256, now, wall, hint)
    assert ids == (1, 2, 3, 4) and used == 2
    assert times == pytest.approx([1000.0, 999.9, 1000.0, 1000.0])


def test_parse_slots_without_stamps_and_with_errors():
    err = struct.pack("=IHHIIi", 36, nfq.NLMSG_ERROR, 0, 0, 0, -16) + b"\0" * 16
    hint = [0, 0]
    ids, times, used = nfq.parse_slots(_slots([_packet_msg(7), err, _packet_msg(9)]),
                                       3, 256, 5.0, 0.0, hint)
    assert ids == (7, 9) and times is None and used == 0 and hint[1] == 1
    # a message longer than its slot is truncated; its id is still read
    ids, _, _ = nfq.parse_slots(_slots([_packet_msg(11, cap=5) + b"\0" * 300], 64), 1, 64,
                                5.0, 0.0, [0, 0])
    assert ids == (11,)


def test_recvmmsg_fills_slots_in_one_call():
    import socket
    from rig.realization.emul.engine.mmsg import MmsgReceiver
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with a, b:
        mm = MmsgReceiver(b.fileno(), slots=4, slot=64)
        assert mm.recv() == 0                                   # nothing queued: no block
        for i in range(6):
            a.send(bytes([i]) * 10)
        assert mm.recv() == 4 and mm.recv() == 2
        assert bytes(mm.view[64:74]) == b"\x05" * 10            # 2nd call: datagrams 4, 5


def test_arrive_batch_stores_one_run_and_releases_it_whole():
    dq = q(delay_s=0.010)
    assert dq.arrive_batch((5, 6, 7), 1.0) == []
    assert dq.held == 3 and len(dq._fifo) == 1
    assert dq.arrive_batch((8,), 1.0001) == []
    assert dq.release(1.0100) == ([5, 6, 7], [])
    assert dq.release(1.0102) == ([8], []) and dq.held == 0
    s = dq.stats.report("forward", dq.held)
    assert s.seen == s.released == 4
    assert s.applied_delay_mean_s == pytest.approx(0.010)
    assert s.lateness.hist[LATENESS_LABELS.index("0..50us")] == 3
    assert sum(s.lateness.hist) == 4
