"""Teardown: what the setup built, undone in reverse once the last action is done (the
run's ExitStack, rig.orchestration.timing.Teardown): servers and engines stopped,
namespaces deleted, the tmpfs unmounted, host sysctls restored, remote hosts cleaned."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rig.description.scenario import Scenario
from rig.orchestration.actions import PREFIX, Action, Item, text
from rig.orchestration.acts.path import host_wd
from rig.realization import remote_router


@dataclass(frozen=True)
class Teardown(Action):
    kind: str = "teardown"      # executed by the unwinding, never by execute()


def items(sc: Scenario, wd: Path) -> list[Item]:
    out = [text("# teardown: stop servers and engines, ip netns del every namespace above, "
                "umount the tmpfs, restore host sysctls")]
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
