"""No silent trap (issue 41 item 3): a value that means something else than it seems is
refused in one line naming the file, the key path and the value, and a sweep axis that
does not reach a client is said in the plan and the run's progress. Each rule is tried
where the answer is no and where it is yes. Pure: nothing runs."""
import copy
import types

import pytest

from rig.description import scenario, steps
from rig.errors import InputError
from rig.orchestration.context import Context
from rig.orchestration.plan import plan_lines

BASE = {"name": "t", "paths": [{"name": "wan", "rtt": ["0ms", "20ms"]}],
        "files": [{"name": "f", "size": "1MiB"}],
        "servers": [{"name": "x", "kind": "xrootd"}, {"name": "s", "kind": "sshd"}],
        "clients": [{"name": "a", "tool": "xrdcp", "file": "f"},
                    {"name": "c", "tool": "curl", "file": "f"}]}


def _doc(**top) -> dict:
    d = copy.deepcopy(BASE)
    d.update(copy.deepcopy(top))
    return d


def _parse(d: dict) -> scenario.Scenario:
    return scenario.parse(d, source="s.yaml")


def _refused(d: dict) -> str:
    with pytest.raises(InputError) as e:
        _parse(d)
    msg = str(e.value)
    assert msg.startswith("s.yaml: ") and "\n" not in msg, msg
    return msg


def _streams(sc: scenario.Scenario) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for g in steps.groups(sc, sc.paths[0]):
        out.setdefault(g.client.name, set()).add(g.streams)
    return out


# --- a client's own streams and sweep.streams ------------------------------------------
def test_a_clients_own_streams_under_sweep_streams_is_refused_with_the_way_to_write_it():
    d = _doc(sweep={"streams": [1, 8]})
    d["clients"][0]["streams"] = 4
    assert _refused(d) == (
        "s.yaml: clients[0].streams: client a's own streams and sweep.streams [1, 8] conflict "
        "(the sweep would replace it): remove streams to sweep it, or keep it with the "
        "client's own sweep: {streams: [4]} (got 4)")


def test_a_client_stating_streams_1_is_refused_too():
    """Even the default, written: the sweep would replace it all the same."""
    d = _doc(sweep={"streams": [1, 8]})
    d["clients"][0]["streams"] = 1
    assert "clients[0].streams: client a's own streams and sweep.streams" in _refused(d)


def test_without_its_own_streams_the_client_is_swept():
    assert _streams(_parse(_doc(sweep={"streams": [1, 8]})))["a"] == {1, 8}


def test_the_way_the_error_says_keeps_the_clients_streams_beside_the_sweep():
    d = _doc(sweep={"streams": [1, 8]})
    d["clients"].append({"name": "a4", "tool": "xrdcp", "file": "f",
                         "sweep": {"streams": [4]}})
    got = _streams(_parse(d))
    assert got["a"] == {1, 8} and got["a4"] == {4}


def test_own_streams_without_a_sweep_is_kept():
    d = _doc()
    d["clients"][0]["streams"] = 4
    assert _streams(_parse(d))["a"] == {4}


def test_a_clients_streams_and_its_own_sweep_streams_is_refused():
    d = _doc()
    d["clients"][0].update(streams=4, sweep={"streams": [1, 8]})
    assert _refused(d) == ("s.yaml: clients[0].streams: client a's streams and its own "
                           "sweep.streams [1, 8] conflict (the sweep would replace it): keep "
                           "one (got 4)")


def test_a_single_stream_clients_streams_1_beside_sweep_streams_is_accepted():
    """The sweep does not replace it (curl runs one stream whatever the sweep): no
    conflict, and the plan says the sweep does not reach it."""
    d = _doc(sweep={"streams": [1, 8]})
    d["clients"][1]["streams"] = 1
    assert _streams(_parse(d))["c"] == {1}


# --- an axis a client cannot honour ----------------------------------------------------
def test_a_clients_own_sweep_axis_it_cannot_honour_is_refused():
    d = _doc()
    d["clients"][1]["sweep"] = {"streams": [1, 4]}
    assert _refused(d) == ("s.yaml: clients[1].sweep.streams[1]: curl supports at most 1 "
                           "stream(s) (got 4)")


