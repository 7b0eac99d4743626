"""The rules of a scenario with an external endpoint (a server of kind external, issue 40
item 1): what the rig can do against a server it does not own, each refusal one line
naming the key.

- The endpoint is reached through the rig's own emulated paths, built on this host
  (default topology client-router-server, IPv4): the path's server namespace routes on
  to it (rig.realization.gateway).
- Downloads only, by a tool that speaks the URL's protocol (xrdcp and xrdcl for root://
  and roots://; curl, davix-get and wget for http(s):// and dav(s)://). No uploads, no
  third-party copy, no replays, no iperf3: the rig writes nothing on a server it does
  not own and runs nothing there.
- One external server per scenario, and no server of the rig's beside it.
- A client's `file:` is a path on the endpoint (below the URL's path, or absolute); the
  rig makes no data for it.

Pure; imports the description only.
"""
from __future__ import annotations

from rig.description import kinds, schema as S
from rig.description.scenario.clients import EXTERNAL, ClientSpec, ServerSpec
from rig.description.scenario.document import Scenario
from rig.description.scenario.paths import LOCAL

# paths per scenario with an endpoint: the gateway links take the upper half of the
# run's /24 (rig.realization.gateway), 8 addresses a path below it
MAX_PATHS = 16


def externals(sc: Scenario) -> list[ServerSpec]:
    return [s for s in sc.servers if s.kind == EXTERNAL]


def speaks(c: ClientSpec, s: ServerSpec) -> bool:
    """Can the client's tool fetch from this endpoint?"""
    caps = kinds.client(c.tool).caps
    ep = s.endpoint
    return (ep is not None and ep.protocol in caps.protocols and not caps.third_party
            and not caps.reads_root and not caps.uses_iperf_servers)


def fetchers() -> str:
    return ", ".join(sorted(t.name for t in kinds.CLIENTS.all()
                            if not (t.caps.third_party or t.caps.reads_root
                                    or t.caps.uses_iperf_servers)
                            and set(t.caps.protocols) & {"root", "http"}))


def check_client(cc: S.Ctx, c: ClientSpec, s: ServerSpec) -> None:
    """A client of an external endpoint: a download of a path there by a tool that
    speaks its protocol."""
    ep = s.endpoint
    assert ep is not None
    if not speaks(c, s):
        raise cc.child("tool").error(f"{c.tool} cannot fetch from the {ep.scheme}:// "
                                     f"endpoint {s.name} ({fetchers()} can, by protocol)",
                                     c.tool)
    if c.source is not None:
        raise cc.child("source").error(f"no third-party copy with endpoint {s.name}, which "
                                       "the rig does not own", c.source)
    if c.protocol and c.protocol != ep.protocol:
        raise cc.child("protocol").error(f"endpoint {s.name} serves {ep.protocol}", c.protocol)
    if c.direction == "upload":
        raise cc.child("direction").error(f"the rig writes nothing on endpoint {s.name}, "
                                          "which it does not own: downloads only", "upload")
    if c.tls not in (None, "off"):
        raise cc.child("tls").error(f"the URL of endpoint {s.name} says whether TLS is used "
                                    f"({ep.scheme}://)", c.tls)
    if not c.file:
        raise cc.child("file").error(f"the path on endpoint {s.name} to fetch "
                                     "(below its URL's path, or absolute)")
    if c.option("checksum"):
        raise cc.child("checksum").error(f"no checksum is known for a file on endpoint "
                                         f"{s.name} (not yet: issue 40 item 6)", True)
    if c.option("sources"):
        raise cc.child("sources").error("an extreme copy against an external endpoint is "
                                        "not supported yet", c.option("sources"))


def check(ctx: S.Ctx, sc: Scenario) -> None:
    """The scenario-wide rules, once its clients know their servers."""
    ext = externals(sc)
    if not ext:
        return
    first = sc.servers.index(ext[0])
    if len(sc.servers) > 1:
        other = next(i for i, s in enumerate(sc.servers) if i != first)
        raise ctx.child("servers").child(other).error(
            f"one external endpoint ({ext[0].name}) and no other server per scenario",
            sc.servers[other].name)
    if sc.topology.name != "client-router-server":
        raise ctx.child("topology").error(f"endpoint {ext[0].name} is reached through the "
                                          "default topology (client-router-server)",
                                          sc.topology.name)
    if len(sc.paths) > MAX_PATHS:
        raise ctx.child("paths").error(f"at most {MAX_PATHS} paths with an external "
                                       f"endpoint (has {len(sc.paths)})")
    for i, p in enumerate(sc.paths):
        at = ctx.child("paths").child(i)
        if p.kind != "emulated" or p.router_host is not None or LOCAL not in (
                p.client_host, p.server_host) or p.client_host != LOCAL \
                or p.server_host != LOCAL:
            raise at.child("kind").error(f"endpoint {ext[0].name} is reached through an "
                                         "emulated path built on this host", p.kind)
        if (p.ip or 4) != 4:
            raise at.child("ip").error("an external endpoint is reached over IPv4", p.ip)
    if sc.background:
        raise ctx.child("background").child(0).error(
            f"competing flows need an iperf3 server at the far end: not on endpoint "
            f"{ext[0].name}, which the rig does not own", sc.background[0].name)
    if sc.storage.kind != "tmpfs":
        raise ctx.child("storage").child("kind").error(
            "the files are on the external endpoint", sc.storage.kind)
    if sc.sweep.tls and any(m != "off" for m in sc.sweep.tls):
        raise ctx.child("sweep").child("tls").error(
            f"the URL of endpoint {ext[0].name} says whether TLS is used", sc.sweep.tls)
    if sc.sweep.direction and "upload" in sc.sweep.direction:
        raise ctx.child("sweep").child("direction").error(
            f"the rig writes nothing on endpoint {ext[0].name}: downloads only",
            sc.sweep.direction)
    for key in ("origins", "server_cpus"):
        if getattr(sc.sweep, key):
            raise ctx.child("sweep").child(key).error(
                f"endpoint {ext[0].name} is not started by the rig", getattr(sc.sweep, key))
    for i, c in enumerate(sc.clients):
        if kinds.client(c.tool).caps.uses_iperf_servers:
            raise ctx.child("clients").child(i).child("tool").error(
                f"no iperf3 server runs on endpoint {ext[0].name}, which the rig does not "
                "own", c.tool)
