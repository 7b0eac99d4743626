"""A stored run's transfers as records other tools read (issue 41 item 5): JSON, NDJSON or
CSV, one record per transfer with its point, the point's verdict, whether the rig spoiled
it (artefact), the run's environment and its provenance. The schema is versioned
(SCHEMA, docs/export-format.md): a reader checks `schema` before anything else, and a
change that renames or removes a field takes a new version.

    records(run)                 -> list of dicts (SCHEMA)
    write(run_dir, fmt, out)     -> the file written (or "-": standard output)

Pure: reads DIR/results.sqlite through rig.report.model; writes one file. The archiver
(rig.report.archive) posts the same records to an HTTP endpoint.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rig.errors import InputError
from rig.report import artefacts
from rig.report.model import Run, _key, load_run
from rig.report.verdict import verdicts

SCHEMA = "rig-export/1"
FORMATS = ("json", "ndjson", "csv")

# environment keys that are not the host's or the run's facts but bulky text kept
# elsewhere in the record (the scenario's text: its sha256 and file name in provenance)
_ENV_LEFT_OUT = ("scenario_text",)


def _json(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def _iso(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(float(t), UTC).isoformat(timespec="milliseconds")


def provenance(run: Run) -> dict[str, Any]:
    """Where the records come from: the run, the rig that made it, the scenario (its file
    name and the sha256 of its text as run), the host."""
    text = run.env.get("scenario_text")
    created = run.meta.get("created")
    return {
        "run_id": run.run_id,
        "run_dir": str(run.dir),
        "prefix": run.env.get("prefix"),
        "created": _iso(float(created)) if created else None,
        "rig_version": run.meta.get("rig_version"),
        "results_format": run.meta.get("format_version"),
        "scenario_file": run.env.get("scenario_file"),
        "scenario_sha256": hashlib.sha256(text.encode()).hexdigest() if text else None,
        "hostname": run.env.get("hostname"),
        "kernel": run.env.get("kernel"),
    }


def environment(run: Run) -> dict[str, Any]:
    return {k: _json(v) for k, v in sorted(run.env.items()) if k not in _ENV_LEFT_OUT}


def records(run: Run) -> list[dict[str, Any]]:
    """One record per stored transfer, in the order they landed."""
    vmap = verdicts(run)
    spoiled = artefacts.artefacts(run, vmap)
    points = {p.key: p for p in run.points}
    prov, env = provenance(run), environment(run)
    out = []
    for r in run.transfers:
        k = _key(r)
        p, v = points.get(k), vmap.get(k)
        out.append({
            "schema": SCHEMA,
            "point": {"path": k.path, "rtt_ms": k.rtt_ms, "client": k.client,
                      "streams": k.streams, "concurrency": k.concurrency,
                      "tls": r.tls or "off", "backend": r.backend,
                      "rtt_ms_measured": r.rtt_ms_measured,
                      "capacity_bps": p.capacity_bps if p else None,
                      "loss": r.loss_configured, "rate_bps": r.rate_bps_configured},
            "transfer": {"step": r.step, "repeat": r.repeat, "instance": r.instance,
                         "tool": r.tool, "server": r.server, "origin": r.origin, "url": r.url,
                         "direction": r.direction or "download", "ok": bool(r.ok),
                         "error": r.error, "exit_code": r.exit_code, "bytes": r.bytes,
                         "file_bytes": r.file_bytes, "duration_s": r.duration_s,
                         "throughput_bps": r.throughput_bps if r.ok else None,
                         "aggregate_bps": r.aggregate_bps if r.ok else None,
                         "cpu_user_s": r.cpu_user_s, "cpu_sys_s": r.cpu_sys_s,
                         "server_cpu_user_s": r.server_cpu_user_s,
                         "server_cpu_sys_s": r.server_cpu_sys_s,
                         "started_at": _iso(r.started_at), "argv": _json(r.argv),
                         "extra": _json(r.extra)},
            "verdict": ({"kind": v.kind, "detail": v.detail, "text": v.text()}
                        if v is not None else None),
            "artefact": spoiled.get(k),
            "provenance": prov,
            "environment": env,
        })
    return out


# CSV: the record flattened to one level (point.rtt_ms, transfer.ok, ...); the nested
# environment and the argv/extra lists as JSON text in their column
def _flat(rec: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in rec.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict) and k not in ("environment", "extra"):
            out.update(_flat(v, f"{name}."))
        elif isinstance(v, (dict, list)):
            out[name] = json.dumps(v, sort_keys=True)
        else:
            out[name] = v
    return out


def render(recs: list[dict[str, Any]], fmt: str) -> str:
    if fmt == "json":
        return json.dumps({"schema": SCHEMA, "records": recs}, indent=1, sort_keys=True) + "\n"
    if fmt == "ndjson":
        return "".join(json.dumps(r, sort_keys=True) + "\n" for r in recs)
    rows = [_flat(r) for r in recs]
    cols: list[str] = list(dict.fromkeys(c for row in rows for c in row))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def write(run_dir: Path, fmt: str, out: str | None = None) -> str:
    """Write the run's records as `fmt` to `out` (default DIR/export.<fmt>; "-": standard
    output). Returns where they went."""
    if fmt not in FORMATS:
        raise InputError(f"not one of {', '.join(FORMATS)}", key="--format", value=fmt)
    run = load_run(Path(run_dir))
    text = render(records(run), fmt)
    if out == "-":
        sys.stdout.write(text)
        return "-"
    dest = Path(out) if out else run.dir / f"export.{fmt}"
    if dest.is_dir():
        raise InputError("is a folder: give a file name", key="--out", value=str(dest))
    try:
        dest.write_text(text)
    except OSError as e:
        raise InputError(f"cannot write it ({e.strerror})", key="--out",
                         value=str(dest)) from None
    return str(dest)
