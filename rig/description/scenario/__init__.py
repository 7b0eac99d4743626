"""Scenario and topology descriptions: pure, validated data loaded from YAML.

A scenario names a topology, paths (emulated or real), servers, data files, client
configurations, a sweep, tuning and validation settings. Everything is checked strictly
(unknown keys, bad units, impossible values) and reported as one line
`FILE: key.path: message (got VALUE)`. Must not import anything that runs.

The model, one module per job (each imports only those above it in this list):
- `paths`: the `paths:` and `hosts:` sections, and the names every section shares;
- `clients`: `files:`, `servers:`, `clients:` and `background:`;
- `sweep`: `sweep:`, and the path copies it makes;
- `topologies`: the topology a scenario names (a file in topologies/ or a Mininet Topo);
- `document`: the scenario's top-level keys, `validation:` and `sampling:`;
- `queries`: questions asked of a loaded scenario (a client's directions, streams, ...);
- `rules`: the checks that span sections;
- `loader`: `load` and `parse`.
`tuning:` is rig.description.tuningspec, `storage:` rig.description.storage. The key
reference docs/scenario-reference.md is generated from these declarations
(rig.description.reference_doc).

This module gathers the names the rest of the rig uses, so `scenario.load(...)`,
`scenario.Scenario` and the rest read as before.
"""
from __future__ import annotations

from rig.description import limits as L, schema as S, topology as T
from rig.description.profile import Direction, GilbertElliott, LinkProfile
from rig.description.reference import Reference
from rig.description.scenario.clients import (DIRECTIONS, MAX_ARGS, PER_INSTANCE, BackgroundSpec,
                                              ClientSpec, ClientSweep, FileSpec, ServerSpec,
                                              branch_fraction)
from rig.description.scenario.document import Sampling, Scenario, Validation
from rig.description.scenario.loader import load, parse
from rig.description.scenario.paths import (CAPTURE_MODES, LOCAL, GeModel, HostSpec, PathSpec,
                                            RouterIfaces, parse_path)
from rig.description.scenario.queries import (Placement, background_on, client_concurrency,
                                              client_directions, client_repeats,
                                              client_streams, instance_cpus, measurements,
                                              path_mtu, path_servers, path_tuning, placements,
                                              runs_on, server_count, sweep_notes,
                                              tls_modes, upload_servers, uses_tls)
from rig.description.scenario.sweep import Sweep
from rig.description.scenario.topologies import (ROOT, TOPOLOGY_DIR, Topology, list_topologies,
                                                 parse_topology)
from rig.description.storage import Storage
from rig.description.tuningspec import CC_NAMES, Tuning

__all__ = [
    "L", "S", "T", "Direction", "GilbertElliott", "LinkProfile", "Reference", "Storage",
    "CC_NAMES", "Tuning",
    "DIRECTIONS", "MAX_ARGS", "PER_INSTANCE", "BackgroundSpec", "ClientSpec", "ClientSweep",
    "FileSpec", "ServerSpec", "branch_fraction",
    "Sampling", "Scenario", "Validation", "load", "parse",
    "CAPTURE_MODES", "LOCAL", "GeModel", "HostSpec", "PathSpec", "RouterIfaces", "parse_path",
    "Placement", "background_on", "client_concurrency", "client_directions", "client_repeats",
    "client_streams", "instance_cpus", "measurements", "path_mtu", "path_servers",
    "path_tuning", "placements", "runs_on", "server_count", "sweep_notes", "tls_modes",
    "upload_servers",
    "uses_tls",
    "Sweep", "ROOT", "TOPOLOGY_DIR", "Topology", "list_topologies", "parse_topology",
]
