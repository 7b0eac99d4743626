"""Caching-mode replay: execute a `rig.description.rootfile.plan.Plan` against a real server.

Services layer (a client adapter): talks to the network, starts no process, must not
import orchestration or reports.
"""
