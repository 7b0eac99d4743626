"""FDT-style multi-stream copy tool (server, client, sans-IO protocol, rig adapter)."""
