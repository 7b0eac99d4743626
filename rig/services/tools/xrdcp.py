"""xrdcp (XRootD client): root:// downloads with 1–15 streams (`-S`); roots:// with TLS
on every stream, or on the control stream only (`--tlsnodata`), trusting only the run's
CA (X509_CERT_DIR: xrdcp 5.5 reads its CA from a hashed directory, not a file); extreme
copy (`-y K` over a metalink listing the file at K sources, seed 001).

Downloads are checked end to end with xrdcp's own option, `--cksum adler32:<value>` with
the value the rig took when it made the file: XrdCl computes adler32 of the bytes as they
arrive (also when they go to /dev/null) and exits 53 (`CheckSum error`) when it differs.
That is on the clock, as every FTS/gfal transfer does it (measured on this 2-vCPU VM,
loopback, 1 GiB to /dev/null, medians of 5: 4.13 Gbit/s without, 2.86 with); `checksum:
false` leaves it out. `adler32:source` would ask the server for its own value, which a
damaged served file agrees with."""
from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape

if TYPE_CHECKING:
    from rig.services.servers import ServerPlan

from rig.description import limits as L, schema as S
from rig.services.tools import (DEST_SLOT, URL_SLOT, Capabilities, ClientTool, Column,
                                FetchSet, Job, Parsed, checks, each_file_argv, last_line,
                                one_invocation, register)

# xrdcp 5.5 retries a refused connection for ~8 minutes by default; fail fast instead.
XRD_FAIL_FAST = {"XRD_CONNECTIONRETRY": "1", "XRD_CONNECTIONWINDOW": "5",
                 "XRD_REQUESTTIMEOUT": "60", "XRD_STREAMTIMEOUT": "30",
                 "XRD_TIMEOUTRESOLUTION": "1"}


@dataclasses.dataclass(frozen=True)
class XrdcpOptions(FetchSet):
    """xrdcp's own client keys."""
    # XRD_CPUSEPGWRTRD: checksum every 4 KiB page (None: the client's default, on)
    page_checksum: bool | None = S.spec(S.optional(S.boolean), None)
    # extreme copy (seed 001): a metalink listing the file K times, `-y K`; each source a
    # different user (root://uN@...) so each gets its own connection, unless
    # `multiplex: true` (one user: the client multiplexes every source over one channel)
    sources: int | None = S.spec(S.optional(S.integer(1, L.MAX_SOURCES)), None)
    multiplex: bool | None = S.spec(S.optional(S.boolean), None)


