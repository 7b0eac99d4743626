"""A registry of named adapters (client tools, server kinds): each adapter module in a
package registers its class with `@register`; loading the package imports every module
in it. Each adapter is also entered in the description's registry of the same things
(rig.description.kinds), which the scenario schema reads: the services fill it, the
description never imports them. Pure: imports nothing that runs."""
from __future__ import annotations

from typing import Any, Callable, Generic, Iterable, TypeVar

from rig.description import kinds

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, what: str, key: Callable[[Any], str],
                 into: "kinds.Registry[Any]") -> None:
        self.what, self.key, self.into = what, key, into
        self.items: dict[str, T] = {}

    def register(self, cls: type) -> type:
        name = self.key(cls)
        if name in self.items:
            raise ValueError(f"{self.what} {name!r} registered twice")
        item = cls()
        self.into.add(item)
        self.items[name] = item
        return cls

    def unregister(self, name: str) -> None:
        """Remove an adapter (a test's own, registered in-process)."""
        del self.items[name]
        self.into.remove(name)

    def get(self, name: str) -> T:
        return self.items[name]

    def names(self) -> tuple[str, ...]:
        return tuple(self.items)

    def all(self) -> list[T]:
        return list(self.items.values())

    def load(self, package: str, path: Iterable[str], skip: tuple[str, ...] = ()) -> None:
        """Import every module of the package (its adapters register themselves)."""
        kinds.load_package(package, path, skip)

