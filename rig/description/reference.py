"""A study's published numbers and claims as data: the reference files in `reproductions/`.

One YAML file per study. It names the study's series once (`series:` id -> label and the
selector that picks the rig's rows for it, or `lacks:` naming the capability the rig does
not have), holds every numeric table the study publishes (`tables:`, series x an axis,
with unit, precision, source and conditions), and every claim as a predicate over the
rig's points (`claims:`: ranking, ratio, collapse, plateau, flat, share). The comparison
(rig.report.against) evaluates them from stored results; the format is described in
reproductions/README.md.

Strict like the scenario loader: unknown keys are errors, every error is one line naming
the file, the key path and the value (rig.errors.InputError, exit 2).

Pure description layer: imports only rig.errors and rig.description.{schema, safeyaml}.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig.description import safeyaml, schema as S
from rig.description.libraries import READ_LIBRARIES
from rig.errors import InputError

FORMAT = 1
AXES = ("rtt_ms", "concurrency", "streams", "branches_percent")
# unit -> (quantity, factor from the rig's unit: bits/s for throughput, seconds for time)
UNITS: dict[str, tuple[str, float]] = {
    "MB/s": ("throughput", 1 / 8e6), "MiB/s": ("throughput", 1 / (8 * 2**20)),
    "Gbit/s": ("throughput", 1e-9), "Mbit/s": ("throughput", 1e-6),
    "GB/s": ("throughput", 1 / 8e9), "s": ("duration", 1.0),
}
KINDS = ("ranking", "ratio", "collapse", "plateau", "flat", "share", "alike", "inflation",
         "verdict")
# The bottleneck verdicts the report gives (rig.report.verdict.KINDS, a contract test keeps
# the two alike): what a `verdict` claim may name
VERDICT_KINDS = ("window-limited", "path-limited", "client-CPU-bound", "latency-bound",
                 "emulator-limited", "unexplained", "failed", "sender-buffer-limited",
                 "loss-limited", "cwnd-limited", "application-limited", "storage-bound",
                 "host-CPU-bound", "single-thread-bound", "server-thread-bound",
                 "server-cpu-bound")
BOUNDS = ("capacity", "window", "rate")
MAX_ITEMS = 256
# selector key -> parser of its value; each names a column of the rig's points
SELECT_KEYS: dict[str, S.Parser] = {
    "client": S.name, "tool": S.name, "tls": S.choice("off", "control", "all"),
    "streams": S.integer(1, 1024), "concurrency": S.integer(1, 1024), "path": S.name,
    "mode": S.choice("application", "storage", "lazy-download", "direct"),
    "library": S.choice(*READ_LIBRARIES), "server": S.name,
    "branches_percent": lambda v: _number(v, 0.0, 100.0), "rtt_ms": lambda v: _number(v, 0.0),
    # a storage check of `storage: disk` (not a transfer): its cold sequential read (dd, as
    # hdparm -t), the same bytes from the page cache (hdparm -T), the served file's write
    "measure": S.choice("storage-read", "storage-cached", "storage-write"),
}


def _number(v: Any, lo: float | None = None, hi: float | None = None) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError("expected a finite number")
    if lo is not None and v < lo:
        raise ValueError(f"must be >= {lo:g}")
    if hi is not None and v > hi:
        raise ValueError(f"must be <= {hi:g}")
    return float(v)


def _positive(v: Any) -> float:
    x = _number(v)
    if x <= 0:
        raise ValueError("must be > 0")
    return x


def _value_or_null(v: Any) -> float | None:
    """A table cell: a number, or null where the study shows none."""
    return None if v is None else _number(v, 0.0)


def experiment_id(v: Any) -> str:
    if not isinstance(v, str) or not re.fullmatch(r"E([1-9]|[1-3][0-9])", v):
        raise ValueError("expected an experiment id E1..E39 (shared/seeds/EXPERIMENTS.md)")
    return v


def _ident(v: Any) -> str:
    if not isinstance(v, str) or not re.fullmatch(r"[a-z0-9][a-z0-9_.+-]{0,47}", v):
        raise ValueError("expected an id of lower-case letters, digits, '_', '.', '+', '-' "
                         "(max 48)")
    return v


def _line(v: Any) -> str:
    v = S.text(v)
    if not v.strip():
        raise ValueError("must not be empty")
    return v


@S.with_ctx
def _conditions(ctx: S.Ctx, v: Any) -> dict[str, str]:
    """The study's conditions: key -> text or number (link, cores, file, buffers, ...)."""
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ctx.error("expected a mapping of condition -> text", v)
    out = {}
    for k, x in v.items():
        c = ctx.child(str(k))
        S.call(c, _ident, k)
        if isinstance(x, bool) or not isinstance(x, (str, int, float)):
            raise c.error("expected text or a number", x)
        out[str(k)] = S.call(c, S.text, str(x))
    return out


