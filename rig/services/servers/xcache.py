"""xcache: XRootD's proxy file cache (XrdPss + the XrdPfc plugin, Debian's
libXrdPfc-5.so from xrootd-server 5.5), run as user xrootd in its own namespace.

It serves root:// and HTTP (XrdHttp) like an xrootd origin; a file it does not hold yet
is fetched from its origin (`pss.origin`, the scenario server named by `origin:`) block
by block (pfc.blocksize 1 MiB), written to its cache directory `cache/` in its run
directory (removed with the run and by `rig clean`) and served from there on the next
read. Prefetch is off (pfc.prefetch 0): the cache fetches what its clients read, so
the bytes it fetched from the origin are those the reads missed. pfc.ram 1g is the
smallest RAM XrdPfc 5.5 accepts ("may not be less than 1073741824"): an upper bound of
its block buffers, not memory it takes at start.

Which blocks it holds is in `cache/<file>.cinfo` (its bitmap, read with xrdpfc_print:
rig.orchestration.xcache). The access records' B_hit/B_miss of XrdPfc 5.5 are not
used: a cold 64 MiB xrdcp read recorded 85056 kB hit + 4096 kB missed here, more than
the file.
"""
from __future__ import annotations

from rig.services.servers import ServerKind, ServerPlan, register
from rig.services.servers.xrootd import daemon_argv, daemon_lines

CACHE_DIR = "cache"            # below the instance's workdir
BLOCK_BYTES = 1 << 20          # pfc.blocksize
RAM = "1g"                     # pfc.ram: XrdPfc 5.5's minimum


@register
class XCache(ServerKind):
    kind = "xcache"
    ports = {"root": 1094, "http": 8000}
    version_argv = ["xrootd", "-v"]
    run_as = "xrootd"
    logs = ("xrootd.log",)
    caches = True              # reads through it go to `origin:` (rig.description.scenario)

    def prepare_argv(self, p: ServerPlan) -> list[list[str]]:
        # XrdPss refuses a localroot that does not exist
        return [["mkdir", "-p", str(p.workdir / CACHE_DIR)]]

    def files(self, p: ServerPlan) -> dict[str, str]:
        if not p.upstream:
            raise ValueError(f"xcache {p.origin}: no origin address")   # the loader checks
        return {"xrootd.cfg": "\n".join([
            *daemon_lines(p),
            "ofs.osslib libXrdPss.so",
            f"pss.origin {p.upstream}",
            "pss.cachelib libXrdPfc.so",
            f"oss.localroot {p.workdir / CACHE_DIR}",
            f"pfc.blocksize {BLOCK_BYTES // (1 << 20)}M",
            "pfc.prefetch 0",
            f"pfc.ram {RAM}",
            "xrootd.trace off", "xrd.trace off", "",
        ])}

    def argv(self, p: ServerPlan) -> list[str]:
        return daemon_argv(p)
