"""`rig plan FILE.root` / `rig plan --generate`: print a caching-mode read plan's summary.

Description layer: computes and prints, runs nothing. Only argparse is imported at module
level so that building the `rig` parser does not import uproot.
"""
from __future__ import annotations

import argparse
from typing import Any, Callable

from rig.errors import InputError


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("read plan (SCENARIO is a .root file, or --generate)")
    g.add_argument("--generate", action="store_true",
                   help="use the rig's generated CMS-like file (cached) instead of a path")
    g.add_argument("--size", default="512MiB", help="generated file size (default 512MiB)")
    g.add_argument("--nbranches", default="300", help="generated branches (300)")
    g.add_argument("--cluster", default="20MiB", help="generated cluster size (20MiB)")
    g.add_argument("--seed", default="0", help="file content and tie-breaking seed")
    g.add_argument("--tree", help="TTree to read (default Events, else the first)")
    g.add_argument("--mode", action="append", choices=["application", "storage", "lazy-download"],
                   help="caching mode (repeatable; default all three)")
    g.add_argument("--percent", default="100",
                   help="percent of branches read, weighted by size (IOExerciser)")
    g.add_argument("--strategy", default="smallest_first",
                   choices=["smallest_first", "largest_first", "round_robin"])
    g.add_argument("--branches", help="comma-separated branch list (instead of --percent)")
    g.add_argument("--cache-size", default="20MiB", help="TTreeCache size (20MiB)")
    g.add_argument("--learn-entries", default="20", help="learning entries (20)")
    g.add_argument("--learning", default="cmssw", choices=["cmssw", "root"])
    g.add_argument("--fill", default="root", choices=["root", "cluster"])
    g.add_argument("--segment-size", default="128MiB", help="lazy-download segment (128MiB)")
    g.add_argument("--rounds", action="store_true", help="also print every round")


def _checked(key: str, parse: Callable[[Any], Any], value: Any) -> Any:
    """A command-line value through the scenario's own parser and limits
    (rig.description.schema, rig.description.limits): one-line error naming the option."""
    from rig.description import schema as S
    try:
        return S.call(S.Ctx(f"rig plan {key}"), parse, value)
    except InputError as e:
        raise InputError(e.message, key=key, value=value, has_value=True) from None


def _number(text: str) -> Any:
    """An integer option as the scenario's YAML scalar would be (argparse gives text)."""
    try:
        return int(text)
    except ValueError:
        return text


def options(a: argparse.Namespace) -> dict[str, Any]:
    """Every read-plan option, range-checked with the limits a scenario's files: and
    clients: keys have; raises InputError `--OPTION: message (got VALUE)`."""
    from rig.description import limits as L, schema as S
    out = {
        "size": _checked("--size", S.size_in(L.MIN_ROOT_FILE, L.MAX_FILE_SIZE), a.size),
        "nbranches": _checked("--nbranches", S.integer(1, L.MAX_ROOT_BRANCHES),
                              _number(a.nbranches)),
        "cluster": _checked("--cluster", S.size_in(L.MIN_CLUSTER, L.MAX_CLUSTER), a.cluster),
        "seed": _checked("--seed", S.integer(0, L.MAX_SEED), _number(a.seed)),
        "percent": _checked("--percent", _percent, a.percent),
        "cache_size": _checked("--cache-size", S.size_in(L.MIN_CACHE, L.MAX_CACHE), a.cache_size),
        "learn_entries": _checked("--learn-entries", S.integer(0, L.MAX_LEARN_ENTRIES),
                                  _number(a.learn_entries)),
        "segment_size": _checked("--segment-size", S.size_in(L.MIN_SEGMENT, L.MAX_SEGMENT),
                                 a.segment_size),
        "tree": None if a.tree is None else _checked("--tree", _tree, a.tree),
        "branches": None,
    }
    if a.branches is not None:
        names = [b for b in a.branches.split(",") if b]
        if not names:
            raise InputError("name at least one branch", key="--branches", value=a.branches)
        if len(names) > L.MAX_BRANCH_NAMES:
            raise InputError(f"at most {L.MAX_BRANCH_NAMES} branches",
                             key="--branches", value=a.branches)
        out["branches"] = names
    return out


def _tree(v: str) -> str:
    if not v or len(v) > 255 or not v.isprintable():
        raise ValueError("expected a TTree name: 1-255 printable characters")
    return v


def _percent(v: Any) -> float:
    try:
        f = float(v)
    except ValueError:
        raise ValueError("expected a number of percent, e.g. 30") from None
    if not 0 < f <= 100:          # also refuses nan
        raise ValueError("must be more than 0 and at most 100")
    return f


def run(a: argparse.Namespace) -> int:
    from rig.description.rootfile import generate, layout, plan, select
    o = options(a)
    if a.generate:
        if a.scenario:
            raise InputError("give a ROOT file or --generate, not both", key="plan",
                             value=a.scenario)
        spec = generate.FileSpec(size_bytes=o["size"], n_branches=o["nbranches"],
                                 cluster_bytes=o["cluster"], seed=o["seed"])
        path = generate.ensure(spec)
    elif a.scenario:
        path = a.scenario
    else:
        raise InputError("give a scenario, a ROOT file, or --generate", key="plan")
    lay = layout.load(path, o["tree"])
    if o["branches"] is not None:
        sel = select.by_names(lay, o["branches"])
    else:
        sel = select.by_percent(lay, o["percent"], a.strategy, o["seed"])
    opt = plan.Options(cache_size=o["cache_size"], learn_entries=o["learn_entries"],
                       learning=a.learning, fill=a.fill, segment_size=o["segment_size"])
    for mode in a.mode or list(plan.MODES):
        p = plan.make(lay, sel, mode, opt)
        print(p.summary())
        if a.rounds:
            for i, r in enumerate(p.rounds):
                print(f"    {i:5d} {r.phase:<8} cluster {r.cluster:>4} requests {len(r.requests):>3} "
                      f"ranges {sum(len(q.ranges) for q in r.requests):>5} wire {r.wire_bytes:>10} "
                      f"useful {r.useful_bytes:>10}")
    return 0
