"""The read libraries a caching-mode replay (client tool `replay`) can read through, declared
once: the scenario's and a reference's `library:`, the replay tool's table and the replay
program's `--library` all read them here. XRootD reads through the Python bindings, the
HTTP libraries through tools/rig-replay-http. Pure data."""
from __future__ import annotations

READ_LIBRARIES = ("xrootd", "davix", "curl")
HTTP_LIBRARIES = ("davix", "curl")       # the ones rig-replay-http speaks