@S.with_ctx
def _selector(ctx: S.Ctx, v: Any) -> dict[str, Any]:
    if not isinstance(v, dict) or not v:
        raise ctx.error("expected a mapping of column -> value (known: "
                        f"{', '.join(sorted(SELECT_KEYS))})", v)
    out = {}
    for k, x in v.items():
        if k not in SELECT_KEYS:
            raise ctx.child(str(k)).error(
                f"unknown key (known: {', '.join(sorted(SELECT_KEYS))})", x)
        out[k] = S.call(ctx.child(k), SELECT_KEYS[k], x)
    return out


def _pair(v: Any) -> tuple[float, float]:
    if not isinstance(v, list) or len(v) != 2:
        raise ValueError("expected [low, high]")
    lo, hi = _number(v[0], 0.0), _number(v[1], 0.0)
    if lo > hi:
        raise ValueError("low is above high")
    return (lo, hi)


STATISTICS = ("mean", "max")


@dataclass(frozen=True)
class Series:
    """One of the study's series and the rig's rows that stand for it."""
    label: str = S.spec(_line)
    select: dict[str, Any] | None = S.spec(S.optional(_selector), None)
    # the capability the rig lacks for it (wget, XCache, ...): "not comparable here"
    lacks: str | None = S.spec(S.optional(_line), None)
    # how the rig's repeats of a point are summed up: mean, or max where the study shows
    # "only highest values" of several jobs (seed 003)
    statistic: str = S.spec(S.choice(*STATISTICS), "mean")
    note: str = S.spec(S.text, "")
    id: str = ""

    @classmethod
    def checked(cls, ctx: S.Ctx, d: dict[str, Any]) -> dict[str, Any]:
        if (d["select"] is None) == (d["lacks"] is None):
            raise ctx.error("give exactly one of select (the rig's rows) or lacks "
                            "(the capability the rig does not have)")
        return d


@S.with_ctx
def _series_map(ctx: S.Ctx, v: Any) -> dict[str, Series]:
    if not isinstance(v, dict) or not v:
        raise ctx.error("expected a mapping of series id -> {label, select | lacks}", v)
    if len(v) > MAX_ITEMS:
        raise ctx.error(f"at most {MAX_ITEMS} series")
    out = {}
    for k, x in v.items():
        c = ctx.child(str(k))
        sid = S.call(c, _ident, k)
        out[sid] = Series(**{**S.load(c, x, Series).__dict__, "id": sid})
    return out


@S.with_ctx
def _at(ctx: S.Ctx, v: Any) -> list[float]:
    xs = S.call(ctx, S.list_of(lambda x: _number(x, 0.0), scalar_ok=False,
                               max_len=MAX_ITEMS), v)
    if len(set(xs)) != len(xs):
        raise ctx.error("a value is listed twice", v)
    return xs


@S.with_ctx
def _rows(ctx: S.Ctx, v: Any) -> dict[str, list[float | None]]:
    if not isinstance(v, dict) or not v:
        raise ctx.error("expected a mapping of series id -> list of values", v)
    out = {}
    for k, x in v.items():
        c = ctx.child(str(k))
        S.call(c, _ident, k)
        out[str(k)] = S.call(c, S.list_of(_value_or_null, scalar_ok=False,
                                          max_len=MAX_ITEMS), x)
    return out


@dataclass(frozen=True)
class Table:
    """A numeric table of the study: its series over one axis."""
    id: str = S.spec(_ident)
    experiment: str = S.spec(experiment_id)
    source: str = S.spec(_line)              # figure / table / slide title in the seed
    title: str = S.spec(_line)
    unit: str = S.spec(S.choice(*UNITS))
    precision: str = S.spec(_line)
    x: str = S.spec(S.choice(*AXES))
    at: list[float] = S.spec(_at)
    rows: dict[str, list[float | None]] = S.spec(_rows)
    conditions: dict[str, str] = S.spec(_conditions, {})
    note: str = S.spec(S.text, "")

    @classmethod
    def checked(cls, ctx: S.Ctx, d: dict[str, Any]) -> dict[str, Any]:
        for sid, vals in d["rows"].items():
            if len(vals) != len(d["at"]):
                raise ctx.child("rows").child(sid).error(
                    f"has {len(vals)} values, `at` has {len(d['at'])}")
        return d

    @property
    def quantity(self) -> str:
        return UNITS[self.unit][0]

    def value(self, sid: str, x: float) -> float | None:
        vals = self.rows.get(sid)
        if vals is None or x not in self.at:
            return None
        return vals[self.at.index(x)]


