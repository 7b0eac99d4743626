"""xrootd: root:// and HTTP (XrdHttp) from one instance, run as user xrootd."""
from __future__ import annotations

from rig.services.servers import ServerKind, ServerPlan, register


@register
class Xrootd(ServerKind):
    kind = "xrootd"
    ports = {"root": 1094, "http": 8000}
    version_argv = ["xrootd", "-v"]
    run_as = "xrootd"          # it refuses to run as root and writes its admin paths
    logs = ("xrootd.log",)

    def files(self, p: ServerPlan) -> dict[str, str]:
        return {"xrootd.cfg": "\n".join([
            f"oss.localroot {p.datadir}",
            "all.export / nolock",
            # no reverse DNS of clients: without a resolver every connection waits 5 s
            "xrd.network nodnr",
            f"xrd.port {p.ports['root']}",
            f"all.adminpath {p.workdir / 'admin'}",
            f"all.pidpath {p.workdir / 'run'}",
            f"xrd.protocol XrdHttp:{p.ports['http']} libXrdHttp.so",
            "xrootd.trace off", "xrd.trace off", "",
        ])}

    def argv(self, p: ServerPlan) -> list[str]:
        # -R: xrootd refuses to run as root; -n: a private instance name (admin paths)
        return [p.spec.binary or "xrootd", "-R", "xrootd", "-n", p.instance,
                "-c", str(p.workdir / "xrootd.cfg"), "-l", str(p.workdir / "xrootd.log")]
