"""The storage check and the page-cache drops of a disk-backed origin (`storage: disk`).

Per step, beside the path check: the sequential read rate of each file the step serves,
as seed 003 measured its data node (`dd` to /dev/null, here of the served file itself,
`check_size` of it, from a cold cache: the file's pages are dropped before and after, so
the transfers that follow start cold too), and the same read again from the page cache
(raw.cached_bps, as hdparm -T beside -t). Stored as a validations row of phase
`storage` (storage_bps, storage_file, storage_note; docs/results-format.md), drawn in the
report beside the network check and used by the verdict (storage-bound).

Before every transfer group the group's file is dropped from the page cache
(posix_fadvise DONTNEED on that file: rig.realization.diskdata.drop_cache), so each
repeat reads the disk, not what the previous one left in memory.
Nothing here runs for `storage: tmpfs` (the files are memory). Must not import reports.
"""
from __future__ import annotations

import contextlib
import json
import re
import time
from pathlib import Path
from typing import Callable

from rig.description import steps as S
from rig.description.scenario.document import Scenario
from rig.orchestration.actions import Item, cmd, text
from rig.process import proc
from rig.realization import diskdata
from rig.results.store import Store, ValidationRow

_DD = re.compile(r"^(\d+) bytes\b.*copied, ([0-9.,eE+-]+) s", re.M)
MIN_RATE_BPS = 8e6          # the check's deadline assumes at least 1 MB/s


def dd_argv(path: Path, size: int) -> list[str]:
    """Read the first `size` bytes (whole MiB, at least one) of `path` to /dev/null."""
    return ["dd", f"if={path}", "of=/dev/null", "bs=1M", f"count={max(1, size >> 20)}"]


def parse_dd(stderr: str) -> tuple[int, float]:
    """(bytes, seconds) of dd's summary line; ValueError when there is none."""
    found = list(_DD.finditer(stderr))
    if not found:
        raise ValueError("dd printed no summary")
    m = found[-1]
    return int(m.group(1)), float(m.group(2).replace(",", "."))


def served_files(sc: Scenario, step: S.Step) -> list[str]:
    """Names of the files this step's transfer groups read, in scenario order."""
    used = {g.client.file for g in S.groups(sc, step.path)}
    return [f.name for f in sc.files if f.name in used]


class DiskHooks:
    """What a run does for a disk-backed data folder; inert for a tmpfs."""

    def __init__(self, sc: Scenario, datadir: Path, say: Callable[[str], None],
                 written: dict | None = None) -> None:
        self.sc, self.datadir, self.say = sc, datadir, say
        self.on = sc.storage.on_disk
        self.written = written or {}
        self.env_stored = False

    def before_group(self, g: S.Group) -> None:
        if self.on and self.sc.storage.drop_cache and g.client.file:
            f = self.datadir / g.client.file
            if f.is_file():
                diskdata.drop_cache(f)

    def check(self, step: S.Step, fields: dict, store: Store) -> None:
        """One `storage` row per served file of the step, with the console line."""
        if not self.on:
            return
        if not self.env_stored:        # where the files were and how fast they were written
            store.set_env("storage", {"kind": "disk", "folder": str(self.datadir),
                                      "written": self.written})
            self.env_stored = True
        for name in served_files(self.sc, step):
            row = ValidationRow(**fields, phase="storage", flagged=False,
                                started_at=time.time(), **self.measure(name))
            store.add_validation(row)
            rate = (f"{row.storage_bps / 8e6:.0f} MB/s" if row.storage_bps
                    else row.storage_note or "?")
            warm = json.loads(row.raw or "{}").get("cached_bps")
            self.say(f"  storage check: {name} sequential read {rate} (dd, cold cache)"
                     + (f", {warm / 8e6:.0f} MB/s cached" if warm else ""))

    def measure(self, name: str) -> dict:
        f = self.datadir / name
        size = min(self.sc.storage.check_size, f.stat().st_size)
        argv = dd_argv(f, size)
        diskdata.drop_cache(f)
        r = proc.run(argv, timeout=30 + size * 8 / MIN_RATE_BPS)
        # the same bytes again, now in the page cache (as hdparm -T beside hdparm -t)
        warm = proc.run(argv, timeout=30 + size * 8 / MIN_RATE_BPS)
        diskdata.drop_cache(f)
        raw = {"dd_argv": argv, "dd_stderr": r.stderr[-500:], "file_bytes": f.stat().st_size}
        with contextlib.suppress(ValueError):
            wb, ws = parse_dd(warm.stderr)
            if warm.returncode == 0 and wb > 0 and ws > 0:
                raw["cached_bps"] = wb * 8 / ws
        try:
            nbytes, secs = parse_dd(r.stderr)
        except ValueError as e:
            return {"storage_file": name, "storage_note": f"not measured: {e} (rc "
                    f"{r.returncode})", "raw": json.dumps(raw)}
        raw.update(bytes=nbytes, seconds=secs)
        if r.returncode != 0 or secs <= 0 or nbytes <= 0:
            return {"storage_file": name, "storage_note": f"not measured: dd rc {r.returncode}",
                    "raw": json.dumps(raw)}
        return {"storage_file": name, "storage_bps": nbytes * 8 / secs, "raw": json.dumps(raw)}


# --- `rig plan` -------------------------------------------------------------------------
def plan_data(sc: Scenario, prefix: str) -> list[str]:
    """What a run does to make its disk data folder (storage: disk), as plan lines."""
    d = diskdata.folder(sc.storage.base, prefix)
    return [f"# mkdir {d}   # storage: disk, removed at the end and by `rig clean`"] + [
        f"# write {f.name} to {d}: {f.size} random bytes, flushed and dropped from the page "
        "cache every GiB" for f in sc.files]


def plan_step(sc: Scenario, step: S.Step, prefix: str) -> list[Item]:
    """The storage check of a step and the drops before its groups, as plan lines."""
    d = diskdata.folder(sc.storage.base, prefix)
    out = []
    for name in served_files(sc, step):
        f = next(x for x in sc.files if x.name == name)
        out.append(cmd(dd_argv(d / name, min(sc.storage.check_size, f.size)),
                       note="   # storage check, its page cache dropped before and after"))
    if sc.storage.drop_cache:
        out.append(text("# before every transfer group: posix_fadvise(DONTNEED) on its file"))
    return out


def data_folder(sc: Scenario, workdir: Path, prefix: str) -> Path:
    """The servers' data directory: the tmpfs in the run directory, or the disk folder."""
    return diskdata.folder(sc.storage.base, prefix) if sc.storage.on_disk else workdir / "data"
