"""End-to-end caching modes (issue #9): a generated ROOT file replayed in each mode through
the emulated path at 50 and 100 ms, against xrootd (root://), nginx and Apache (HTTP),
next to plain single-stream downloads of the same file. Asserts the issue's physics with
its tolerances:

- storage (RTT >= 10 ms): wall within 20 % of round_trips x RTT + bytes / path rate;
- application: round trips = the plan's cache-fill reads (plus the open reads); wall
  within 25 % of (round_trips + TCP slow-start round trips) x RTT + round_trips x 1 ms
  (each fill's service time, see FILL_SERVICE_S) + bytes / path rate
  (the issue's formula without slow start is off by 2x for MiB fills on a fresh
  connection: see _slow_start_flights);
- lazy-download of 100 %: within 30 % of a plain single-stream download of the same
  file at the same RTT (xrdcp for xrootd, curl for the HTTP library); bytes_wire = the
  whole segments touched.

RTT is the step's measured ping mean; the path rate is the step's validated iperf3 goodput.
Each client runs 3 repeats and the timing assertions take the fastest repeat per step (as
ping's minimum is the path's RTT): on a shared 2-vCPU VM with steal time, other processes
only ever add time to a latency-bound replay (CI once saw app-xrootd at 1.30 x the model
where its other runs gave 1.09-1.21; beside three busy sessions the three repeats of one
step took 0.382/0.359/0.305 s with steady fills of 11-19 ms at 10.3 ms RTT).

Why the scenario runs cubic (the seed's CC7/SLC6 hosts), not this host's default BBR:
BBR paces a request/response flow at its own bandwidth estimate, which such a flow keeps
low (each round is app-limited), so every cache fill took 1.6-1.8 RTT at 10-20 ms (and
each storage basket ~+2 ms) where cubic sends the window at once: 1.0-1.2 RTT measured,
per round (`extra.round_s`). Debian's nginx answers each fill one RTT late (see
test_nginx_default_answers_each_fill_one_rtt_late), nginx without tcp_nopush does not,
Apache does in some runs (test_apache_answers_each_fill_in_one_or_two_rtt).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rig.results.store import Store, TransferRow
from rigrun import rig_run

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parent.parent
SCEN = REPO / "tests/data/scenarios/caching-e2e.yaml"
MiB = 1 << 20
REPEATS = 3


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    pytest.importorskip("XRootD", reason="XRootD Python bindings (pip install xrootd)")
    out = tmp_path_factory.mktemp("caching") / "run"
    prefix = rig_run(SCEN, out, timeout=900).prefix
    # the plain downloads' files (dest_dir) are gone, the shadow files were never named
    assert not [f for f in Path("/var/tmp").iterdir() if f.name.startswith(f"{prefix}-")]
    return out


def _rows(run_dir):
    st = Store.open(run_dir)
    rows, vals = st.transfers(), st.validations()
    rate = {v.step: v.iperf_bps / 8 for v in vals if v.phase == "before"}
    return rows, rate


def _by(rows, client: str | tuple[str, ...]):
    """step -> that step's rows of one client (or of clients configured alike), one per
    repeat."""
    names = (client,) if isinstance(client, str) else client
    out: dict[int, list[TransferRow]] = {}
    for r in rows:
        if r.client in names:
            out.setdefault(r.step, []).append(r)
    return out


def _fastest(rs) -> float:
    return min(r.duration_s for r in rs)


def rig_faults(run_dir, *, late: bool = True) -> list[str]:
    """What the rig itself broke in this run, each with its numbers: a step whose path
    check was flagged, and (`late`) a phase whose emulation ran late (issue 43)."""
    st = Store.open(run_dir)
    try:
        vals, eng = st.validations(), st.engine_stats()
    finally:
        st.close()

    def ms(x):
        return "-" if x is None else f"{x:.3f}"
    out = [f"step {v.step} {v.phase} path {v.path} ({v.backend}) flagged: RTT mean "
           f"{ms(v.rtt_ms_measured)} ms (min {ms(v.rtt_ms_min)}, max {ms(v.rtt_ms_max)}) of "
           f"{ms(v.rtt_ms_configured)} ms asked; iperf3 "
           f"{'-' if v.iperf_bps is None else f'{v.iperf_bps / 1e6:.0f}'} Mbit/s: "
           f"{v.flag_reason}" for v in vals if v.flagged]
    if late:
        out += [f"step {e.step} {e.phase or 'whole step'} path {e.path} ({e.backend}) "
                f"emulation late: {e.emulation_late_reason}" for e in eng if e.emulation_late]
    return out


def _in_spec(run_dir) -> set[int]:
    """Every step, once the path was what the step says: a flagged path check (its RTT
    or capacity off) fails the test with its numbers (no evidence for or against the
    physics, and a skip would hide the rig's fault: issue 43). An engine late by a
    fraction of a millisecond does not make the physics untestable, since every model
    here takes the step's measured RTT: its phases are reported
    (test_the_engine_s_lateness_is_reported), and the figure itself lives in
    bench/engine_stamps.py (on a shared 2-vCPU host the engine's tail is the host's
    steal and run queue: a correct build would fail on it)."""
    faults = rig_faults(run_dir, late=False)
    if faults:
        pytest.fail(f"the rig's own fault, not the physics ({len(faults)}): "
                    + "; ".join(faults), pytrace=False)
    return {v.step for v in Store.open(run_dir).validations()}


def test_the_path_held_in_every_step(run_dir):
    """The precondition of every timing test below, as a test of its own."""
    assert not rig_faults(run_dir, late=False), "\n".join(rig_faults(run_dir, late=False))


def test_the_engine_s_lateness_is_reported(run_dir):
    """Every phase the engine ran late in is stored with its reason (wire audit numbers),
    and said here as a warning: never silent, never a skip."""
    import warnings
    st = Store.open(run_dir)
    try:
        late = [e for e in st.engine_stats() if e.emulation_late]
    finally:
        st.close()
    for e in late:
        assert e.emulation_late_reason and "late" in e.emulation_late_reason, e
    if late:
        warnings.warn("emulation late (issue 42, bench/engine_stamps.py): "
                      + "; ".join(rig_faults(run_dir)[-len(late):]), stacklevel=2)


IW = 10 * 1448          # Linux initial congestion window (bytes)


def _slow_start_flights(p, rtt_s: float, rate_Bps: float) -> int:
    """Extra round trips TCP needs because a round's bytes exceed the congestion window:
    from IW, the window doubles per round trip (slow start) up to the path's BDP, and
    it persists across rounds on the one connection. The issue's formula (round trips x
    RTT + bytes / rate) leaves this out; for fills of MiBs on a fresh connection it is
    most of the time (measured: 9 fills took 0.197 s at 10.6 ms, the formula says 0.10 s)."""
    cwnd, cap, extra = IW, max(IW, int(rate_Bps * rtt_s)), 0
    for rnd in p.rounds:
        left = rnd.wire_bytes
        while left > cwnd:
            left -= cwnd
            cwnd = min(cap, cwnd * 2)   # a full window acked doubles it
            extra += 1
        cwnd = min(cap, cwnd + left)    # slow start: +1 byte of window per byte acked
    return extra


# Service time of one cache-fill round beyond the wire: the server's read of ~0.3 MB, the
# client's handling and the engine's release batch (0.4 ms windows). Measured: steady
# fills took 1.0-1.3 ms more than the RTT in the fastest repeats at both 10 and 20 ms
# (11.1-11.6 ms at 10.29 ms; 21.1-21.7 ms at 20.11 ms), so it is a time per round,
# not a share of the RTT.
FILL_SERVICE_S = 1.0e-3


def _model(r, rate_Bps, p=None):
    rtt = r.rtt_ms_measured / 1e3
    if p is None:                                   # storage: one small read per round
        return r.round_trips * rtt + r.bytes_wire / rate_Bps
    flights = _slow_start_flights(p, rtt, rate_Bps)
    return ((r.round_trips + flights) * rtt + r.round_trips * FILL_SERVICE_S
            + r.bytes_wire / rate_Bps)


def _plan(client: str):
    from rig.description import scenario
    from rig.realization.data import root_source
    from rig.services.tools.replay import plan_for
    sc = scenario.load(SCEN)
    c = next(c for c in sc.clients if c.name == client)
    return plan_for(c, str(root_source(sc.file(c.file))))


def test_every_replay_ok_and_recorded(run_dir, require_tools):
    require_tools("xrootd", "nginx", "apache2", "xrdcp", "curl")
    rows, _ = _rows(run_dir)
    assert len(rows) == 2 * 13 * REPEATS
    bad = [(r.client, r.step, r.error) for r in rows if not r.ok]
    assert not bad
    for r in rows:
        if r.tool != "replay":
            assert r.cache_mode is None and r.requests is None
            continue
        extra = json.loads(r.extra)
        assert extra["checksum"] == extra["expected_checksum"]
        assert extra["bytes_received"] == r.bytes_wire
        # what the verdict reads: each round's size, and the run-queue wait over the wall
        assert sum(extra["round_bytes"]) == r.bytes_wire
        assert len(extra["round_bytes"]) == len(extra["round_s"])
        assert 0 <= extra["cpu_wait_s"] < r.duration_s * 8      # summed over its threads
        assert r.bytes == r.bytes_useful > 0
        # replay rows: throughput is useful bytes over the replay's wall
        assert r.throughput_bps == pytest.approx(8 * r.bytes_useful / r.duration_s)
        assert r.cache_mode in ("application", "storage", "lazy-download")
        assert r.read_library in ("xrootd", "davix")


@pytest.mark.parametrize("client", ["storage-xrootd", "storage-davix-apache"])
def test_storage_time_is_round_trips_times_rtt(run_dir, client):
    rows, rate = _rows(run_dir)
    p = _plan(client)
    ok = _in_spec(run_dir)
    for step, rs in _by(rows, client).items():
        assert len(rs) == REPEATS
        for r in rs:
            assert r.round_trips == r.requests == p.round_trips
        if step not in ok:
            continue
        model, wall = _model(rs[0], rate[step]), _fastest(rs)
        assert abs(wall - model) <= 0.20 * model, (step, [r.duration_s for r in rs], model)


APP_CLIENTS = ["app-xrootd", "app-davix-xrootd", "app-davix-apache", "app-davix-nginx",
               "app-davix-nginx-nopush-off"]


@pytest.mark.parametrize("client", APP_CLIENTS)
def test_application_round_trips_are_cache_fills(run_dir, client):
    rows, rate = _rows(run_dir)
    p = _plan(client)
    fills = [x for x in p.rounds if x.phase in ("learn", "fill")]
    opens = [x for x in p.rounds if x.phase == "open"]
    assert len(fills) > 3                    # the 2 MiB cache takes several fills
    for rs in _by(rows, client).values():
        for r in rs:
            assert r.round_trips == len(opens) + len(fills) == p.round_trips


@pytest.mark.parametrize("client", [
    "app-xrootd",
    # fastest / model in three runs (10 / 20 ms): 1.155 / 1.118 (flagged), 0.996 / 0.999,
    # 1.019 / 1.111; 1.14 / 1.17 in an earlier flagged run (the 1.29 of the 16 MiB file
    # was one slow learning fill among 4)
    "app-davix-xrootd",
    # libdavix sends each fill as one multi-range GET (DavixFile::readv = one preadVec),
    # one GET per round (counted: extra.http_requests). nginx with tcp_nopush off answers
    # it in 1.0-1.1 RTT; Debian's nginx in 2 (test_nginx_default_answers_each_fill_one_rtt_late);
    # Apache in either (test_apache_answers_each_fill_in_one_or_two_rtt).
    "app-davix-nginx-nopush-off"])
def test_application_time_is_fills_times_rtt(run_dir, client):
    rows, rate = _rows(run_dir)
    p = _plan(client)
    ok = _in_spec(run_dir)
    for step, rs in _by(rows, client).items():
        if step not in ok:
            continue
        model, wall = _model(rs[0], rate[step], p), _fastest(rs)
        assert abs(wall - model) <= 0.25 * model, (step, [r.duration_s for r in rs], model)


def _late_rounds(p) -> list[int]:
    """Indices of the rounds Debian's nginx answers one RTT late: the learning and cache-fill
    rounds (MiB answers written by several sendfile calls), not the small open reads."""
    return [i for i, x in enumerate(p.rounds) if x.phase in ("learn", "fill")]


def test_nginx_default_answers_each_fill_one_rtt_late(run_dir):
    """Debian's nginx.conf (`sendfile on; tcp_nopush on;`): nginx clears TCP_NODELAY, corks
    the socket (TCP_CORK), writes the answer (writev of each part's header, sendfile of its
    bytes) and uncorks at the end. With Nagle back on, the kernel holds the answer's last
    sub-MSS segment (the last range's tail and the closing boundary, 192-1159 bytes) until
    the ACK of the previous sub-MSS segment (Minshall's rule): one RTT. Seen in a header
    capture at 20 ms: every steady fill's last segment left 20.0-20.4 ms after the rest,
    10-20 us after that ACK (strace: TCP_NODELAY 0, TCP_CORK 1 ... 0 per answer). With
    tcp_nopush off the same plan takes 1.0-1.1 RTT per fill (app-davix-nginx-nopush-off).
    Asserted: a steady fill takes at least 1.8 RTT (only load could move it, and load only
    adds), and the wall is the 1-RTT model plus one RTT per learn/fill round, within 25 %."""
    rows, rate = _rows(run_dir)
    p = _plan("app-davix-nginx")
    late = _late_rounds(p)
    assert len(late) > 3
    ok = _in_spec(run_dir)
    for step, rs in _by(rows, "app-davix-nginx").items():
        rtt = rs[0].rtt_ms_measured / 1e3
        for r in rs:
            rounds = json.loads(r.extra)["round_s"]
            steady = sorted(rounds[i] for i in late[2:])   # past slow start
            assert steady[len(steady) // 2] >= 1.8 * rtt, (step, rtt, steady)
        if step not in ok:
            continue
        model = _model(rs[0], rate[step], p) + len(late) * rtt
        wall = _fastest(rs)
        assert abs(wall - model) <= 0.25 * model, (step, [r.duration_s for r in rs], model)


def test_apache_answers_each_fill_in_one_or_two_rtt(run_dir):
    """Apache (Debian's default, EnableSendfile Off) held each fill's last segment for one
    RTT in some runs and not in others, with either sendfile setting: steady fills at
    20.1-20.4 ms took 2.06-2.15 RTT (this test's run, sendfile Off; two runs with On) or
    1.0-1.15 RTT (two runs, Off and On). Not established why (docs/caching-modes.md), so
    asserted is the band: the wall between the 1-RTT model - 25 % and the model with one
    more RTT per learn/fill round + 25 %, and no steady fill faster than 0.9 RTT."""
    rows, rate = _rows(run_dir)
    p = _plan("app-davix-apache")
    late = _late_rounds(p)
    ok = _in_spec(run_dir)
    for step, rs in _by(rows, "app-davix-apache").items():
        rtt = rs[0].rtt_ms_measured / 1e3
        for r in rs:
            rounds = json.loads(r.extra)["round_s"]
            assert min(rounds[i] for i in late[2:]) >= 0.9 * rtt, (step, rtt, rounds)
        if step not in ok:
            continue
        one = _model(rs[0], rate[step], p)
        two = one + len(late) * rtt
        wall = _fastest(rs)
        assert 0.75 * one <= wall <= 1.25 * two, (step, [r.duration_s for r in rs], one, two)


@pytest.mark.parametrize("lazy,plain", [
    # Like with like: the lazy replay writes its shadow file to /var/tmp (as CMSSW's
    # LocalCacheFile), xrdcp and curl write their file there too (dest_dir), the checksum
    # is outside the wall, the replay's open is the 4 RTT xrdcp's own open takes (connect,
    # handshake + kXR_protocol, kXR_login, kXR_open; the bindings are loaded before it),
    # and every socket starts with the whole 16 MiB receive buffer (tuning.tcp_rmem_default):
    # with Linux's default 128 KiB the client kernel's autotuning (6.18 here) stalled the
    # window at 0.13-0.5 MB for 0.3-1.1 s in 5 of 20 plain downloads at 20 ms, on either
    # side at random (docs/caching-modes.md, "Lazy-download against a plain download").
    # lazy-xrootd and xrdcp run twice in the scenario (-b): the fastest of 6 repeats a side
    (("lazy-xrootd", "lazy-xrootd-b"), ("xrdcp", "xrdcp-b")),
    (("lazy-davix-nginx",), ("curl-nginx",))], ids=["lazy-xrootd", "lazy-davix-nginx"])
def test_lazy_download_is_near_a_plain_download(run_dir, lazy, plain):
    """CMSSW's 128 MiB segment: LocalCacheFile::cache reads it with one storage read, which
    XrdFile::read cuts into 8 MiB requests, 2 in flight (a sliding window), and DavixFile
    reads with one GET. (With 8 MiB segments, as this test used before, every segment was
    a synchronous round of its own: +18 % and +38 % against xrdcp at 10 ms.)"""
    rows, _ = _rows(run_dir)
    lz, pl = _by(rows, lazy), _by(rows, plain)
    assert {len(rs) for rs in lz.values()} == {REPEATS * len(lazy)}
    assert {len(rs) for rs in pl.values()} == {REPEATS * len(plain)}
    p = _plan(lazy[0])
    segment = 128 * MiB
    touched = [x for x in p.rounds if x.phase == "segment"]
    assert len(touched) == math.ceil(pl[0][0].file_bytes / segment)
    for r in pl[0]:                 # like with like: the download went to the same disk
        assert "/var/tmp/" in r.argv
    for step, rs in lz.items():
        for r in rs:
            assert json.loads(r.extra)["shadow_dir"] == "/var/tmp"
            assert r.branch_fraction == 1.0
            assert r.bytes_wire == sum(x.wire_bytes for x in touched) \
                == pl[step][0].file_bytes
        # the replay's own wall excludes connecting and opening; a plain download's
        # time includes them: compare like with like
        if step not in _in_spec(run_dir):
            continue
        ts = [r.duration_s + json.loads(r.extra)["open_s"] for r in rs]
        t, plain_t = min(ts), _fastest(pl[step])
        assert abs(t - plain_t) <= 0.30 * plain_t, \
            (step, ts, [r.duration_s for r in pl[step]])


def test_report_has_caching_tables(run_dir):
    md = (run_dir / "caching_table_mean.md").read_text()
    assert "storage" in md and "lazy-download" in md and "| 100 |" in md.replace("100 ms", "100")
    assert (run_dir / "caching_read_time.md").is_file()
    assert (run_dir / "caching_modes.png").stat().st_size > 1000
    html = (run_dir / "report.html").read_text()
    assert "latency-bound" in html
