"""Execute a read plan over root:// (XRootD Python bindings, as CMSSW's XrdAdaptor uses
XrdCl File::Read / File::VectorRead) or over HTTP (Range and multi-range GET).

Each plan round is one synchronous wait: its requests are issued together (at most
`round.window` in flight, 0 = all), and the next round starts when all have answered.
Records wall time, requests, round trips, bytes asked (useful), bytes requested (wire),
bytes actually received, CPU of this process (XrdCl's threads included), per-round
times. Services layer: no subprocess, no orchestration import.
"""
from __future__ import annotations

import dataclasses
import http.client
import os
import resource
import tempfile
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from rig.errors import RigError
from rig.description.rootfile.plan import Plan, Request
from rig.process import threadcpu


@dataclasses.dataclass(frozen=True)
class ReplayResult:
    protocol: str
    url: str
    mode: str
    wall_s: float
    requests: int
    round_trips: int
    bytes_useful: int
    bytes_wire: int
    bytes_received: int
    cpu_user_s: float
    cpu_sys_s: float
    round_s: tuple[float, ...]
    checksum: str                 # crc32 of every received range, in plan order
    open_s: float = 0.0           # connecting and opening the file, before wall_s starts
    # its threads' time runnable but waiting for a CPU over wall_s (schedstat; None: none)
    cpu_wait_s: float | None = None

    @property
    def throughput_useful_Bps(self) -> float:
        return self.bytes_useful / self.wall_s if self.wall_s > 0 else 0.0


class _Windowed:
    """Run request thunks with at most `window` in flight; each thunk gets a `done(n,
    data_or_err)` callback. Waits for all against a deadline."""

    def __init__(self, thunks: list[Callable[[Callable], None]], window: int,
                 deadline: float) -> None:
        self.thunks, self.window, self.deadline = thunks, window or len(thunks), deadline
        self.cv = threading.Condition()
        self.results: list[object] = [None] * len(thunks)
        self.left = len(thunks)
        self.next = 0
        self.error: str | None = None

    def _issue(self) -> None:
        i = self.next
        self.next += 1

        def done(result: object, err: str | None = None, i: int = i) -> None:
            with self.cv:
                self.results[i] = result
                if err and not self.error:
                    self.error = err
                self.left -= 1
                if self.next < len(self.thunks) and not self.error:
                    self._issue()          # the condition's lock is an RLock
                self.cv.notify_all()
        self.thunks[i](done)

    def run(self) -> list[object]:
        with self.cv:
            for _ in range(min(self.window, len(self.thunks))):
                self._issue()
            while self.left and not self.error:
                remaining = self.deadline - time.monotonic()
                if remaining <= 0:
                    raise RigError("replay: deadline passed with requests in flight")
                self.cv.wait(timeout=min(remaining, 1.0))
        if self.error:
            raise RigError(f"replay: {self.error}")
        return self.results


def _crc(crc: int, data: bytes) -> int:
    import zlib
    return zlib.crc32(data, crc)


def _xrootd_bindings():
    """XRootD's Python module (loading libXrdCl: 9-24 ms measured here), imported before
    the open is timed: open_s is the connect, handshake, login and open (4 RTT, as xrdcp's)."""
    from rig import extras
    client = extras.require("replay", "XRootD.client")
    flags = extras.require("replay", "XRootD.client.flags")
    return client, flags.OpenFlags


