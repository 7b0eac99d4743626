"""The remote hosts of a run: how to reach them (rig.process.remote.Host from the
scenario's `hosts:`), the run's one SSH connection to each, its directory there
(`<rundir>/<prefix>`: server configs and logs, data files, pid files), and removing it.

The run records every host in its state file BEFORE it touches it, so `rig clean` can
clean the hosts a killed run touched (clean_host below). Durations are measured on the
host that runs a process; times of two hosts are never subtracted (clock offset is only
reported, by `rig doctor --host`). Must not import reports.
"""
from __future__ import annotations

import time
from pathlib import Path

from rig.description.scenario.document import Scenario
from rig.description.scenario.paths import HostSpec
from rig.errors import RigError
from rig.process import proc
from rig.process.remote import RUNDIR_RE, Host

CLEAN_TIMEOUT_S = 60.0


def make_host(name: str, h: HostSpec, control_path: str | None = None) -> Host:
    return Host(name=name, ssh=h.ssh, port=h.port, identity=h.identity,
                known_hosts=h.known_hosts, rundir_base=h.rundir, control_path=control_path)


def to_state(h: Host) -> dict:
    return {"ssh": h.ssh, "port": h.port, "identity": h.identity,
            "known_hosts": h.known_hosts, "rundir_base": h.rundir_base}


def from_state(name: str, d: dict) -> Host:
    return Host(name=name, ssh=d["ssh"], port=d["port"], identity=d.get("identity"),
                known_hosts=d.get("known_hosts"), rundir_base=d["rundir_base"])


def hosts_of(sc: Scenario, workdir: Path) -> dict[str, Host]:
    """Every remote host a path uses, each with its ControlMaster socket in workdir."""
    return {n: make_host(n, h, str(workdir / f"ssh-{n}")) for n, h in sc.remote_hosts().items()}


def required_tools(sc: Scenario, name: str) -> dict[str, str]:
    """Programs host `name` must have for the scenario -> the scenario key needing it."""
    from rig.services import servers, tools
    need: dict[str, str] = {"tar": "hosts (logs back)", "find": "hosts (logs back)"}
    for i, p in enumerate(sc.paths):
        if p.server_host == name:
            need.setdefault("iperf3", f"paths[{i}] (validation server)")
            for j, s in enumerate(sc.servers):
                argv = servers.get(s.kind).version_argv
                if argv:
                    need.setdefault(argv[0], f"servers[{j}].kind")
        if p.client_host == name:
            need.setdefault("ping", f"paths[{i}] (validation)")
            need.setdefault("iperf3", f"paths[{i}] (validation)")
            for j, c in enumerate(sc.clients):
                argv = tools.get(c.tool).version_argv
                if c.binary:
                    need.setdefault(c.binary, f"clients[{j}].binary")
                elif argv:
                    need.setdefault(argv[0], f"clients[{j}].tool")
        if name in (p.server_host, p.client_host) and sc.tuning.mtu != 1500:
            need.setdefault("ip", "tuning.mtu")
    return need


def check_tools(h: Host, sc: Scenario) -> None:
    """One line naming host and key when a program the scenario needs is not there."""
    need = required_tools(sc, h.name)
    got = proc.remote_op(h, {"op": "info", "tools": sorted(need)}, timeout=30)["tools"]
    missing = [t for t in need if not got.get(t)]
    if missing:
        raise RigError(f"host {h.name} ({h.ssh}): {missing[0]} not found there (needed by "
                       f"{need[missing[0]]})" + (f"; also missing: {', '.join(missing[1:])}"
                                                 if missing[1:] else ""))


def write_data(h: Host, rundir: str, files: list) -> str:
    """The scenario's files on h, same content as locally (same seeds, same generator
    as rig.realization.data.write_random); returns the data directory there."""
    d = f"{rundir}/data"
    for i, f in enumerate(files):
        proc.remote_op(h, {"op": "gen", "path": f"{d}/{f.name}", "size": f.size, "seed": i + 1},
                       timeout=60 + f.size / 50e6)
    return d


def fetch_logs(h: Host, rundir: str, dest: Path) -> None:
    """The host's server configs and logs (not its data) into dest/<host>/."""
    try:
        res = proc.run(["find", rundir, "-maxdepth", "2", "-type", "f",
                        "(", "-name", "*.log", "-o", "-name", "*.conf", "-o", "-name", "*.cfg",
                        ")", "-size", "-16M"], timeout=30, host=h)
        files = [ln for ln in res.stdout.splitlines() if ln.startswith(rundir + "/")
                 and "/data/" not in ln]
        if not files:
            return
        proc.fetch_tree(h, rundir, dest / h.name, timeout=60,
                        members=[f[len(rundir) + 1:] for f in files])
    except (RigError, OSError):
        pass   # logs are a courtesy; cleaning the host is not


def clean_host(h: Host, rundir: str) -> dict:
    """Kill every process the run's pid files name on h, remove its directory."""
    import posixpath
    if not RUNDIR_RE.fullmatch(rundir) or posixpath.normpath(rundir) != rundir \
            or "/../" in rundir + "/":
        raise RigError(f"host {h.name}: refusing to remove {rundir!r} (not a rig run directory)")
    return proc.remote_op(h, {"op": "clean", "rundir": rundir, "grace": proc.GRACE_S},
                          timeout=CLEAN_TIMEOUT_S)



def doctor(h: Host, sysctls: tuple[str, ...], version_argvs: dict[str, list[str]]) -> dict:
    """What `rig doctor --host` reports: kernel, netem, tools and versions, buffer limits,
    and the clock offset (remote minus local, bounded by half the round trip)."""
    t0 = time.time()
    info = proc.remote_op(h, {"op": "info", "sysctls": list(sysctls),
                              "tools": sorted({a[0] for a in version_argvs.values()})},
                          timeout=30)
    t1 = time.time()
    info["clock_offset_s"] = info["time"] - (t0 + t1) / 2
    info["clock_offset_bound_s"] = (t1 - t0) / 2
    versions: dict[str, str | None] = {}
    for name, argv in version_argvs.items():
        if not info["tools"].get(argv[0]):
            versions[name] = None
            continue
        r = proc.run(argv, timeout=15, host=h)
        text = (r.stdout + "\n" + r.stderr).strip()
        import re
        m = re.search(r"v?(\d+\.\d+(?:\.\d+)?(?:[-.\w]*)?)", text)
        versions[name] = m.group(0) if m else (text.splitlines()[0][:80] if text else "unknown")
    info["versions"] = versions
    return info
