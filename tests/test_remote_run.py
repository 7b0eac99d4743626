"""A real path between two hosts, end to end: the servers (nginx, rig-fdt) and the
path's iperf3 server run on "dtn1", an OpenSSH server in a namespace this test creates
(tests/sshhost.py), reached only over SSH; the clients run here. Then a run killed with
SIGKILL, and `rig clean` removing what it left on dtn1.
"""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rig.orchestration import clean
from rig.realization import netns

from sshhost import pids_with, ssh_host, start_run

pytestmark = pytest.mark.e2e
RIG = [sys.executable, "-m", "rig"]
SIZE = 32 << 20


@pytest.fixture(scope="module")
def dtn1(tmp_path_factory, require_tools_module):
    with ssh_host(tmp_path_factory.mktemp("dtn1")) as h:
        yield h


@pytest.fixture(scope="module")
def require_tools_module():
    import shutil
    missing = [t for t in ("sshd", "ssh", "nginx", "curl", "iperf3")
               if not shutil.which(t) and not Path("/usr/sbin", t).exists()]
    assert not missing, f"missing tools (make install): {missing}"


def _scenario(tmp: Path, h, *, iperf_s: int = 1, repeats: int = 1) -> Path:
    f = tmp / "two-hosts.yaml"
    f.write_text(f"""name: two-hosts-test
topology: host
hosts:
  dtn1: {{ssh: "root@{h.addr}", identity: "{h.identity}", known_hosts: "{h.known_hosts}"}}
paths:
  - {{name: loop, kind: real, server_host: dtn1, server_addr: "{h.addr}"}}
files: [{{name: f32, size: 32MiB}}]
servers: [{{name: ng, kind: nginx}}, {{name: fdt, kind: fdt}}]
clients:
  - {{name: curl, tool: curl, file: f32, server: ng}}
  - {{name: fdt-4, tool: fdt, streams: 4, file: f32, server: fdt}}
validation: {{ping_count: 5, iperf_duration: {iperf_s}s, iperf_streams: 2}}
sweep: {{repeats: {repeats}}}
transfer_timeout: 60s
""")
    return f


def _leftovers(prefix: str) -> list:
    return [*pids_with(f"/dev/shm/{prefix}"), *pids_with(f"/run/rig/{prefix}/ssh-"),
            *([f"/dev/shm/{prefix}"] if Path(f"/dev/shm/{prefix}").exists() else [])]


def test_servers_on_a_remote_host_clients_here(dtn1, tmp_path):
    out = tmp_path / "out"
    r = subprocess.run([*RIG, "run", str(_scenario(tmp_path, dtn1)), "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    prefix = json.loads(sqlite3.connect(out / "results.sqlite").execute(
        "SELECT value_json FROM environment WHERE key='prefix'").fetchone()[0])
    assert f"run directory /dev/shm/{prefix}" in r.stderr
    db = sqlite3.connect(out / "results.sqlite")
    db.row_factory = sqlite3.Row
    rows = db.execute("SELECT * FROM transfers ORDER BY rowid").fetchall()
    assert [x["client"] for x in rows] == ["curl", "fdt-4"]
    for x in rows:
        assert x["ok"] == 1, x["error"]
        assert x["bytes"] == SIZE
        assert (x["client_host"], x["server_host"]) == ("local", "dtn1")
        assert dtn1.addr in x["url"]
        assert 0 < x["cpu_user_s"] + x["cpu_sys_s"] < 30
    vals = db.execute("SELECT * FROM validations").fetchall()
    assert len(vals) == 2 and all(v["iperf_bps"] and v["iperf_bps"] > 1e8 for v in vals)
    env = {k: json.loads(v) for k, v in db.execute("SELECT key, value_json FROM environment")}
    assert env["hosts"]["dtn1"]["kernel"] == os.uname().release
    # the server's config and log came back from dtn1; nothing of the run is left there
    assert (out / "logs/dtn1/loop-ng/nginx.conf").read_text().count(f"/dev/shm/{prefix}/") >= 3
    cmds = (out / "commands.log").read_text()
    assert f"@dtn1 nginx -e /dev/shm/{prefix}/loop-ng/nginx-error.log" in cmds
    assert "@dtn1 iperf3 -s" in cmds
    assert not _leftovers(prefix), _leftovers(prefix)
    assert not (netns.STATE_DIR / f"{prefix}.json").exists()


def test_sigkill_then_rig_clean_cleans_the_remote_host(dtn1, tmp_path):
    out = tmp_path / "out"
    p, prefix = start_run(_scenario(tmp_path, dtn1, iperf_s=20), out,
                          "validate", "iperf3", "server fdt", dir_marker="run directory /dev/shm/")
    try:
        assert prefix, "the run did not reach dtn1"
        pids = Path(f"/dev/shm/{prefix}/pids")
        end = time.monotonic() + 60     # a hang guard: the run reaches its servers in seconds
        while not (pids / "loop-fdt.json").exists():
            assert p.poll() is None, "the run ended before it started server fdt on dtn1"
            if time.monotonic() > end:
                raise TimeoutError(f"no {pids / 'loop-fdt.json'} within 60 s")
            time.sleep(0.1)
        assert (pids / "loop-ng.json").exists()
    finally:
        os.kill(p.pid, signal.SIGKILL)       # only rig itself: its ssh children live on
        p.wait()
    time.sleep(0.5)
    assert _leftovers(prefix), "nothing to clean: the test would prove nothing"
    said: list[str] = []
    clean.clean(say=said.append, prefixes=[prefix])
    assert f"removed /dev/shm/{prefix} on host dtn1" in said, said
    # the remote servers go either with their channel (killing the local ssh master
    # closes it, the agent kills its group) or by their pid files: none may remain
    deadline = time.monotonic() + 5
    while _leftovers(prefix) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _leftovers(prefix), _leftovers(prefix)
    assert not (netns.STATE_DIR / f"{prefix}.json").exists()
