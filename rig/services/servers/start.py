"""Starting servers: write a plan's configs, start it as a rig.process.proc.Service in its
namespace, probe its ports against a deadline (never a sleep).

Must not import orchestration or reports.
"""
from __future__ import annotations

import os
import pwd
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig.process import nsprobe, proc
from rig.errors import RigError
from rig.services.servers import ServerPlan, iperf3_server_argv

READY_TIMEOUT_S = 20.0


@dataclass
class RunningServer:
    plan: ServerPlan
    service: proc.Service

    def alive(self) -> bool:
        return self.service.alive()

    def stop(self) -> None:
        self.service.stop()


def _chown_tree(path: Path, user: str) -> None:
    pw = pwd.getpwnam(user)
    for root, dirs, files in os.walk(path):
        for n in [root, *(os.path.join(root, d) for d in dirs),
                  *(os.path.join(root, f) for f in files)]:
            os.chown(n, pw.pw_uid, pw.pw_gid)


def start_server(p: ServerPlan, local_dir: Path | None = None,
                 cgroup: Path | None = None) -> RunningServer:
    """Write configs, start, wait until every port accepts. Raises RigError (with the
    server's log tail) when it does not come up; nothing is left running then.
    On a remote host (p.host) the configs go to p.workdir there; its stdout comes back
    to local_dir/stdout.log. `cgroup`: its CPU set as a cgroup (instead of taskset)."""
    if p.host is not None:
        return _start_remote(p, local_dir or Path("/dev/null"))
    refuse_taken_ports(p.ns, p.addr, p.ports, f"server {p.origin} ({p.spec.kind})")
    kind = p.kind
    if p.workdir.exists():
        shutil.rmtree(p.workdir)
    p.workdir.mkdir(parents=True)
    (p.workdir / "tmp").mkdir()
    for argv in kind.prepare_argv(p):          # e.g. sshd's per-run keys
        proc.run(argv, timeout=30, check=True)
    for name, text in kind.files(p).items():
        f = p.workdir / name
        f.touch(mode=0o600 if name in kind.private else 0o644)   # xrootd refuses a readable key
        f.write_text(text)
    if kind.run_as:
        _chown_tree(p.workdir, kind.run_as)
    svc = proc.Service(proc.pinned_argv(None if cgroup else p.cpus, kind.argv(p)), netns=p.ns,
                       log_path=p.workdir / "stdout.log", name=f"{p.spec.kind}:{p.origin}",
                       cgroup=cgroup)
    svc.start()
    try:
        for proto, port in p.ports.items():
            nsprobe.wait_tcp(p.ns, p.addr, port, timeout=READY_TIMEOUT_S,
                             what=f"server {p.origin} ({p.spec.kind}, {proto})",
                             alive=svc.alive)
    except RigError as e:
        svc.stop()
        raise RigError(f"{e}; log: {_log_tail(p)}") from None
    return RunningServer(p, svc)


def refuse_taken_ports(ns: str | None, addr: str, ports: dict[str, int], what: str) -> None:
    """Refuse, before anything starts, a port where something already answers: the
    readiness probe would take that process for the server (nginx answering on Apache's
    port: a run that measured another server than the one it names)."""
    for proto, port in ports.items():
        if nsprobe.tcp_open(ns, addr, port):
            raise RigError(f"{what}: port {port} ({proto}) on {addr} is already in use: "
                           "another process answers there; give the server another port "
                           "or stop that process")


def _start_remote(p: ServerPlan, local_dir: Path) -> RunningServer:
    h, kind = p.host, p.kind
    assert h is not None
    if kind.prepare_argv(p):
        raise RigError(f"server {p.origin}: a {p.spec.kind} server runs on this machine only")
    for name, text in kind.files(p).items():
        proc.put_file(h, str(p.workdir / name), text.encode())
    proc.run(["mkdir", "-p", str(p.workdir / "tmp")], timeout=30, host=h, check=True)
    if kind.run_as:
        proc.run(["chown", "-R", f"{kind.run_as}:", str(p.workdir)], timeout=30, host=h,
                 check=True)
    local_dir.mkdir(parents=True, exist_ok=True)
    svc = proc.Service(kind.argv(p), netns=p.ns, log_path=local_dir / "stdout.log",
                       name=f"{p.spec.kind}:{p.spec.name}", host=h, rundir=p.rundir,
                       ident=p.instance).start()
    try:
        for proto, port in p.ports.items():
            wait_remote_tcp(h, p.addr, port, what=f"server {p.spec.name} ({p.spec.kind}, "
                            f"{proto}) on host {h.name}", alive=svc.alive)
    except RigError as e:
        svc.stop()
        tail = svc.log_tail().strip().splitlines()[-1:] or ["(empty)"]
        raise RigError(f"{e}; log: {tail[0][-300:]}") from None
    return RunningServer(p, svc)


def wait_remote_tcp(h: Any, addr: str, port: int, *, what: str, alive: Any) -> None:
    """Readiness probed on the server's host itself (a connect from there)."""
    import time
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.remote_op(h, {"op": "probe", "addr": addr, "port": port}, timeout=15)["open"]:
            return
        if not alive():
            raise RigError(f"{what}: exited before listening on {addr}:{port}")
        time.sleep(0.05)
    raise RigError(f"{what}: not listening on {addr}:{port} within {READY_TIMEOUT_S:g}s")


def _log_tail(p: ServerPlan) -> str:
    """The last line of the server's own log, else of its stdout. xrootd puts `-l DIR/F`
    of instance `-n NAME` in DIR/NAME/F, so each log is looked for in both places."""
    for name in (*p.kind.logs, "stdout.log"):
        for f in (p.workdir / name, p.workdir / p.instance / name):
            if f.is_file() and f.stat().st_size:
                return f.read_text(errors="replace").strip().splitlines()[-1][-300:]
    return "(empty)"


def start_iperf3_server(ns: str | None, addr: str, port: int, workdir: Path, *,
                        host: Any = None, rundir: str | None = None) -> proc.Service:
    """The path's validation server; on `host` (remote) when given, its log local."""
    workdir.mkdir(parents=True, exist_ok=True)
    svc = proc.Service(iperf3_server_argv(addr, port), netns=ns,
                       log_path=workdir / f"iperf3-{port}.log", name="iperf3-server",
                       host=host, rundir=rundir, ident=f"iperf3-{addr}-{port}" if host else None)
    svc.start()
    try:
        if host is not None:
            wait_remote_tcp(host, addr, port, what=f"iperf3 server on host {host.name}",
                            alive=svc.alive)
        else:
            nsprobe.wait_tcp(ns, addr, port, timeout=READY_TIMEOUT_S, what="iperf3 server",
                             alive=svc.alive)
    except RigError:
        svc.stop()
        raise
    return svc