class _RootTransport:
    def __init__(self, url: str, timeout: float) -> None:
        client, OpenFlags = _xrootd_bindings()
        self.f = client.File()
        st, _ = self.f.open(url, OpenFlags.READ, timeout=int(max(1, timeout)))
        if not st.ok:
            raise RigError(f"replay: cannot open {url}: {st.message.strip()}")
        self.timeout = int(max(1, timeout))

    def thunk(self, q: Request) -> Callable[[Callable], None]:
        def go(done: Callable) -> None:
            def cb(status, response, hosts=None):
                if not status.ok:
                    done(None, status.message.strip())
                elif q.kind == "read":
                    done([bytes(response)])
                else:
                    done([bytes(c.buffer) for c in response.chunks])
            if q.kind == "read":
                (off, n), = q.ranges
                st = self.f.read(off, n, timeout=self.timeout, callback=cb)
            else:
                st = self.f.vector_read(list(q.ranges), timeout=self.timeout, callback=cb)
            if not st.ok:
                done(None, st.message.strip())
        return go

    def close(self) -> None:
        self.f.close(timeout=self.timeout)


class _HttpTransport:
    """One keep-alive connection per in-flight request; multi-range GET for a readv."""

    def __init__(self, url: str, timeout: float) -> None:
        u = urllib.parse.urlsplit(url)
        if u.scheme != "http":
            raise RigError(f"replay: not an http:// URL (got {url!r})")
        self.host, self.port, self.path = u.hostname, u.port or 80, u.path or "/"
        self.timeout = timeout
        self.local = threading.local()
        self.pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="replay-http")

    def _conn(self) -> http.client.HTTPConnection:
        c = getattr(self.local, "c", None)
        if c is None:
            assert self.host is not None
            c = self.local.c = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        return c

    def _get(self, q: Request) -> list[bytes]:
        rng = ",".join(f"{o}-{o + n - 1}" for o, n in q.ranges)
        c = self._conn()
        c.request("GET", self.path, headers={"Range": f"bytes={rng}"})
        r = c.getresponse()
        body = r.read()
        if r.status != 206:
            raise RigError(f"HTTP {r.status} for {len(q.ranges)} range(s)")
        if len(q.ranges) == 1:
            return [body]
        return _multipart(r.getheader("Content-Type", ""), body)

    def thunk(self, q: Request) -> Callable[[Callable], None]:
        def go(done: Callable) -> None:
            def work() -> None:
                try:
                    done(self._get(q))
                except Exception as e:  # the failure is reported as the run's one line
                    done(None, f"{type(e).__name__}: {e}")
            self.pool.submit(work)
        return go

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def _multipart(ctype: str, body: bytes) -> list[bytes]:
    """Bodies of a multipart/byteranges answer, in order."""
    key = "boundary="
    if key not in ctype:
        raise RigError(f"multi-range answer is not multipart (Content-Type {ctype!r})")
    b = ctype.split(key, 1)[1].split(";")[0].strip().strip('"').encode()
    parts = []
    for chunk in body.split(b"--" + b)[1:]:
        if chunk.startswith(b"--"):
            break
        head, _, data = chunk.partition(b"\r\n\r\n")
        parts.append(data[:-2] if data.endswith(b"\r\n") else data)
    return parts


class _Shadow:
    """CMSSW's LocalCacheFile shadow file: an unlinked temporary file in `directory`, the
    size of the remote file. LocalCacheFile::cache maps the segment and XrdCl reads into
    the mapping, so the copy overlaps the next request; the Python bindings hand over a
    bytes object instead, which a writer thread `pwrite`s while the next request is in
    flight. `flush()` waits for the round's writes (inside the round's time)."""

    def __init__(self, directory: str, size: int) -> None:
        fd, name = tempfile.mkstemp(prefix="rig-shadow-", dir=directory)
        os.unlink(name)
        os.ftruncate(fd, size)
        self.fd = fd
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="replay-shadow")
        self.pending: list = []

    def _write(self, q: Request, pieces: list[bytes]) -> None:
        for (o, n), p in zip(q.ranges, pieces):
            if os.pwrite(self.fd, p, o) != n:
                raise OSError(f"short write at offset {o}")

    def writer(self, q: Request, thunk: Callable[[Callable], None]) -> Callable[[Callable], None]:
        def go(done: Callable) -> None:
            def into(pieces: object, err: str | None = None) -> None:
                if err is None and isinstance(pieces, list) and len(pieces) == len(q.ranges) \
                        and all(len(p) == n for p, (_, n) in zip(pieces, q.ranges)):
                    self.pending.append(self.pool.submit(self._write, q, pieces))
                    pieces = [len(p) for p in pieces]       # the bytes go to the file
                done(pieces, err)
            thunk(into)
        return go

    def flush(self) -> None:
        pending, self.pending = self.pending, []
        for f in pending:
            try:
                f.result()
            except OSError as e:
                raise RigError(f"replay: shadow file: {e}") from None

    def crc(self, plan: Plan) -> int:
        crc = 0
        for rnd in plan.rounds:
            for q in rnd.requests:
                for off, n in q.ranges:
                    crc = _crc(crc, os.pread(self.fd, n, off))
        return crc

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        os.close(self.fd)


