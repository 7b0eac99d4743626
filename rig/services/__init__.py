"""Server and client adapters: one per tool, in explicit registries.

Adapters build argv lists and parse output with pure functions; starting and reaping
goes through rig.process.proc. Must not import orchestration or reports.
"""
