"""The `none` backend: a plain path (or a real one) with nothing emulated."""
from __future__ import annotations

from rig.description.linkstats import EmulStats
from rig.realization.emul.base import LinkSite
from rig.description.profile import LinkProfile


class NoneBackend:
    name = "none"

    def plan(self, site: LinkSite, profile: LinkProfile) -> list[list[str]]:
        return []

    def apply(self, site: LinkSite, profile: LinkProfile) -> None:
        return None

    def update(self, site: LinkSite, profile: LinkProfile) -> None:
        return None

    def check(self, site: LinkSite) -> None:
        return None

    def stats(self, site: LinkSite) -> EmulStats:
        return EmulStats(self.name)

    def remove(self, site: LinkSite) -> None:
        return None

    def engine_pid(self, site: LinkSite) -> int | None:
        return None
