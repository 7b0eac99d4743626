"""Pick an emulation backend by name: one of the registry's (rig.realization.emul.registry)
or "auto" (the first by rank the kernel can run: netem where the kernel has it, else the
userspace engine where NFQUEUE works).

Must not import services, orchestration or reports.
"""
from __future__ import annotations

from typing import Any, Mapping

from rig.description.kinds import AUTO
from rig.errors import InputError, RigError
from rig.realization.emul import registry
from rig.realization.emul.base import Backend


def auto_choice(usable: Mapping[str, bool]) -> str | None:
    """What `auto` means, given which backends this kernel can run (by name)."""
    return registry.auto_choice(usable)


def auto_backend_name() -> str:
    """Probe the kernel for each backend auto considers, in rank order (a throwaway
    namespace each; ~50 ms), up to the first that works."""
    for b in registry.ranked():
        if b.usable():
            return str(b.name)
    needs = [b.needs for b in registry.ranked()]
    have = (f"neither {needs[0]} nor {needs[1]}" if len(needs) == 2
            else f"none of {', '.join(needs)}")
    raise RigError(f"no link emulation possible here: the kernel has {have}")


def make_backend(name: str, **options: Any) -> Backend:
    """A backend instance; `options` go to a backend that takes them (the userspace
    engine's python, seed, ready_timeout, bypass_passthrough, local_logs)."""
    names = (AUTO, *registry.names())
    if name not in names:
        raise InputError(f"unknown emulation backend (use one of {', '.join(names)})",
                         key="backend", value=name)
    if name == AUTO:
        name = auto_backend_name()
    cls = registry.get(name)
    if options and not cls.takes_options:
        takers = [n for n in registry.names() if registry.get(n).takes_options]
        raise InputError(f"options given are for the {', '.join(takers)} backend only",
                         key="backend", value=name)
    return cls(**options) if options else cls()
