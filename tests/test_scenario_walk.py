"""No scenario input reaches an `assert` (issue 31, item 3).

Walks every shipped scenario with structured mutations: every key dropped, every server
kind swapped in, every client tool against every server kind, every TLS mode (a client's
own and swept), odd sweeps, and odd values of the right and the wrong type at every leaf.
Each case goes through what `rig plan` runs (scenario.parse, then plan.plan_lines), in
process. The property: a plan, or the rig's one-line InputError; never an
AssertionError or any other exception. Pure: no root, no network, nothing created.
"""
from __future__ import annotations

import copy
import random
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from rig.description import scenario
from rig.errors import InputError, RigError
from rig.orchestration import plan
from rig.realization import netns
from rig.services import servers as server_kinds, tools

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = sorted((REPO / "scenarios").glob("*.yaml"))
TLS = [None, "off", "control", "all", "ALL", "", 1, True]
ODD = [None, "", 0, -1, 1, 7, 0.5, -0.0, 10**30, float("nan"), float("inf"), True, [], {},
       [0], {"a": 1}, "0.05", "7", "1ms", "0ms", "-5ms", "1e400s", "256MiB", "0B", "1%",
       "150%", "10gbit", "x" * 10000, "\u202e\u0000", "apache", "all", "random", "root"]
BUDGET_S = 240.0       # the whole walk; ~20 s on an idle 2-core VM


def _docs() -> list[tuple[str, dict]]:
    return [(p.stem, yaml.safe_load(p.read_text())) for p in SCENARIOS]


