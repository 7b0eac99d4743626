"""One process per file, in turn: how the rig runs a client that fetches a `count:` set
of small files one file per invocation (davix-get, which takes one URL; xrdcp or curl with
`reuse: false`), as a user's shell loop would, each file its own connection.

    python -m rig.process.eachfile --list LIST --timeout SECONDS -- TOOL ARGV..

LIST holds `URL<TAB>DEST` per file; the tool's argv has `{url}` and `{dest}` where each
file's go. For each file it prints one JSON line: `i`, `rc`, `start_s` (since this
runner started), `first_s` (from the file's process start until its destination file
first held a byte, its size read every 2 ms: the file's time to first byte, process start
included; null if none arrived), `wall_s`, `out` (the tool's last stdout line, e.g.
curl's `-w` JSON) and `err` (its last stderr line). It stops at the first failure and
exits with that file's status (124: the overall deadline passed). Every child runs in
this runner's process group, so the rig's deadline and watchdog, which end the runner's
group (rig.process.proc), end them with it: that is why it starts them itself with
subprocess rather than through proc.run, which gives each child a session of its own
(the one exception to "only rig.process.proc starts processes", tests/test_layers.py).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

POLL_S = 0.002


def arrived(path: str) -> bool:
    """The destination holds a byte (a tool's writes to its own pipes and eventfds, which
    /proc/PID/io counts too, do not)."""
    try:
        return os.stat(path).st_size > 0
    except OSError:
        return False


def last(text: bytes) -> str:
    lines = [ln for ln in text.decode(errors="replace").splitlines() if ln.strip()]
    return lines[-1].strip()[:20000] if lines else ""


def fill(argv: list[str], url: str, dest: str) -> list[str]:
    return [a.replace("{url}", url).replace("{dest}", dest) for a in argv]


def one(argv: list[str], dest: str, deadline: float) -> tuple[int, float | None, float, bytes, bytes]:
    """Run one file's process: (status, first write s, wall s, stdout, stderr)."""
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL)
    first: float | None = None
    import threading
    got: dict[str, bytes] = {}

    def drain(name: str, stream) -> None:        # noqa: ANN001
        got[name] = stream.read()
    ts = [threading.Thread(target=drain, args=(n, s), daemon=True)
          for n, s in (("out", p.stdout), ("err", p.stderr))]
    for t in ts:
        t.start()
    rc: int | None = None
    while rc is None:
        now = time.monotonic()
        if now >= deadline:
            p.kill()
            p.wait()
            rc = 124
            break
        if first is None:
            if arrived(dest):
                first = time.monotonic() - t0
            try:
                rc = p.wait(timeout=POLL_S)
            except subprocess.TimeoutExpired:
                pass
        else:
            try:
                rc = p.wait(timeout=max(0.0, deadline - now))
            except subprocess.TimeoutExpired:
                pass
    wall = time.monotonic() - t0
    for t in ts:
        t.join(5)
    return rc, first, wall, got.get("out", b""), got.get("err", b"")


def main(args: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="rig.process.eachfile")
    ap.add_argument("--list", required=True)
    ap.add_argument("--timeout", type=float, required=True)
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    a = ap.parse_args(args)
    argv = a.argv[1:] if a.argv[:1] == ["--"] else a.argv
    t0 = time.monotonic()
    deadline = t0 + a.timeout
    with open(a.list) as f:
        pairs = [ln.rstrip("\n").split("\t") for ln in f if ln.strip()]
    for i, (url, dest) in enumerate(pairs):
        start = time.monotonic() - t0
        rc, first, wall, out, err = one(fill(argv, url, dest), dest, deadline)
        print(json.dumps({"i": i, "rc": rc, "start_s": round(start, 6),
                          "first_s": None if first is None else round(first, 6),
                          "wall_s": round(wall, 6), "out": last(out), "err": last(err)}),
              flush=True)
        if rc != 0:
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
