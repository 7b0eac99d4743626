"""The studies' tuning (issue 29 item 3): seed 000's list as a profile, the keys it needs,
2 GiB buffers written as the C int sysctls take them, and a kernel that lacks a key:
refused when the scenario wrote it, left out and said when a profile brought it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rig.description import schema as S
from rig.description.tuningspec import INT_MAX, PROFILES, Tuning
from rig.errors import InputError
from rig.process import proc
from rig.realization import tuning

RIG = [sys.executable, "-m", "rig"]
REPO = Path(__file__).resolve().parent.parent


def _t(doc: dict) -> Tuning:
    return S.load(S.Ctx("t.yaml", "tuning"), doc, Tuning)


def test_the_seed_000_profile_is_the_study_s_list_verbatim():
    t = _t({"profile": "seed-000"})
    want = {**tuning.global_wanted(t), **tuning.ns_wanted(t)}
    assert want == {                          # seed 000 §3, as printed there
        "net.ipv4.tcp_wmem": "4096 65536 2147483647",
        "net.ipv4.tcp_rmem": "4096 87380 2147483647",
        "net.core.rmem_max": "2147483647", "net.core.wmem_max": "2147483647",
        "net.core.default_qdisc": "fq", "net.ipv4.tcp_congestion_control": "bbr",
        "net.ipv4.tcp_mtu_probing": "1", "net.core.optmem_max": "1048576"}
    assert set(t.from_profile) == set(PROFILES["seed-000"]) and not t.required("optmem_max")


def test_a_key_written_beside_the_profile_wins_and_is_required():
    t = _t({"profile": "seed-000", "congestion_control": "cubic", "optmem_max": "512KiB"})
    assert (t.congestion_control, t.optmem_max) == ("cubic", 512 << 10)
    assert t.required("congestion_control") and t.required("optmem_max")
    assert not t.required("default_qdisc")


def test_buffers_up_to_2_gib_are_written_as_int_max():
    t = _t({"tcp_rmem_max": "2GiB", "tcp_wmem_max": "2GiB", "tcp_wmem_default": "1MiB",
            "core_rmem_max": "2GiB", "tcp_fastopen": 3})
    assert tuning.ns_wanted(t)["net.ipv4.tcp_wmem"] == f"4096 1048576 {INT_MAX}"
    assert tuning.ns_wanted(t)["net.ipv4.tcp_fastopen"] == "3"
    assert tuning.global_wanted(t)["net.core.rmem_max"] == str(INT_MAX)


@pytest.mark.parametrize("doc, key", [
    ({"tcp_rmem_max": "3GiB"}, "tuning.tcp_rmem_max"),
    ({"tcp_wmem_default": "1MiB"}, "tuning.tcp_wmem_default"),      # needs tcp_wmem_max
    ({"tcp_mtu_probing": 3}, "tuning.tcp_mtu_probing"),
    ({"tcp_fastopen": -1}, "tuning.tcp_fastopen"),
    ({"optmem_max": "1KiB"}, "tuning.optmem_max"),
    ({"default_qdisc": "netem"}, "tuning.default_qdisc"),
    ({"profile": "seed-999"}, "tuning.profile"),
])
def test_bad_tuning_is_one_line_naming_the_key(doc, key):
    with pytest.raises(InputError) as e:
        _t(doc)
    assert e.value.key == key and "\n" not in str(e.value)


def test_a_lacking_key_stops_the_run_if_written_and_is_left_out_if_from_a_profile(monkeypatch):
    monkeypatch.setattr(tuning, "_lacks", lambda t: {"default_qdisc": "this kernel has no fq"})
    with pytest.raises(InputError) as e:
        tuning.as_far_as_kernel_allows(_t({"default_qdisc": "fq"}), "s.yaml")
    assert (e.value.file, e.value.key, e.value.value) == ("s.yaml", "tuning.default_qdisc", "fq")
    t, lacking = tuning.as_far_as_kernel_allows(_t({"profile": "seed-000"}), "s.yaml")
    assert t.default_qdisc is None and lacking == {"default_qdisc": "this kernel has no fq"}
    assert "net.core.default_qdisc" not in tuning.global_wanted(t)


def _lacked_qdisc() -> str | None:
    """A qdisc of the allowed list this kernel cannot load (this VM: fq, fq_codel...)."""
    for q in ("fq", "fq_codel", "cake", "fq_pie", "sfq"):
        if not proc.run(["unshare", "--net", "--", "tc", "qdisc", "add", "dev", "lo", "root", q],
                        timeout=10).ok:
            return q
    return None


@pytest.mark.netns
def test_net_up_applies_the_profile_as_far_as_the_kernel_allows(tmp_path):
    name = f"t{os.getpid()}p"
    f = tmp_path / "t.yaml"
    f.write_text("tuning: {profile: seed-000}\n")
    r = subprocess.run([*RIG, "net", "up", "--name", name, "--rtt", "10ms", "--tuning", str(f)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout.strip().splitlines()[-1])
    try:
        got = {k: " ".join(proc.run(["sysctl", "-n", k], netns=info["client_ns"],
                                    timeout=10).stdout.split())
               for k in ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.ipv4.tcp_mtu_probing",
                         "net.core.optmem_max", "net.ipv4.tcp_congestion_control")}
        assert got == {"net.ipv4.tcp_rmem": "4096 87380 2147483647",
                       "net.ipv4.tcp_wmem": "4096 65536 2147483647",
                       "net.ipv4.tcp_mtu_probing": "1", "net.core.optmem_max": "1048576",
                       "net.ipv4.tcp_congestion_control": "bbr"}
        # host-global keys are never written by a path left running: said, not applied
        left = info["tuning_not_applied"]
        assert {"core_rmem_max", "core_wmem_max", "default_qdisc"} <= set(left), left
    finally:
        r = subprocess.run([*RIG, "net", "down", "--name", name], capture_output=True,
                           text=True, timeout=60)
    assert r.returncode == 0, r.stderr


@pytest.mark.netns
def test_a_required_qdisc_the_kernel_lacks_is_one_line_exit_2_nothing_left(tmp_path):
    q = _lacked_qdisc()
    if q is None:
        pytest.skip("this kernel loads every qdisc the test would ask for")
    scen = tmp_path / "s.yaml"
    scen.write_text((REPO / "tests/data/scenarios/real-loopback.yaml").read_text()
                    .replace("transfer_timeout: 60s", f"transfer_timeout: 60s\ntuning: "
                             f"{{default_qdisc: {q}}}"))
    before = Path("/proc/sys/net/core/default_qdisc").read_text()
    r = subprocess.run([*RIG, "run", str(scen), "--out", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert f"tuning.default_qdisc: this kernel has no {q} qdisc" in line and str(scen) in line
    assert Path("/proc/sys/net/core/default_qdisc").read_text() == before


@pytest.mark.e2e
def test_a_run_with_the_profile_applies_what_the_kernel_has_and_restores_the_host(tmp_path):
    scen = tmp_path / "p.yaml"
    scen.write_text("name: profile\npaths:\n  - {name: wan, rtt: [10ms]}\n"
                    "files: [{name: f16M, size: 16MiB}]\nservers: [{name: nginx, kind: nginx}]\n"
                    "clients: [{name: curl, tool: curl, server: nginx, file: f16M}]\n"
                    "validation: {ping_count: 10, iperf_duration: 1s, iperf_streams: 1}\n"
                    "tuning: {profile: seed-000}\ntransfer_timeout: 60s\n")
    keys = ("net.core.rmem_max", "net.core.wmem_max", "net.core.default_qdisc",
            "net.ipv4.tcp_allowed_congestion_control")
    before = tuning.read(keys)
    out = tmp_path / "out"
    r = subprocess.run([*RIG, "run", str(scen), "--out", str(out)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    from rig.results.store import Store
    st = Store.open(out)
    lacking = st.environment()["tuning_not_applied"]
    q = _lacked_qdisc()
    assert ("default_qdisc" in lacking) == (q == "fq"), lacking
    if "default_qdisc" in lacking:
        assert "tuning: default_qdisc not applied (this kernel has no fq qdisc" in r.stderr
    row = st.transfers()[0]
    assert row.ok and row.congestion_control == "bbr" and row.tcp_rmem_max == INT_MAX
    assert tuning.read(keys) == before          # host-global values put back


# ---- a path's own tuning: two paths of one run tuned differently (seed 000's E4) ---------

def _two_paths(tmp_path, own: str, scenario_tuning: str = "{}") -> Path:
    f = tmp_path / "two.yaml"
    f.write_text("name: two\npaths:\n  - {name: default, rtt: [0ms]}\n"
                 f"  - {{name: tuned, rtt: [0ms], tuning: {own}}}\n"
                 "files: [{name: f, size: 1MiB}]\nservers: [{name: x, kind: xrootd}]\n"
                 f"clients: [{{name: c, tool: xrdcp, file: f}}]\ntuning: {scenario_tuning}\n")
    return f


def test_a_path_s_own_tuning_goes_over_the_scenario_s_in_its_namespaces_only(tmp_path):
    from rig.description import scenario
    sc = scenario.load(_two_paths(tmp_path, "{profile: seed-000, tcp_fastopen: 3}",
                                  "{tcp_rmem_max: 16MiB, tcp_wmem_max: 16MiB, "
                                  "core_rmem_max: 16MiB, tcp_fastopen: 1}"))
    default, tuned = (scenario.path_tuning(sc, p) for p in sc.paths)
    assert default == sc.tuning
    assert tuning.ns_wanted(tuned) == {
        "net.ipv4.tcp_rmem": "4096 87380 2147483647", "net.ipv4.tcp_wmem": "4096 65536 2147483647",
        "net.ipv4.tcp_congestion_control": "bbr", "net.ipv4.tcp_mtu_probing": "1",
        "net.core.optmem_max": "1048576", "net.ipv4.tcp_fastopen": "3"}
    # host-global: the scenario's, for every path (the profile's 2 GiB and fq left out)
    assert tuning.global_wanted(tuned) == tuning.global_wanted(sc.tuning) == {
        "net.core.rmem_max": str(16 << 20)}
    assert not tuned.required("optmem_max") and tuned.required("tcp_fastopen")
    assert sc.paths[1].tuning.default_qdisc is None
    # the plan tunes each path's namespaces its own way, and lets bbr in for the host
    from rig.orchestration import plan as rplan
    lines = rplan.plan_lines(sc)
    assert "ip netns exec rig0000-1c sysctl -q -w net.ipv4.tcp_congestion_control=bbr" in lines
    assert not any("rig0000-0c" in x and "congestion_control=" in x for x in lines)
    assert any("tcp_allowed_congestion_control" in x and x.endswith(" bbr'") for x in lines)


@pytest.mark.parametrize("own, key, msg", [
    ("{core_rmem_max: 1GiB}", "paths[1].tuning.core_rmem_max", "host-global"),
    ("{default_qdisc: fq}", "paths[1].tuning.default_qdisc", "host-global"),
    ("{mtu: 9000}", "paths[1].tuning.mtu", "its own mtu: key"),
    ("{tcp_rmem_max: 4MiB}", "paths[1].tuning",
     "tcp_rmem_default 16MiB above tcp_rmem_max 4MiB once over the scenario's"),
    ("{congestion_control: vegas}", "paths[1].tuning.congestion_control", "must be one of"),
])
def test_bad_path_tuning_is_one_line_naming_the_key(tmp_path, own, key, msg):
    from rig.description import scenario
    f = _two_paths(tmp_path, own, "{tcp_rmem_max: 64MiB, tcp_rmem_default: 16MiB}")
    with pytest.raises(InputError) as e:
        scenario.load(f)
    assert (e.value.key, e.value.file) == (key, str(f)) and msg in str(e.value), str(e.value)


def test_a_real_path_has_no_tuning_of_its_own(tmp_path):
    from rig.description import scenario
    f = tmp_path / "r.yaml"
    f.write_text("name: r\npaths: [{name: lo, kind: real, server_addr: 127.0.0.1, "
                 "tuning: {congestion_control: bbr}}]\nfiles: [{name: f, size: 1MiB}]\n"
                 "servers: [{name: x, kind: xrootd}]\nclients: [{name: c, tool: xrdcp, file: f}]\n")
    with pytest.raises(InputError) as e:
        scenario.load(f)
    assert e.value.key == "paths[0].tuning" and "namespaces this host builds" in str(e.value)


@pytest.mark.e2e
def test_two_paths_of_one_run_tuned_differently(tmp_path, run_rig):
    """Each path's rows carry what its own namespaces held: the tuned path the study's
    2 GiB and bbr, the other the kernel's defaults; the host's sysctls put back."""
    scen = tmp_path / "two.yaml"
    scen.write_text("name: two\npaths:\n  - {name: default, rtt: [0ms]}\n"
                    "  - {name: tuned, rtt: [0ms], tuning: {profile: seed-000}}\n"
                    "files: [{name: f8M, size: 8MiB}]\nservers: [{name: nginx, kind: nginx}]\n"
                    "clients: [{name: curl, tool: curl, server: nginx, file: f8M}]\n"
                    "validation: {ping_count: 5, iperf_duration: 1s, iperf_streams: 1}\n"
                    "transfer_timeout: 60s\n")
    keys = ("net.core.rmem_max", "net.core.wmem_max", "net.core.default_qdisc",
            "net.ipv4.tcp_allowed_congestion_control")
    before = tuning.read(keys)
    st = run_rig(scen, tmp_path / "out", timeout=300)
    rows = {x.path: x for x in st.transfers()}
    assert rows["tuned"].ok and rows["default"].ok
    assert (rows["tuned"].congestion_control, rows["tuned"].tcp_rmem_max) == ("bbr", INT_MAX)
    assert rows["default"].tcp_rmem_max < INT_MAX
    assert st.environment()["path_tuning"]["tuned"]["profile"] == "seed-000"
    assert tuning.read(keys) == before
