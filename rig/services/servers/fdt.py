"""rig-fdt serve: the FDT-style server (control and data streams on one port)."""
from __future__ import annotations

from rig.fdt import adapter
from rig.netaddr import hostport
from rig.services.servers import ServerKind, ServerPlan, register


@register
class FdtServer(ServerKind):
    kind = "fdt"
    writes = True                # uploads into UPLOAD_DIR
    ports = {"fdt": 54321}

    def argv(self, p: ServerPlan) -> list[str]:
        return adapter.server_argv(str(p.datadir), p.addr, p.ports["fdt"], bufsize=None)

    def url(self, p: ServerPlan, protocol: str, relpath: str, tls: bool = False) -> str:
        return f"fdt://{hostport(p.addr, p.ports['fdt'])}/{relpath}"
