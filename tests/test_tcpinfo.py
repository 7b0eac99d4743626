"""tcp_info evidence (issue #15): the sock_diag parser on captured bytes and on a live
loopback connection, the sampler's rows, the scenario key, the results table (old
folders without it still load), and the verdicts the kernel's counters give."""
from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from rig.description import scenario
from rig.errors import InputError
from rig.orchestration.tcpsample import sample_rows, socket_inodes
from rig.process.sockdiag import DiagSocket, TcpInfo, parse_dump, request
from rig.report.model import load_run
from rig.report.tcpevidence import Evidence, evidence_by_key
from rig.report.verdict import verdicts
from rig.results import check
from rig.results.store import ADDED_AFTER_V1, Store, TcpSample, TcpSampleRow
from fixtures_results import make_run

DATA = Path(__file__).parent / "data"


def test_parse_captured_dump():
    meta = json.loads((DATA / "sockdiag_loopback.json").read_text())
    recs, done = parse_dump((DATA / "sockdiag_loopback.bin").read_bytes())
    assert done
    send = [r for r in recs if r.sport == meta["server_port"]
            and r.dport == meta["client_port"]]
    assert len(send) == 1
    r = send[0]
    assert r.src == r.dst == "127.0.0.1" and r.state == 1
    assert r.bytes_acked == r.bytes_sent == meta["bytes"]      # all of it, acknowledged
    assert r.bytes_retrans == r.total_retrans == 0
    assert r.snd_mss == 65483 and r.snd_cwnd_segs == 28 and r.rtt_us == 106
    assert r.busy_us is not None and r.rwnd_limited_us == 0


def test_request_asks_for_tcp_info():
    b = request(7, info=True)
    assert len(b) == 16 + 56
    assert b[16] == socket.AF_INET and b[17] == socket.IPPROTO_TCP and b[18] == 2
    assert request(7, info=False)[18] == 0


def test_error_answer_raises():
    import struct
    msg = struct.pack("=IHHII", 36, 2, 0, 1, 0) + struct.pack("=i", -13) + b"\0" * 16
    with pytest.raises(OSError):
        parse_dump(msg)


