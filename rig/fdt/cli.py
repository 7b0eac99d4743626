"""Command line of the FDT-style copy tool (console script ``rig-fdt``).

    rig-fdt serve --root DIR [--bind ADDR] [--port PORT] [--bufsize SIZE]
    rig-fdt get [--streams N] [--port PORT] [options] ADDR NAME DEST
    rig-fdt get [options] ADDR NAME NAME... DIR    # several files, one session (or /dev/null)
    rig-fdt get --mem SIZE [--streams N] [options] ADDR          # like FDT -nettest
    rig-fdt get --time 10s [--omit 3s] [--streams N] [options] ADDR   # timed, as iperf3 -t
    rig-fdt put [--streams N] [--port PORT] [options] ADDR SRC NAME
    rig-fdt put --mem SIZE [options] ADDR

``get``/``put`` print one JSON object as the last stdout line (bytes, seconds,
throughput_bps in bit/s, streams, per_stream_bytes, cpu_user_s, cpu_sys_s, ...), also on
failure (with "error" and "exit"); a progress line goes to stderr only when it is a
terminal.  ``serve`` prints one JSON line {"listening": ADDR, "port": PORT} when ready.
Exit status: 0 ok, 1 transfer failed, 2 bad usage, 3 integrity error, 4 stalled or past
the deadline, 130 interrupted.  SIGTERM and SIGINT take the same shutdown path.

``main()`` maps exceptions to exit codes; ``program()`` holds the logic.  May import
rig.description.units (pure); nothing else from rig outside rig.fdt.
"""
from __future__ import annotations

import argparse
import asyncio
import enum
import ipaddress
import json
import math
import os
import re
import signal
import sys
from typing import Callable, Sequence, TextIO

import rig.description.units as units
from rig.errors import clip, quote
from rig.fdt import client
from rig.fdt.protocol import MAX_BLOCK, MAX_BUFSIZE, MAX_FILES, IntegrityError, ProtocolError
from rig.fdt.server import Server
from rig.fdt.transport import DEFAULT_BLOCK, DeadlineError, Options, Progress, StallError, \
    TransferError

DEFAULT_PORT = 54321      # FDT's default port
TIMED_CAP = 1 << 60       # --time without --mem: no practical size limit


class ExitStatus(enum.IntEnum):
    OK = 0
    ERROR = 1
    BAD_INPUT = 2
    INTEGRITY = 3
    TIMEOUT = 4
    INTERRUPTED = 130
    CLOSED_STDOUT = 141     # stdout closed by its reader (`| head`), as cat under a shell


class _Parser(argparse.ArgumentParser):
    """Usage errors are one line on stderr (`rig-fdt get: error: ...`), exit 2."""

    def error(self, message: str):
        self.exit(ExitStatus.BAD_INPUT, clip(f"{self.prog}: error: {message}") + "\n")


def _ranged(parse: Callable[[str], float], lo: float, hi: float, shown: str,
            above_lo: bool = False) -> Callable[[str], float]:
    """An argparse type: parse, then insist on a finite value in [lo, hi] (or (lo, hi])."""
    def convert(text: str):
        try:
            value = parse(text)
        except OverflowError:            # '1e400': infinite, no int holds it
            raise argparse.ArgumentTypeError(f"must be {shown} (got {quote(text)})") from None
        except ValueError as e:
            why = "expected a whole number" if parse is int else str(e)
            raise argparse.ArgumentTypeError(f"{why} (got {quote(text)})") from None
        if not math.isfinite(value) or not lo <= value <= hi or (above_lo and value == lo):
            raise argparse.ArgumentTypeError(f"must be {shown} (got {quote(text)})")
        return value
    return convert


DAY = 86400.0


def parse_size(text: str) -> int:
    """Bytes; a bare number is bytes, as FDT's and iperf3's options read (the rig's own
    command line and files require a unit)."""
    return units.parse_size(text, bare_unit="B")


def parse_duration(text: str) -> float:
    """Seconds; a bare number is seconds, as iperf3 -t reads."""
    return units.parse_duration(text, bare_unit="s")

_PORT = _ranged(int, 1, 65535, "a port number 1..65535")
_LISTEN_PORT = _ranged(int, 0, 65535, "a port number 0..65535 (0: any free port)")
_BUFSIZE = _ranged(parse_size, 1024, MAX_BUFSIZE, "1KiB..1GiB")
_BLOCK = _ranged(parse_size, 1, MAX_BLOCK, "1B..1GiB")
_MEM = _ranged(parse_size, 0, TIMED_CAP, "0..1EiB")
_CONNECT_S = _ranged(parse_duration, 0, 3600, "more than 0 and at most 1h", True)
_STALL_S = _ranged(parse_duration, 0, DAY, "more than 0 and at most 1 day", True)
_TIMEOUT_S = _ranged(parse_duration, 0, 30 * DAY, "more than 0 and at most 30 days", True)
_INTERVAL_S = _ranged(parse_duration, 0, 3600, "more than 0 and at most 1h", True)
_OMIT_S = _ranged(parse_duration, 0, DAY, "0..1 day")
_TIME_S = _ranged(parse_duration, 0, DAY, "more than 0 and at most 1 day", True)


