"""The verdict rules the ground-truth tier (bench/ground_truth.py, docs/ground-truth.md)
found wrong, each where the answer is known to be YES and where it is known to be NO."""
from __future__ import annotations

import sqlite3
from dataclasses import fields
from pathlib import Path

import pytest

from fixtures_results import make_run
from rig.report.model import GroupCpu, Key, Point, load_run
from rig.report.tcpevidence import Evidence, evidence_by_key
from rig.report.threads import PointThreads, ProcUse, ThreadUse, capped
from rig.report.verdict import verdicts
from rig.results.store import Store, TcpSample, TcpSampleRow


def _conn(*, adv: int, rate_Bps: float = 1e6, srtt_us: int = 40000, rwnd: float = 0.28,
          retrans: float = 0.0, seconds: float = 2.0, tick: float = 0.1,
          in_flight: int | None = None, cwnd: int = 100, rtt_ms: float = 40.0
          ) -> list[TcpSample]:
    """One connection, past slow start from its first sample: `rate_Bps` acked, the
    receiver advertising `adv` bytes, rwnd_limited `rwnd` of busy time."""
    out = []
    for i in range(1, int(seconds / tick) + 1):
        t = i * tick
        sent = int(rate_Bps * t)
        out.append(TcpSample(
            transfer_id=1, conn=0, t_s=t, cwnd_segs=cwnd, mss_bytes=1448, srtt_us=srtt_us,
            in_flight_pkts=in_flight,
            snd_wnd_bytes=adv, bytes_acked=sent, bytes_sent=sent,
            bytes_retrans=int(sent * retrans), busy_us=int(t * 1e6),
            rwnd_limited_us=int(rwnd * t * 1e6), sndbuf_limited_us=0, ok=True, path="wan",
            rtt_ms_configured=rtt_ms, client="xrdcp", streams=1, concurrency=1))
    return out


# the known wrong one: 1 MiB rmem at 40 ms, no rate; the kernel (6.x, scaling_ratio ~0.75)
# advertised ~787 KB and the sender kept it full, yet rwnd_limited only 28 % of busy time
def test_a_full_advertised_window_is_window_limited_though_rwnd_share_is_small():
    (ev,) = evidence_by_key(_conn(adv=787_456, rate_Bps=787_456 * 0.95 / 0.04)).values()
    assert ev.adv_window == 787_456 and ev.window_fill == pytest.approx(0.95, abs=0.01)
    kind, why = ev.classify()
    assert kind == "window-limited"
    assert "advertised window full: 95%" in why and "rwnd_limited 28%" in why


@pytest.mark.parametrize("what, kw, kind", [
    # half the window in flight: cwnd (congestion control) set the pace
    ("half full", {"adv": 787_456, "rate_Bps": 787_456 * 0.5 / 0.04}, "cwnd-limited"),
    # full, but the kernel never saw the window stop the sender
    ("never stopped", {"adv": 787_456, "rate_Bps": 787_456 * 0.95 / 0.04, "rwnd": 0.0},
     "cwnd-limited"),
    # full, but losses drove cwnd: the loss is the cause
    ("lossy", {"adv": 787_456, "rate_Bps": 787_456 * 0.95 / 0.04, "retrans": 0.01},
     "loss-limited"),
])
def test_a_window_not_kept_full_is_not_window_limited(what, kw, kind):
    (ev,) = evidence_by_key(_conn(**kw)).values()
    assert ev.classify()[0] == kind, what


# 512 KiB tcp_wmem at 40 ms through xrootd's sendfile: sndbuf_limited 0-3 %, yet 362 of a
# cwnd of 1548 segments in flight and 4 % of a 12 MiB receive window
SNDBUF = {"adv": 12_900_000, "rate_Bps": 362 * 1448 / 0.04, "rwnd": 0.0, "in_flight": 362,
          "cwnd": 1548}


def test_little_in_flight_while_busy_is_the_senders_buffer():
    (ev,) = evidence_by_key(_conn(**SNDBUF)).values()
    kind, why = ev.classify()
    assert kind == "sender-buffer-limited" and "23% of cwnd" in why


