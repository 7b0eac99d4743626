"""Data: the files the servers serve, in a tmpfs of the run's (or on disk, `storage:`),
with room for uploads and third-party copies."""
from __future__ import annotations

import contextlib
import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path

from rig.description.scenario.document import Scenario
from rig.description.scenario.queries import client_concurrency, client_directions, upload_servers
from rig.orchestration import storagecheck
from rig.orchestration.actions import PREFIX, Action, Item, cmd, text
from rig.orchestration.context import Context
from rig.realization import data
from rig.services import servers


@dataclass(frozen=True)
class Data(Action):
    kind: str = "data"

    def execute(self, ctx: Context, stack: contextlib.ExitStack) -> None:
        _data(ctx, stack)


def items(sc: Scenario, wd: Path) -> list[Item]:
    if sc.storage.on_disk:          # rig.orchestration.storagecheck
        return [text(ln) for ln in storagecheck.plan_data(sc, PREFIX)]
    out = [cmd(data.mount_argv(PREFIX, wd / "data", tmpfs_size(sc)))]
    out += [text(f"# write {f.name}: {f.size} random bytes" if f.kind == "random" else
                 f"# copy {f.name}: ROOT file " + (
                     f.path or f"generated ({f.size} bytes asked, "
                               f"{f.branches or 300} branches, seed {f.seed or 0})"))
            for f in sc.files]
    if upload_servers(sc):
        out.append(text(f"# mkdir {servers.UPLOAD_DIR}/ (mode 1777): uploads land there,"
                        " each checked (size, adler32) and removed after its group"))
    return out


def _data(ctx: Context, stack: contextlib.ExitStack) -> None:
    ctx.datadir = stack.enter_context(data.data_dir(
        ctx.prefix, ctx.datadir, ctx.sc.files, **_incoming(ctx.sc), **_uploads(ctx.sc),
        storage=ctx.sc.storage,
        record=functools.partial(_record_disk, ctx), say=ctx.say, written=ctx.disk_written))
    ctx.say(f"data: {len(ctx.sc.files)} file(s) on {ctx.sc.storage.kind} {ctx.datadir}")
    # a generated ROOT file's size is only near the asked one: use the real one
    ctx.sc = dataclasses.replace(ctx.sc, files=[
        dataclasses.replace(f, size=(ctx.datadir / f.name).stat().st_size)
        for f in ctx.sc.files])
    ctx.disk = storagecheck.DiskHooks(ctx.sc, ctx.datadir, ctx.say, ctx.disk_written)


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


def tmpfs_size(sc: Scenario) -> int | str:
    """The tmpfs's size as data.data_dir makes it: the files, 16 MiB, the room for
    third-party copies and uploads (a ROOT file's real size is known only once copied
    or generated: then a placeholder)."""
    if any(f.kind != "random" for f in sc.files):
        return "<bytes of the files + room>"
    return (sum(f.size for f in sc.files) + (16 << 20) + _incoming(sc)["incoming_bytes"]
            + _uploads(sc)["upload_bytes"])


def _record_disk(ctx: Context, d: Path) -> None:
    """A disk data folder, named in the state before it is made (`rig clean`)."""
    ctx.state.data["disk_data"] = str(d)
    ctx.state.save()

