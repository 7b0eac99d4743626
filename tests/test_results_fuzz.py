"""Bad result folders given to `rig report` and `rig compare`: a seeded generator of
mutations of a valid results.sqlite (cells, tables, columns, meta, environment, the file
itself, the folder, --out). Property: exit 2 with `rig: ` lines naming the folder and the
defect, or a normal exit (0, or 1 for a compare that found a regression) when the
mutation left the folder valid; never a traceback; nothing written into an input folder
on failure. Mutations the oracle knows to be defects must give exit 2.
"""
from __future__ import annotations

import hashlib
import random
import shutil
import sqlite3
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest

from fixtures_results import DEFAULT_CLIENTS, make_run
from rig.cli import main
from rig.results.store import _TABLES as _ALL_TABLES, ADDED_AFTER_V1

pytestmark = pytest.mark.slow   # seconds each: left out of `make test-fast`

# tables added after format 1 may be absent or empty: mutate those of format 1
_TABLES = {t: c for t, c in _ALL_TABLES.items() if t not in ADDED_AFTER_V1}

MUTATIONS = 150
CHARTED = 15        # valid folders drawn with charts; the rest without, to bound the time
NUMERIC = ("INTEGER", "REAL")
# Columns whose negative values the issue names as defects.
MUST_BE_NON_NEGATIVE = {"aggregate_bps", "throughput_bps", "duration_s", "bytes",
                        "file_bytes", "cpu_user_s", "cpu_sys_s"}
JSON_COLUMNS = {("transfers", "argv"), ("transfers", "env"), ("transfers", "extra"),
                ("validations", "raw"), ("engine_stats", "stats")}
VALUES = [None, "fast", "", "1e3", 9e999, -9e999, -1, -0.5, 0, 0.5, 2, 1e300,
          b"\x00\x01", "{not json", "[1, 2]", '{"a": 1}', "NaN", 2**62]


@dataclass
class Mutation:
    what: str
    must_fail: bool | None        # True: a defect; False: still valid; None: either
    needle: str = ""              # must appear in stderr when it fails


def _loosen(conn: sqlite3.Connection, table: str) -> None:
    """Rebuild `table` without NOT NULL constraints (as a foreign writer might)."""
    conn.execute(f"CREATE TABLE loose AS SELECT * FROM {table}")
    conn.execute(f"DROP TABLE {table}")
    conn.execute(f"ALTER TABLE loose RENAME TO {table}")


def _cell(conn: sqlite3.Connection, rng: random.Random) -> Mutation:
    table = rng.choice(sorted(_TABLES))
    column = rng.choice(sorted(_TABLES[table]))
    decl = _TABLES[table][column]
    value = rng.choice(VALUES)
    rowids = [r[0] for r in conn.execute(f"SELECT rowid FROM {table}")]
    rowid = rng.choice(rowids)
    if value is None and "NOT NULL" in decl:
        _loosen(conn, table)
    conn.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = ?", (value, rowid))
    stored, kind = conn.execute(f"SELECT {column}, typeof({column}) FROM {table} "
                                f"WHERE rowid = ?", (rowid,)).fetchone()
    what = f"{table}[{rowid}].{column} = {value!r} (stored {kind} {stored!r})"
    needle = f"{table}[{rowid}].{column}"
    if kind == "null":
        return Mutation(what, "NOT NULL" in decl, needle)
    if decl.split()[0] in NUMERIC:
        if kind in ("text", "blob"):
            return Mutation(what, True, needle)
        if stored in (float("inf"), float("-inf")):
            return Mutation(what, True, needle)
        if column in MUST_BE_NON_NEGATIVE and stored < 0:
            return Mutation(what, True, needle)
        return Mutation(what, None, needle)
    if kind == "blob":
        return Mutation(what, True, needle)
    if (table, column) in JSON_COLUMNS:
        return Mutation(what, None, needle)     # depends on the JSON's shape
    return Mutation(what, False, needle)


def _table(conn: sqlite3.Connection, rng: random.Random) -> Mutation:
    tables = sorted(_TABLES) + ["meta", "environment"]
    op = rng.choice(["drop_table", "drop_column", "add_column", "rename_table"])
    if op == "drop_table":
        t = rng.choice(tables)
        conn.execute(f"DROP TABLE {t}")
        return Mutation(f"drop table {t}", True, t)
    if op == "rename_table":
        t = rng.choice(tables)
        conn.execute(f"ALTER TABLE {t} RENAME TO {t}_old")
        return Mutation(f"rename table {t}", True, t)
    t = rng.choice(sorted(_TABLES))
    if op == "add_column":
        conn.execute(f"ALTER TABLE {t} ADD COLUMN bogus_col REAL")
        return Mutation(f"add column {t}.bogus_col", True, f"{t}.bogus_col")
    c = rng.choice(sorted(_TABLES[t]))
    conn.execute(f"ALTER TABLE {t} DROP COLUMN {c}")
    if c in ADDED_AFTER_V1:       # an older folder, written before the column existed
        return Mutation(f"drop column {t}.{c} (added after format 1)", False)
    return Mutation(f"drop column {t}.{c}", True, f"{t}.{c}")


