"""The netem backend on a kernel that has sch_netem: Debian's stock kernel booted in qemu
(TCG) by tests/netem_vm/vm.py, the rig's CLI driven inside by tests/netem_vm/guest.py.

One VM boot per session (~3-4 min); every test below judges its numbers. Tolerances:
- RTT: netem can only be late, never early, so the floor is the design target
  (median >= configured + the VM's own path RTT - max(0.3 ms, 1 %)). The ceiling is
  wider than the design target on purpose: under TCG the guest's timers fire late
  (measured here: median 0.7-1.4 ms above 50 ms, mean up to 5 ms with stalls of 100+ ms
  on a shared 2-core host), so the median must stay within +3 ms and p10 within
  +-1.5 ms (jitter 2 ms is +-1 ms per direction). On real hardware the design target holds.
- loss: netem's own drop counter on the lossy egress within the 99.9 % binomial interval
  of the packets it saw; iperf3's count within the same interval of its datagrams.
- rate: received wire rate within 5 % of 50 Mbit/s (TCP goodput scaled by 1514/1448,
  UDP payload by (len + 42)/len).
- the `rig run` of tests/data/scenarios/netem-run.yaml (netem, 0 and 20 ms, 0.5 % loss):
  rows whole, the path check's ping within the same TCG tolerances (its stored min and
  mean: the run keeps ping's summary only), netem's stored drops within the 99.9 %
  binomial interval of the packets it was offered, nothing left behind.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from netem_vm import checks

RTT_MS = 50.0
LOSS = 0.01
RATE_BPS = 50e6
RUN_LOSS = 0.005                 # tests/data/scenarios/netem-run.yaml
RUN_FILE_BYTES = 16 << 20
RUN_RTTS_MS = (0.0, 20.0)


# ---- pure tier: the helpers the VM tests rely on -------------------------------------

def test_binomial_bounds_cover_and_exclude():
    lo, hi = checks.binomial_bounds(10000, 0.01)
    assert 65 <= lo <= 72 and 128 <= hi <= 135      # normal approx: 100 +- 3.29 * 9.95
    assert not lo <= 544 <= hi                       # a 5 % loss would fail


def test_wire_rates():
    assert checks.tcp_wire_bps(47.82e6) == pytest.approx(50e6, rel=1e-3)
    assert checks.udp_wire_bps(48.544e6, 1400) == pytest.approx(50e6, rel=1e-3)


def test_newc_cpio_layout():
    from netem_vm.vm import newc_cpio
    import stat
    data = newc_cpio([("init", stat.S_IFREG | 0o755, b"abc")])
    assert data.startswith(b"070701") and b"init\0" in data and b"TRAILER!!!\0" in data
    assert len(data) % 4 == 0


def test_netem_run_totals_follow_cumulative_counters_and_resets():
    def row(seen, drops):
        return {"directions": [{"direction": "reverse", "seen": seen, "released": seen - drops,
                                "dropped_unattributed": drops, "dropped_rate_limiter": None,
                                "extra": {"qdiscs": [{"kind": "netem", "bytes": 1000 * seen}]}}]}
    # two snapshots of one qdisc, then a rebuilt one (counter went down), then more of it
    t = checks.netem_run_totals([row(100, 1), row(300, 2), row(50, 1), row(80, 1)])
    assert t["reverse"] == {"seen": 380, "released": 377, "dropped_unattributed": 3,
                            "dropped_rate_limiter": 0, "bytes": 380000}


def test_load_order_puts_dependencies_first():
    from netem_vm.vm import load_order, parse_modules_dep
    deps = parse_modules_dep("k/9p.ko: k/9pnet.ko k/netfs.ko\nk/9pnet.ko:\nk/netfs.ko:\n"
                             "k/9pnet_virtio.ko: k/9pnet.ko k/virtio.ko\nk/virtio.ko:\n")
    order = load_order(deps, ["9pnet_virtio", "9p"])
    assert order.index("k/9pnet.ko") < order.index("k/9p.ko")
    assert order.index("k/virtio.ko") < order.index("k/9pnet_virtio.ko")
    assert len(order) == len(set(order)) == 5


# ---- the VM tier ----------------------------------------------------------------------

def _vm_missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (qemu 9p shares the host root)"
    for tool in ("qemu-system-x86_64", "apt-get", "dpkg-deb"):
        if not shutil.which(tool):
            return f"{tool} missing (make test-netem installs it)"
    if not Path("/bin/busybox").exists():
        return "busybox-static missing (make test-netem installs it)"
    return None


@pytest.fixture(scope="session")
def vm():
    why = _vm_missing()
    if why:
        pytest.skip(why)
    from netem_vm.vm import VM_TIMEOUT_S, run_vm
    out = Path(os.environ.get("RIG_NETEMVM_OUT", "/tmp/rig-netemvm-out"))
    r = run_vm(out)
    print(f"\nnetem VM: boot {r['host']['t_boot_s']} s, VM {r['host']['t_vm_s']:.1f} s, "
          f"total {r['host']['t_total_s']:.1f} s; results in {out}/result.json")
    assert not r["host"]["qemu_timed_out"], \
        f"the VM hit its {VM_TIMEOUT_S:g} s deadline after {r['host']['t_total_s']:.0f} s"
    assert r.get("kernel"), f"guest.py wrote no result; see {out}/console.log, guest.log"
    assert not r["errors"], r["errors"]
    return r


@pytest.mark.netemvm
def test_doctor_finds_netem_and_auto_picks_it(vm):
    e = vm["doctor"]["emulation"]
    assert e["kernel_netem"] is True and e["auto"] == "netem"
    assert "sch_netem" in vm["modules"]


@pytest.mark.netemvm
def test_nothing_left_after_net_down(vm):
    for name, p in vm["profiles"].items():
        assert p["down_rc"] == 0, (name, p["down_stderr"])
    left = vm["leftovers"]
    assert left["netns"] == [] and left["links"] == ["lo"], left
    assert not {"netem", "tbf"} & set(left["qdisc_kinds"]), left
    # the empty name-registry lock file stays by design (rig/realization/netns.py)
    assert [f for f in left["state_files"] if not f.endswith("/registry.lock")] == [], left
    if "leftovers_before_run" in vm:       # the profiles alone, before the `rig run`
        assert vm["leftovers_before_run"]["netns"] == [], vm["leftovers_before_run"]


@pytest.mark.netemvm
def test_qdiscs_as_configured(vm):
    for name in ("loss", "lossrate", "rate"):
        p = vm["profiles"][name]
        for dev in (p["to_client_if"], p["to_server_if"]):
            q = checks.netem_stats(p["qdiscs_before"], dev)
            assert q["options"]["delay"]["delay"] == pytest.approx(RTT_MS / 2e3)
            assert q["options"]["delay"]["jitter"] == pytest.approx(0.001)
            kinds = [x["kind"] for x in p["qdiscs_before"][dev]]
            assert ("tbf" in kinds) == (name != "loss"), kinds
        rev = checks.netem_stats(p["qdiscs_before"], p["to_client_if"])
        fwd = checks.netem_stats(p["qdiscs_before"], p["to_server_if"])
        if name != "rate":   # --loss is on the data direction (server -> client) only
            assert rev["options"]["loss-random"]["loss"] == pytest.approx(LOSS)
        assert "loss-random" not in fwd["options"]


@pytest.mark.netemvm
@pytest.mark.parametrize("name", ["delay", "loss", "lossrate", "rate"])
def test_rtt(vm, name):
    """The floor and the p10 window add the VM's own path as its p10 echo, not its median:
    one boot's base median read 1.195 ms (p10 0.289; other boots 0.42-0.44 ms) and failed
    four correct paths (medians 50.4 ms, p10s 49.3-50.2 ms)."""
    b = checks.rtt_summary(vm["profiles"]["base"]["ping"]["rtts_ms"])
    base = b["median_ms"]
    s = checks.rtt_summary(vm["profiles"][name]["ping"]["rtts_ms"])
    want = RTT_MS + base
    print(f"{name}: {s} (VM path without delay: median {base} ms, p10 {b['p10_ms']} ms)")
    assert s["median_ms"] >= RTT_MS + b["p10_ms"] - max(0.3, 0.01 * RTT_MS), s
    assert s["median_ms"] <= want + 3.0, s
    assert abs(s["p10_ms"] - (RTT_MS + b["p10_ms"])) <= 1.5, s


@pytest.mark.netemvm
def test_base_rtt_small(vm):
    s = checks.rtt_summary(vm["profiles"]["base"]["ping"]["rtts_ms"])
    assert s["median_ms"] < 2.0, s


@pytest.mark.netemvm
@pytest.mark.parametrize("name", ["loss", "lossrate"])
def test_loss_in_data_direction(vm, name):
    p = vm["profiles"][name]
    # snapshot taken right after the UDP loss runs (before any rate test fills the TBF)
    snap = p["qdiscs_after_loss"]
    rev = checks.netem_stats(snap, p["to_client_if"])
    fwd = checks.netem_stats(snap, p["to_server_if"])
    drops = rev["drops"] - _tbf_drops(snap, p["to_client_if"])
    offered = rev["packets"] + drops          # netem counts only what it passed on
    lo, hi = checks.binomial_bounds(offered, LOSS)
    print(f"{name}: netem reverse dropped {drops} of {offered} (bounds {lo}..{hi})")
    assert lo <= drops <= hi
    assert fwd["drops"] - _tbf_drops(snap, p["to_server_if"]) == 0
    udp = p["udp_reverse"]["end"]["sum_received"]
    lo, hi = checks.binomial_bounds(udp["packets"], LOSS)
    print(f"{name}: iperf3 UDP server->client lost {udp['lost_packets']} of {udp['packets']}"
          f" (bounds {lo}..{hi}); receive-buffer drops {p['udp_rcvbuf_errors']}")
    assert lo <= udp["lost_packets"] <= hi
    fw = p["udp_forward"]["end"]["sum_received"]
    assert fw["lost_packets"] <= 0.001 * fw["packets"], fw


def _tbf_drops(snap: dict, dev: str) -> int:
    """netem counts a child's drops as its own: subtract the TBF's (queue overflow)."""
    return sum(q.get("drops", 0) for q in snap[dev] if q["kind"] == "tbf")


@pytest.mark.netemvm
def test_udp_rate_limited(vm):
    """The TBF's rate from the bytes the receiver got, over two clocks: the receiver's
    window (iperf3 -R: the client stops counting at its own -t) and the sender's span.
    Under TCG the two drift apart: one fresh-clone CI run had the receiver count 26.4 MB
    in 4.00 s (54.3 Mbit/s on the wire) while the sender sent for 4.36 s (49.9). The
    rate must lie between the two estimates, with 5 % on each side; a limiter 10 % off
    either way still fails."""
    end = vm["profiles"]["lossrate"]["udp_rate"]["end"]
    got, sent = end["sum_received"], end["sum_sent"]
    hi = checks.udp_wire_bps(got["bytes"] * 8 / got["seconds"], 1400)
    lo = checks.udp_wire_bps(got["bytes"] * 8 / max(got["seconds"], sent["seconds"]), 1400)
    print(f"UDP at 80 Mbit/s offered: {lo / 1e6:.2f}..{hi / 1e6:.2f} Mbit/s on the wire "
          f"(receiver {got['seconds']:.3f} s, sender {sent['seconds']:.3f} s)")
    assert lo * 0.95 <= RATE_BPS <= hi * 1.05
    assert hi - lo <= 0.15 * RATE_BPS, "the two clocks disagree by more than 15 %"


@pytest.mark.netemvm
def test_tcp_rate(vm):
    """The rate limiter's rate, from TCP: the median one-second goodput (the guest under
    TCG on a shared host stalls now and then for 50-100+ ms — ping max 104-124 ms at 50 ms
    — and a stall longer than the TBF queue's 50 ms empties the bottleneck: the mean
    over 6 s fell to 42-47 Mbit/s on the wire in two runs while UDP read 50.4-50.6)."""
    r = vm["profiles"]["rate"]["tcp_rate"]
    s = r["end"]["sum_received"]
    ivs = sorted(r["intervals_bps"])
    assert len(ivs) >= 4, r
    med = ivs[len(ivs) // 2] if len(ivs) % 2 else (ivs[len(ivs) // 2 - 1] + ivs[len(ivs) // 2]) / 2
    wire = checks.tcp_wire_bps(med)
    print(f"TCP: {s['bits_per_second'] / 1e6:.2f} Mbit/s goodput over the run "
          f"({checks.tcp_wire_bps(s['bits_per_second']) / 1e6:.2f} on the wire); per second "
          f"{[round(x / 1e6, 1) for x in r['intervals_bps']]}, median {wire / 1e6:.2f} on the wire")
    assert wire == pytest.approx(RATE_BPS, rel=0.05)


# ---- netem through a whole `rig run` (tests/data/scenarios/netem-run.yaml) ---------------

@pytest.fixture(scope="session")
def netem_run(vm):
    from rig.results.store import Store
    r = vm.get("run")
    assert r, "guest.py ran no `rig run`"
    print(f"\nrig run netem-run.yaml in the VM: rc {r['rc']}, {r['wall_s']:.1f} s")
    assert r["rc"] == 0 and not r["timed_out"], r["stderr_tail"] or r["stdout_tail"]
    return Store.open(_vm_out() / r["out"])


def _vm_out() -> Path:
    return Path(os.environ.get("RIG_NETEMVM_OUT", "/tmp/rig-netemvm-out"))


@pytest.mark.netemvm
def test_run_rows_whole_through_netem(netem_run):
    rows = netem_run.transfers()
    got = sorted((r.rtt_ms_configured, r.client) for r in rows)
    assert got == sorted((rtt, c) for rtt in RUN_RTTS_MS for c in ("curl", "xrdcp")), got
    assert len({r.step for r in rows}) == 2
    for r in rows:
        assert r.ok, (r.client, r.step, r.error)
        assert r.bytes == r.file_bytes == RUN_FILE_BYTES, r.client
        assert r.backend == "netem" and r.loss_configured == pytest.approx(RUN_LOSS)
        assert r.throughput_bps > 1e6
    print("throughput (Mbit/s): " + ", ".join(
        f"{r.client}@{r.rtt_ms_configured:g}ms {r.throughput_bps / 1e6:.1f}"
        for r in sorted(rows, key=lambda r: (r.step, r.client))))


@pytest.mark.netemvm
def test_run_path_check_rtt(netem_run):
    """The run stores ping's summary (min/mean/max), not each echo: netem is never early,
    so the fastest echo of the 20 ms step is at least 20 ms + the VM's own path (the 0 ms
    step's fastest) - max(0.3 ms, 1 %), and within +1.5 ms of 20 ms + its mean (the p10
    bound of test_rtt); the mean, which TCG stalls of 100+ ms pull up, within +8 ms.
    Measured: 20.28-20.93 ms fastest, 20.83-24.58 ms mean (the latter with the host at
    load 20), against 0 ms means of 0.43-3.38 ms."""
    vals = netem_run.validations()
    assert sorted((v.rtt_ms_configured, v.phase) for v in vals) == sorted(
        (rtt, ph) for rtt in RUN_RTTS_MS for ph in ("before", "after")), vals
    assert {v.backend for v in vals} == {"netem"}
    base = [v for v in vals if v.rtt_ms_configured == 0.0]
    base_min = min(v.rtt_ms_min for v in base)
    base_mean = max(v.rtt_ms_measured for v in base)
    for v in vals:
        print(f"{v.rtt_ms_configured:g} ms {v.phase}: ping min {v.rtt_ms_min:.3f} "
              f"mean {v.rtt_ms_measured:.3f} max {v.rtt_ms_max:.3f} ms, loss "
              f"{v.ping_loss:.3f}, iperf3 {(v.iperf_bps or 0) / 1e6:.1f} Mbit/s; "
              f"flag: {v.flag_reason}")
        assert v.ping_loss <= 0.25 and v.iperf_bps and v.iperf_bps > 1e6, v
    # the VM's own path: its fastest echo (the mean read 3.4 ms with the host at load 20)
    assert base_min < 2.0, base
    for v in vals:
        want = v.rtt_ms_configured
        if want == 0.0:
            continue
        assert v.rtt_ms_min >= want + base_min - max(0.3, 0.01 * want), v
        assert v.rtt_ms_min <= want + base_mean + 1.5, v
        assert v.rtt_ms_measured <= want + base_mean + 8.0, v


@pytest.mark.netemvm
def test_run_stored_netem_stats(netem_run):
    """Every phase of every step stored netem's `tc -s -j` counters (drops, backlog) per
    direction; over the run, the data direction's own drops (netem's minus its child's)
    lie within the 99.9 % binomial interval of the segments it was offered at 0.5 %, and
    the other direction dropped nothing. netem drops whole skbs: before the server's veth
    sent one segment per skb (rig.description.profile.Direction.per_segment), a run dropped 126
    skbs against 543460 segments (0.023 %), far below this interval."""
    rows = netem_run.engine_stats()
    assert sorted((r.step, r.phase) for r in rows) == sorted(
        (s, ph) for s in {r.step for r in rows}
        for ph in ("check-before", "transfers", "check-after"))
    assert len({r.step for r in rows}) == 2
    stats = []
    for r in sorted(rows, key=lambda r: (r.taken_at, r.step)):
        s = json.loads(r.stats)
        assert r.backend == s["backend"] == "netem" and not s["error"], s
        dirs = {d["direction"]: d for d in s["directions"]}
        assert set(dirs) == {"forward", "reverse"}, dirs
        for d in dirs.values():
            q = [x for x in d["extra"]["qdiscs"] if x["kind"] == "netem"]
            assert len(q) == 1 and {"drops", "backlog", "qlen", "packets"} <= set(q[0]), q
            assert q[0]["backlog"] >= 0 and d["held"] == q[0]["qlen"]
        print(f"step {r.step} {r.phase}: " + "; ".join(
            f"{n} seen {d['seen']} dropped {d['dropped_unattributed']} "
            f"backlog {d['extra']['qdiscs'][0]['backlog']} B" for n, d in sorted(dirs.items())))
        stats.append(s)
    tot = checks.netem_run_totals(stats)
    rev, fwd = tot["reverse"], tot["forward"]
    drops = rev["dropped_unattributed"]
    lo, hi = checks.binomial_bounds(rev["seen"], RUN_LOSS)
    print(f"netem over the run: reverse dropped {drops} of {rev['seen']} segments "
          f"({rev['bytes']} bytes), bounds {lo}..{hi} at {RUN_LOSS:.1%}; forward dropped "
          f"{fwd['dropped_unattributed']} of {fwd['seen']}")
    assert rev["seen"] > 10000, rev          # two 16 MiB files alone are ~23000 segments
    assert lo <= drops <= hi
    assert fwd["dropped_unattributed"] == 0 and fwd["seen"] > 1000, fwd


@pytest.mark.netemvm
def test_run_left_nothing(vm, netem_run):
    left = vm["leftovers"]
    assert left["netns"] == [] and left["links"] == ["lo"], left
    assert not {"netem", "tbf", "ingress"} & set(left["qdisc_kinds"]), left
    assert [f for f in left["state_files"] if not f.endswith("/registry.lock")] == [], left
    assert left["mounts"] == [] and left["etc_netns"] == [], left
    assert netem_run.environment()["prefix"]
