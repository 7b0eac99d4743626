"""Hosts: one SSH connection per remote host, the run's directory there, the data on
server hosts, the scenario's tuning where it differs (restored at the end)."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

from rig.description.scenario.document import Scenario
from rig.errors import RigError
from rig.orchestration import hosts
from rig.orchestration.actions import Action, Item, comment, text
from rig.orchestration.context import Context
from rig.process import proc
from rig.process.remote import Host
from rig.realization import remote_tuning, tuning


@dataclass(frozen=True)
class Hosts(Action):
    kind: str = "hosts"

    def execute(self, ctx: Context, stack: contextlib.ExitStack) -> None:
        _open_hosts(ctx, stack)


def items(sc: Scenario) -> list[Item]:
    out: list[Item] = []
    for name in sc.remote_hosts():     # rig.realization.remote_tuning: only what differs
        if not any(name in (p.client_host, p.server_host) for p in sc.paths):
            continue                   # a router host only forwards: not tuned
        want = {**tuning.global_wanted(sc.tuning), **tuning.ns_wanted(sc.tuning)}
        mtu = [f"mtu {sc.tuning.mtu} on the path's interface"] if sc.tuning.mtu != 1500 else []
        if want or mtu:
            out.append(text(f"@{name} " + comment(
                "tuning, old values recorded first, restored at the end: "
                + ", ".join([f"{k}={v}" for k, v in want.items()] + mtu))))
    return out


def _open_hosts(ctx: Context, stack: contextlib.ExitStack) -> None:
    """One SSH connection per remote host, the run's directory there, the data files
    on server hosts. Every host is in the state file before anything touches it."""
    ctx.hosts = hosts.hosts_of(ctx.sc, ctx.workdir)
    if not ctx.hosts:
        return
    ctx.workdir.mkdir(parents=True, exist_ok=True)
    ctx.state.data["hosts"] = {n: dict(hosts.to_state(h), rundir=h.rundir(ctx.prefix))
                                for n, h in ctx.hosts.items()}
    ctx.state.save()
    servers_on = {p.server_host for p in ctx.sc.paths}
    info = {}
    for n, h in ctx.hosts.items():
        master = proc.open_master(h)
        stack.callback(master.stop)
        ctx.state.record_pid(master)      # `rig clean` ends it after a SIGKILL
        rd = h.rundir(ctx.prefix)
        stack.callback(_leave_host, ctx, h, rd)
        info[n] = {k: v for k, v in proc.remote_op(h, {"op": "info"}, timeout=30).items()
                   if k in ("kernel", "machine", "hostname", "cpus", "python")}
        ctx.say(f"host {n}: connected ({h.ssh}, {info[n]['hostname']}, kernel "
                f"{info[n]['kernel']}), run directory {rd}")
        hosts.check_tools(h, ctx.sc)
        if n in servers_on:
            ctx.remote_data[n] = hosts.write_data(h, rd, ctx.sc.files)
            ctx.say(f"data: {len(ctx.sc.files)} file(s) in {ctx.remote_data[n]} on {n}")
        _tune_host(ctx, stack, n, h)
    ctx.store.set_env("hosts", info)
    ctx.store.set_env("tuning_hosts", ctx.tuning_hosts)


def _tune_host(ctx: Context, stack: contextlib.ExitStack, n: str, h: Host) -> None:
    """The scenario's tuning on host n: recorded in the state file before it is
    written (`rig clean` restores it after a SIGKILL), restored at the end."""
    ends = [(p.server_addr or "", p.server_host == n) for p in ctx.sc.paths
            if n in (p.server_host, p.client_host)]
    if not ends:         # a router host only forwards: its TCP is not the path's
        return
    rec = remote_tuning.plan(h, ctx.sc.tuning, ends)
    ctx.tuning_hosts[n] = rec
    if not rec["sysctls_wrote"] and not rec["mtu_wrote"]:
        return
    ctx.state.data["hosts"][n]["tuning"] = rec
    ctx.state.save()
    stack.callback(_untune_host, ctx, n, h, rec)
    remote_tuning.apply(h, rec)
    ctx.say(f"host {n}: tuned " + ", ".join(
        [f"{k}={v}" for k, v in rec["sysctls_wrote"].items()]
        + [f"{d} mtu {m}" for d, m in rec["mtu_wrote"].items()]))


def _untune_host(ctx: Context, n: str, h: Host, rec: dict) -> None:
    try:
        done = remote_tuning.restore(h, rec)
    except RigError as e:
        ctx.say(f"host {n}: tuning not restored ({e}); `rig clean` retries")
        return
    ctx.tuning_hosts[n]["restored"] = done
    ctx.store.set_env("tuning_hosts", ctx.tuning_hosts)
    ctx.state.data["hosts"].get(n, {}).pop("tuning", None)
    ctx.state.save()


def _leave_host(ctx: Context, h: Host, rundir: str) -> None:
    """Its configs and logs into the output folder, then nothing of the run left."""
    hosts.fetch_logs(h, rundir, ctx.out / "logs")
    try:
        hosts.clean_host(h, rundir)
    except RigError as e:
        ctx.say(f"host {h.name}: not cleaned ({e}); `rig clean` retries")
        return
    ctx.state.data["hosts"].pop(h.name, None)
    ctx.state.save()