def _meta_env(conn: sqlite3.Connection, rng: random.Random) -> Mutation:
    choice = rng.choice(["abc", "", "3", "0", "1.0", None, "delete", "1", 1, "env-bad",
                         "env-ok", "no-run-id"])
    if choice == "delete":
        conn.execute("DELETE FROM meta WHERE key = 'format_version'")
        return Mutation("meta.format_version deleted", True, "format_version")
    if choice == "no-run-id":
        conn.execute("DELETE FROM meta WHERE key = 'run_id'")
        return Mutation("meta.run_id deleted", False)
    if choice in ("env-bad", "env-ok"):
        keys = [r[0] for r in conn.execute("SELECT key FROM environment")]
        key = rng.choice(keys)
        value = "{garbage" if choice == "env-bad" else '"x"'
        conn.execute("UPDATE environment SET value_json = ? WHERE key = ?", (value, key))
        return Mutation(f"environment.{key} = {value}", choice == "env-bad",
                        f"environment.{key}")
    conn.execute("UPDATE meta SET value = ? WHERE key = 'format_version'", (choice,))
    return Mutation(f"meta.format_version = {choice!r}", choice not in ("1", 1, "2", 2),
                    "format_version")


def _rows(conn: sqlite3.Connection, rng: random.Random) -> Mutation:
    table = rng.choice(sorted(_TABLES))
    if rng.random() < 0.2:
        conn.execute(f"DELETE FROM {table}")
        return Mutation(f"all rows of {table} deleted", None, table)
    rowids = [r[0] for r in conn.execute(f"SELECT rowid FROM {table}")]
    gone = rng.sample(rowids, k=min(len(rowids), rng.randint(1, 5)))
    conn.executemany(f"DELETE FROM {table} WHERE rowid = ?", [(r,) for r in gone])
    return Mutation(f"{len(gone)} row(s) of {table} deleted", False)


