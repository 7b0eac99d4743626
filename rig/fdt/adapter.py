"""How the rig runs the FDT-style tool: pure argv builders and a pure output parser.

The rig registers these as server ``fdt`` and client ``fdt``.  The argv start with
``sys.executable -m rig.fdt`` (an absolute path), so they work unchanged inside
``ip netns exec NS ...`` whatever PATH the namespace shell has.

Pure functions only: must not import asyncio, the transport, rig.process.proc or anything that
runs; bad input raises ValueError.
"""
from __future__ import annotations

import json
import math
import sys

_REQUIRED = ("bytes", "seconds", "throughput_bps", "streams", "cpu_user_s", "cpu_sys_s")


def tool_argv() -> list[str]:
    return [sys.executable, "-m", "rig.fdt"]


def _check_port(port: int) -> None:
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"port must be 1..65535, got {port!r}")


def _check_size(what: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or value <= 0):
        raise ValueError(f"{what} must be a positive number of bytes, got {value!r}")


def server_argv(root: str, bind: str, port: int, *, bufsize: int | None) -> list[str]:
    """`rig-fdt serve` for the server namespace; ready when PORT accepts connections."""
    if not root or not bind:
        raise ValueError("root and bind must be non-empty")
    _check_port(port)
    _check_size("bufsize", bufsize)
    argv = [*tool_argv(), "serve", "--root", str(root), "--bind", bind, "--port", str(port)]
    if bufsize is not None:
        argv += ["--bufsize", str(bufsize)]
    return argv


def client_argv(addr: str, port: int, name: str, dest: str, *, streams: int,
                block_bytes: int | None, bufsize: int | None,
                timeout_s: float, program: str | None = None,
                checksum: bool = False) -> list[str]:
    """`rig-fdt get` of NAME into DEST (``/dev/null`` to discard) over `streams` streams.
    `checksum`: `--checksum`, the whole file's adler32 taken by the sender and checked by
    the receiver over the blocks as they land (the result's `checksum_adler32`).
    `program`: another rig-fdt executable to run (a scenario's `binary:`), else this
    rig's own (`python -m rig.fdt`).

    The tool enforces `timeout_s` itself (exit 4); the stall timeout is the smaller of
    30 s and the deadline, so a dead server ends the run well before the rig's own
    process deadline.
    """
    if not addr or not name or not dest:
        raise ValueError("addr, name and dest must be non-empty")
    _check_port(port)
    if isinstance(streams, bool) or not isinstance(streams, int) or not 1 <= streams <= 256:
        raise ValueError(f"streams must be 1..256, got {streams!r}")
    _check_size("block_bytes", block_bytes)
    _check_size("bufsize", bufsize)
    if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s)
            and timeout_s > 0):
        raise ValueError(f"timeout_s must be a positive number, got {timeout_s!r}")
    if program is not None and (not isinstance(program, str) or not program):
        raise ValueError(f"program must be a non-empty path, got {program!r}")
    argv = [*([program] if program else tool_argv()), "get", "--streams", str(streams),
            "--port", str(port),
            "--timeout", f"{timeout_s:g}", "--stall-timeout", f"{min(30.0, timeout_s):g}"]
    if block_bytes is not None:
        argv += ["--block", str(block_bytes)]
    if bufsize is not None:
        argv += ["--bufsize", str(bufsize)]
    if checksum:
        argv.append("--checksum")
    return [*argv, addr, name, dest]


def put_argv(addr: str, port: int, src: str, name: str, **kw) -> list[str]:
    """`rig-fdt put` of the local file SRC to the server as NAME (below its root); the
    options and their checks are `client_argv`'s."""
    argv = client_argv(addr, port, name, src, **kw)
    argv[argv.index("get")] = "put"
    return [*argv[:-2], src, name]


def parse(stdout: str, stderr: str) -> dict:
    """The result object from the last non-empty stdout line.

    Returns bytes, seconds (and duration_s), throughput_bps (bit/s), streams,
    per_stream_bytes, cpu_user_s, cpu_sys_s, server_cpu_user_s, server_cpu_sys_s,
    block_bytes, bufsize, checksum_adler32, mem, setup_s, data_throughput_bps and, for
    timed runs, time_s, omit_s, steady_throughput_bps and intervals.  Raises ValueError when there is no
    result line, it is not JSON, a field is missing, or the tool reported an error.
    """
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    if not lines:
        hint = stderr.strip().splitlines()[-1:] or ["no output"]
        raise ValueError(f"rig-fdt printed no result: {hint[0]}")
    try:
        obj = json.loads(lines[-1])
    except json.JSONDecodeError as e:
        raise ValueError(f"rig-fdt result line is not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise ValueError("rig-fdt result line is not a JSON object")
    if "error" in obj:
        raise ValueError(f"rig-fdt failed (exit {obj.get('exit')}): {obj['error']}")
    missing = [k for k in _REQUIRED if k not in obj]
    if missing:
        raise ValueError(f"rig-fdt result lacks {', '.join(missing)}")
    try:
        out = {"bytes": int(obj["bytes"]), "seconds": float(obj["seconds"]),
               "throughput_bps": float(obj["throughput_bps"]),
               "streams": int(obj["streams"]),
               "per_stream_bytes": [int(x) for x in obj.get("per_stream_bytes", [])],
               "cpu_user_s": float(obj["cpu_user_s"]), "cpu_sys_s": float(obj["cpu_sys_s"])}
    except (TypeError, ValueError) as e:
        raise ValueError(f"rig-fdt result has a bad field: {e}") from None
    out["duration_s"] = out["seconds"]
    for key in ("server_cpu_user_s", "server_cpu_sys_s", "block_bytes", "bufsize",
                "checksum_adler32", "mem", "setup_s", "data_throughput_bps",
                "steady_throughput_bps", "omit_s", "time_s", "intervals"):
        out[key] = obj.get(key)
    return out