def _common(p: argparse.ArgumentParser, port: Callable) -> None:
    p.add_argument("--port", type=port, default=DEFAULT_PORT)
    p.add_argument("--bufsize", type=_BUFSIZE, default=None,
                   help="SO_SNDBUF/SO_RCVBUF of every socket, 1KiB..1GiB (default:"
                        " autotuning)")
    p.add_argument("--connect-timeout", type=_CONNECT_S, default=10.0,
                   help="connect and handshake, at most 1h (default 10s)")
    p.add_argument("--stall-timeout", type=_STALL_S, default=30.0,
                   help="fail when no byte moved on any stream for this long (at most 1 day)")


def _transfer(p: argparse.ArgumentParser) -> None:
    _common(p, _PORT)
    p.add_argument("-P", "--streams", type=int, default=4)
    p.add_argument("--block", type=_BLOCK, default=DEFAULT_BLOCK,
                   help=f"block size, at most 1GiB (default {DEFAULT_BLOCK >> 20}MiB)")
    p.add_argument("--checksum", action="store_true",
                   help="verify a whole-file adler32 at the end")
    p.add_argument("--mem", type=_MEM, default=None, metavar="SIZE",
                   help="memory-to-memory: move SIZE bytes, no file at either end")
    p.add_argument("--time", type=_TIME_S, default=None, metavar="SECONDS",
                   help="memory-to-memory for this long (as iperf3 -t); --mem is then a cap")
    p.add_argument("--interval", type=_INTERVAL_S, default=1.0,
                   help="sample cumulative bytes this often (the 'intervals' key)")
    p.add_argument("--omit", type=_OMIT_S, default=0.0,
                   help="steady_throughput_bps leaves out this first part (slow start)")
    p.add_argument("--timeout", type=_TIMEOUT_S, default=3600.0,
                   help="deadline for the whole transfer (at most 30 days)")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="rig-fdt", description="FDT-style multi-stream copy")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="serve files below --root")
    s.add_argument("--root", required=True)
    s.add_argument("--bind", default="0.0.0.0")
    _common(s, _LISTEN_PORT)
    g = sub.add_parser("get", help="fetch NAME from the server into DEST (several: into DIR)")
    _transfer(g)
    g.add_argument("addr")
    g.add_argument("paths", nargs="*", metavar="NAME... DEST",
                   help="file(s) below the server's root, then where they land")
    u = sub.add_parser("put", help="upload SRC to the server as NAME")
    _transfer(u)
    u.add_argument("addr")
    u.add_argument("src", nargs="?")
    u.add_argument("name", nargs="?")
    return ap


def _options(a: argparse.Namespace) -> Options:
    return Options(block=getattr(a, "block", DEFAULT_BLOCK), bufsize=a.bufsize,
                   checksum=getattr(a, "checksum", False), connect_s=a.connect_timeout,
                   stall_s=a.stall_timeout, timeout_s=getattr(a, "timeout", 3600.0),
                   interval_s=getattr(a, "interval", 1.0), omit_s=getattr(a, "omit", 0.0))


def _progress_hook(err: TextIO):
    if not err.isatty():
        return None

    def hook(p: Progress, elapsed: float) -> None:
        rate = p.total * 8 / elapsed / 1e9 if elapsed > 0 else 0.0
        err.write(f"\r{p.total / 2**20:10.1f} MiB  {rate:7.3f} Gbit/s  {elapsed:6.1f} s ")
        err.flush()
    return hook


