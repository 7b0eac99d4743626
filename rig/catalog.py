"""Everything the description's registries hold (rig.description.kinds): importing this
module imports every client tool, server kind and link emulation backend, each of
which registers itself, and the reader of Mininet topologies. Whoever loads scenarios
imports it first: the CLI, the run, tools and tests (tests/conftest.py). Pure: the modules it imports build argv and parse
output; none starts a process when imported."""
from __future__ import annotations

import rig.realization.emul.registry  # noqa: F401  (netem, userspace, none)
import rig.realization.mininet  # noqa: F401  (the reader of Mininet topologies)
import rig.services.servers  # noqa: F401  (xrootd, nginx, apache, fdt, sshd, xcache)
import rig.services.tools  # noqa: F401  (xrdcp, curl, davix-get, fdt, iperf3, replay, ...)
