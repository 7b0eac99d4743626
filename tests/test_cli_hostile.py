"""Every command-line option of `rig` and `rig-fdt` with hostile values (issue 31).

Each option gets huge, negative, zero, non-finite, 10,000-character, unicode-control,
empty and wrong-unit values, in process, each case bounded by an alarm. The property:
exit 2 with one stderr line of at most MAX_LINE characters (what is quoted cut), or
success; never a traceback, never a hang. What a command would *do* once its input is
valid (build a path, run a scenario, generate a ROOT file, probe a host, connect) is
replaced by a stub that only says it was reached: no root, no network, nothing made.
"""
from __future__ import annotations

import asyncio
import contextlib
import io
import signal
from pathlib import Path

import pytest

from rig import cli
from rig.fdt import cli as fdt_cli

REPO = Path(__file__).resolve().parent.parent
QUICK = str(REPO / "scenarios/quick.yaml")
MAX_LINE = 250          # fixed text + a value cut at ~80 characters
CASE_S = 20             # one case, on a loaded 2-core VM (in practice < 0.5 s)

HOSTILE = ["9" * 40, "1e400", "-1", "-5ms", "0", "x" * 10_000, "\u202e\u0007abc",
           "", " ", "1B", "2TiB", "nan", "-inf", "0.05", "7", "ünï/cødé", "../../etc",
           "a" * 300 + "/" + "b" * 300]


class Reached(Exception):
    """The command's action was reached with valid input (a stub)."""


def _reached(*a, **k):
    raise Reached()


@pytest.fixture
def stubs(monkeypatch, tmp_path):
    from rig.description.rootfile import generate
    from rig.orchestration import clean, hostinfo, hosts, netcmd, run
    from rig.services.tools import replay
    for mod, name in ((netcmd, "up"), (netcmd, "down"), (run, "run"), (generate, "ensure"),
                      (clean, "clean"), (hosts, "doctor"), (hostinfo, "summary"),
                      (hostinfo, "emulation"), (replay, "require_helper")):
        monkeypatch.setattr(mod, name, _reached)

    async def program(a, out, err):
        raise Reached()
    monkeypatch.setattr(fdt_cli, "program", program)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RIG_CACHE_DIR", str(tmp_path / "cache"))


def _alarm(signum, frame):
    raise TimeoutError("a hostile value hung the command")


def _run(main, argv: list[str]) -> tuple[int | str, str]:
    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code: int | str = main(argv)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (1 if e.code else 0)
            except Reached:
                code = "reached"
            except asyncio.CancelledError:
                code = "cancelled"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return code, err.getvalue()


# (base argv, option or None for a positional, the positional's place)
RIG_CASES: list[tuple[list[str], str]] = [
    *[(["plan", "--generate", opt, "{}"], opt) for opt in (
        "--size", "--nbranches", "--cluster", "--seed", "--tree", "--mode", "--percent",
        "--strategy", "--branches", "--cache-size", "--learn-entries", "--learning", "--fill",
        "--segment-size")],
    (["plan", "{}"], "SCENARIO"), (["plan", "{}.yaml"], "SCENARIO.yaml"),
    (["plan", "{}.root", "--rounds"], "FILE.root"),
    (["run", "{}"], "run SCENARIO"), (["run", QUICK, "--out", "{}"], "run --out"),
    (["report", "{}"], "report DIR"),
    (["compare", "{}", "."], "BASELINE"), (["compare", ".", "{}"], "CANDIDATE"),
    (["compare", ".", ".", "--out", "{}"], "compare --out"),
    (["compare", ".", ".", "--threshold", "{}"], "--threshold"),
    *[(["net", "up", "--name", "lab", opt, "{}"], opt) for opt in (
        "--rtt", "--jitter", "--loss", "--reverse-loss", "--rate", "--cc", "--rmem", "--wmem",
        "--mtu", "--tuning", "--backend", "--owner-pid", "--ip")],
    (["net", "up", "--name", "{}"], "net up --name"), (["net", "down", "--name", "{}"], "down"),
    (["doctor", "--host", "{}"], "doctor --host"),
    (["doctor", "--host", "lab", "--scenario", "{}"], "doctor --scenario"),
    *[(["doctor", "--host", "u@h", opt, "{}"], opt) for opt in (
        "--port", "--identity", "--known-hosts")],
]
FDT_CASES: list[tuple[list[str], str]] = [
    *[(["serve", "--root", ".", opt, "{}"], "serve " + opt) for opt in (
        "--bind", "--port", "--bufsize", "--connect-timeout", "--stall-timeout")],
    (["serve", "--root", "{}"], "serve --root"),
    *[(["get", opt, "{}", "127.0.0.1", "f", "/dev/null"], "get " + opt) for opt in (
        "--port", "--bufsize", "--connect-timeout", "--stall-timeout", "--streams", "--block",
        "--interval", "--omit", "--timeout")],
    (["get", "--mem", "{}", "127.0.0.1"], "get --mem"),
    (["get", "--time", "{}", "127.0.0.1"], "get --time"),
    (["get", "{}", "f", "/dev/null"], "get ADDR"), (["get", "127.0.0.1", "{}", "d"], "NAME"),
    (["get", "127.0.0.1", "f", "{}"], "get DEST"),
    (["put", "127.0.0.1", "{}", "n"], "put SRC"), (["put", "127.0.0.1", "s", "{}"], "put NAME"),
    (["put", "{}", "s", "n"], "put ADDR"),
]


