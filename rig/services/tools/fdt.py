"""rig-fdt: the rig's FDT-style multi-stream copy (control + N data streams).

A download runs with `--checksum`: the server takes the adler32 of the file it sends, the
receiver checks it over the blocks as they land, and the result's `checksum_adler32` is
then compared with the value the rig took when it made the file (a damaged served copy
agrees with itself, not with that). `checksum: false` leaves it out.

A `count:` set of small files travels in one session (`rig-fdt get ADDR NAME.. DIR`: one
control connection and the data streams, blocks of file after file), at most
rig.fdt.protocol.MAX_FILES names; each file is checked after the group."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rig.fdt import adapter
from rig.fdt.protocol import MAX_FILES
from rig.description.limits import MAX_STREAMS
from rig.description import limits as L, schema as S
from rig import checksum
from rig.services.tools import (BUFFER, Capabilities, Checksum, ClientTool, Job, Parsed, checks,
                                last_line, register)

if TYPE_CHECKING:
    from rig.description.scenario import ClientSpec, FileSpec
    from rig.services.servers import ServerPlan


@dataclass(frozen=True)
class FdtOptions(Checksum):
    """rig-fdt's own client keys: its block size and its sockets' buffer."""
    block: int | None = S.spec(S.optional(S.size_in(L.MIN_BLOCK, L.MAX_BLOCK)), None)
    buffer: int | None = S.spec(BUFFER, None)


@register
class Fdt(ClientTool):
    name = "fdt"
    version_argv = None                 # part of the rig: its version is the rig's
    caps = Capabilities(servers=frozenset({"fdt"}), protocols=("fdt",), max_streams=MAX_STREAMS,
                        upload=frozenset({"fdt"}), many_files="one", max_files=MAX_FILES)
    options = FdtOptions
    verify = "tool"

    def job(self, c: "ClientSpec", streams: int, instance: int, *,
            server: "ServerPlan | None", file: "FileSpec | None",
            iperf: tuple[str, int], timeout_s: float, tls: str = "off") -> Job:
        assert server is not None and file is not None
        return Job(c, streams, addr=server.addr, port=server.ports["fdt"], relpath=file.name,
                   file_bytes=file.size, timeout_s=timeout_s)

    def argv(self, job: Job) -> list[str]:
        if job.direction == "upload":        # rig-fdt put SRC as upload/NAME
            return adapter.put_argv(job.addr, job.port, job.src, job.relpath,
                                    streams=job.streams, block_bytes=job.client.options.block,
                                    bufsize=job.client.options.buffer, timeout_s=job.timeout_s,
                                    program=job.client.binary)
        if job.members:          # a set: every name in one session, into the folder
            argv = adapter.client_argv(job.addr, job.port, job.members[0][1], job.dest,
                                       streams=job.streams,
                                       block_bytes=job.client.options.block,
                                       bufsize=job.client.options.buffer,
                                       timeout_s=job.timeout_s, program=job.client.binary)
            return [*argv[:-2], *(r for _, r, _ in job.members), job.dest]
        return adapter.client_argv(job.addr, job.port, job.relpath, job.dest,
                                   streams=job.streams, block_bytes=job.client.options.block,
                                   bufsize=job.client.options.buffer, timeout_s=job.timeout_s,
                                   program=job.client.binary, checksum=checks(job))

    def set_list(self, job: Job) -> str:
        return ""                # the names are on its command line

    def parse_set(self, stdout: str, stderr: str, returncode: int, job: Job) -> Parsed:
        p = self.parse(stdout, stderr, returncode, job)
        return Parsed(bytes=None, error=p.error, extra={"files": [], **p.extra})

    def parse(self, stdout: str, stderr: str, returncode: int, job: Job) -> Parsed:
        try:
            d = adapter.parse(stdout, stderr)
        except ValueError as e:
            return Parsed(bytes=None, error=(last_line(stderr) or str(e))[:300])
        err = None if returncode == 0 else (last_line(stderr)[:300] or f"exit {returncode}")
        if err is None and checks(job):
            err = checksum.mismatch(d.get("checksum_adler32"), job.adler32)
        return Parsed(bytes=int(d["bytes"]), seconds=float(d["seconds"]), error=err,
                      extra={k: v for k, v in d.items() if k not in ("bytes", "seconds")})
