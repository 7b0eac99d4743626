"""Data: the files the servers serve, in a tmpfs of the run's (or on disk, `storage:`),
with room for uploads and third-party copies; each file's adler32 taken as it is made,
kept for the run (a client with checksum: true is checked against it, rig.checksum); and a second tmpfs,
`downloads/`, where the clients without an end-to-end check of their own (curl, davix-get,
wget, scp) write what they fetch, checksummed after each group and removed."""
from __future__ import annotations

import contextlib
import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path

from rig import checksum
from rig.description.scenario.document import Scenario
from rig.description.scenario.paths import LOCAL
from rig.description.scenario.queries import client_concurrency, client_directions, upload_servers
from rig.orchestration import storagecheck
from rig.orchestration.actions import PREFIX, Action, Item, cmd, text
from rig.orchestration.context import Context
from rig.realization import data
from rig.services import servers, tools

DOWNLOADS = "downloads"     # below the run's workdir: the kept copies' tmpfs


@dataclass(frozen=True)
class Data(Action):
    kind: str = "data"

    def execute(self, ctx: Context, stack: contextlib.ExitStack) -> None:
        _data(ctx, stack)


def items(sc: Scenario, wd: Path) -> list[Item]:
    if sc.storage.on_disk:          # rig.orchestration.storagecheck
        return [text(ln) for ln in storagecheck.plan_data(sc, PREFIX)] + _kept_items(sc, wd)
    out = [cmd(data.mount_argv(PREFIX, wd / "data", tmpfs_size(sc)))]
    out += [text(f"# write {f.name}/00000 .. {f.members[-1]}: {f.count} files of {f.size} "
                 "random bytes" if f.count is not None else
                 f"# write {f.name}: {f.size} random bytes" if f.kind == "random" else
                 f"# copy {f.name}: ROOT file " + (
                     f.path or f"generated ({f.size} bytes asked, "
                               f"{f.branches or 300} branches, seed {f.seed or 0})"))
            for f in sc.files]
    if upload_servers(sc):
        out.append(text(f"# mkdir {servers.UPLOAD_DIR}/ (mode 1777): uploads land there,"
                        " each checked (size, adler32) and removed after its group"))
    return out + _kept_items(sc, wd)


def _kept_items(sc: Scenario, wd: Path) -> list[Item]:
    out: list[Item] = [text("# each file's adler32 taken as it is made: the downloads of a "
                            "client with checksum: true are checked against it")]
    keep: int | str = keep_size(sc)
    if keep:
        if any(f.kind != "random" for f in sc.files):    # a ROOT file's size: once copied
            keep = "<bytes of the kept downloads>"
        out.append(cmd(data.mount_argv(PREFIX, wd / DOWNLOADS, keep),
                       note="   # kept downloads (curl, davix-get, wget, scp): each "
                            "checksummed after its group, then removed"))
    return out


def _data(ctx: Context, stack: contextlib.ExitStack) -> None:
    ctx.datadir = stack.enter_context(data.data_dir(
        ctx.prefix, ctx.datadir, ctx.sc.files, **_incoming(ctx.sc), **_uploads(ctx.sc),
        storage=ctx.sc.storage,
        record=functools.partial(_record_disk, ctx), say=ctx.say, written=ctx.disk_written,
        checksums=ctx.file_adler32))
    ctx.say(f"data: {len(ctx.sc.files)} file(s) on {ctx.sc.storage.kind} {ctx.datadir}")
    ctx.store.set_env("file_adler32", dict(ctx.file_adler32))
    if ctx.corrupt is not None:
        _corrupt(ctx, ctx.corrupt)
    # a generated ROOT file's size is only near the asked one: use the real one
    ctx.sc = dataclasses.replace(ctx.sc, files=[
        dataclasses.replace(f, size=(ctx.datadir / f.name).stat().st_size)
        if f.count is None else f for f in ctx.sc.files])
    ctx.disk = storagecheck.DiskHooks(ctx.sc, ctx.datadir, ctx.say, ctx.disk_written)
    keep = keep_size(ctx.sc)       # from the real sizes
    if keep:
        d = ctx.workdir / DOWNLOADS
        stack.enter_context(data.scratch_dir(ctx.prefix, d, keep))
        ctx.keep_dir = str(d)


def _incoming(sc: Scenario) -> dict:
    """Room for third-party copies: every TPC client's file, at the highest
    concurrency (each instance overwrites its own name group after group)."""
    tpc = [c for c in sc.clients if c.source]
    need = sum(sc.file(c.file).size * max(client_concurrency(sc, c)) for c in tpc if c.file)
    owners = {servers.get(s.kind).run_as for s in sc.servers if s.tpc}
    return {"incoming_bytes": need, "incoming_owner": next(iter(owners - {None}), None)}


def _uploads(sc: Scenario) -> dict:
    """Room for uploads: the largest group of them (each file removed after its
    group, once its checksum was compared)."""
    need = max((sc.file(c.file).size * max(client_concurrency(sc, c)) for c in sc.clients
                if c.file and "upload" in client_directions(sc, c)), default=0)
    return {"upload_bytes": need, "upload_dir": servers.UPLOAD_DIR}


def keep_size(sc: Scenario) -> int:
    """Room for the kept downloads: the largest group of a local client whose tool keeps
    its file to check it (verify `kept`, no `dest_dir`, `checksum: true`), each of
    its instances a whole file (0: none). A client of a `count:` set always keeps its
    files (each is checked after the group), whatever its tool."""
    local = {p.name for p in sc.paths if p.client_host == LOCAL}
    need = 0
    for c in sc.clients:
        f = next((x for x in sc.files if x.name == c.file), None) if not c.source else None
        if f is not None and f.count is not None and "download" in client_directions(sc, c):
            need = max(need, f.total * max(client_concurrency(sc, c)))
            continue
        if (tools.get(c.tool).verify != "kept" or c.option("dest_dir") or not c.file
                or c.option("checksum") is not True
                or "download" not in client_directions(sc, c)
                or not any(c.paths is None or n in c.paths for n in local)):
            continue
        need = max(need, sc.file(c.file).size * max(client_concurrency(sc, c)))
    return need + (16 << 20) if need else 0


def _corrupt(ctx: Context, name: str) -> None:
    """`rig run --corrupt FILE`: one byte of the served copy changed after its adler32
    was taken, so that every download of it must fail its checksum (a self-test of the
    verification, as a lab runs it before trusting a campaign)."""
    f = ctx.sc.file(name)
    if f.count is not None:         # a set: its middle file
        name = f.members[len(f.members) // 2]
    path = ctx.datadir / name
    off = data.corrupt(path)
    ctx.say(f"data: --corrupt: byte {off} of {name} changed after its adler32 "
            f"{ctx.file_adler32.get(name)} was taken; every download of it must fail")
    ctx.store.set_env("corrupted", {"file": name, "offset": off,
                                    "served_adler32": checksum.of_file(str(path))})


def tmpfs_size(sc: Scenario) -> int | str:
    """The tmpfs's size as data.data_dir makes it: the files, 16 MiB, the room for
    third-party copies and uploads (a ROOT file's real size is known only once copied
    or generated: then a placeholder)."""
    if any(f.kind != "random" for f in sc.files):
        return "<bytes of the files and room>"
    return (sum(f.total for f in sc.files) + (16 << 20) + _incoming(sc)["incoming_bytes"]
            + _uploads(sc)["upload_bytes"])


def _record_disk(ctx: Context, d: Path) -> None:
    """A disk data folder, named in the state before it is made (`rig clean`)."""
    ctx.state.data["disk_data"] = str(d)
    ctx.state.save()

