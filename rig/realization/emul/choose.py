"""Pick an emulation backend by name: "netem", "userspace" or "auto" (netem where the
kernel has it, else the userspace engine where NFQUEUE works).

Must not import services, orchestration or reports.
"""
from __future__ import annotations

from rig.errors import InputError, RigError
from rig.realization.emul.base import Backend
from rig.realization.emul.netem import NetemBackend, kernel_has_netem
from rig.realization.emul.none import NoneBackend
from rig.description.profile import BACKENDS
from rig.realization.emul.userspace import UserspaceBackend, kernel_has_nfqueue


def auto_choice(netem: bool, nfqueue: bool) -> str | None:
    """What `auto` means on a kernel with (or without) sch_netem and NFQUEUE."""
    return "netem" if netem else ("userspace" if nfqueue else None)


def auto_backend_name() -> str:
    """Probe the kernel (a throwaway namespace each; ~50 ms)."""
    name = auto_choice(kernel_has_netem(), kernel_has_nfqueue())
    if name:
        return name
    raise RigError("no link emulation possible here: the kernel has neither sch_netem "
                   "nor the iptables NFQUEUE target")


def make_backend(name: str, **userspace_options) -> Backend:
    """A backend instance; `userspace_options` go to UserspaceBackend (python, seed,
    ready_timeout, bypass_passthrough)."""
    if name not in BACKENDS:
        raise InputError(f"unknown emulation backend (use one of {', '.join(BACKENDS)})",
                         key="backend", value=name)
    if name == "none":
        return NoneBackend()
    if name == "auto":
        name = auto_backend_name()
    if name == "netem":
        if userspace_options:
            raise InputError("options given are for the userspace backend only",
                             key="backend", value=name)
        return NetemBackend()
    return UserspaceBackend(**userspace_options)