def test_live_loopback_bytes_and_owner():
    """A sender's counters match the bytes it sent, and the process's fds name the
    socket inodes the dump reports (the sampler's matching rule)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    c = socket.create_connection(srv.getsockname())
    a, _ = srv.accept()
    n = 5 * 2**20
    t = threading.Thread(target=a.sendall, args=(b"y" * n,))
    t.start()
    got = 0
    while got < n:
        got += len(c.recv(1 << 20))
    t.join()
    with DiagSocket(None) as d:
        for _ in range(50):   # the last ACK may still be on its way
            recs = d.dump()
            mine = [r for r in recs if r.sport == srv.getsockname()[1]
                    and r.dport == c.getsockname()[1]]
            if mine and mine[0].bytes_acked == n:
                break
    assert mine[0].bytes_acked == n
    import os
    inodes = socket_inodes(os.getpid())
    client = [r for r in recs if r.sport == c.getsockname()[1]]
    assert client and client[0].inode in inodes and mine[0].inode in inodes
    for s in (a, c, srv):
        s.close()


def _info(**kw) -> TcpInfo:
    base = dict(src="198.18.0.6", sport=1094, dst="198.18.0.1", dport=40000, inode=1,
                state=1)
    return TcpInfo(**{**base, **kw})


def test_sample_rows_time_base_and_slow_start():
    conns = [[(10.1, _info(snd_cwnd_segs=10, snd_ssthresh_segs=0x7FFFFFFF)),
              (10.2, _info(snd_cwnd_segs=50, snd_ssthresh_segs=30, delivery_rate_Bps=1000))]]
    rows = sample_rows(conns, 42, 10.0)
    assert [r.t_s for r in rows] == [0.1, 0.2]
    assert rows[0].ssthresh_segs is None and rows[1].ssthresh_segs == 30
    assert rows[1].delivery_rate_bps == 8000 and rows[0].transfer_id == 42
    # a tick stamped just before the recorded process start (qemu TCG: -7.9 ms) is at 0
    early = sample_rows([[(9.9921, _info(snd_cwnd_segs=10, snd_ssthresh_segs=30))]], 1, 10.0)
    assert early[0].t_s == 0.0


def test_scenario_sampling_key(tmp_path):
    base = ("name: s\npaths: [{name: w, rtt: [10ms]}]\nfiles: [{name: f, size: 1MiB}]\n"
            "servers: [{name: x, kind: xrootd}]\nclients: [{name: c, tool: curl, file: f}]\n")
    assert scenario.parse(__import__("yaml").safe_load(base), source="s").sampling.tcp_info_s == 0.1
    for text, want in (("sampling: {tcp_info: off}\n", None),
                       ("sampling: {tcp_info: 250ms}\n", 0.25)):
        sc = scenario.parse(__import__("yaml").safe_load(base + text), source="s")
        assert sc.sampling.tcp_info_s == want
    with pytest.raises(InputError, match=r"sampling\.tcp_info.*1ms"):
        scenario.parse(__import__("yaml").safe_load(base + "sampling: {tcp_info: 1ms}\n"),
                       source="s")


# --- results and verdicts -----------------------------------------------------------
def _samples(tid: int, *, seconds: float, rwnd: float = 0.0, sndbuf: float = 0.0,
             busy: float = 1.0, retrans: float = 0.0, slow_s: float = 0.0,
             tick: float = 0.1) -> list[TcpSampleRow]:
    """One connection: cwnd ramps for slow_s, then flat; chrono shares constant."""
    out = []
    n = int(seconds / tick)
    for i in range(1, n + 1):
        t = i * tick
        cwnd = int(100 * min(1.0, t / slow_s)) if slow_s else 100
        sent = int(1e6 * t)
        out.append(TcpSampleRow(
            transfer_id=tid, conn=0, t_s=t, cwnd_segs=max(cwnd, 10), mss_bytes=1448,
            srtt_us=20000, bytes_acked=sent, bytes_sent=sent,
            bytes_retrans=int(sent * retrans), busy_us=int(busy * t * 1e6),
            rwnd_limited_us=int(rwnd * busy * t * 1e6),
            sndbuf_limited_us=int(sndbuf * busy * t * 1e6)))
    return out


def _run_with(tmp_path: Path, **kw) -> tuple:
    d = make_run(tmp_path / "run", rtts=(20,))
    st = Store(sqlite3.connect(str(d / "results.sqlite"), isolation_level=None),
               d / "results.sqlite")
    rows = st.conn.execute("SELECT rowid, client FROM transfers").fetchall()
    for rowid, client in rows:
        st.add_tcp_samples(_samples(rowid, **kw.get(client, kw.get("*", {"seconds": 2}))))
    st.conn.close()
    run = load_run(d)
    return run, verdicts(run)


def test_window_limited_cites_rwnd_share(tmp_path):
    _, v = _run_with(tmp_path, **{"*": {"seconds": 3, "rwnd": 0.91}})
    assert v and all(x.kind in ("window-limited", "client-CPU-bound") for x in v.values())
    w = [x for x in v.values() if x.kind == "window-limited"]
    assert w and all("rwnd_limited 91% of busy time" in x.detail for x in w)


def test_each_kind_from_its_evidence(tmp_path):
    _, v = _run_with(tmp_path, **{
        "curl": {"seconds": 3, "sndbuf": 0.8},
        "davix-get": {"seconds": 3, "busy": 0.3},
        "xrdcp": {"seconds": 3, "retrans": 0.01},
        "xrdcp-S4": {"seconds": 3}})
    kinds = {k.client: x.kind for k, x in v.items()}
    assert kinds["curl"] == "sender-buffer-limited"
    assert kinds["davix-get"] == "application-limited"
    # cwnd-bound at the path's capacity is path-limited; else loss/cwnd as the kernel says
    assert kinds["xrdcp"] in ("loss-limited", "path-limited")
    assert kinds["xrdcp-S4"] in ("cwnd-limited", "path-limited")
    assert "retransmitted 1.00%" in v[next(k for k in v if k.client == "xrdcp")].detail


def test_slow_start_left_out_of_the_shares():
    rows = [TcpSample(**vars(r), ok=True, path="w", rtt_ms_configured=20.0, client="c",
                      streams=1, concurrency=1)
            for r in _samples(1, seconds=3, slow_s=1.0, rwnd=0.8)]
    # nothing window-limited until cwnd reached 90 % of its top (t = 0.9 s), 80 % after
    for r in rows:
        r.rwnd_limited_us = int(max(0.0, r.t_s - 0.9) * 0.8e6)
    (ev,) = evidence_by_key(rows).values()
    assert ev.slow_start_s == pytest.approx(1.0, abs=0.11)
    assert ev.share(ev.rwnd_s) == pytest.approx(0.8, abs=0.03)
    assert ev.classify()[0] == "window-limited"


def test_small_window_shares_leave_cwnd_in_charge_and_are_cited():
    e = Evidence(conns=1, busy_s=1.0, rwnd_s=0.3, sndbuf_s=0.1, life_s=1.0,
                 bytes_sent=100, bytes_retrans=0)
    kind, why = e.classify()
    assert kind == "cwnd-limited" and "cwnd-limited 60%" in why and "rwnd_limited 30%" in why
    e.sndbuf_s = 0.25          # together 55 %: the buffers, rwnd the larger
    assert e.classify()[0] == "window-limited"


def test_old_folder_without_tcp_samples_still_reports(tmp_path):
    assert "tcp_samples" in ADDED_AFTER_V1
    d = make_run(tmp_path / "old", rtts=(20, 60))
    conn = sqlite3.connect(str(d / "results.sqlite"))
    conn.execute("DROP TABLE tcp_samples")
    conn.commit()
    conn.close()
    check.check(d / "results.sqlite")
    run = load_run(d)
    assert run.tcp == [] and verdicts(run)


def test_bad_tcp_sample_is_one_line(tmp_path):
    d = make_run(tmp_path / "bad", rtts=(20,))
    conn = sqlite3.connect(str(d / "results.sqlite"))
    conn.execute("INSERT INTO tcp_samples (transfer_id, conn, t_s, busy_us) "
                  "VALUES (1, 0, 0.1, -5)")
    conn.commit()
    conn.close()
    with pytest.raises(Exception, match=r"tcp_samples\[1\]\.busy_us: must be >= 0"):
        check.check(d / "results.sqlite")


def test_timeline_series_adds_connections():
    from rig.report.timeline import transfer_series
    ss = [TcpSample(t_s=t, conn=c, bytes_acked=int(t * 10 * 1e6) * (c + 1), cwnd_segs=10,
                    mss_bytes=1000, srtt_us=20000 + 1000 * c)
          for t in (0.1, 0.2, 0.3) for c in (0, 1)]
    t, bps, cwnd, srtt = transfer_series(ss)
    assert t == [0.2, 0.3]
    assert bps == pytest.approx([8 * 30e6 / 1] * 2, rel=1e-6)   # 3 x 10 MB/s in all
    assert cwnd == [20000.0, 20000.0] and srtt == [20.5, 20.5]


def test_one_sample_transfer_still_gets_the_kernels_verdict(tmp_path):
    """A transfer shorter than two sampling ticks has one sample per connection; its
    cumulative counters cover the connection's whole life (at most the time since the
    client started), so the kernel's account still decides (it was dropped before:
    quick.yaml's curl and davix-get at 0 ms were 'unexplained')."""
    _, v = _run_with(tmp_path, **{"*": {"seconds": 0.1, "sndbuf": 0.8}})
    assert v and all(x.kind == "sender-buffer-limited" for x in v.values()), \
        {k.client: x.text() for k, x in v.items()}
    assert all("sndbuf_limited 80% of busy time" in x.detail and "busy 100% of 0.3 s"
               in x.detail for x in v.values())      # 3 repeats x 0.1 s


