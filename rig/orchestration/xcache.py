"""Reads through a cache (server kind xcache): cold and warm, and what the cache fetched.

Around each transfer group whose client reads through a cache (the XCache sampler of
rig.orchestration.samplers calls `begin` before the group and `annotate` on its rows):

- cold (`cache: cold`): every cache instance the group uses is emptied of the file first:
  once no process of the cache's namespace holds a file of its cache directory open (so
  XrdPfc has released it and written its bitmap), the data file and its `.cinfo` are
  removed; the next open starts from nothing.
- warm (`cache: warm`): an instance that does not hold all of the file is filled first
  by one unmeasured xrdcp through it from the client's namespace (`cache_prefilled`).
- bytes fetched from the origin (`origin_bytes`): from XrdPfc's own block bitmap, the
  `.cinfo` file read with Debian's `xrdpfc_print` after the group (once the cache has
  released the file): downloaded blocks x 1 MiB, the file's size when every block is
  held; after minus before. A block the cache fetched twice counts once.
- bytes the origin's interface sent meanwhile (`origin_wire_bytes`): its tx_bytes
  counter (`ip -s link`, stats64), headers included: the wire-side check of the bitmap.

Each row's extra gets its instance's `origin_bytes` divided among the rows that read
through that instance, and the group's `origin_wire_bytes` divided among all rows, so
sums over a group's rows are the group's; `cache`, `cache_instance`, `cache_origin`
(the origin server's name) and `cache_bytes_before` are stored as they were.
Must not import reports.
"""
from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from rig.description.steps import Group
from rig.errors import RigError
from rig.process import proc
from rig.realization import netns
from rig.realization.netns import RealizedPath
from rig.services import servers
from rig.services.servers import ServerPlan
from rig.services.servers.xcache import BLOCK_BYTES, CACHE_DIR
from rig.services.tools import Job
from rig.services.tools.xrdcp import XRD_FAIL_FAST

IDLE_TIMEOUT_S = 20.0
CMD_TIMEOUT_S = 20.0
_SUMMARY = re.compile(r"n_blocks (\d+), n_downloaded (\d+)")


def cache_dir(p: ServerPlan) -> Path:
    return p.workdir / CACHE_DIR


def held_bytes(cinfo: Path, file_bytes: int) -> int:
    """Bytes of the file the cache holds, from its bitmap (0 without a .cinfo)."""
    if not cinfo.exists():
        return 0
    res = proc.run(print_argv(cinfo), timeout=CMD_TIMEOUT_S)
    return parse_held(res.stdout, file_bytes, where=str(cinfo))


def parse_held(text: str, file_bytes: int, *, where: str = "cinfo") -> int:
    """xrdpfc_print's summary line -> bytes held: every block, the file's size; else
    downloaded blocks x the block size (at most one block too many, when the last,
    shorter one is among them)."""
    m = _SUMMARY.search(text)
    if not m:
        raise RigError(f"xrdpfc_print {where}: no block summary in its output "
                       f"({text.strip()[:200]!r})")
    n, got = int(m.group(1)), int(m.group(2))
    return file_bytes if got >= n else min(got * BLOCK_BYTES, file_bytes)


def open_files_below(ns: str | None, d: Path) -> list[str]:
    """Files below `d` that a process of namespace `ns` holds open."""
    prefix = str(d) + "/"
    out = []
    for pid in (netns.ns_pids(ns) if ns else []):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                t = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if t.startswith(prefix):
                out.append(t)
    return out


def wait_released(p: ServerPlan, timeout_s: float = IDLE_TIMEOUT_S) -> None:
    """Until the cache holds none of its files open (XrdPfc wrote the bitmap and let go)."""
    deadline = time.monotonic() + timeout_s
    while busy := open_files_below(p.ns, cache_dir(p)):
        if time.monotonic() > deadline:
            raise RigError(f"cache {p.origin}: still holds {busy[0]} open after "
                           f"{timeout_s:g}s")
        time.sleep(0.05)


def print_argv(cinfo: Path) -> list[str]:
    return ["xrdpfc_print", str(cinfo)]


def link_argv(ns: str, dev: str) -> list[str]:
    return ["ip", "-n", ns, "-s", "-j", "link", "show", "dev", dev]


def fill_argv(p: ServerPlan, relpath: str) -> list[str]:
    return ["xrdcp", "--force", "--nopbar", p.url("root", relpath), "/dev/null"]


def shown(g: Group, jobs: list[Job], plans: dict[str, list[ServerPlan]],
          path: RealizedPath) -> list[tuple[list[str], dict, str]]:
    """What `begin` and `annotate` run around a group, as `rig plan` shows it: (argv,
    environment, note); the fill only where a warm cache lacks the file."""
    mine = plans.get(g.client.server or "", [])
    if not mine or not servers.get(mine[0].spec.kind).caches or not jobs:
        return []
    by_name = {p.origin: p for p in mine}
    used = mine if g.client.option("sources") else [by_name[j.origin] for j in jobs]
    insts = list({p.origin: p for p in used}.values())
    cinfo = [cache_dir(p) / f"{jobs[0].relpath}.cinfo" for p in insts]
    Shown = list[tuple[list[str], dict, str]]
    links: Shown = [(link_argv(ns, dev), {}, "   # the origin link's bytes, before and after")
             for ns, dev in origin_ifaces(path, mine)]
    out: Shown = [(print_argv(c), {}, "   # what the cache holds, before and after")
                  for c in cinfo]
    if g.client.cache == "warm":
        out += [(proc.ns_argv(path.client_ns, fill_argv(p, jobs[0].relpath)),
                 dict(XRD_FAIL_FAST), "   # warm: filled first where it lacks the file")
                for p in insts]
    return out + links