@S.with_ctx
def _replace(ctx: S.Ctx, v: Any) -> dict[str, str]:
    if not isinstance(v, dict) or not v:
        raise ctx.error("expected a mapping of the claim's series id -> the ablated series id",
                        v)
    out = {}
    for k, x in v.items():
        c = ctx.child(str(k))
        out[S.call(c, _ident, k)] = S.call(c, _ident, x)
    return out


@dataclass(frozen=True)
class Ablation:
    """The claim's points again with one suspected cause removed (page checksums off, TLS
    off, a CPU of its own, bigger windows, ...): each of the claim's series named in
    `series` is replaced by the ablated one (rows of the same run)."""
    cause: str = S.spec(_line)
    series: dict[str, str] = S.spec(_replace)


@dataclass(frozen=True)
class Claim:
    """A claim of the study as a predicate over the rig's points (kinds: KINDS)."""
    id: str = S.spec(_ident)
    experiment: str = S.spec(experiment_id)
    source: str = S.spec(_line)
    text: str = S.spec(_line)                # the claim as the study states it
    kind: str = S.spec(S.choice(*KINDS))
    series: list[str] = S.spec(S.list_of(_ident, max_len=64))
    table: str | None = S.spec(S.optional(_ident), None)   # the study's numbers, if any
    x: str | None = S.spec(S.optional(S.choice(*AXES)), None)
    at: list[float] | None = S.spec(S.optional(_at), None)  # x values it is checked at
    min_tau: float = S.spec(lambda v: _number(v, -1.0, 1.0), 1.0)   # ranking
    band: tuple[float, float] | None = S.spec(S.optional(_pair), None)  # ratio, share
    factor: float = S.spec(lambda v: _number(v, 1.0, 100.0), 2.0)  # ratio/collapse/plateau
    fraction: float = S.spec(lambda v: _number(v, 0.01, 0.99), 0.5)  # collapse, plateau
    within: float = S.spec(lambda v: _number(v, 0.0, 1.0), 0.1)      # flat
    bound: str | None = S.spec(S.optional(S.choice(*BOUNDS)), None)  # share
    # share: the series' points at one x are the paths of one joint step (`together:`):
    # their throughputs add, and so do their bounds (the site's view of all its links)
    joint: bool = S.spec(S.boolean, False)
    # verdict: the bottleneck the study names for the series' points (e.g. one client
    # thread CPU-bound: single-thread-bound); agrees where the rig's verdict is it
    verdict: str | None = S.spec(S.optional(S.choice(*VERDICT_KINDS)), None)
    study_value: float | None = S.spec(S.optional(_number), None)  # stated, no table
    lacks: str | None = S.spec(S.optional(_line), None)
    conditions: dict[str, str] = S.spec(_conditions, {})
    precision: str = S.spec(S.text, "")
    note: str = S.spec(S.text, "")
    # the rig's reading, not the study's statement (a threshold or claim the study does
    # not state), with its reasoning: reported apart, never counted toward a row's status
    inference: str | None = S.spec(S.optional(_line), None)
    ablations: list[Ablation] = S.spec(S.list_of(S.section(Ablation), scalar_ok=False,
                                                 min_len=0, max_len=16), [])

    @classmethod
    def checked(cls, ctx: S.Ctx, d: dict[str, Any]) -> dict[str, Any]:
        for i, ab in enumerate(d["ablations"]):
            for sid in ab.series:
                if sid not in d["series"]:
                    raise ctx.child("ablations").child(i).child("series").error(
                        "not a series of this claim", sid)
        need = {"ranking": 2, "ratio": 2, "alike": 2}.get(d["kind"], 1)
        n = len(d["series"])
        many = d["kind"] in ("ranking", "alike")
        if n < need or (not many and n > need):
            want = f"{need} or more" if many else str(need)
            raise ctx.child("series").error(f"{d['kind']} takes {want} series", d["series"])
        if len(set(d["series"])) != n:
            raise ctx.child("series").error("a series is listed twice", d["series"])
        if d["kind"] == "inflation" and d["study_value"] is None:
            raise ctx.child("study_value").error("inflation needs the study's bound in ms "
                                                 "(study_value)")
        if d["kind"] == "share" and d["bound"] is None:
            raise ctx.child("bound").error(f"share needs a bound ({', '.join(BOUNDS)})")
        if d["kind"] == "share" and d["band"] is None:
            raise ctx.child("band").error("share needs the band [low, high] of the bound")
        if (d["kind"] == "verdict") != (d["verdict"] is not None):
            raise ctx.child("verdict").error("a verdict claim names one verdict (and only "
                                             "a verdict claim does)", d["verdict"])
        if d["joint"] and d["kind"] != "share":
            raise ctx.child("joint").error("joint applies to a share claim only", d["joint"])
        if d["kind"] == "ratio" and d["table"] is None and d["band"] is None:
            raise ctx.child("band").error("a ratio without a table needs a band [low, high]")
        return d