def test_tls_and_plain_of_one_client_keep_their_own_evidence():
    """A client run with and without TLS is two points (model.client_label); the kernel's
    evidence of each stays with its own point instead of merging into the plain one."""
    def rows(tid: int, tls: str | None, **kw) -> list[TcpSample]:
        return [TcpSample(**vars(r), ok=True, path="w", rtt_ms_configured=20.0, client="c",
                          tls=tls, streams=1, concurrency=1)
                for r in _samples(tid, seconds=3, **kw)]
    ev = evidence_by_key(rows(1, "off", rwnd=0.9) + rows(2, "all", busy=0.3)
                         + rows(3, None, rwnd=0.9))
    assert {k.client for k in ev} == {"c", "c tls=all"}
    plain = next(e for k, e in ev.items() if k.client == "c")
    tls = next(e for k, e in ev.items() if k.client == "c tls=all")
    assert plain.conns == 2 and tls.conns == 1      # NULL (an older run) is off
    assert plain.classify()[0] == "window-limited"
    assert tls.classify()[0] == "application-limited"


def test_tpc_source_sampler_takes_the_source_side_from_the_group_start():
    """Third-party copy: the connections from the source's port are sampled, a pooled
    one counted from the group's start, an idle one left out, and each moving one is
    one instance's (issue 24, E21)."""
    from rig.orchestration.tcpsample import SourceSampler, since
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    pooled = socket.create_connection(("127.0.0.1", port))
    p_srv, _ = srv.accept()
    idle = socket.create_connection(("127.0.0.1", port))
    i_srv, _ = srv.accept()

    def move(s_out: socket.socket, s_in: socket.socket, n: int) -> None:
        t = threading.Thread(target=s_out.sendall, args=(b"z" * n,))
        t.start()
        got = 0
        while got < n:
            got += len(s_in.recv(1 << 20))
        t.join()

    move(p_srv, pooled, 3 * 2**20)              # before the group: not this group's
    smp = SourceSampler(None, [port], interval_s=0.05)
    fresh = socket.create_connection(("127.0.0.1", port))
    f_srv, _ = srv.accept()
    move(p_srv, pooled, 2**20)
    move(f_srv, fresh, 2 * 2**20)
    smp.tick(time.monotonic())
    assert not smp.series                       # no copy started yet: nobody's data
    smp.track(0, os.getpid())
    smp.track(1, os.getpid())
    for _ in range(50):                         # the last ACKs may still be on their way
        smp.series.clear()
        smp.active.clear()
        smp.tick(time.monotonic())
        acked = sorted(s[-1][1].bytes_acked for s in smp.series.values())
        if acked == [2**20, 2 * 2**20]:
            break
    assert acked == [2**20, 2 * 2**20]           # the pooled one rebased, the idle one out
    assert sorted(i for i, _ in smp.series) == [0, 1]
    assert idle.getsockname()[1] not in {p for _, p in smp.series}
    r = _info(bytes_acked=10, busy_us=7, bytes_sent=None)
    assert since(r, _info(bytes_acked=4, busy_us=2)) == _info(bytes_acked=6, busy_us=5,
                                                               bytes_sent=None)
    smp.send.close()
    for s in (pooled, p_srv, idle, i_srv, fresh, f_srv, srv):
        s.close()


def test_the_sampler_ticks_fast_in_a_groups_first_half_second():
    """A group's first FAST_FOR_S are sampled every FAST_S, then at the interval; an
    interval shorter than FAST_S stays as it is (an 80 ms transfer at ~0 ms fell between
    two ticks of 100 ms and had no kernel account)."""
    from rig.orchestration import tcpsample
    from rig.orchestration.tcpsample import GroupSampler
    smp = GroupSampler(None, None, sender="server", interval_s=0.1)
    assert smp.step(0.0) == tcpsample.FAST_S == 0.02
    assert smp.step(tcpsample.FAST_FOR_S - 0.001) == 0.02
    assert smp.step(tcpsample.FAST_FOR_S) == 0.1 and smp.step(3.0) == 0.1
    t, n = 0.0, 0                   # 1.5 s: 25 ticks at 20 ms, then 10 at 100 ms
    while t < 1.5 - 1e-9:
        t += smp.step(t + 1e-9)
        n += 1
    assert n == 35
    smp.interval_s = 0.01
    assert smp.step(0.0) == 0.01 and smp.step(1.0) == 0.01
    smp.send.close()
