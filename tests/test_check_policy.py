"""The path check's policy (issue 25, item 4): `validation.capacity: once` lets a path
whose capacity cannot depend on the RTT measure it at its first step only, and
`validation.after: ping` checks the RTT after each step, running the capacity run too
when the ping or the engine's counters flag the step. Pure: proc.run is replaced by a
recorder that answers with captured ping and iperf3 output."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from rig.description import scenario, steps
from rig.errors import InputError
from rig.orchestration import pathcheck
from rig.orchestration.plan import build_plan, plan_lines
from rig.process.proc import Result

QUICK = Path(__file__).resolve().parent.parent / "scenarios" / "quick.yaml"

PING_OK = ("20 packets transmitted, 20 received, 0% packet loss, time 190ms\n"
           "rtt min/avg/max/mdev = 120.101/120.250/120.600/0.100 ms\n")
PING_OFF = PING_OK.replace("120.250", "131.000")
IPERF = json.dumps({"intervals": [{"sum": {"bits_per_second": 9e9, "omitted": False}}] * 5,
                    "end": {"sum_received": {"bits_per_second": 9e9},
                            "sum_sent": {"bits_per_second": 9e9, "retransmits": 0}}})


def _scenario(tmp_path: Path, path_extra: str = "", validation: str = "") -> scenario.Scenario:
    f = tmp_path / "s.yaml"
    f.write_text(f"""name: s
paths:
  - {{name: a, kind: emulated, rtt: [2ms, 20ms, 120ms]{path_extra}}}
  - {{name: b, kind: emulated, rtt: [10ms, 60ms], loss: 0.1%}}
