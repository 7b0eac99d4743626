"""A registry of named adapters (client tools, server kinds): each adapter module in a
package registers its class with `@register`; loading the package imports every module
in it. Each adapter is also entered in the description's registry of the same things
(rig.description.kinds), which the scenario schema reads: the services fill it, the
description never imports them. Pure: imports nothing that runs."""
from __future__ import annotations

from typing import Any, Callable, Iterable, TypeVar

from rig.description import kinds

T = TypeVar("T")


class Registry(kinds.Registry[T]):
    """The services' side of a registry: each adapter class registers an instance here
    and in the description's registry `into`."""

    def __init__(self, what: str, key: Callable[[Any], str],
                 into: "kinds.Registry[Any]") -> None:
        super().__init__(what, key)
        self.into = into

    def register(self, cls: type) -> type:
        if self.key(cls) in self.items:
            raise ValueError(f"{self.what} {self.key(cls)!r} registered twice")
        item = cls()
        self.into.add(item)
        self.add(item)
        return cls

    def unregister(self, name: str) -> None:
        """Remove an adapter (a test's own, registered in-process)."""
        self.remove(name)
        self.into.remove(name)

    def load(self, package: str, path: Iterable[str], skip: tuple[str, ...] = ()) -> None:
        """Import every module of the package (its adapters register themselves)."""
        kinds.load_package(package, path, skip)

