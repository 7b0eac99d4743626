"""The `none` backend: a plain path (or a real one) with nothing emulated."""
from __future__ import annotations

from rig.description.linkstats import EmulStats
from rig.realization.emul import registry
from rig.realization.emul.base import LinkSite
from rig.description.profile import LinkProfile


@registry.register
class NoneBackend:
    name = "none"
    auto_rank = None               # nothing emulated: only when a path asks for it
    auto_note = ""
    needs = ""
    doctor_key = ""
    takes_options = False

    @staticmethod
    def usable() -> bool:
        return True

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

    def engine_pids(self, site: LinkSite) -> list[int]:
        return []