def _leaves(obj: Any, path: tuple = ()) -> Iterator[tuple]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield path + (k,)
            yield from _leaves(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield path + (i,)
            yield from _leaves(v, path + (i,))


def _set(doc: Any, path: tuple, value: Any) -> Any:
    doc = copy.deepcopy(doc)
    node = doc
    for k in path[:-1]:
        node = node[k]
    if value is _DROP:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return doc


_DROP = object()


def cases(seed: int = 31) -> Iterator[tuple[str, Any]]:
    rng = random.Random(seed)
    kinds = list(server_kinds.kinds())
    tool_names = list(tools.names())
    for stem, doc in _docs():
        leaves = list(_leaves(doc))
        for path in leaves:                                      # every key and item dropped
            yield f"{stem}: drop {path}", _set(doc, path, _DROP)
        for path in rng.sample(leaves, min(len(leaves), 40)):    # odd values, any type
            for v in ODD:
                yield f"{stem}: {path} = {v!r:.40}", _set(doc, path, v)
        for i, _ in enumerate(doc.get("servers") or []):         # every server kind
            for k in kinds:
                yield f"{stem}: servers[{i}].kind={k}", _set(doc, ("servers", i, "kind"), k)
        for i, c in enumerate(doc.get("clients") or []):
            for t in tool_names:                                 # every tool, every kind
                d = _set(doc, ("clients", i, "tool"), t)
                yield f"{stem}: clients[{i}].tool={t}", d
                for k in kinds:
                    d2 = copy.deepcopy(d)
                    d2["servers"] = [*d2.get("servers", []), {"name": "zz", "kind": k}]
                    d2["clients"][i]["server"] = "zz"
                    yield f"{stem}: clients[{i}] {t} -> {k}", d2
                    for m in ("control", "all"):
                        d3 = copy.deepcopy(d2)
                        d3["clients"][i]["tls"] = m
                        yield f"{stem}: clients[{i}] {t} -> {k} tls {m}", d3
            for m in TLS:
                yield f"{stem}: clients[{i}].tls={m!r}", _set(doc, ("clients", i, "tls"), m)
            for k in ("mode", "library", "branches", "segment", "cache_size", "sources",
                      "multiplex", "streams", "source", "protocol", "capture", "cpus"):
                for v in rng.sample(ODD, 6):
                    yield f"{stem}: clients[{i}].{k}={v!r:.40}", _set(doc, ("clients", i), {**c, k: v})
        for i, p in enumerate(doc.get("paths") or []):               # path kinds, backends
            for k, v in (("kind", "real"), ("kind", "emulated"), ("backend", "none"),
                         ("backend", "netem"), ("client_host", "local"), ("router_host", "x")):
                yield f"{stem}: paths[{i}].{k}={v}", _set(doc, ("paths", i), {**p, k: v})
        for topo in [t.stem for t in (REPO / "topologies").glob("*.yaml")] + ["host", "x"]:
            yield f"{stem}: topology={topo}", {**doc, "topology": topo}
        for i, f in enumerate(doc.get("files") or []):
            for kind in ("random", "root", "x"):
                yield f"{stem}: files[{i}].kind={kind}", _set(doc, ("files", i), {**f, "kind": kind})
        sweep = doc.get("sweep") or {}
        for key, vals in (("tls", [["off"], ["all"], ["control"], ["off", "all", "control"],
                                   ["all", "all"], [], "all", [None]]),
                          ("streams", [[1], [0], [129], [1, 1], [], 4, [2**40], ["4"]]),
                          ("concurrency", [[1], [0], [257], [], 1, [1.5], ["1"]]),
                          ("branches", [["1%"], ["0%"], ["101%"], [], "1%", [0.5], [1]]),
                          ("repeats", [0, 1, -1, 1001, "1", 1.5])):
            for v in vals:
                yield f"{stem}: sweep.{key}={v!r}", {**doc, "sweep": {**sweep, key: v}}


def _plan(doc: Any) -> None:
    sc = scenario.parse(doc, source="walk.yaml")
    plan.plan_lines(sc)


@pytest.mark.slow
def test_no_scenario_mutation_reaches_an_assert(tmp_path, monkeypatch):
    monkeypatch.setattr(netns, "STATE_DIR", tmp_path / "state")
    monkeypatch.chdir(tmp_path)
    n = {"plan": 0, "refused": 0}
    t0 = time.monotonic()
    failures: list[str] = []
    for label, doc in cases():
        try:
            _plan(doc)
            n["plan"] += 1
        except InputError as e:
            line = str(e)
            if "\n" in line or len(line) > 400:
                failures.append(f"{label}: not one short line: {line[:300]!r}")
            n["refused"] += 1
        except RigError as e:          # e.g. a ROOT file not generated yet: one line, exit 1
            n["refused"] += 1
            if "\n" in str(e):
                failures.append(f"{label}: not one line: {str(e)[:300]!r}")
        except Exception as e:         # AssertionError and every other traceback
            failures.append(f"{label}: {type(e).__name__}: {str(e)[:200]}")
        assert time.monotonic() - t0 < BUDGET_S, (n, "the walk took too long")
    assert not failures, f"{len(failures)} case(s):\n" + "\n".join(failures[:40])
    assert n["plan"] + n["refused"] >= 2000, n
    assert n["plan"] >= 100 and n["refused"] >= 1000, n     # the walk reaches both sides


@pytest.mark.parametrize("doc, key", [
    ({"servers": [{"name": "a", "kind": "fdt"}],
      "clients": [{"name": "c", "tool": "fdt", "file": "f", "tls": "all"}]}, "clients[0].tls"),
    ({"servers": [{"name": "a", "kind": "sshd"}], "sweep": {"tls": ["off", "all"]},
      "clients": [{"name": "c", "tool": "scp", "file": "f"}]}, "sweep.tls"),
    ({"servers": [{"name": "a", "kind": "apache"}],
      "clients": [{"name": "c", "tool": "replay", "mode": "storage", "library": "davix",
                   "file": "f"}]}, "clients[0].file"),
])
def test_tls_without_certificates_and_replay_of_random_are_refused(doc, key):
    base = {"name": "t", "topology": "client-router-server",
            "paths": [{"name": "wan", "kind": "emulated", "rtt": ["0ms"]}],
            "files": [{"name": "f", "size": "1MiB"}]}
    with pytest.raises(InputError) as e:
        scenario.parse({**base, **doc}, source="t.yaml")
    assert f"t.yaml: {key}: " in str(e.value) and "\n" not in str(e.value)