@register
class Xrdcp(ClientTool):
    name = "xrdcp"
    caps = Capabilities(servers=frozenset({"xrootd", "xcache"}), protocols=("root",),
                        max_streams=15,
                        timed_by_written_bytes=True, tls=frozenset({"control", "all"}),
                        upload=frozenset({"xrootd"}), auth=frozenset({"x509"}),
                        many_files="one")
    options = XrdcpOptions
    verify = "tool"
    columns = (Column("page_checksum", int),)    # 1: pages checksummed, 0: not

    def checked(self, ctx: Any, d: dict[str, Any]) -> dict[str, Any]:
        if d["direction"] == "upload" and d["sources"] is not None:
            raise ctx.child("sources").error("an extreme copy reads from several sources: "
                                             "it does not upload", d["sources"])
        d = super().checked(ctx, d)
        if d["multiplex"] is not None and d["sources"] is None:
            raise ctx.child("multiplex").error("only with sources (extreme copy)", d["multiplex"])
        return d

    def with_origins(self, job: Job, origins: "list[ServerPlan]", instance: int) -> Job:
        """Extreme copy: a metalink in the run's directory naming the file K times,
        spread round-robin over the server's origins, each as user uN (its own
        connection) or all as one user (multiplexed over one connection)."""
        opts: XrdcpOptions = job.client.options
        k = opts.sources
        if not k:
            return job
        urls = []
        for n in range(k):
            o = origins[(instance + n) % len(origins)]
            user = "u1" if opts.multiplex else f"u{n + 1}"
            urls.append(o.url("root", job.relpath).replace("root://", f"root://{user}@", 1))
        path = origins[0].workdir.parent / "metalinks" / f"{job.client.name}-{instance}.meta4"
        return dataclasses.replace(job, url=str(path), files=((str(path),
                                                                metalink(job.relpath, urls)),))

    def argv(self, job: Job) -> list[str]:
        extra = ["-S", str(job.streams)] if job.streams > 1 else []
        if job.tls == "control":
            extra.append("--tlsnodata")
        o: XrdcpOptions = job.client.options
        if o.sources:
            extra += ["-y", str(o.sources)]
        if job.members:
            # a set: every source in one invocation (`--infiles` list) into a folder, one
            # connection (XrdCl's channel per server) reused from file to file; each
            # file's adler32 checked after the group (--cksum takes one value).
            # `reuse: false`: one xrdcp per file (eachfile)
            head = [job.client.binary or "xrdcp", "--force", "--nopbar", *extra]
            if one_invocation(job):
                return [*head, "--infiles", job.list_file, job.dest + "/"]
            return each_file_argv(job, [*head, URL_SLOT, DEST_SLOT])
        if checks(job):
            extra += ["--cksum", f"adler32:{job.adler32}"]
        ends = [job.src, job.url] if job.direction == "upload" else [job.url, job.dest]
        return [job.client.binary or "xrdcp", "--force", "--nopbar", *extra, *ends]

    def env(self, job: Job) -> dict[str, str]:
        env = dict(XRD_FAIL_FAST)
        if job.tls != "off" or (job.credential and job.ca_dir):
            env["X509_CERT_DIR"] = job.ca_dir
        env.update(gsi_env(job))
        o: XrdcpOptions = job.client.options
        if o.page_checksum is not None:
            env["XRD_CPUSEPGWRTRD"] = "1" if o.page_checksum else "0"
        env.update(job.client.env)
        return env

    @staticmethod
    def page_checksum(env: dict[str, str]) -> int:
        return 0 if env.get("XRD_CPUSEPGWRTRD", "1") == "0" else 1

    def set_list(self, job: Job) -> str:
        if not one_invocation(job):
            return super().set_list(job)
        return "".join(f"{u}\n" for u, _, _ in job.members)

    def parse_set(self, stdout: str, stderr: str, returncode: int, job: Job) -> Parsed:
        if not one_invocation(job):
            return super().parse_set(stdout, stderr, returncode, job)
        p = self.parse(stdout, stderr, returncode, job)
        return Parsed(bytes=None, error=p.error, extra={"files": []})

    def parse(self, stdout: str, stderr: str, returncode: int, job: Job) -> Parsed:
        if returncode == 0:
            return Parsed(bytes=None)
        m = re.search(r"\[(ERROR|FATAL)\][^\n]*", stderr)
        if checks(job) and "CheckSum error" in stderr:
            return Parsed(bytes=None, error=cksum_error(job, "xrdcp"))
        return Parsed(bytes=None, error=(m.group(0) if m else last_line(stderr))[:300]
                      or f"exit {returncode}")

    def row_fields(self, job: Job, env: dict[str, str]) -> dict:
        return {"page_checksum": self.page_checksum(env)}

    def known_deadlock(self, job: Job) -> str | None:
        if (job.client.options.sources or 0) < 2:
            return None
        return ("XrdCl before 5.9.2: two extreme-copy sources stealing work from each "
                "other take their locks in opposite order, XCpSrc::Steal, "
                "xrootd/xrootd#2619")


# where no file can be (/dev/null is no directory): XrdCl's GSI, finding no usable proxy,
# makes one from the user certificate and key these name, asking for a passphrase
NO_FILE = "/dev/null/none"


def gsi_env(job: Job) -> dict[str, str]:
    """What an XrdCl client presents to a GSI server: the proxy's path (`missing`: a path
    where none is, so it does not fall back to /tmp/x509up_u<uid>), and no user
    certificate to make a proxy from (~/.globus would ask for a passphrase); not
    XrdSecGSICREATEPROXY=0, with which xrdcp 5.5.3 segfaults when it has no proxy. A rig
    server's certificate CN is named (XrdSecGSISRVNAMES): XrdCl 5.5 otherwise wants it to
    be the host it connected to, '::ffff:198.18.0.6'."""
    if not job.credential:
        return {}
    return gsi_env_of(job.proxy, job.gsi_name)


def gsi_env_of(proxy: str, server_cn: str = "") -> dict[str, str]:
    env = {"X509_USER_PROXY": proxy, "X509_USER_CERT": NO_FILE, "X509_USER_KEY": NO_FILE}
    if server_cn:
        env["XrdSecGSISRVNAMES"] = server_cn
    return env


def cksum_error(job: Job, tool: str) -> str:
    """A download XrdCl's `--cksum adler32:<value>` refused: it does not print the value
    it computed, only that it differs."""
    return (f"adler32 mismatch: got another value ({tool} --cksum: CheckSum error), "
            f"want {job.adler32}")


def metalink(name: str, urls: list[str]) -> str:
    """A Metalink 4 (RFC 5854) document: one file at every URL (xrdcp reads a local
    *.meta4 as a list of sources)."""
    rows = "".join(f"    <url>{escape(u)}</url>\n" for u in urls)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            '<metalink xmlns="urn:ietf:params:xml:ns:metalink">\n'
            f'  <file name="{escape(name, {chr(34): "&quot;"})}">\n{rows}  </file>\n</metalink>\n')