def test_a_clients_own_sweep_axis_it_can_honour_is_accepted():
    d = _doc()
    d["clients"][1]["sweep"] = {"streams": [1]}
    assert _streams(_parse(d))["c"] == {1}


def test_sweep_streams_no_client_takes_is_refused():
    d = _doc(sweep={"streams": [1, 8]})
    d["clients"] = [BASE["clients"][1]]
    assert _refused(d) == (
        "s.yaml: sweep.streams: no client takes it: each has one stream or its own "
        "sweep.streams (several streams: fdt, iperf3, xrdcl, xrdcp) (got [1, 8])")


def test_sweep_streams_only_clients_with_their_own_take_is_refused():
    d = _doc(sweep={"streams": [1, 8]})
    d["clients"][0]["sweep"] = {"streams": [2]}
    assert "sweep.streams: no client takes it" in _refused(d)


def test_sweep_branches_no_client_reads_is_refused():
    assert _refused(_doc(sweep={"branches": ["10%", "100%"]})) == (
        "s.yaml: sweep.branches: no client takes it: only replay reads branches, and a "
        "client's own branches: keeps it (got ['10%', '100%'])")


def _replay_doc(**client) -> dict:
    d = _doc(sweep={"branches": ["10%", "100%"]})
    d["files"] = [{"name": "aod", "kind": "root", "size": "16MiB"}]
    d["clients"] = [{"name": "r", "tool": "replay", "mode": "storage", "library": "xrootd",
                     "server": "x", "file": "aod", **client},
                    {"name": "a", "tool": "xrdcp", "file": "aod"}]
    return d


def test_sweep_branches_a_replay_client_reads_is_accepted_and_said_for_the_others():
    sc = _parse(_replay_doc())
    assert scenario.sweep_notes(sc) == [
        "client a: sweep.branches [10%, 100%] not applied: only replay reads branches"]


def test_sweep_branches_every_replay_keeps_its_own_is_refused():
    assert "sweep.branches: no client takes it" in _refused(_replay_doc(branches="100%"))


NOTES_DOC = {
    "servers": [{"name": "x", "kind": "xrootd"}, {"name": "s", "kind": "sshd"}],
    "clients": [{"name": "a", "tool": "xrdcp", "file": "f"},
                {"name": "c", "tool": "curl", "file": "f"},
                {"name": "w", "tool": "wget", "file": "f", "tls": "off"},
                {"name": "p", "tool": "scp", "server": "s", "file": "f"},
                {"name": "d", "tool": "davix-get", "file": "f", "direction": "download"}],
    "sweep": {"streams": [1, 8], "tls": ["off", "control", "all"],
              "direction": ["download", "upload"]},
}


def test_every_axis_a_client_does_not_run_is_said_with_its_reason():
    sc = _parse(_doc(**NOTES_DOC))
    assert scenario.sweep_notes(sc) == [
        "client c: sweep.streams [1, 8] not applied: curl has one stream",
        "client c: sweep.tls control not applied: curl cannot use TLS mode control",
        "client w: sweep.streams [1, 8] not applied: wget has one stream",
        "client w: sweep.tls [off, control, all] not applied: own tls: off",
        "client w: sweep.direction upload not applied: wget does not upload",
        "client p: sweep.streams [1, 8] not applied: scp has one stream",
        "client p: sweep.tls control, all not applied: server s (sshd) serves no TLS",
        "client d: sweep.streams [1, 8] not applied: davix-get has one stream",
        "client d: sweep.tls control not applied: davix-get cannot use TLS mode control",
        "client d: sweep.direction [download, upload] not applied: own direction: download",
    ]


def test_a_client_every_axis_reaches_gets_no_note():
    sc = _parse(_doc(**NOTES_DOC))
    assert not [n for n in scenario.sweep_notes(sc) if n.startswith("client a:")]
    only_xrdcp = _parse(_doc(sweep={"streams": [1, 8]}, clients=[BASE["clients"][0]]))
    assert scenario.sweep_notes(only_xrdcp) == []