def _check(label: str, value: str, code, err: str) -> str | None:
    lines = err.splitlines()
    if code in ("reached", 0):
        return None if "Traceback" not in err else f"{label}: traceback on success"
    if code != 2:
        return f"{label} {value[:30]!r}: exit {code}: {err[-300:]!r}"
    if len(lines) != 1:
        return f"{label} {value[:30]!r}: {len(lines)} lines: {err[:300]!r}"
    if len(lines[0]) > MAX_LINE:
        return f"{label} {value[:30]!r}: a line of {len(lines[0])} characters: {lines[0][:200]!r}"
    return None


@pytest.mark.parametrize("tool", ["rig", "rig-fdt"])
@pytest.mark.slow
def test_every_option_with_hostile_values_is_one_line_exit_2_or_success(stubs, tool):
    main = cli.main if tool == "rig" else fdt_cli.main
    cases = RIG_CASES if tool == "rig" else FDT_CASES
    failures, n = [], {"refused": 0, "reached": 0}
    for base, label in cases:
        for value in HOSTILE:
            argv = [a.replace("{}", value) for a in base]
            code, err = _run(main, argv)
            bad = _check(label, value, code, err)
            if bad:
                failures.append(bad)
            n["refused" if code == 2 else "reached"] += 1
    assert not failures, f"{len(failures)} case(s):\n" + "\n".join(failures[:40])
    assert n["refused"] > n["reached"] > 0, n


@pytest.mark.parametrize("argv, key", [
    (["plan", "--generate", "--size", "1e30TiB"], "--size"),
    (["plan", "--generate", "--seed", "-1"], "--seed"),
    (["plan", "--generate", "--cluster", "1B"], "--cluster"),
    (["plan", "--generate", "--cluster", "2TiB"], "--cluster"),
    (["plan", "--generate", "--branches", ""], "--branches"),
    (["plan", "x.root", "--segment-size", "1B"], "--segment-size"),
    (["report", "x" * 10_000], "DIR"),
    (["compare", ".", ".", "--out", "x" * 10_000], "--out"),
])
def test_the_values_issue_31_found_are_refused_naming_the_option(stubs, argv, key):
    code, err = _run(cli.main, argv)
    assert code == 2 and err.startswith(f"rig: {key}: ") and err.count("\n") == 1, err
    assert len(err) < MAX_LINE


@pytest.mark.parametrize("argv", [["serve", "--root", ".", "--bind", "\u202eabc"],
                                  ["get", "x" * 10_000, "f", "/dev/null"]])
def test_rig_fdt_refuses_an_address_that_is_none(stubs, argv):
    code, err = _run(fdt_cli.main, argv)
    assert code == 2 and err.count("\n") == 1 and len(err) < MAX_LINE, err


@pytest.mark.parametrize("argv, key", [
    (["plan", "--generate", "--size", "4MiB", "--nbranches", "2000", "--cluster", "64KiB"],
     "rootfile.cluster"),              # 206,000 baskets: 158 s to write here
    (["plan", "--generate", "--size", "1KiB", "--nbranches", "5000"], "--nbranches"),
])
def test_a_generated_file_too_costly_to_write_is_refused(stubs, argv, key):
    code, err = _run(cli.main, argv)
    assert code == 2 and err.startswith(f"rig: {key}: ") and err.count("\n") == 1, err
