"""`rig plan FILE.root` / `rig plan --generate`: print a caching-mode read plan's summary.

Description layer: computes and prints, runs nothing. Only argparse is imported at module
level so that building the `rig` parser does not import uproot.
"""
from __future__ import annotations

import argparse

from rig.errors import InputError


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("read plan (SCENARIO is a .root file, or --generate)")
    g.add_argument("--generate", action="store_true",
                   help="use the rig's generated CMS-like file (cached) instead of a path")
    g.add_argument("--size", default="512MiB", help="generated file size (default 512MiB)")
    g.add_argument("--nbranches", type=int, default=300, help="generated branches (300)")
    g.add_argument("--cluster", default="20MiB", help="generated cluster size (20MiB)")
    g.add_argument("--seed", type=int, default=0, help="file content and tie-breaking seed")
    g.add_argument("--tree", help="TTree to read (default Events, else the first)")
    g.add_argument("--mode", action="append", choices=["application", "storage", "lazy-download"],
                   help="caching mode (repeatable; default all three)")
    g.add_argument("--percent", type=float, default=100.0,
                   help="percent of branches read, weighted by size (IOExerciser)")
    g.add_argument("--strategy", default="smallest_first",
                   choices=["smallest_first", "largest_first", "round_robin"])
    g.add_argument("--branches", help="comma-separated branch list (instead of --percent)")
    g.add_argument("--cache-size", default="20MiB", help="TTreeCache size (20MiB)")
    g.add_argument("--learn-entries", type=int, default=20, help="learning entries (20)")
    g.add_argument("--learning", default="cmssw", choices=["cmssw", "root"])
    g.add_argument("--fill", default="root", choices=["root", "cluster"])
    g.add_argument("--segment-size", default="128MiB", help="lazy-download segment (128MiB)")
    g.add_argument("--rounds", action="store_true", help="also print every round")


def _size(text: str, key: str) -> int:
    from rig.description import units
    try:
        return units.parse_size(text)
    except ValueError as e:
        raise InputError(str(e), key=key, value=text) from None


def run(a: argparse.Namespace) -> int:
    from rig.description.rootfile import generate, layout, plan, select
    if a.generate:
        if a.scenario:
            raise InputError("give a ROOT file or --generate, not both", key="plan",
                             value=a.scenario)
        spec = generate.FileSpec(size_bytes=_size(a.size, "--size"), n_branches=a.nbranches,
                                 cluster_bytes=_size(a.cluster, "--cluster"), seed=a.seed)
        path = generate.ensure(spec)
    elif a.scenario:
        path = a.scenario
    else:
        raise InputError("give a scenario, a ROOT file, or --generate", key="plan")
    lay = layout.load(path, a.tree)
    if a.branches:
        sel = select.by_names(lay, [b for b in a.branches.split(",") if b])
    else:
        sel = select.by_percent(lay, a.percent, a.strategy, a.seed)
    opt = plan.Options(cache_size=_size(a.cache_size, "--cache-size"),
                       learn_entries=a.learn_entries, learning=a.learning, fill=a.fill,
                       segment_size=_size(a.segment_size, "--segment-size"))
    for mode in a.mode or list(plan.MODES):
        p = plan.make(lay, sel, mode, opt)
        print(p.summary())
        if a.rounds:
            for i, r in enumerate(p.rounds):
                print(f"    {i:5d} {r.phase:<8} cluster {r.cluster:>4} requests {len(r.requests):>3} "
                      f"ranges {sum(len(q.ranges) for q in r.requests):>5} wire {r.wire_bytes:>10} "
                      f"useful {r.useful_bytes:>10}")
    return 0
