"""The topology a scenario names: a file in topologies/ (parsed once per version of the
file), or a Mininet Topo whose links set each path's RTT, rate, jitter and loss. Also the
strict YAML reading the loader shares.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig.description import mininet as MN, safeyaml, schema as S
from rig.description import topology as T
from rig.description.scenario.paths import LOCAL


ROOT = Path(__file__).resolve().parents[3]

TOPOLOGY_DIR = ROOT / "topologies"

Topology = T.Topology         # nodes and links: rig/description/topology.py


def list_topologies() -> list[str]:
    return sorted(p.stem for p in TOPOLOGY_DIR.glob("*.yaml"))


def parse_topology(p: Path) -> Topology:
    """The topology in file `p`, parsed once per version of the file (its path, size
    and mtime): every scenario naming it reads the same frozen Topology."""
    try:
        st = p.stat()
    except OSError:
        return T.parse(_load_yaml(p), source=str(p))    # the read names what is wrong
    return _parse_topology(str(p), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _parse_topology(p: str, size: int, mtime_ns: int) -> Topology:
    return T.parse(_load_yaml(Path(p)), source=p)


def _load_yaml(p: Path) -> Any:
    return _read(p)[0]


def _read(p: Path) -> tuple[Any, str]:
    """The document and its text, read once (size-capped, strict UTF-8, no aliases,
    no duplicate keys: rig.description.safeyaml)."""
    text = safeyaml.read_text(p)
    return safeyaml.load(text, str(p)), text


_PY_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")


def _py_name(v: Any) -> str:
    if not isinstance(v, str) or not _PY_NAME.fullmatch(v):
        raise ValueError("expected a Python class name")
    return v


S.described(_py_name, type="name", text="a Python class name", example="TwoBottlenecks")


@dataclass(frozen=True)
class MininetRef:
    """`topology:` as a Mininet Topo (rig.description.mininet)."""
    # the Python file defining the Topo, relative to the scenario's file
    mininet: str = S.spec(S.path_text, example="../topologies/two-bottlenecks.py")
    cls: str = S.spec(_py_name, key="class")      # the Topo subclass in it
    # the hosts that run the clients and the servers (default: the first and last)
    client: str | None = S.spec(S.optional(S.text), None)
    server: str | None = S.spec(S.optional(S.text), None)


@S.describe(type="topology", text="a topology name, or a Mininet Topo", cls=MininetRef,
            choices=lambda: list_topologies())
def _topology_ref(ctx: S.Ctx, v: Any) -> str | dict:
    """A topology's name (a file in topologies/) or a Mininet Topo reference."""
    if not isinstance(v, dict):
        return S.call(ctx, S.name, v)
    r = S.load(ctx, v, MininetRef)
    return {"mininet": r.mininet, "class": r.cls, "client": r.client, "server": r.server}


# path keys a Mininet topology's links set (PathSpec attribute, YAML key)
_MININET_SETS = (("gemodel", "gemodel"), ("rate_bps", "rate"), ("queue_pkts", "queue"),
                 ("router_host", "router_host"), ("router_ifaces", "router_ifaces"),
                 ("router_iface", "router_iface"))


def _mininet_scenario(ctx: S.Ctx, d: dict[str, Any]) -> dict[str, Any]:
    """The scenario's topology read from a Mininet Topo, and each path's RTT, rate,
    jitter and loss from the links between the client and the server (pure: the file is
    read through rig.description.mininet's reader)."""
    tc = ctx.child("topology")
    ref = d["topology"]
    shown = ref["mininet"]
    file = Path(shown) if os.path.isabs(shown) else Path(ctx.file).parent / shown
    doc = MN.read(file, ref["class"], tc, shown)
    mt = MN.from_export(doc, tc, file=shown, cls=ref["class"], client=ref["client"],
                        server=ref["server"])
    nodes = tuple(T.NodeSpec(h, "client" if h == mt.client else "server")
                  for h in sorted(mt.hosts, key=lambda h: (h != mt.client, h != mt.server)))
    topo = T.Topology(f"mininet-{ref['class']}", "mininet",
                      f"Mininet {ref['class']} from {shown}", nodes, mininet=mt)
    for key in ("ip", "origins", "server_cpus"):
        if getattr(d["sweep"], key):
            raise ctx.child("sweep").child(key).error(
                f"copies paths of a topology built from the scenario; {shown} is one network",
                getattr(d["sweep"], key))
    vals = MN.path_values(mt)
    paths = []
    for i, p in enumerate(d["paths"]):
        pc = ctx.child("paths").child(i)
        if p.kind == "real":
            raise pc.child("kind").error("a Mininet topology builds emulated paths", p.kind)
        if p.rtt_stated:
            raise pc.child("rtt").error(f"set by the links of {shown}", p.rtts_s)
        for attr, key in _MININET_SETS:
            if getattr(p, attr) is not None:
                raise pc.child(key).error(f"set by the links of {shown}", getattr(p, attr))
        if p.loss or p.jitter_s:
            raise pc.child("loss" if p.loss else "jitter").error(
                f"set by the links of {shown}", p.loss or p.jitter_s)
        if p.ip != 4:
            raise pc.child("ip").error("a Mininet topology is built with IPv4", p.ip)
        if p.client_host != LOCAL or p.server_host != LOCAL:
            raise pc.child("client_host" if p.client_host != LOCAL else "server_host").error(
                "a Mininet topology's hosts are namespaces on this host",
                p.client_host if p.client_host != LOCAL else p.server_host)
        paths.append(dataclasses.replace(p, rtts_s=[vals["rtt_s"]], rate_bps=vals["rate_bps"],
                                         jitter_s=vals["jitter_s"], loss=vals["loss"]))
    return dict(d, topology=topo, paths=paths)
