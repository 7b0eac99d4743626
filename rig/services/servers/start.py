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


def start_server(p: ServerPlan) -> RunningServer:
    """Write configs, start, wait until every port accepts. Raises RigError (with the
    server's log tail) when it does not come up; nothing is left running then."""
    kind = p.kind
    if p.workdir.exists():
        shutil.rmtree(p.workdir)
    p.workdir.mkdir(parents=True)
    (p.workdir / "tmp").mkdir()
    for name, text in kind.files(p).items():
        (p.workdir / name).write_text(text)
    if kind.run_as:
        _chown_tree(p.workdir, kind.run_as)
    svc = proc.Service(proc.pinned_argv(p.cpus, kind.argv(p)), netns=p.ns,
                       log_path=p.workdir / "stdout.log", name=f"{p.spec.kind}:{p.origin}")
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


def _log_tail(p: ServerPlan) -> str:
    for name in (*p.kind.logs, "stdout.log"):
        f = p.workdir / name
        if f.exists() and f.stat().st_size:
            return f.read_text(errors="replace").strip().splitlines()[-1][-300:]
    return "(empty)"


def start_iperf3_server(ns: str | None, addr: str, port: int, workdir: Path) -> proc.Service:
    workdir.mkdir(parents=True, exist_ok=True)
    svc = proc.Service(iperf3_server_argv(addr, port), netns=ns,
                       log_path=workdir / f"iperf3-{port}.log", name="iperf3-server")
    svc.start()
    try:
        nsprobe.wait_tcp(ns, addr, port, timeout=READY_TIMEOUT_S, what="iperf3 server",
                         alive=svc.alive)
    except RigError:
        svc.stop()
        raise
    return svc
