"""No scenario input reaches an `assert` (issue 31, item 3).

Walks every shipped scenario with structured mutations: every key dropped, every server
kind swapped in, every client tool against every server kind, every TLS mode (a client's
own and swept), odd sweeps, and odd values of the right and the wrong type at every leaf.
Each case goes through what `rig plan` runs (scenario.parse, then plan.plan_lines), in
process. The property: a plan, or the rig's one-line InputError; never an
AssertionError or any other exception. Pure: no root, no network, nothing created.

No wall-clock budget (issue 43): a case that hangs is stopped by a per-case deadline
(CASE_DEADLINE_S, tests/hangguard.py) and reported by name; the walk's speed is bench's business.
Identical mutated documents (two mutations that land on the same document) run once.
"""
from __future__ import annotations

import contextlib
import random
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from rig.description import scenario, schema as S
from rig.errors import InputError, RigError
from rig.orchestration import plan
from rig.realization import netns
from rig.services import servers as server_kinds, tools

from hangguard import Hung, hang_guard

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = sorted((REPO / "scenarios").glob("*.yaml"))
TLS = [None, "off", "control", "all", "ALL", "", 1, True]
ODD = [None, "", 0, -1, 1, 7, 0.5, -0.0, 10**30, float("nan"), float("inf"), True, [], {},
       [0], {"a": 1}, "0.05", "7", "1ms", "0ms", "-5ms", "1e400s", "256MiB", "0B", "1%",
       "150%", "10gbit", "x" * 10000, "\u202e\u0000", "apache", "all", "random", "root"]
# A hang guard, not a speed goal: the slowest case takes ~0.2 s on an idle 2-core VM
# (a plan of some 50 groups); a case still running after this is reported as hung.
CASE_DEADLINE_S = 30.0


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
    """`doc` with the node at `path` replaced by `value` (or dropped): each mapping and
    list on the way is a copy, everything else is shared with `doc` (the walk checks
    that parsing never changes a document: test_no_scenario_mutation_reaches_an_assert)."""
    node: Any = dict(doc) if isinstance(doc, dict) else list(doc)
    if len(path) > 1:
        node[path[0]] = _set(doc[path[0]], path[1:], value)
    elif value is _DROP:
        del node[path[0]]
    else:
        node[path[0]] = value
    return node


_DROP = object()


def cases(seed: int = 31, docs: list[tuple[str, dict]] | None = None,
          ) -> Iterator[tuple[str, Any]]:
    rng = random.Random(seed)
    kinds = list(server_kinds.kinds())
    tool_names = list(tools.names())
    for stem, doc in docs if docs is not None else _docs():
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
                    d2 = _set({**d, "servers": [*d.get("servers", []),
                                                {"name": "zz", "kind": k}]},
                              ("clients", i, "server"), "zz")
                    yield f"{stem}: clients[{i}] {t} -> {k}", d2
                    for m in ("control", "all"):
                        d3 = _set(d2, ("clients", i, "tls"), m)
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


def _plan(doc: Any, planned: set[str] | None = None) -> None:
    """What `rig plan` runs: parse, then plan. A scenario equal to one planned before
    in this walk (two mutations that parse alike; its repr is every field) is not
    planned again: plan_lines is a function of the scenario alone."""
    sc = scenario.parse(doc, source="walk.yaml")
    if planned is not None:
        key = repr(sc)
        if key in planned:
            return
        planned.add(key)
    plan.plan_lines(sc)


def unique_cases(seed: int = 31, docs: list[tuple[str, dict]] | None = None,
                 ) -> Iterator[tuple[str, Any]]:
    """cases(), each distinct document once (its repr is canonical: the walk builds
    every document from the same YAML load, so equal documents have equal key order)."""
    seen: set[str] = set()
    for label, doc in cases(seed, docs):
        key = repr(doc)
        if key not in seen:
            seen.add(key)
            yield label, doc


def _nodes(obj: Any) -> Iterator[Any]:
    if isinstance(obj, (dict, list)):
        yield obj
        for v in obj.values() if isinstance(obj, dict) else obj:
            yield from _nodes(v)


@contextlib.contextmanager
def reusing_parsed_parts(docs: list[tuple[str, dict]]) -> Iterator[None]:
    """While the walk runs: a section (a path, a client, a file, ...) that is the very
    object of a shipped scenario, which every mutation outside it shares (`_set`), is
    parsed once per class and its result reused. Every mutated part, and every whole
    document (cross-checks, defaults, the plan), is still parsed on its own; a section's
    parse reads nothing but its data (the same object, never changed: the test checks)."""
    shipped = {id(n) for _, d in docs for n in _nodes(d)}
    real = S.load
    memo: dict[tuple[type, int], Any] = {}

    def load(ctx: S.Ctx, data: Any, cls: type) -> Any:
        hit = memo.get((cls, id(data)))
        if hit is not None:
            return hit
        out = real(ctx, data, cls)
        if id(data) in shipped:
            memo[(cls, id(data))] = out
        return out
    S.load = load
    try:
        yield
    finally:
        S.load = real


def walk(items: Iterator[tuple[str, Any]], deadline_s: float = CASE_DEADLINE_S,
         ) -> tuple[dict[str, int], list[str]]:
    """Plan every case; count plans and refusals; list each case that broke the
    property, or hung past `deadline_s` (stopped there, named, and the walk goes on)."""
    n = {"plan": 0, "refused": 0, "hung": 0}
    failures: list[str] = []
    planned: set[str] = set()
    for label, doc in items:
        try:
            with hang_guard(deadline_s, label):
                _plan(doc, planned)
            n["plan"] += 1
        except Hung as e:
            n["hung"] += 1
            failures.append(str(e))
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
    return n, failures


@pytest.mark.slow
def test_no_scenario_mutation_reaches_an_assert(tmp_path, monkeypatch):
    monkeypatch.setattr(netns, "STATE_DIR", tmp_path / "state")
    monkeypatch.chdir(tmp_path)
    docs = _docs()
    with reusing_parsed_parts(docs):
        n, failures = walk(unique_cases(docs=docs))
    assert docs == _docs(), "parsing or planning changed a shipped scenario's document"
    assert not failures, f"{len(failures)} case(s):\n" + "\n".join(failures[:40])
    assert n["plan"] + n["refused"] >= 2000, n
    assert n["plan"] >= 100 and n["refused"] >= 1000, n     # the walk reaches both sides


def test_a_hung_case_is_stopped_and_named(monkeypatch):
    """The hang guard itself: a case that never returns is stopped at its deadline,
    reported by its label, and the walk goes on to the next case."""
    calls = []

    def slow_plan(doc: Any, planned: Any = None) -> None:
        calls.append(doc)
        if doc == "hang":
            while True:
                pass

    monkeypatch.setattr(sys.modules[__name__], "_plan", slow_plan)
    n, failures = walk(iter([("case-a", "hang"), ("case-b", "ok")]), deadline_s=0.2)
    assert n == {"plan": 1, "refused": 0, "hung": 1}
    assert failures == ["case-a: still running after 0.2 s (stopped by its hang guard)"]
    assert calls == ["hang", "ok"]


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
