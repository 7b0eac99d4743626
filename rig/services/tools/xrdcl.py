"""xrdcl: root:// downloads through XrdCl's CopyProcess -- the engine xrdcp itself runs --
from a side environment holding PyPI's `xrootd` wheel (`make xrdcl6`: XrdCl 6.x and its
Python bindings, no xrdcp binary). A second XRootD client release next to Debian's
xrdcp 5.5, so that `rig compare` can see a change of release.

The helper tools/xrdcl-copy/xrdcl_copy.py runs under the side environment's python
(`binary:` names another one, e.g. a venv holding a 5.x wheel): `--streams N` is
`xrdcp -S N` (SubStreamsPerChannel), and XRD_* variables of the client's `env:` set chunk
size, parallel chunks and the rest (XRD_CPCHUNKSIZE, XRD_CPPARALLELCHUNKS ...), as they
do for xrdcp. The data phase is dated as xrdcp's is (bytes written, /proc/PID/io), so
both clients are timed alike. The row's extra records the XrdCl version, streams and
the chunk settings in force; `rig doctor` and the run's environment list the version.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from rig.services.tools import (Capabilities, ClientTool, Column, DestDir, Job, Parsed, checks,
                                last_line, register)
from rig.services.tools.xrdcp import XRD_FAIL_FAST, cksum_error

if TYPE_CHECKING:
    from rig.description.scenario import Scenario

REPO = Path(__file__).resolve().parents[3]
SIDE_PYTHON = REPO / ".venv-xrdcl6" / "bin" / "python"
HELPER = REPO / "tools" / "xrdcl-copy" / "xrdcl_copy.py"
MISSING = ("needs XrdCl 6 in the side environment .venv-xrdcl6, which is not installed: "
           "run `make xrdcl6` (pip installs PyPI's xrootd 6.x wheel)")


@register
class Xrdcl(ClientTool):
    name = "xrdcl"
    version_argv = [str(SIDE_PYTHON), str(HELPER), "--version"]
    caps = Capabilities(servers=frozenset({"xrootd"}), protocols=("root",), max_streams=15,
                        timed_by_written_bytes=True)
    options = DestDir
    verify = "tool"          # --cksum adler32:<value>, as xrdcp's (xrdcl_copy.py)
    columns = (Column("page_checksum", int),)    # 1: pages checksummed, 0: not

    def argv(self, job: Job) -> list[str]:
        ck = ["--cksum", f"adler32:{job.adler32}"] if checks(job) else []
        return [job.client.binary or str(SIDE_PYTHON), str(HELPER), "--streams",
                str(job.streams), *ck, job.url, job.dest]

    def env(self, job: Job) -> dict[str, str]:
        env = dict(XRD_FAIL_FAST)       # page checksums: XRD_CPUSEPGWRTRD in env:
        env.update(job.client.env)
        return env

    def parse(self, stdout: str, stderr: str, returncode: int, job: Job) -> Parsed:
        if returncode != 0:
            if checks(job) and "CheckSum error" in stderr:
                return Parsed(bytes=None, error=cksum_error(job, "xrdcl"))
            return Parsed(bytes=None, error=last_line(stderr)[:300] or f"exit {returncode}")
        try:
            d = json.loads(last_line(stdout))
        except ValueError:
            return Parsed(bytes=None, error="no xrdcl-copy json output")
        if not isinstance(d, dict) or not isinstance(d.get("xrdcl_version"), str):
            return Parsed(bytes=None, error="xrdcl-copy json output lacks the XrdCl version")
        return Parsed(bytes=None, extra=d)

    def row_fields(self, job: Job, env: dict[str, str]) -> dict:
        return {"page_checksum": 0 if env.get("XRD_CPUSEPGWRTRD", "1") == "0" else 1}


def require_side_env(sc: "Scenario") -> None:
    """A run with an xrdcl client and no `binary:` needs .venv-xrdcl6 (before anything is
    made): one line naming the first such client, exit 2."""
    from rig.errors import InputError
    for i, c in enumerate(sc.clients):
        if c.tool == Xrdcl.name and not c.binary and not SIDE_PYTHON.exists():
            raise InputError(MISSING, file=sc.source, key=f"clients[{i}].tool", value=c.tool)