files: [{{name: f, size: 1MiB}}]
servers: [{{name: x, kind: xrootd}}]
clients: [{{name: c, tool: curl, file: f}}]
validation: {{ping_count: 20{validation}}}
""")
    return scenario.load(f)


def test_once_reuses_the_first_step_of_a_path_whose_capacity_cannot_depend_on_the_rtt(
        tmp_path) -> None:
    sc = _scenario(tmp_path, validation=", capacity: once")
    st = steps.expand(sc)
    src = [pathcheck.capacity_source(st, s, sc.validation.capacity) for s in st]
    # path a (a delay line only): steps 1 and 2 take step 0's; path b has loss (Mathis:
    # its capacity falls with the RTT), so each of its steps measures its own
    assert src == [None, 0, 0, None, None]
    # a step without delay is the kernel's forwarding, not the emulator: its own class
    sc0 = _scenario(tmp_path, ", rate: 1gbit", ", capacity: once")
    st0 = steps.expand(dataclasses.replace(sc0, paths=[dataclasses.replace(
        sc0.paths[0], rtts_s=[0.0, 0.02, 0.0, 0.12])]))
    assert [pathcheck.capacity_source(st0, s, "once") for s in st0] == [None, None, 0, 1]
    assert [pathcheck.capacity_source(st, s, "each-step") for s in st] == [None] * 5
    for extra in (", loss: 0.1%", ", jitter: 1ms", ", queue: 100",
                  ", gemodel: {p: 1%, r: 50%}"):
        sc2 = _scenario(tmp_path, extra, ", capacity: once")
        st2 = steps.expand(sc2)
        assert pathcheck.capacity_source(st2, st2[1], "once") is None, extra
    sc3 = _scenario(tmp_path, ", rate: 1gbit", ", capacity: once")   # a rate, BDP queue
    st3 = steps.expand(sc3)
    assert pathcheck.capacity_source(st3, st3[2], "once") == 0


def test_policy_keys_default_to_checking_everything_and_refuse_other_values(tmp_path) -> None:
    sc = _scenario(tmp_path)
    assert (sc.validation.capacity, sc.validation.after) == ("each-step", "full")
    with pytest.raises(InputError) as e:
        _scenario(tmp_path, validation=", after: sometimes")
    assert "after" in str(e.value) and "sometimes" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(InputError) as e:
        _scenario(tmp_path, validation=", capacity: twice")
    assert "capacity" in str(e.value) and "twice" in str(e.value)


class _Proc:
    """proc.run's stand-in: records each argv, answers ping with `ping` and iperf3 with
    one steady 9 Gbit/s run."""
    def __init__(self, ping: str | list[str]) -> None:
        self.pings = list(ping) if isinstance(ping, list) else None
        self.ping, self.calls = ping, []

    def __call__(self, argv, **kw) -> Result:
        self.calls.append(argv[0])
        ping = self.pings.pop(0) if self.pings else self.ping
        out = ping if argv[0] == "ping" else IPERF
        return Result(list(argv), 0, out, "", 0.1, 0.0, 0.0)


def _check(monkeypatch, ping: str | list[str], v=None, **kw) -> tuple[dict, list[str]]:
    fake = _Proc(ping)
    monkeypatch.setattr(pathcheck.proc, "run", fake)
    monkeypatch.setattr(pathcheck, "_window_here", lambda ns: (None, None))
    monkeypatch.setattr(pathcheck, "RECHECK_PAUSE_S", 0.0)
    v = v or scenario.Validation()
    row = pathcheck.validate_path(client_ns=None, server_addr="198.18.0.6", iperf_port=5201,
                                  configured_rtt_ms=120.0, v=v, **kw)
    return row, fake.calls


def test_a_ping_only_check_runs_no_iperf3_and_carries_the_reused_capacity(monkeypatch) -> None:
    row, calls = _check(monkeypatch, PING_OK, ping_only="validation.capacity: once",
                        reused=(1, 14e9))
    assert calls == ["ping"]
    assert row["capacity_bps"] == 14e9 and row["capacity_note"] is None
    assert row["iperf_bps"] is None and not row["flagged"]
    assert json.loads(row["raw"])["capacity_from_step"] == 1
    row, calls = _check(monkeypatch, PING_OK, ping_only="validation.after: ping")
    assert calls == ["ping"] and row["capacity_bps"] is None
    assert row["capacity_note"] == "not measured: validation.after: ping"


def test_a_flagged_ping_or_a_late_engine_runs_the_capacity_run_anyway(monkeypatch) -> None:
    row, calls = _check(monkeypatch, PING_OFF, ping_only="validation.after: ping")
    assert calls == ["ping", "ping", "ping", "iperf3"] and row["flagged"]
    assert row["capacity_bps"] == 9e9
    assert json.loads(row["raw"])["capacity_run_because"] == "the ping flagged the step"
    row, calls = _check(monkeypatch, PING_OK, ping_only="validation.after: ping",
                        escalate="the engine was late during the transfers")
    assert calls == ["ping", "iperf3"] and not row["flagged"] and row["capacity_bps"] == 9e9
    row, calls = _check(monkeypatch, PING_OK)               # each-step, full: as before
    assert calls == ["ping", "iperf3"] and json.loads(row["raw"])["capacity_run_because"] is None


def test_a_ping_off_the_rtt_is_taken_again_and_every_attempt_is_kept(monkeypatch) -> None:
    """validation.rtt_rechecks: off once then on the RTT is a transient the row keeps (not
    flagged); off every time flags the step, with the last attempt's numbers; 0 re-checks
    flags at the first."""
    row, calls = _check(monkeypatch, [PING_OFF, PING_OK], ping_only="validation.after: ping")
    assert calls == ["ping", "ping"] and not row["flagged"]
    attempts = json.loads(row["raw"])["ping_attempts"]
    assert [a["flag"] is not None for a in attempts] == [True, False]
    assert "taken 2 times" in pathcheck.retaken(row["raw"])
    row, calls = _check(monkeypatch, [PING_OFF] * 3)
    assert calls == ["ping", "ping", "ping", "iperf3"] and row["flagged"]
    assert "vs configured 120.000 ms" in row["flag_reason"]
    assert len(json.loads(row["raw"])["ping_attempts"]) == 3
    v0 = scenario.Validation(rtt_rechecks=0)
    row, calls = _check(monkeypatch, [PING_OFF, PING_OK], v=v0)
    assert calls == ["ping", "iperf3"] and row["flagged"]
    assert pathcheck.retaken(row["raw"]) is None
    row, calls = _check(monkeypatch, PING_OK)
    assert calls == ["ping", "iperf3"] and pathcheck.retaken(row["raw"]) is None


def _capacity_runs(sc, check: str) -> int:
    """Checks (ids ending in `check`) whose lines hold an iperf3 capacity run."""
    return sum(1 for a in build_plan(sc).actions if a.id.endswith(check) and any(
        "iperf3" in i.argv and "-c" in i.argv for i in a.items))


def test_the_plan_says_which_checks_run_iperf3(tmp_path) -> None:
    sc = scenario.load(QUICK)                     # the quick run: once, ping
    once = "\n".join(plan_lines(sc))
    assert _capacity_runs(sc, "check-before") == 2        # 0 ms (no delay line) and 20 ms
    assert once.count("# capacity: step 2's (validation.capacity: once") == 2
    # after the transfers: the ping, the capacity run shown as what a flag adds
    assert once.count("the capacity run too if the ping or the engine's counters flag "
                      "the step (validation.after: ping)") == 4
    f = tmp_path / "q.yaml"
    f.write_text(QUICK.read_text().replace("  capacity: once\n", "").replace(
        "  after: ping\n", ""))
    full = scenario.load(f)
    assert _capacity_runs(full, "check-before") == 4
    assert "\n".join(plan_lines(full)).count("(validation.after: full)") == 4