async def _serve(a: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    def log(msg: str) -> None:
        print(f"rig-fdt serve: {msg}", file=err, flush=True)
    server = Server(a.root, _options(a), log)
    host, port = server.listen(a.bind, a.port)
    print(json.dumps({"listening": host, "port": port}), file=out, flush=True)
    try:
        await server.serve_forever()
    except asyncio.CancelledError:
        log("shutting down")
    return ExitStatus.OK


async def _transfer_cmd(a: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    opts, hook = _options(a), _progress_hook(err)
    if a.cmd == "get":
        stats = await client.get(a.addr, a.port, a.names or "", a.dest, streams=a.streams,
                                 opts=opts, mem_size=a.mem, duration=a.time, hook=hook)
    else:
        stats = await client.put(a.addr, a.port, a.src, a.name or "", streams=a.streams,
                                 opts=opts, mem_size=a.mem, duration=a.time, hook=hook)
    if hook:
        err.write("\n")
    print(json.dumps(stats.as_json()), file=out, flush=True)
    return ExitStatus.OK


def _address(text: str) -> str | None:
    """Why `text` is not an IP address or a DNS name (None: it is one)."""
    try:
        ipaddress.ip_address(text)
        return None
    except ValueError:
        pass
    if not text or len(text) > 253 or not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?",
                                                       text) \
            or any(len(label) > 63 or not label for label in text.split(".")):
        return "expected an IP address or a host name (letters, digits, '-', '.')"
    return None


def _check(a: argparse.Namespace, ap: argparse.ArgumentParser) -> None:
    where = "--bind" if a.cmd == "serve" else "ADDR"
    bad = _address(a.bind if a.cmd == "serve" else a.addr)
    if bad:
        ap.error(f"{where}: {bad} (got {(a.bind if a.cmd == 'serve' else a.addr)[:80]!r})")
    if a.cmd == "serve":
        if not os.path.isdir(a.root):
            ap.error(f"--root: not a directory (got {a.root!r})")
        return
    if a.cmd == "get":               # ADDR NAME... DEST
        a.names, a.dest = (a.paths[:-1], a.paths[-1]) if len(a.paths) >= 2 else (a.paths, None)
        a.name = a.names[0] if a.names else None
        if len(a.names) > MAX_FILES:
            ap.error(f"at most {MAX_FILES} files per session")
    if not 1 <= a.streams <= 256:
        ap.error("--streams must be 1..256")
    if a.block <= 0:
        ap.error("--block must be positive")
    if a.interval <= 0 or a.omit < 0:
        ap.error("--interval must be positive and --omit not negative")
    if a.time is not None:
        if not 0 < a.time <= 86400:
            ap.error("--time must be more than 0 and at most 1 day")
        if getattr(a, "paths", None) or getattr(a, "src", None) or getattr(a, "name", None):
            ap.error("--time is memory-to-memory: give no file names")
        if a.mem is None:
            a.mem = TIMED_CAP
    if a.mem is None:
        first, second = (a.name, a.dest) if a.cmd == "get" else (a.src, a.name)
        if not first or not second:
            ap.error(f"{a.cmd} needs " + ("NAME... DEST" if a.cmd == "get" else "SRC NAME")
                     + " (or --mem SIZE)")
    if a.cmd == "get" and a.mem is not None and a.paths:
        ap.error("--mem discards the data: give no NAME or DEST")


async def program(a: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run one command with SIGTERM wired to the same path as Ctrl-C."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    try:
        if a.cmd == "serve":
            return await _serve(a, out, err)
        return await _transfer_cmd(a, out, err)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def _closed_stdout(out: TextIO) -> int:
    """Later writes (and the flush at exit) go to /dev/null; exit 141, a shell's status
    for `cat` killed by SIGPIPE."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, out.fileno())
    except (OSError, ValueError, AttributeError):
        pass                      # not a real file (a test's StringIO)
    finally:
        os.close(devnull)
    return ExitStatus.CLOSED_STDOUT


def _status(e: BaseException) -> ExitStatus:
    if isinstance(e, IntegrityError):
        return ExitStatus.INTEGRITY
    if isinstance(e, (StallError, DeadlineError)):
        return ExitStatus.TIMEOUT
    if isinstance(e, asyncio.CancelledError):
        return ExitStatus.INTERRUPTED
    return ExitStatus.ERROR


def main(argv: Sequence[str] | None = None, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    ap = build_parser()
    try:
        a = ap.parse_args(argv)
    except BrokenPipeError:          # --help into a closed stdout (Python < 3.11.4 raises)
        return _closed_stdout(out)
    except SystemExit:               # --help, or a usage error: argparse printed and exits
        try:
            out.flush()
        except BrokenPipeError:      # Python before 3.11.4 would report it at exit (120)
            return _closed_stdout(out)
        raise
    _check(a, ap)
    try:
        code = int(asyncio.run(program(a, out, err)))
        out.flush()
        return code
    except BrokenPipeError:       # stdout's reader went away: end quietly, as cat does
        return _closed_stdout(out)
    except (TransferError, ProtocolError, OSError, asyncio.CancelledError,
            KeyboardInterrupt) as e:
        status = _status(e) if not isinstance(e, KeyboardInterrupt) \
            else ExitStatus.INTERRUPTED
        msg = str(e) or type(e).__name__
        if isinstance(e, OSError) and e.strerror:
            msg = f"{e.filename + ': ' if e.filename else ''}{e.strerror}"
        if isinstance(e, asyncio.CancelledError):
            msg = "interrupted"
        msg = clip(msg)
        print(f"rig-fdt {a.cmd}: error: {msg}", file=err, flush=True)
        if a.cmd != "serve":
            print(json.dumps({"tool": "rig-fdt", "op": a.cmd, "error": msg,
                              "exit": int(status)}), file=out, flush=True)
        return int(status)