@dataclass(frozen=True, kw_only=True)
class Reference:
    format: int = S.spec(S.integer(FORMAT, FORMAT))
    study: str = S.spec(_ident)
    title: str = S.spec(_line)
    seed: str = S.spec(_line)                # the seed file's name
    conditions: dict[str, str] = S.spec(_conditions, {})
    scaled: str = S.spec(S.text, "")         # what the reproduction scaled, and why
    series: dict[str, Series] = S.spec(_series_map)
    tables: list[Table] = S.spec(S.list_of(S.section(Table), scalar_ok=False, min_len=0,
                                           max_len=MAX_ITEMS), [])
    claims: list[Claim] = S.spec(S.list_of(S.section(Claim), scalar_ok=False, min_len=0,
                                           max_len=MAX_ITEMS), [])
    source: str = ""
    text: str = ""

    def table(self, tid: str) -> Table:
        return next(t for t in self.tables if t.id == tid)

    def experiments(self) -> list[str]:
        ids = {t.experiment for t in self.tables} | {c.experiment for c in self.claims}
        return sorted(ids, key=lambda e: int(e[1:]))


def _cross_check(ctx: S.Ctx, ref: Reference) -> None:
    seen: set[str] = set()
    items_of: tuple[tuple[str, list[Table | Claim]], ...] = (
        ("tables", list(ref.tables)), ("claims", list(ref.claims)))
    for key, items in items_of:
        for i, it in enumerate(items):
            c = ctx.child(key).child(i)
            if it.id in seen:
                raise c.child("id").error("duplicate id (tables and claims share ids)", it.id)
            seen.add(it.id)
            sids = list(it.rows) if isinstance(it, Table) else it.series + [
                x for ab in it.ablations for x in ab.series.values()]
            for sid in sids:
                if sid not in ref.series:
                    raise c.child("rows" if isinstance(it, Table) else "series").error(
                        "no such series in `series:`", sid)
    tables = {t.id: t for t in ref.tables}
    for i, cl in enumerate(ref.claims):
        c = ctx.child("claims").child(i)
        if cl.table is not None:
            t = tables.get(cl.table)
            if t is None:
                raise c.child("table").error(f"no such table (have: {', '.join(tables)})",
                                             cl.table)
            for sid in cl.series:
                if sid not in t.rows:
                    raise c.child("series").error(f"not a row of table {t.id}", sid)
            for x in cl.at or []:
                if x not in t.at:
                    raise c.child("at").error(f"not an x of table {t.id}", x)
            if cl.x is not None and cl.x != t.x:
                raise c.child("x").error(f"table {t.id} is over {t.x}", cl.x)
        elif cl.x is None:
            raise c.child("x").error("a claim without a table names its axis "
                                     f"({', '.join(AXES)})")
        elif cl.kind in ("collapse", "plateau") and cl.study_value is None and cl.lacks is None:
            raise c.child("study_value").error(f"a {cl.kind} claim without a table needs "
                                               "the study's x (study_value)")


def parse(data: Any, *, source: str, text: str = "") -> Reference:
    ctx = S.Ctx(source)
    ref = S.load(ctx, data, Reference)
    _cross_check(ctx, ref)
    return Reference(**{**ref.__dict__, "source": source, "text": text})


def load(path: str | Path) -> Reference:
    """Read and check a reference file; raises InputError (one line, exit 2)."""
    p = Path(path)
    text = safeyaml.read_text(p)
    return parse(safeyaml.load(text, str(p)), source=str(p), text=text)


def from_text(text: str, source: str) -> Reference:
    """A reference stored with a run (results' environment), checked again on redraw."""
    return parse(safeyaml.load(text, source), source=source, text=text)


def resolve(scenario_file: str, value: str) -> Path:
    """A scenario's `reproduces:` path, relative to the scenario's folder."""
    p = Path(value)
    if not p.is_absolute():
        p = Path(scenario_file).resolve().parent / p
    if not p.is_file():
        raise InputError("no such reference file", file=scenario_file, key="reproduces",
                         value=value)
    return p
