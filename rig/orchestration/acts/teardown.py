"""Teardown: what the setup built, undone in reverse once the last action is done (the
run's ExitStack, rig.orchestration.timing.Teardown): servers and engines stopped,
namespaces deleted, the tmpfs unmounted, host sysctls restored, remote hosts cleaned."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rig.description.profile import LinkProfile
from rig.description.scenario.document import Scenario
from rig.description.scenario.paths import LOCAL, PathSpec
from rig.orchestration.actions import PREFIX, Action, Item, cmd, text
from rig.orchestration.acts import emulate, endpoint, tune
from rig.orchestration.acts.data import DOWNLOADS, keep_size
from rig.orchestration.acts.path import host_wd
from rig.realization import data, netns, remote_router, tuning


@dataclass(frozen=True)
class Teardown(Action):
    kind: str = "teardown"      # executed by the unwinding, never by execute()


def items(sc: Scenario, wd: Path, shown: list[tuple[PathSpec, netns.RealizedPath,
                                                     LinkProfile | None]]) -> list[Item]:
    """`shown`: each path as the plan named it, with the last profile emulated on it."""
    out = [text("# teardown: stop servers and engines, ip netns del every namespace above, "
                "umount the tmpfs, restore host sysctls")]
    for p, n, last in reversed(shown):
        if endpoint.has_endpoint(sc):
            out += endpoint.teardown_items(sc, n)
        if n.site is not None and last is not None and p.router_host is None:
            out += emulate.removed(p.backend, None, n.site, last)
        if p.kind != "real" and p.router_host is None:
            out += [cmd(a) for ns in n.namespaces for a in (netns.pids_argv(ns),
                                                            netns.del_argv(ns))]
    if keep_size(sc):
        out.append(cmd(data.umount_argv(wd / DOWNLOADS)))     # the kept downloads
    if any(p.server_host == LOCAL for p in sc.paths) and not sc.storage.on_disk:
        out.append(cmd(data.umount_argv(wd / "data")))
    if sc.tunes_local():
        out += [cmd(tuning.write_argv(None, k, "<before>"), note="   # where it still holds "
                    "the run's value") for k in tune.wanted(sc)]
    for p in sc.paths:
        if p.router_host is not None and remote_router.end_of(p):
            out.append(text(f"@{p.router_host} # teardown: delete the NFQUEUE rules (comment "
                            f"{PREFIX}), stop the engine, delete the root qdisc, the ingress "
                            f"filter, clsact and "
                            f"{remote_router.ifb_name(PREFIX, sc.paths.index(p))}"))
        elif p.router_host is not None:
            out.append(text(f"@{p.router_host} # teardown: delete the NFQUEUE rules (comment "
                            f"{PREFIX}), stop the engine, delete the root qdiscs, restore "
                            f"{remote_router.FORWARD}"))
    for name in sc.remote_hosts():
        out.append(text(f"@{name} # teardown: copy configs and logs back, kill what the pid "
                        f"files in {host_wd(sc, name, wd)}/pids name, remove that directory"))
    return out