def _file(folder: Path, rng: random.Random) -> Mutation:
    db = folder / "results.sqlite"
    op = rng.choice(["garbage", "text", "truncate", "empty", "remove", "dir", "nofolder"])
    if op == "garbage":
        db.write_bytes(rng.randbytes(4096))
        return Mutation("results.sqlite is random bytes", True, "SQLite")
    if op == "text":
        db.write_text("run_id,throughput\nx,1\n")
        return Mutation("results.sqlite is a CSV file", True, "SQLite")
    if op == "truncate":
        data = db.read_bytes()
        db.write_bytes(data[:rng.randint(100, len(data) // 2)])
        return Mutation("results.sqlite truncated", True, "results.sqlite")
    if op == "empty":
        db.write_bytes(b"")
        return Mutation("results.sqlite empty", True, "missing table")
    if op == "remove":
        db.unlink()
        return Mutation("results.sqlite removed", True, "no results.sqlite")
    if op == "dir":
        db.unlink()
        db.mkdir()
        return Mutation("results.sqlite is a folder", True, "results.sqlite")
    shutil.rmtree(folder)
    return Mutation("folder missing", True, "does not exist")


def mutate(folder: Path, rng: random.Random) -> Mutation:
    kind = rng.choices(["cell", "table", "meta", "rows", "file", "none"],
                       weights=[60, 14, 12, 6, 10, 2])[0]
    if kind == "file":
        return _file(folder, rng)
    if kind == "none":
        return Mutation("unchanged", False)
    conn = sqlite3.connect(str(folder / "results.sqlite"), isolation_level=None)
    conn.execute("PRAGMA synchronous=OFF")
    try:
        return {"cell": _cell, "table": _table, "meta": _meta_env, "rows": _rows}[kind](
            conn, rng)
    finally:
        conn.close()


def _snapshot(folder: Path) -> dict[str, str]:
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest()
                                         if p.is_file() else "dir")
            for p in sorted(folder.rglob("*"))}


def _run(argv: list[str], capsys) -> tuple[int | None, str, str]:
    """The CLI in-process: (exit code, stderr, traceback text if one escaped)."""
    try:
        main(argv)
    except SystemExit as e:
        out = capsys.readouterr()
        return int(e.code or 0), out.err, ""
    except BaseException:           # noqa: BLE001 - the property is "no traceback"
        capsys.readouterr()
        return None, "", traceback.format_exc()
    return 0, capsys.readouterr().err, ""


def _argv(i: int, folder: Path, good: Path, work: Path, rng: random.Random
          ) -> tuple[list[str], Mutation | None]:
    """Alternate `rig report`, compare with the bad run as candidate (default --out
    inside it), and as baseline; sometimes --out points at a file."""
    if i % 3 == 0:
        return ["report", str(folder)], None
    if i % 3 == 1:
        return ["compare", str(good), str(folder)], None
    if rng.random() < 0.15:
        blocker = work / f"out{i}.txt"
        blocker.write_text("not a folder")
        return (["compare", str(folder), str(good), "--out", str(blocker)],
                Mutation("--out is a file", True, "--out"))
    return ["compare", str(folder), str(good), "--out", str(work / f"out{i}")], None


def _no_charts(monkeypatch) -> None:
    import rig.report
    from rig.report import compare_charts
    monkeypatch.setattr(rig.report, "draw_charts", lambda *a: ([], ["charts skipped"]))
    monkeypatch.setattr(compare_charts, "draw_all", lambda *a: [])


def test_bad_result_folders_are_one_line_errors(tmp_path: Path, capsys, monkeypatch) -> None:
    template = make_run(tmp_path / "template", rtts=(0, 60), clients=DEFAULT_CLIENTS[:2],
                        failing=[("xrdcp", 60.0)])
    good = make_run(tmp_path / "good", rtts=(0, 60), clients=DEFAULT_CLIENTS[:2], seed=2)
    problems: list[str] = []
    counts = {"tried": 0, "exit2": 0, "valid": 0}
    for i in range(MUTATIONS):
        rng = random.Random(7000 + i)
        folder = tmp_path / f"m{i:03d}"
        shutil.copytree(template, folder)
        m = mutate(folder, rng)
        argv, extra = _argv(i, folder, good, tmp_path, rng)
        if extra is not None and m.must_fail is not True:
            m = Mutation(f"{m.what}; {extra.what}", True, extra.needle)
        before, good_before = _snapshot(folder), _snapshot(good)
        code, err, tb = _run(argv, capsys)
        counts["tried"] += 1
        tag = f"#{i} {' '.join(argv[:1])} [{m.what}]"
        if tb:
            problems.append(f"{tag}: traceback\n{tb}")
            continue
        if _snapshot(good) != good_before:
            problems.append(f"{tag}: wrote into the valid input folder")
        if code == 2:
            counts["exit2"] += 1
            lines = err.strip().splitlines()
            if not lines or not all(ln.startswith("rig: ") for ln in lines):
                problems.append(f"{tag}: stderr is not `rig: ` lines: {err!r}")
            if m.needle and m.needle not in err:
                problems.append(f"{tag}: defect {m.needle!r} not named in {err!r}")
            if extra is None and str(folder) not in err:
                problems.append(f"{tag}: folder not named in {err!r}")
            if _snapshot(folder) != before:
                problems.append(f"{tag}: wrote into the input folder on failure")
            if m.must_fail is False:
                problems.append(f"{tag}: a valid folder was refused: {err!r}")
        elif code in (0, 1) and not (code == 1 and argv[0] == "report"):
            counts["valid"] += 1
            if counts["valid"] == CHARTED:
                _no_charts(monkeypatch)
            if m.must_fail:
                problems.append(f"{tag}: defect not detected (exit {code}, {err!r})")
        else:
            problems.append(f"{tag}: exit {code}: {err!r}")
    print(f"result-folder mutations: {counts['tried']} tried, {counts['exit2']} refused "
          f"with exit 2, {counts['valid']} accepted as valid, {len(problems)} problems")
    assert not problems, f"{len(problems)} of {counts['tried']} mutations mishandled:\n" \
        + "\n".join(problems[:15])
    assert counts["exit2"] > MUTATIONS / 2 and counts["valid"] >= 5, counts


@pytest.mark.parametrize("argv", [["report"], ["compare", "GOOD"], ["compare", "x", "GOOD"]])
def test_missing_folder_is_one_line(tmp_path: Path, capsys, argv: list[str]) -> None:
    good = make_run(tmp_path / "good", rtts=(0,), clients=DEFAULT_CLIENTS[:1])
    missing = tmp_path / "nope"
    args = [a.replace("GOOD", str(good)) for a in argv]
    args = [str(missing) if a == "x" else a for a in args] + ([] if "x" in argv else
                                                              [str(missing)])
    code, err, tb = _run(args, capsys)
    assert not tb and code == 2, (code, err, tb)
    assert err.count("\n") == 1 and err.startswith(f"rig: {missing}: ") \
        and "does not exist" in err, err