def replay(plan: Plan, url: str, *, timeout: float = 300.0,
           shadow_dir: str | None = None) -> ReplayResult:
    """Execute `plan` against `url` (root[s]://host:port//path or http://host:port/path).
    `shadow_dir`: the answers go into a shadow file there (lazy-download), checksummed
    after the wall; otherwise they stay in memory and are checksummed as they come."""
    proto = urllib.parse.urlsplit(url).scheme
    root = proto in ("root", "xroot", "roots", "xroots")      # roots: TLS, X509_CERT_DIR
    if root:
        _xrootd_bindings()          # loaded outside open_s (see there)
    t_open = time.monotonic()
    transport = _RootTransport(url, timeout) if root else _HttpTransport(url, timeout)
    shadow = None
    if shadow_dir:
        size = max(o + n for r in plan.rounds for q in r.requests for o, n in q.ranges)
        shadow = _Shadow(shadow_dir, size)
    deadline = time.monotonic() + timeout
    wait0 = threadcpu.own_wait_ns()
    ru0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    open_s = t0 - t_open
    received, crc, times = 0, 0, []
    try:
        for rnd in plan.rounds:
            r0 = time.monotonic()
            thunks = [transport.thunk(q) for q in rnd.requests]
            if shadow is not None:
                thunks = [shadow.writer(q, t) for q, t in zip(rnd.requests, thunks)]
            out = _Windowed(thunks, rnd.window, deadline).run()
            if shadow is not None:
                shadow.flush()
            times.append(time.monotonic() - r0)
            for q, pieces in zip(rnd.requests, out):
                assert isinstance(pieces, (list, tuple))
                sizes = [p if isinstance(p, int) else len(p) for p in pieces]
                if len(pieces) != len(q.ranges) or any(m != n for m, (_, n) in zip(sizes, q.ranges)):
                    raise RigError(f"replay: short answer in round {len(times) - 1} "
                                   f"({sum(sizes)} of {q.nbytes} bytes)")
                received += sum(sizes)
                for p in pieces:
                    if not isinstance(p, int):
                        crc = _crc(crc, p)
        wall = time.monotonic() - t0
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        wait1 = threadcpu.own_wait_ns()
        if shadow is not None:
            crc = shadow.crc(plan)
    finally:
        transport.close()
        if shadow is not None:
            shadow.close()
    return ReplayResult(proto, url, plan.mode, wall, plan.requests, plan.round_trips,
                        plan.bytes_useful, plan.bytes_wire, received,
                        ru1.ru_utime - ru0.ru_utime, ru1.ru_stime - ru0.ru_stime,
                        tuple(times), f"{crc:08x}", open_s,
                        None if wait0 is None or wait1 is None else max(0, wait1 - wait0) / 1e9)


def expected_checksum(plan: Plan, path: str) -> str:
    """What `replay` must report for `plan` read from the local copy at `path`."""
    crc = 0
    with open(path, "rb") as fh:
        for rnd in plan.rounds:
            for q in rnd.requests:
                for off, n in q.ranges:
                    fh.seek(off)
                    crc = _crc(crc, fh.read(n))
    return f"{crc:08x}"
