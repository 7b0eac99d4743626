"""A registry of named adapters (client tools, server kinds): each adapter module in a
package registers its class with `@register`; loading the package imports every module
in it. Pure: imports nothing that runs."""
from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Callable, Generic, Iterable, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, what: str, key: Callable[[Any], str]) -> None:
        self.what, self.key = what, key
        self.items: dict[str, T] = {}

    def register(self, cls: type) -> type:
        name = self.key(cls)
        if name in self.items:
            raise ValueError(f"{self.what} {name!r} registered twice")
        self.items[name] = cls()
        return cls

    def get(self, name: str) -> T:
        return self.items[name]

    def names(self) -> tuple[str, ...]:
        return tuple(self.items)

    def all(self) -> list[T]:
        return list(self.items.values())

    def load(self, package: str, path: Iterable[str], skip: tuple[str, ...] = ()) -> None:
        """Import every module of the package (its adapters register themselves)."""
        for m in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
            if not m.name.startswith("_") and m.name not in skip:
                importlib.import_module(f"{package}.{m.name}")