def tx_bytes(ns: str, dev: str) -> int:
    res = proc.run(link_argv(ns, dev), timeout=CMD_TIMEOUT_S, check=True)
    return int(json.loads(res.stdout)[0]["stats64"]["tx"]["bytes"])


def origin_ifaces(path: RealizedPath, plans: list[ServerPlan]) -> list[tuple[str, str]]:
    """(namespace, device) of each origin node the caches read from."""
    out = []
    for node in path.nodes:
        if node.ns and any(p.upstream and p.upstream.split(":")[0] == node.addr
                           for p in plans):
            link = next(ln for ln in path.links if node.name in ln.members)
            out.append((node.ns, link.dev_of(node.name)))
    return out


@dataclass
class CacheGroup:
    mode: str | None
    plans: list[ServerPlan]                 # per job, the cache instance it reads through
    relpath: str
    file_bytes: int
    ifaces: list[tuple[str, str]]
    before: dict[str, int] = field(default_factory=dict)   # instance -> bytes held
    prefilled: set[str] = field(default_factory=set)
    wire0: int = 0
    error: str | None = None
    spread: bool = False        # each job reads from every instance (extreme copy)

    def instances(self) -> list[ServerPlan]:
        return list({p.origin: p for p in self.plans}.values())

    def cinfo(self, p: ServerPlan) -> Path:
        return cache_dir(p) / f"{self.relpath}.cinfo"

    def wire(self) -> int:
        return sum(tx_bytes(ns, dev) for ns, dev in self.ifaces)

    def annotate(self, rows: list) -> None:
        """Add what the caches fetched to the group's rows (after the group)."""
        fetched: dict[str, int | None] = {}
        try:
            wire = self.wire() - self.wire0
        except RigError:
            wire = None
        for p in self.instances():
            try:
                wait_released(p)
                fetched[p.origin] = held_bytes(self.cinfo(p), self.file_bytes) \
                    - self.before.get(p.origin, 0)
            except RigError as e:
                fetched[p.origin] = None
                self.error = self.error or str(e)
        share = {o: sum(1 for q in self.plans if q.origin == o) for o in fetched}
        for r in rows:
            p = self.plans[r.instance % len(self.plans)]
            got: float | None
            before: int | None
            if self.spread:
                vals = list(fetched.values())
                got = None if None in vals else sum(v or 0 for v in vals) / len(rows)
                inst, before = "all", sum(self.before.values())
            else:
                mine = fetched.get(p.origin)
                got = None if mine is None else mine / share[p.origin]
                inst, before = p.origin, self.before.get(p.origin)
            extra = json.loads(r.extra or "{}")
            extra.update({
                "cache": self.mode or "as-is", "cache_instance": inst,
                "cache_origin": p.spec.origin, "cache_bytes_before": before,
                "cache_prefilled": bool(self.prefilled & ({p.origin} if not self.spread
                                                          else set(fetched))),
                "origin_bytes": got,
                "origin_wire_bytes": None if wire is None else wire / len(rows)})
            r.extra = json.dumps(extra)
            if self.error and r.ok:
                r.ok, r.error = False, f"cache: {self.error}"[:300]


def begin(g: Group, jobs: list[Job], plans: dict[str, list[ServerPlan]], path: RealizedPath,
          *, timeout_s: float, say: Callable[[str], None]) -> CacheGroup | None:
    """Prepare the caches a group reads through (None: it reads no cache)."""
    mine = plans.get(g.client.server or "", [])
    if not mine or not servers.get(mine[0].spec.kind).caches or not jobs:
        return None
    by_name = {p.origin: p for p in mine}
    used = [by_name[j.origin] for j in jobs]
    cg = CacheGroup(g.client.cache, used, jobs[0].relpath, jobs[0].file_bytes,
                    origin_ifaces(path, mine), spread=bool(g.client.option("sources")))
    if cg.spread:       # an extreme copy reads from every instance (xrdcp -y)
        cg.plans = mine
    try:
        for p in cg.instances():
            wait_released(p)
            if cg.mode == "cold":
                for f in (cache_dir(p) / cg.relpath, cg.cinfo(p)):
                    f.unlink(missing_ok=True)
            elif cg.mode == "warm" and held_bytes(cg.cinfo(p), cg.file_bytes) < cg.file_bytes:
                _fill(p, cg, path.client_ns, timeout_s, say)
            cg.before[p.origin] = held_bytes(cg.cinfo(p), cg.file_bytes)
        cg.wire0 = cg.wire()
    except RigError as e:
        cg.error = str(e)
    return cg


def _fill(p: ServerPlan, cg: CacheGroup, client_ns: str | None, timeout_s: float,
          say: Callable[[str], None]) -> None:
    say(f"  cache {p.origin}: filling with {cg.relpath} (unmeasured read)")
    res = proc.run(fill_argv(p, cg.relpath), netns=client_ns, env=dict(XRD_FAIL_FAST),
                   timeout=timeout_s)
    if res.returncode != 0 or res.timed_out:
        raise RigError(f"filling cache {p.origin} failed: "
                       f"{(res.stderr.strip().splitlines() or ['exit ' + str(res.returncode)])[-1]}")
    wait_released(p)
    cg.prefilled.add(p.origin)
