"""Server adapters: xrootd (root:// + HTTP via XrdHttp), nginx, the FDT-style server,
and the iperf3 server used for path validation.

Each adapter renders its config (pure text) and argv (pure list) from a ServerPlan;
`start_server` writes the config, starts the process as a rig.proc.Service in the
server namespace and probes its ports against a deadline (never a sleep).
Must not import orchestration or reports.
"""
from __future__ import annotations

import os
import pwd
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .. import nsprobe, proc
from ..errors import RigError
from ..scenario import ServerSpec

READY_TIMEOUT_S = 20.0
BASE_PORTS = {"xrootd": {"root": 1094, "http": 8000}, "nginx": {"http": 8080},
              "fdt": {"fdt": 54321}, "iperf3": {"iperf3": 5201}}


def default_ports(kind: str, k: int) -> dict[str, int]:
    """Ports of the k-th server of a path (each instance its own)."""
    return {proto: port + 10 * k for proto, port in BASE_PORTS[kind].items()}


@dataclass(frozen=True)
class ServerPlan:
    """A server instance as it will run: where, on which ports, serving which directory."""
    spec: ServerSpec
    ns: str | None
    addr: str
    ports: dict[str, int]
    workdir: Path          # run-private: config, logs, admin/pid paths
    datadir: Path

    @property
    def instance(self) -> str:
        return self.workdir.name

    def url(self, protocol: str, relpath: str) -> str:
        if protocol == "root":
            return f"root://{self.addr}:{self.ports['root']}//{relpath}"
        return f"http://{self.addr}:{self.ports['http']}/{relpath}"


def xrootd_config(p: ServerPlan) -> str:
    return "\n".join([
        f"oss.localroot {p.datadir}",
        "all.export / nolock",
        # no reverse DNS of clients: without a resolver every connection waits 5 s
        "xrd.network nodnr",
        f"xrd.port {p.ports['root']}",
        f"all.adminpath {p.workdir / 'admin'}",
        f"all.pidpath {p.workdir / 'run'}",
        f"xrd.protocol XrdHttp:{p.ports['http']} libXrdHttp.so",
        "xrootd.trace off", "xrd.trace off", "",
    ])


def xrootd_argv(p: ServerPlan) -> list[str]:
    # -R: xrootd refuses to run as root; -n: a private instance name (admin paths)
    return [p.spec.binary or "xrootd", "-R", "xrootd", "-n", p.instance,
            "-c", str(p.workdir / "xrootd.cfg"), "-l", str(p.workdir / "xrootd.log")]


def nginx_config(p: ServerPlan) -> str:
    w = p.workdir
    return f"""daemon off;
master_process on;
worker_processes 2;
user www-data;
pid {w / 'nginx.pid'};
error_log {w / 'nginx-error.log'} warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    client_body_temp_path {w / 'tmp'};
    proxy_temp_path {w / 'tmp'};
    fastcgi_temp_path {w / 'tmp'};
    uwsgi_temp_path {w / 'tmp'};
    scgi_temp_path {w / 'tmp'};
    default_type application/octet-stream;
    server {{
        listen {p.addr}:{p.ports['http']};
        root {p.datadir};
    }}
}}
"""


def nginx_argv(p: ServerPlan) -> list[str]:
    return [p.spec.binary or "nginx", "-e", str(p.workdir / "nginx-error.log"),
            "-p", str(p.workdir), "-c", str(p.workdir / "nginx.conf")]


def fdt_argv(p: ServerPlan) -> list[str]:
    from ..fdt import adapter
    return adapter.server_argv(str(p.datadir), p.addr, p.ports["fdt"], bufsize=None)


def iperf3_server_argv(ns_addr: str, port: int) -> list[str]:
    # -J: the server's per-test JSON (with the sender's srtt) goes back to a client
    # that asks with --get-server-output
    return ["iperf3", "-s", "-J", "-B", ns_addr, "-p", str(port)]


@dataclass
class RunningServer:
    plan: ServerPlan
    service: proc.Service
    configs: dict[str, str] = field(default_factory=dict)

    def alive(self) -> bool:
        return self.service.alive()

    def stop(self) -> None:
        self.service.stop()


def server_files(p: ServerPlan) -> dict[str, str]:
    """Config files (name -> text) the server needs in its workdir (pure)."""
    if p.spec.kind == "xrootd":
        return {"xrootd.cfg": xrootd_config(p)}
    if p.spec.kind == "nginx":
        return {"nginx.conf": nginx_config(p)}
    return {}


def server_argv(p: ServerPlan) -> list[str]:
    return {"xrootd": xrootd_argv, "nginx": nginx_argv, "fdt": fdt_argv}[p.spec.kind](p)


def _chown_tree(path: Path, user: str) -> None:
    pw = pwd.getpwnam(user)
    for root, dirs, files in os.walk(path):
        for n in [root, *(os.path.join(root, d) for d in dirs), *(os.path.join(root, f) for f in files)]:
            os.chown(n, pw.pw_uid, pw.pw_gid)


def start_server(p: ServerPlan) -> RunningServer:
    """Write configs, start, wait until every port accepts. Raises RigError (with the
    server's log tail) when it does not come up; nothing is left running then."""
    if p.workdir.exists():
        shutil.rmtree(p.workdir)
    p.workdir.mkdir(parents=True)
    (p.workdir / "tmp").mkdir()
    files = server_files(p)
    for name, text in files.items():
        (p.workdir / name).write_text(text)
    if p.spec.kind == "xrootd":
        _chown_tree(p.workdir, "xrootd")   # it drops to this user and writes admin paths
    svc = proc.Service(server_argv(p), netns=p.ns, log_path=p.workdir / "stdout.log",
                       name=f"{p.spec.kind}:{p.spec.name}")
    svc.start()
    try:
        for proto, port in p.ports.items():
            nsprobe.wait_tcp(p.ns, p.addr, port, timeout=READY_TIMEOUT_S,
                             what=f"server {p.spec.name} ({p.spec.kind}, {proto})",
                             alive=svc.alive)
    except RigError as e:
        svc.stop()
        raise RigError(f"{e}; log: {_log_tail(p)}") from None
    return RunningServer(p, svc, files)


def _log_tail(p: ServerPlan) -> str:
    for name in ("xrootd.log", "nginx-error.log", "stdout.log"):
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
