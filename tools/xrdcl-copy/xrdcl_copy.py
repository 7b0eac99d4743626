#!/usr/bin/env python3
"""xrdcl-copy: one file through XrdCl's CopyProcess (the engine xrdcp itself runs), with
the XRootD Python bindings of a side environment (`make xrdcl6`: PyPI's `xrootd` 6.x
wheel, which carries XrdCl but no xrdcp binary).

    PYTHON xrdcl_copy.py [--streams N] [--cksum adler32:VALUE] SOURCE_URL TARGET
    PYTHON xrdcl_copy.py --version

--streams N sets SubStreamsPerChannel to N as `xrdcp -S N` does (1: left alone). Chunk
size, parallel chunks and every other setting come from XRD_* variables, which XrdCl
reads itself (XRD_CPCHUNKSIZE, XRD_CPPARALLELCHUNKS, XRD_CPUSEPGWRTRD ...). On success
prints one JSON line: the XrdCl version, streams, chunk settings in force and the copy
time. --cksum TYPE:VALUE checks the copy end to end as `xrdcp --cksum` does: XrdCl
computes TYPE of the bytes as they arrive and fails the copy unless it equals VALUE
(checksummode end2end, checksumpreset VALUE). Exit 0 ok, 1 the copy failed (last stderr line says why), 2 bad arguments.

Standalone on purpose: it runs under the side environment's python, which has no rig.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from importlib import metadata


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="xrdcl-copy")
    ap.add_argument("--version", action="store_true")
    ap.add_argument("--streams", type=int, default=1)
    ap.add_argument("--cksum", metavar="TYPE:VALUE")
    ap.add_argument("source", nargs="?")
    ap.add_argument("target", nargs="?")
    a = ap.parse_args(argv)
    try:
        version = metadata.version("xrootd")
    except metadata.PackageNotFoundError:
        print("xrdcl-copy: the xrootd Python package is not installed in this environment "
              f"({sys.executable})", file=sys.stderr)
        return 1
    if a.version:
        print(f"xrdcl-copy (XrdCl v{version})")
        return 0
    if not a.source or not a.target or not 1 <= a.streams <= 15:
        ap.error("need SOURCE and TARGET, and --streams within 1..15")
    from XRootD import client
    from XRootD.client import CopyProcess
    if a.streams != 1:
        client.EnvPutInt("SubStreamsPerChannel", a.streams)
    cp = CopyProcess()
    ck: dict = {}
    if a.cksum:
        kind, _, value = a.cksum.partition(":")
        if not kind or not value:
            ap.error("--cksum takes TYPE:VALUE, e.g. adler32:1a2b3c4d")
        ck = {"checksummode": "end2end", "checksumtype": kind, "checksumpreset": value}
    cp.add_job(a.source, a.target, force=True, **ck)
    st = cp.prepare()
    if not st.ok:
        print(f"xrdcl-copy: [ERROR] prepare: {st.message}", file=sys.stderr)
        return 1
    t0 = time.monotonic()
    st, results = cp.run()
    seconds = time.monotonic() - t0
    bad = [r["status"].message for r in results if "status" in r and not r["status"].ok]
    if not st.ok or bad:
        print(f"xrdcl-copy: [ERROR] {(bad or [st.message])[0]}", file=sys.stderr)
        return 1
    print(json.dumps({"xrdcl_version": f"v{version}", "streams": a.streams,
                      "chunk_size": client.EnvGetInt("CPChunkSize"),
                      "parallel_chunks": client.EnvGetInt("CPParallelChunks"),
                      "copy_seconds": round(seconds, 6)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
