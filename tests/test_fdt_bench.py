"""bench/fdt.py's pure helpers for Java FDT's wire rate: /proc/net/dev parsing and the
data phase found in (time, rx bytes) samples whose answer is known."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "bench_fdt", Path(__file__).resolve().parents[1] / "bench" / "fdt.py")
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

NET_DEV = """\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 999999     10    0    0    0     0          0         0   999999     10    0    0    0     0       0          0
rig1-0c0: 123456789  4000    0    0    0     0          0         0  5555  60    0    0    0     0       0          0
  eth1:    1000      3    0    0    0     0          0         0     0     0    0    0    0     0       0          0
"""


def test_rx_bytes_sums_every_interface_but_lo() -> None:
    assert bench.rx_bytes(NET_DEV) == 123456789 + 1000


def _samples(*phases: tuple[float, float], step: float = 0.05) -> list[tuple[float, int]]:
    """(t, cumulative bytes) through phases of (rate bit/s, seconds); rate 0 is idle."""
    out, t, b = [], 100.0, 5000
    for rate_bps, seconds in phases:
        for _ in range(round(seconds / step)):
            b += int(rate_bps / 8 * step)
            out.append((t, b))
            t += step
    return out


def test_wire_rate_finds_the_data_phase_and_its_steady_rate() -> None:
    """Idle (JVM start), 1 s of slow start at 1 Gbit/s, 5 s at 8, then idle again."""
    s = _samples((0, 3.0), (1e9, 1.0), (8e9, 5.0), (0, 2.0))
    w = bench.wire_rate(s, omit=1.0, min_bytes=1 << 20)
    assert w["bps"] == pytest.approx(8e9, rel=0.02)          # slow start left out
    assert w["seconds"] == pytest.approx(6.0, abs=0.11)      # the idle tail is left out
    assert w["bytes"] == pytest.approx(41e9 / 8, rel=0.01)
    assert w["start_t"] == pytest.approx(100.0 + 3.0, abs=0.11)


def test_wire_rate_refuses_a_run_without_data() -> None:
    with pytest.raises(RuntimeError, match="no data"):
        bench.wire_rate(_samples((0, 3.0), (1e3, 1.0)), omit=0.5, min_bytes=1 << 20)
