"""Link emulation backends: one module per backend in this folder, registered by name,
and the one rule `auto` follows.

A backend module declares a class with the `Backend` contract (rig.realization.emul.base)
and `@register`s it, stating how `auto` ranks it (`auto_rank`, lowest first; None: never
picked by auto), what the kernel must have for it (`needs`, and `usable()` probing it),
the note `rig plan` prints beside its commands under auto, and whether it takes options.
Registering also enters it in the description's registry (rig.description.kinds), so a
path's `backend:` accepts its name. Adding a backend is adding one module here.

Must not import services, orchestration or reports.
"""
from __future__ import annotations

from typing import Any, Mapping

import rig.realization.emul as _package
from rig.description import kinds

# what a backend class declares besides the Backend contract's methods
DECLARES = ("name", "auto_rank", "auto_note", "needs", "doctor_key", "takes_options", "usable",
            "plan")
_BACKENDS: dict[str, Any] = {}


def register(cls: type) -> type:
    """Enter a backend class (its `name`) here and in the description's registry."""
    missing = [a for a in DECLARES if not hasattr(cls, a)]
    if missing:
        raise ValueError(f"emulation backend {cls.__name__} lacks {', '.join(missing)}")
    kinds.BACKENDS.add(cls)
    _BACKENDS[cls.name] = cls   # type: ignore[attr-defined]
    return cls


def unregister(name: str) -> None:
    """Remove a backend (a test's own, registered in-process)."""
    del _BACKENDS[name]
    kinds.BACKENDS.remove(name)


def get(name: str) -> Any:
    return _BACKENDS[name]


def names() -> tuple[str, ...]:
    """Backend names in auto's order, those auto never picks last."""
    return tuple(b.name for b in sorted(_BACKENDS.values(), key=kinds.backend_order))


def ranked() -> list[Any]:
    """The backends `auto` considers, in the order it tries them."""
    return sorted((b for b in _BACKENDS.values() if b.auto_rank is not None),
                  key=kinds.backend_order)


def auto_choice(usable: Mapping[str, bool]) -> str | None:
    """What `auto` means, given which backends are usable: the first usable by rank."""
    return next((b.name for b in ranked() if usable.get(b.name)), None)


kinds.load_package(_package.__name__, _package.__path__,
                   skip=("base", "choose", "registry", "engine"))