@pytest.mark.parametrize("what, kw, kind", [
    # at 0 ms nothing much is ever in flight: says nothing of the buffer
    ("no round trip", dict(SNDBUF, rtt_ms=0.0, srtt_us=300), "cwnd-limited"),
    # cwnd full: congestion control set the pace
    ("cwnd full", dict(SNDBUF, in_flight=1500), "cwnd-limited"),
    # losses: the cause is the loss
    ("lossy", dict(SNDBUF, retrans=0.01), "loss-limited"),
])
def test_a_sender_not_short_of_buffer(what, kw, kind):
    (ev,) = evidence_by_key(_conn(**kw)).values()
    assert ev.classify()[0] == kind, what


def test_evidence_without_snd_wnd_keeps_the_old_rules():
    e = Evidence(conns=1, busy_s=1.0, rwnd_s=0.3, sndbuf_s=0.0, life_s=1.0, bytes_sent=100)
    assert e.window_fill is None and e.classify()[0] == "cwnd-limited"


def _point(window: int | None, adv: int | None) -> Point:
    p = Point(Key("wan", 40.0, "xrdcp", 1, 1), "xrdcp", samples_bps=[1.5e8])
    p.window_bytes, p.adv_window_bytes, p.rtt_ms_measured = window, adv, 40.0
    return p


def test_window_bound_takes_the_kernels_advertised_window_when_larger():
    # computed as half of 1 MiB (tcp_adv_win_scale 1) but the kernel advertised 0.75 MiB
    assert _point(2**19, 787_456).window_bound_bps() == pytest.approx(787_456 * 8 / 0.04)
    # an advertised window autotuning had not yet grown is no bound: the computed one stays
    assert _point(8 * 2**20, 300_000).window_bound_bps() == pytest.approx(8 * 2**20 * 8 / 0.04)
    assert _point(None, None).window_bound_bps() is None


def test_load_run_reads_the_advertised_window(tmp_path: Path):
    d = make_run(tmp_path / "run", rtts=(40,), repeats=1)
    c = sqlite3.connect(str(d / "results.sqlite"))
    rows = c.execute("SELECT rowid FROM transfers WHERE client = 'xrdcp'").fetchall()
    c.close()
    st = Store(sqlite3.connect(str(d / "results.sqlite"), isolation_level=None),
               d / "results.sqlite")
    for (rowid,) in rows:
        st.add_tcp_samples([TcpSampleRow(**{f.name: getattr(s, f.name) for f in fields(
            TcpSampleRow)} | {"transfer_id": rowid}) for s in _conn(adv=787_456)])
    st.conn.close()
    run = load_run(d)
    (p,) = [p for p in run.points if p.key.client == "xrdcp"]
    assert p.adv_window_bytes == 787_456


def _with_ping_min(tmp_path: Path, rtt_min: float) -> dict:
    d = make_run(tmp_path / "run", rtts=(20,), repeats=1, flagged_steps=(0,))
    c = sqlite3.connect(str(d / "results.sqlite"))
    c.execute("UPDATE validations SET rtt_ms_min = ?, rtt_ms_measured = ?",
              (rtt_min, rtt_min + 0.1))
    c.commit()
    c.close()
    return verdicts(load_run(d))


def test_a_path_delaying_more_than_its_label_is_the_rigs_fault(tmp_path: Path):
    # the engine delayed 30 ms more than the step's 20 ms: every ping at least 50 ms
    v = _with_ping_min(tmp_path, 50.2)
    assert v and all(x.kind == "emulator-limited" for x in v.values())
    assert all("not what step" in x.detail and "+30.2 ms" in x.detail for x in v.values())


def test_a_ping_a_little_off_is_a_note_not_the_verdict(tmp_path: Path):
    # flagged (0.6 ms off at 20 ms) but within max(1 ms, 5 %): the transfer's own verdict
    v = _with_ping_min(tmp_path, 20.6)
    assert v and not any(x.kind == "emulator-limited" for x in v.values())
    assert all(any("ping RTT off" in n for n in x.notes) for x in v.values())


# --- a CPU allowance (a cgroup quota): the process waited for a CPU the host had spare --
def _use(side: str, cpu_s: float, wait_s: float, hot: bool = True) -> ProcUse:
    threads = ([ThreadUse("xrdcp[7]", 7, 0.34, 0.66, cpu_s)] if hot else
               [ThreadUse(f"xrdcp[{i}]", i, 0.4, 0.3, cpu_s / 3) for i in range(3)])
    return ProcUse(side, 1, busy_s=0.5, span_s=1.0, cpu_s=cpu_s, wait_s=wait_s, cores=2,
                   bytes=10**8, threads=threads, want_s=1.0, want_cpu_s=cpu_s,
                   want_wait_s=wait_s)


