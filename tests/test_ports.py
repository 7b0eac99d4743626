"""A server port where another process already answers is refused before anything starts
(rig.services.servers.start.refuse_taken_ports): the readiness probe would otherwise take
that process for the server, as when nginx answered on Apache's port (issue 38). Loopback
only, in the test's own network namespace (no root needed)."""
from __future__ import annotations

import socket

import pytest

from rig.errors import RigError
from rig.services.servers.start import refuse_taken_ports


def test_a_port_in_use_is_refused_in_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(RigError) as e:
            refuse_taken_ports(None, "127.0.0.1", {"http": port}, "server a (apache)")
        msg = str(e.value)
        assert f"port {port} (http) on 127.0.0.1 is already in use" in msg
        assert msg.startswith("server a (apache)") and "\n" not in msg
    # the same port, free again: accepted
    refuse_taken_ports(None, "127.0.0.1", {"http": port}, "server a (apache)")