def test_clients_with_one_reason_share_a_line():
    d = _doc(sweep={"streams": [1, 8]})
    d["clients"] += [{"name": f"c{i}", "tool": "curl", "file": "f"} for i in range(7)]
    assert scenario.sweep_notes(_parse(d)) == [
        "clients c, c0, c1, c2, c3 and 3 more: sweep.streams [1, 8] not applied: curl has "
        "one stream"]


def test_the_plan_says_the_notes_at_its_top():
    lines = plan_lines(_parse(_doc(sweep={"streams": [1, 8]})))
    assert lines[1] == "# client c: sweep.streams [1, 8] not applied: curl has one stream"
    assert not any("not applied" in ln for ln in plan_lines(_parse(_doc())))


def test_the_run_says_the_notes_as_its_sweep_starts():
    said: list[str] = []
    sc = _parse(_doc(sweep={"streams": [1, 8]}))
    all_steps = steps.expand(sc)
    fake = types.SimpleNamespace(
        sc=sc, swept=False, all_steps=all_steps, lives=[], say=said.append,
        store=types.SimpleNamespace(set_env=lambda *a: None),
        reporter=types.SimpleNamespace(start=lambda n, kinds=(): None))
    Context.step_of(fake, types.SimpleNamespace(step=0))      # type: ignore[arg-type]
    assert said == ["note: client c: sweep.streams [1, 8] not applied: curl has one stream"]
    Context.step_of(fake, types.SimpleNamespace(step=1))      # type: ignore[arg-type]
    assert len(said) == 1                                     # once, as the sweep starts


# --- units and words --------------------------------------------------------------------
def _path(**keys) -> dict:
    d = _doc()
    d["paths"][0].update(keys)
    return d


@pytest.mark.parametrize("value, words", [
    (0.5, "paths[0].loss: a bare number is ambiguous: write a percentage, '50%' for 0.5 as "
          "a fraction or '0.5%' (got 0.5)"),
    ("0.5", "'50%' for 0.5 as a fraction or '0.5%'"),
    (-0.5, "paths[0].loss: must be between 0% and 100%: not negative (got -0.5)"),
    ("-0.5%", "paths[0].loss: must be between 0% and 100%: not negative (got '-0.5%')"),
    ("150%", "paths[0].loss: must be between 0% and 100% (got '150%')"),
])
def test_a_loss_that_is_not_a_percentage_is_refused_with_the_unit(value, words):
    assert words in _refused(_path(loss=value))


@pytest.mark.parametrize("value, want", [("0.5%", 0.005), (0, 0.0), ("0%", 0.0)])
def test_a_loss_written_as_a_percentage_is_accepted(value, want):
    assert _parse(_path(loss=value)).paths[0].loss == pytest.approx(want)


@pytest.mark.parametrize("value, words", [
    (100, "paths[0].rate: give a unit, e.g. '100mbit' or '100gbit' (a bare number is "
          "refused) (got 100)"),
    ("100", "paths[0].rate: a bare number is ambiguous (tc reads bytes/s): add a unit, "
            "e.g. '100mbit'"),
    ("100mbps", "write '100mbit' for bits per second"),
])
def test_a_rate_without_its_unit_is_refused_with_the_unit(value, words):
    assert words in _refused(_path(rate=value))


def test_a_rate_with_its_unit_is_accepted():
    assert _parse(_path(rate="100mbit")).paths[0].rate_bps == pytest.approx(1e8)


@pytest.mark.parametrize("where, key, meant", [
    ("paths", "bandwidth", "rate"), ("paths", "bw", "rate"), ("paths", "delay", "rtt"),
    ("paths", "latency", "rtt"), ("clients", "parallel", "streams"),
    ("clients", "threads", "streams")])
def test_an_unknown_key_suggests_the_key_it_means(where, key, meant):
    d = _doc()
    d[where][0][key] = 4
    assert f"s.yaml: {where}[0].{key}: unknown key (did you mean {meant}?)" in _refused(d)


def test_an_unknown_key_that_is_no_synonym_lists_what_is_known():
    d = _path(rat="1gbit")
    msg = _refused(d)
    assert "did you mean" not in msg and "closest known: rate" in msg