def _capped(side: str, share: float, **kw):
    point = Point(Key("lan", 0.0, "xrdcp", 1, 1), "xrdcp", samples_bps=[1e9])
    point.host_cpu = {(1, 0): GroupCpu(share=share, cpus=2, wall_s=1.0)}
    uses = [_use(side, **kw)]
    p = PointThreads(client=uses) if side == "client" else PointThreads(server=uses)
    return capped(p, point, side)


def test_a_quota_held_client_is_its_cpu_bound():
    # the poller thread runnable all the time, on a CPU a third of it; the host 40 % busy
    kind, why = _capped("client", 0.4, cpu_s=0.3, wait_s=0.65)
    assert kind == "single-thread-bound" and "own CPU allowance" in why
    kind, _ = _capped("client", 0.4, cpu_s=0.3, wait_s=0.65, hot=False)
    assert kind == "client-CPU-bound"
    assert _capped("server", 0.4, cpu_s=0.2, wait_s=0.7)[0] == "server-cpu-bound"


def test_starved_on_a_busy_host_is_the_hosts_cpu():
    # the same signature with every CPU of the host busy: contention or quota, unknown
    kind, why = _capped("client", 0.97, cpu_s=0.3, wait_s=0.65)
    assert kind == "host-CPU-bound" and "97% busy" in why


@pytest.mark.parametrize("what, share, cpu_s, wait_s", [
    ("waiting for the network, not for a CPU", 0.4, 0.3, 0.05),
    ("on a CPU, hardly waiting: no allowance held it", 0.4, 0.7, 0.1),
])
def test_no_quota_where_the_wait_is_not_for_its_own_cpu(what, share, cpu_s, wait_s):
    assert _capped("client", share, cpu_s=cpu_s, wait_s=wait_s) is None, what


# --- loss at "the path's capacity": on a lossy path iperf3's capacity is loss-limited too --
def _lossy_run(tmp_path: Path, at_rate: bool) -> dict:
    d = make_run(tmp_path / "run", rtts=(10,), repeats=1, rate_bps=None)
    c = sqlite3.connect(str(d / "results.sqlite"))
    c.execute("UPDATE validations SET loss_configured = 0.01")
    c.execute("UPDATE transfers SET loss_configured = 0.01")
    rows = c.execute("SELECT rowid, aggregate_bps FROM transfers").fetchall()
    # the check's iperf3 carried what xrdcp did (on a lossy path: its loss-limited rate)
    (xrdcp,) = c.execute("SELECT aggregate_bps FROM transfers WHERE client = 'xrdcp'")
    c.execute("UPDATE validations SET capacity_bps = ?, iperf_bps = ?", (xrdcp[0], xrdcp[0]))
    if at_rate:     # and a rate configured there, below everything else
        c.execute("UPDATE validations SET rate_bps_configured = ?", xrdcp)
        c.execute("UPDATE transfers SET rate_bps_configured = ?", xrdcp)
    c.commit()
    c.close()
    st = Store(sqlite3.connect(str(d / "results.sqlite"), isolation_level=None),
               d / "results.sqlite")
    for rowid, bps in rows:
        st.add_tcp_samples([TcpSampleRow(**{f.name: getattr(s, f.name) for f in fields(
            TcpSampleRow)} | {"transfer_id": rowid}) for s in _conn(
                adv=10 * 2**20, rate_Bps=bps / 8, rwnd=0.0, retrans=0.01, rtt_ms=10.0,
                srtt_us=10000)])
    st.conn.close()
    return {k.client: v.kind for k, v in verdicts(load_run(d)).items()}


def test_loss_near_a_lossy_paths_iperf3_capacity_is_loss(tmp_path: Path):
    # no rate: the check's iperf3 measured the loss-limited rate; the transfers match it
    kinds = _lossy_run(tmp_path, at_rate=False)
    assert kinds["xrdcp"] == "loss-limited", kinds


def test_loss_at_a_configured_rate_is_the_rate(tmp_path: Path):
    # a rate below everything: at it, the rate is the bound (losses are its queue's drops)
    kinds = _lossy_run(tmp_path, at_rate=True)
    assert kinds["xrdcp"] == "path-limited", kinds
