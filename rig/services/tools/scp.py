"""scp (OpenSSH client): one-stream downloads from the run's sshd (servers/sshd.py), seed
000's baseline. OpenSSH 9 scp speaks SFTP (seed 000's OpenSSH 8.0 spoke the old scp
protocol, which needs a login shell the rig's sshd does not give).

`cipher:` picks the SSH cipher (`-c`); the default is aes256-gcm@openssh.com, the cipher
seed 000's Alma Linux 8 negotiates between two of its own hosts (its crypto policy
DEFAULT lists it first; upstream OpenSSH 8.0 would pick chacha20-poly1305@openssh.com).
Only the run's keys and known_hosts are used (`-F /dev/null`: no ~/.ssh, no
/etc/ssh/ssh_config; BatchMode: never a prompt). `-v` prints the negotiated cipher and
the session's byte count, kept in the row's extra; the data phase is timed from the bytes
the process wrote, like the HTTP fetchers.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rig.netaddr import host
from rig.services.servers.sshd import CIPHERS, CLIENT_KEY, KNOWN_HOSTS, USER
from rig.description import schema as S
from rig.services.tools import (Capabilities, ClientTool, DestDir, Job, Parsed, last_line,
                                register)

if TYPE_CHECKING:
    from rig.description.scenario import ClientSpec, FileSpec
    from rig.services.servers import ServerPlan

DEFAULT_CIPHER = "aes256-gcm@openssh.com"
_CIPHER = re.compile(r"kex: server->client cipher: (\S+)")
_TRANSFERRED = re.compile(r"Transferred: sent (\d+), received (\d+) bytes, in ([\d.]+) seconds")


@dataclass(frozen=True)
class ScpOptions(DestDir):
    """scp's own client keys: the SSH cipher (`ssh -c`, one of sshd.CIPHERS)."""
    cipher: str | None = S.spec(S.optional(S.text), None)


@register
class Scp(ClientTool):
    name = "scp"
    caps = Capabilities(servers=frozenset({"sshd"}), protocols=("ssh",),
                        timed_by_written_bytes=True, upload=frozenset({"sshd"}))
    options = ScpOptions
    verify = "kept"          # no end-to-end option: a kept file, checksummed after the group
    version_argv = ["ssh", "-V"]

    def checked(self, ctx: Any, d: dict[str, Any]) -> dict[str, Any]:
        if d["cipher"] is not None and d["cipher"] not in CIPHERS:
            raise ctx.child("cipher").error(f"must be one of {', '.join(CIPHERS)}", d["cipher"])
        return super().checked(ctx, d)

    def job(self, c: "ClientSpec", streams: int, instance: int, *,
            server: "ServerPlan | None", file: "FileSpec | None",
            iperf: tuple[str, int], timeout_s: float, tls: str = "off") -> Job:
        assert server is not None and file is not None
        return Job(c, streams, url=server.url("ssh", file.name), addr=server.addr,
                   port=server.ports["ssh"], relpath=str(server.datadir / file.name),
                   file_bytes=file.size, timeout_s=timeout_s, keys=str(server.workdir))

    def argv(self, job: Job) -> list[str]:
        keys = job.keys
        return [job.client.binary or "scp", "-v", "-F", "/dev/null", "-P", str(job.port),
                "-i", os.path.join(keys, CLIENT_KEY), "-o", "IdentitiesOnly=yes",
                "-o", f"UserKnownHostsFile={os.path.join(keys, KNOWN_HOSTS)}",
                "-o", "GlobalKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=yes",
                "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
                "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4",
                "-c", job.client.options.cipher or DEFAULT_CIPHER,
                *((job.src, f"{USER}@{host(job.addr)}:{job.stored}") if job.direction == "upload"
                  else (f"{USER}@{host(job.addr)}:{job.relpath}", job.dest))]

    def with_args(self, argv: list[str], args: list[str]) -> list[str]:
        # scp's getopt stops at the first operand: options go before source and target
        return argv[:-2] + args + argv[-2:]

    def parse(self, stdout: str, stderr: str, returncode: int, job: Job) -> Parsed:
        return parse_scp(stderr, returncode)


def parse_scp(stderr: str, returncode: int) -> Parsed:
    """The negotiated cipher and the SSH session's byte count and time (`-v`)."""
    extra: dict = {}
    m = _CIPHER.search(stderr)
    extra["cipher"] = m.group(1) if m else None
    t = _TRANSFERRED.search(stderr)
    if t:
        extra.update(ssh_sent=int(t.group(1)), ssh_received=int(t.group(2)),
                     ssh_seconds=float(t.group(3)))
    if returncode == 0:
        return Parsed(bytes=None, extra=extra)
    errs = [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith("debug")]
    errs = [ln for ln in errs if ln.startswith("ssh: ")] or errs      # the cause, if named
    return Parsed(bytes=None, error=(errs[-1] if errs else last_line(stderr))[:300]
                  or f"exit {returncode}", extra=extra)
