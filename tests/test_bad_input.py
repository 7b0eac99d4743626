"""Every bad input: one line, exit 2, nothing created (issue #12).

A seeded generator mutates every shipped scenario (values, structure, bytes, encodings)
and runs `rig plan FILE` in-process on each. The property: exit 2 with exactly one
stderr line `rig: FILE: ...` (no traceback, a value quoted in at most ~80 characters),
or exit 0 with every number of the loaded scenario finite and inside rig.description.limits and a
plan whose every command line is shell-quoted; and nothing created in the state dir, the
working directory or reports/. Pure: no root, no network.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import math
import os
import random
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rig import cli, errors

from rig.description import limits as L, scenario

from rig.realization import netns

from rig.orchestration import plan

from hangguard import hang_guard

pytestmark = pytest.mark.slow   # seconds each: left out of `make test-fast`

REPO = Path(__file__).resolve().parent.parent
SEEDS = sorted((REPO / "scenarios").glob("*.yaml")) + \
    sorted((REPO / "tests/data/scenarios").glob("*.yaml"))
N_RANDOM = 460            # plus the explicit cases: ~500 in all
MAX_LINE = 320            # an error line after "rig: FILE: ": key path + message + <= 80 chars
                          # of value (the file's own path is the test's tmp path, any length)

BAD_VALUES: list = [
    "1e400MiB", "1e400gbit", "1e400s", "1e400", "1e400ms", float("inf"), float("-inf"),
    float("nan"), ".inf", "-1", -1, 0, "0", -5, "-5ms", "1e-300bit", "1e-300s", "1e-300",
    10**19, 2**64, 10**400, "1e19", 1e19, True, False, None, [], {}, [[[]]], {"a": {"b": 1}},
    "x" * 20000, "ünïcødé", "\u202e\u0000bidi", "tab\there", "line\nbreak", "256Mib",
    "4mb", "4KB", "4M", "8b", "100mbps", "10Gbps", "1kbps", "10MBps", "1000", 1000, 1.5,
    0.5, "5MS", "1H", "50 parsecs", "../../../etc", "/etc/passwd", "$(touch pwned)",
    "`id`", "; rm -rf /", "0x10", "1:20", "1_000", "2024-13-45", "~", "", " ", "é" * 50,
    "10gbit", "20ms", "256MiB", "1%", "150%", "-0", "1.5s", "0.1GiB", "127.0.0.1", "::1",
    "rig0000-0c", "..", "a/b", 65536, 1 << 31, 128, 129, 16, 15, 33, 576, 65001,
]
UNKNOWN_KEYS = ["lossy", "rtts", "Name", "", "x" * 5000, "$(id)", "1", "null"]


# --- mutations: each returns bytes to write as the scenario file --------------------

def _nodes(obj, path=()):
    yield path, obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _nodes(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _nodes(v, path + (i,))


def _set(doc, path, value):
    cur = doc
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value


class _NoAliasDumper(yaml.SafeDumper):
    def ignore_aliases(self, data):    # shared objects written out in full, not as &x/*x
        return True


def _dump(doc) -> bytes:
    return yaml.dump(doc, Dumper=_NoAliasDumper, allow_unicode=True, sort_keys=False,
                     width=10**9).encode()


def _value(rng, doc, text):
    path, _ = rng.choice([p for p in _nodes(doc) if p[0]])
    d = copy.deepcopy(doc)
    _set(d, path, copy.deepcopy(rng.choice(BAD_VALUES)))
    return _dump(d)


def _delete(rng, doc, text):
    path, _ = rng.choice([p for p in _nodes(doc) if p[0] and isinstance(p[0][-1], str)])
    d = copy.deepcopy(doc)
    cur = d
    for k in path[:-1]:
        cur = cur[k]
    del cur[path[-1]]
    return _dump(d)


def _unknown(rng, doc, text):
    maps = [p for p, v in _nodes(doc) if isinstance(v, dict)]
    path = rng.choice(maps)
    d = copy.deepcopy(doc)
    cur = d
    for k in path:
        cur = cur[k]
    cur[rng.choice(UNKNOWN_KEYS)] = rng.choice(BAD_VALUES[:20])
    return _dump(d)


def _duplicate_item(rng, doc, text):
    lists = [p for p, v in _nodes(doc) if isinstance(v, list) and v and p]
    path = rng.choice(lists)
    d = copy.deepcopy(doc)
    cur = d
    for k in path:
        cur = cur[k]
    cur.extend(copy.deepcopy(cur) * rng.choice([1, 40]))
    return _dump(d)


def _duplicate_key(rng, doc, text):
    lines = text.splitlines(keepends=True)
    keyed = [i for i, ln in enumerate(lines) if re.match(r"\s*[a-z_]+:", ln)]
    i = rng.choice(keyed)
    return "".join(lines[:i + 1] + [lines[i]] + lines[i + 1:]).encode()


def _alias(rng, doc, text):
    lines = text.splitlines(keepends=True)
    i = rng.choice([i for i, ln in enumerate(lines) if re.match(r"\s*[a-z_]+: \S", ln)])
    k, v = lines[i].split(":", 1)
    anchored = f"{k}: &x {v.strip()}\n"
    return "".join(lines[:i] + [anchored] + lines[i + 1:] + ["extra: *x\n"]).encode()


def _deep(rng, doc, text):
    n = rng.choice([33, 40, 200, 500, 5000])
    lines = text.splitlines(keepends=True)
    i = rng.choice([i for i, ln in enumerate(lines) if re.match(r"\s*[a-z_]+: \S", ln)])
    k = lines[i].split(":", 1)[0]
    opener, closer = rng.choice([("[", "]"), ("{a: ", "}")])
    return "".join(lines[:i] + [f"{k}: {opener * n}1{closer * n}\n"] + lines[i + 1:]).encode()


def _truncate(rng, doc, text):
    data = text.encode()
    return data[:rng.randrange(0, len(data))]


def _flip(rng, doc, text):
    data = bytearray(text.encode())
    for _ in range(rng.choice([1, 3, 10])):
        data[rng.randrange(len(data))] = rng.randrange(256)
    return bytes(data)


def _junk(rng, doc, text):
    return rng.randbytes(rng.choice([1, 100, 5000]))


def _encoding(rng, doc, text):
    t = text.replace("name: ", "name: é", 1)
    enc = rng.choice(["utf-16", "utf-16-le", "utf-32", "latin-1", "cp1252", "utf-8-sig"])
    return t.encode(enc)


def _control(rng, doc, text):
    i = rng.randrange(len(text))
    return (text[:i] + rng.choice(["\x00", "\x1b[31m", "\t", "\r", "\ufeff", "\x7f"])
            + text[i:]).encode()


MUTATORS = [_value] * 10 + [_delete] * 2 + [_unknown] * 2 + [
    _duplicate_item, _duplicate_key, _alias, _deep, _truncate, _flip, _junk, _encoding,
    _control]


def _explicit() -> list[tuple[str, bytes]]:
    q = (REPO / "scenarios/quick.yaml").read_text()
    real = (REPO / "tests/data/scenarios/real-loopback.yaml").read_text()
    laughs = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n"
        for i in range(8)) + "name: *i\n"
    doc = yaml.safe_load(q)
    doc33 = copy.deepcopy(doc)
    doc33["paths"] = [dict(doc["paths"][0], name=f"p{i}") for i in range(33)]
    cases = {
        "iperf-1e400s": re.sub(r"iperf_duration: \S+", "iperf_duration: 1e400s", q),
        "size-1e400MiB": q.replace("size: 256MiB", "size: 1e400MiB"),
        "rate-1e400gbit": q.replace("backend: auto", "backend: auto\n    rate: 1e400gbit"),
        "rate-1e-300bit": q.replace("backend: auto", "backend: auto\n    rate: 1e-300bit"),
        "rate-bare": q.replace("backend: auto", "backend: auto\n    rate: 1000000"),
        "rate-bare-text": q.replace("backend: auto", "backend: auto\n    rate: '1000000'"),
        "rate-mbps": q.replace("backend: auto", "backend: auto\n    rate: 100mbps"),
        "rate-Gbps": q.replace("backend: auto", "backend: auto\n    rate: 10Gbps"),
        "queue-1e19": q.replace("backend: auto", "backend: auto\n    queue: 1e19"),
        "queue-int-1e19": q.replace("backend: auto", "backend: auto\n    queue: 10000000000000000000"),
        "size-Mib": q.replace("size: 256MiB", "size: 256Mib"),
        "dup-key": q.replace("name: quick\n", "name: quick\nname: other\n"),
        "nest-500": "name: " + "[" * 500 + "]" * 500 + "\n",
        "paths-33": _dump(doc33).decode(),
        "laughs": laughs,
        "name-900k": q.replace("name: quick", "name: " + "x" * 900_000),
        "addr-dotdot": real.replace("server_addr: 127.0.0.1", "server_addr: ../../../etc"),
        "client-ns-dotdot": real.replace("server_addr: 127.0.0.1",
                                         "server_addr: 127.0.0.1, client_ns: ../../../etc"),
        "server-ns-slash": real.replace("server_addr: 127.0.0.1",
                                        "server_addr: 127.0.0.1, server_ns: a/b"),
        "env-key-subst": q.replace("{name: curl, tool: curl, file: f256M}",
                                   '{name: curl, tool: curl, file: f256M, env: {"$(touch pwned)": 1}}'),
        "empty": "", "only-doc-marker": "---\n", "two-docs": q + "---\n" + q,
        "scalar": "42\n", "list": "- 1\n- 2\n",
    }
    # each mutation of the quick scenario must change it: a replace that finds nothing (the
    # file changed) would test a valid file and fail as "exit 0" far from the cause
    same = [k for k, v in cases.items() if v == q]
    assert not same, f"mutations that no longer change scenarios/quick.yaml: {same}"
    out = [(k, v.encode()) for k, v in cases.items()]
    out += [("utf16", q.encode("utf-16")), ("utf32", q.encode("utf-32")),
            ("bom", q.encode("utf-8-sig")), ("latin1", q.replace("quick", "quické").encode("latin-1")),
            ("binary", bytes(range(256)) * 4), ("nul", q.encode().replace(b"\n", b"\n\x00", 1)),
            ("30MB", b"name: " + b"x" * (30 << 20) + b"\n")]
    return out


def mutations(seed: int = 12, n: int = N_RANDOM) -> list[tuple[str, bytes]]:
    rng = random.Random(seed)
    seeds = [(p, p.read_text(), yaml.safe_load(p.read_text())) for p in SEEDS]
    out = _explicit()
    for i in range(n):
        p, text, doc = seeds[i % len(seeds)]
        fn = rng.choice(MUTATORS)
        out.append((f"{i:03d}-{p.stem}-{fn.__name__.strip('_')}", fn(rng, doc, text)))
    return out


# --- the property ------------------------------------------------------------------

def _snapshot(*dirs: Path) -> set[str]:
    return {str(p) for d in dirs if d.exists() for p in d.rglob("*")}


def _run_plan(path: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.main(["plan", path])
            code = 0
        except SystemExit as e:
            code = int(e.code or 0)
    return code, out.getvalue(), err.getvalue()


def _numbers(obj, where="sc"):
    """Every int/float inside a loaded scenario (dataclasses, lists, dicts)."""
    if dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            yield from _numbers(getattr(obj, f.name), f"{where}.{f.name}")
    elif isinstance(obj, (list, tuple)):
        for i, x in enumerate(obj):
            yield from _numbers(x, f"{where}[{i}]")
    elif isinstance(obj, dict):
        for k, x in obj.items():
            yield from _numbers(x, f"{where}[{k!r}]")
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield where, obj


def check_in_range(sc: scenario.Scenario) -> None:
    for where, x in _numbers(sc):
        assert math.isfinite(x) and abs(x) < 2**63, (where, x)
    assert 1 <= len(sc.paths) <= L.MAX_PATHS and 1 <= len(sc.clients) <= L.MAX_CLIENTS
    assert len(sc.files) <= L.MAX_FILES and len(sc.servers) <= L.MAX_SERVERS
    for p in sc.paths:
        assert len(p.rtts_s) <= L.MAX_RTTS
        assert all(0 <= r <= L.MAX_RTT_S for r in p.rtts_s)
        assert 0 <= p.jitter_s <= max(p.rtts_s, default=0.0)
        assert 0 <= p.loss < 1
        assert p.rate_bps is None or L.MIN_RATE_BPS <= p.rate_bps <= L.MAX_RATE_BPS
        assert p.queue_pkts is None or 1 <= p.queue_pkts <= L.MAX_QUEUE_PKTS
        if p.kind == "real":
            import ipaddress
            ipaddress.ip_address(p.server_addr)
            for ns in (p.client_ns, p.server_ns):
                assert ns is None or ("/" not in ns and ".." not in ns)
    most = L.MAX_DISK_BYTES if sc.storage.on_disk else L.MAX_FILE_SIZE   # disk: its room, at run
    assert all(1 <= f.size <= min(most, L.MAX_SIZE) for f in sc.files)
    assert sum(f.size for f in sc.files) <= most
    for c in sc.clients:
        assert c.streams is None or 1 <= c.streams <= L.MAX_STREAMS
        assert 1 <= c.duration_s <= L.MAX_IPERF_S and c.duration_s == int(c.duration_s)
        block, buffer = c.option("block"), c.option("buffer")
        assert block is None or L.MIN_BLOCK <= block <= L.MAX_BLOCK
        assert buffer is None or L.MIN_SOCKET_BUFFER <= buffer <= L.MAX_BUFFER
        assert all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k) for k in c.env)
    sw, tu, va = sc.sweep, sc.tuning, sc.validation
    assert 1 <= sw.repeats <= L.MAX_REPEATS
    assert all(1 <= n <= L.MAX_CONCURRENCY for n in sw.concurrency)
    assert all(1 <= n <= L.MAX_STREAMS for n in sw.streams or [])
    assert scenario.measurements(sc) <= L.MAX_MEASUREMENTS
    for b in (tu.tcp_rmem_max, tu.tcp_wmem_max, tu.core_rmem_max, tu.core_wmem_max,
              tu.tcp_rmem_default):
        assert b is None or L.MIN_BUFFER <= b <= L.MAX_TUNING_BUFFER
    assert L.MIN_MTU <= tu.mtu <= L.MAX_MTU
    assert L.MIN_PING_COUNT <= va.ping_count <= L.MAX_PING_COUNT
    assert L.MIN_PING_INTERVAL_S <= va.ping_interval_s <= L.MAX_PING_INTERVAL_S
    assert 1 <= va.iperf_seconds <= L.MAX_IPERF_S
    assert 0 <= va.rtt_tolerance_ms <= L.MAX_RTT_TOLERANCE_S * 1e3
    assert 0 < sc.transfer_timeout_s <= L.MAX_DURATION_S


_ENV_TOKEN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.S)


def check_paste_safe(lines: list[str]) -> None:
    """Every command line is exactly its tokens through shlex.quote (env as K=quote(V)),
    followed at most by a comment: nothing a shell would expand or run."""
    for line in lines:
        assert "\n" not in line and "\r" not in line, line
        if line.startswith("#"):
            continue
        tokens = shlex.split(line, comments=True)
        env = []
        while tokens and _ENV_TOKEN.fullmatch(tokens[0]):
            k, v = _ENV_TOKEN.fullmatch(tokens.pop(0)).groups()
            env.append(f"{k}={shlex.quote(v)}")
        rebuilt = " ".join(env + [shlex.join(tokens)])
        assert line.startswith(rebuilt), (line, rebuilt)
        assert re.fullmatch(r"(\s+#.*)?", line[len(rebuilt):]), line


def test_every_mutation_is_one_line_exit_2_or_valid_and_in_range(tmp_path, monkeypatch):
    state, work = tmp_path / "state", tmp_path / "cwd"
    work.mkdir()
    monkeypatch.setattr(netns, "STATE_DIR", state)
    monkeypatch.chdir(work)
    watched = (state, work, REPO / "reports", tmp_path)
    cases = mutations()
    files = tmp_path / "in"
    files.mkdir()
    stats = {"tried": 0, "rejected": 0, "valid": 0}
    t0 = time.monotonic()
    for label, data in cases:
        path = files / f"{label}.yaml"
        path.write_bytes(data)
        before = _snapshot(*watched)
        with hang_guard(30.0, label):   # a hang, not a speed goal (bench/ has those)
            code, out, err = _run_plan(str(path))
        stats["tried"] += 1
        assert _snapshot(*watched) == before, label
        if code == 2:
            stats["rejected"] += 1
            assert out == "", (label, out[:200])
            lines = err.splitlines()
            assert len(lines) == 1 and err.endswith("\n"), (label, err[:500])
            assert lines[0].startswith(f"rig: {path}: "), (label, lines[0][:300])
            assert len(lines[0]) - len(f"rig: {path}: ") <= MAX_LINE, (label, lines[0][:500])
            assert "Traceback" not in err
        else:
            assert code == 0, (label, code, err[:500])
            stats["valid"] += 1
            assert err == "", (label, err[:500])
            check_in_range(scenario.load(path))
            check_paste_safe(out.splitlines())
        path.unlink()
    elapsed = time.monotonic() - t0
    print(f"\nmutations tried {stats['tried']}, handled cleanly (exit 2, one line) "
          f"{stats['rejected']}, accepted as valid {stats['valid']}, {elapsed:.1f} s")
    assert stats["tried"] >= 480
    assert stats["rejected"] + stats["valid"] == stats["tried"]
    assert stats["rejected"] >= 0.6 * stats["tried"]      # the mutations do bite
    # how fast: bench/pure_speed.py (a speed goal is no test; the 30 s above is a hang)


@pytest.mark.parametrize("label,expect", [
    ("iperf-1e400s", "validation.iperf_duration: number is not finite"),
    ("rate-1e-300bit", "paths[0].rate: must be within 1kbit..1Tbit"),
    ("rate-bare", "paths[0].rate: give a unit"),
    ("rate-bare-text", "paths[0].rate: a bare number is ambiguous"),
    ("rate-mbps", "write '100mbit' for bits per second"),
    ("rate-Gbps", "write '10gbit' for bits per second"),
    ("queue-1e19", "paths[0].queue: expected a whole number"),
    ("queue-int-1e19", "paths[0].queue: must be <= 1000000"),
    ("size-Mib", "files[0].size: 'Mib' would be mebibits: write 'MiB'"),
    ("dup-key", "line 4: not valid YAML (duplicate key 'name')"),
    ("nest-500", "nested deeper than 32 levels"),
    ("paths-33", "paths: at most 32 item(s) (has 33)"),
    ("laughs", "anchors (&name) are not allowed"),
    ("addr-dotdot", "paths[0].server_addr: expected an IP address"),
    ("client-ns-dotdot", "paths[0].client_ns: expected a namespace name"),
    ("server-ns-slash", "paths[0].server_ns: expected a namespace name"),
    ("env-key-subst", "clients[3].env.$(touch pwned): an environment variable name"),
    ("utf16", "file is UTF-16: save it as UTF-8"),
    ("bom", "byte-order mark"),
    ("latin1", "line 3: not UTF-8 text (byte 0xe9)"),
    ("30MB", "larger than 1024 KiB"),
    ("name-900k", "name: expected a name"),
])
def test_explicit_cases_say_what_is_wrong(tmp_path, label, expect):
    data = dict(_explicit())[label]
    p = tmp_path / "s.yaml"
    p.write_bytes(data)
    code, out, err = _run_plan(str(p))
    assert code == 2 and err.count("\n") == 1, err[:500]
    assert err.startswith(f"rig: {p}: ") and expect in err, err[:500]
    if "(got " in err:      # a value is quoted in at most ~80 characters
        assert len(err.split("(got ", 1)[1]) <= errors.QUOTE_CHARS + 3, err


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory"])
def test_non_regular_files_are_refused_without_hanging(tmp_path, kind):
    if kind == "fifo":
        target = tmp_path / "s.yaml"
        os.mkfifo(target)
    else:
        target = Path("/dev/zero") if kind == "dev-zero" else tmp_path
    # the hang guard is the 30 s deadline (TimeoutExpired names the command); a refusal
    # takes about a second, the interpreter's start
    r = subprocess.run([sys.executable, "-m", "rig", "plan", str(target)], capture_output=True,
                       text=True, timeout=30, cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == "", r
    assert r.stderr == f"rig: {target}: not a regular file (a FIFO, device or directory " \
                       "cannot be a scenario)\n"


def test_plan_quotes_env_keys_even_if_one_got_through():
    line = plan._fmt(["curl", "-o", "a b"], {"$(touch x)": "1; id", "XRD_A": "2"})
    assert line == "'$(touch x)'='1; id' XRD_A=2 curl -o 'a b'"


def test_plan_of_a_scenario_path_with_a_newline_stays_a_comment(tmp_path):
    p = tmp_path / "a\nrm -rf x.yaml"
    p.write_text((REPO / "scenarios/quick.yaml").read_text())
    code, out, err = _run_plan(str(p))
    assert code == 0, err
    check_paste_safe(out.splitlines())
    assert out.splitlines()[0].startswith("# scenario quick (") and "\\n" in out.splitlines()[0]


def test_valid_case_mutation_is_checked_in_range():
    """The in-range check can fail: a scenario built past a limit is caught by it."""
    sc = scenario.load(REPO / "scenarios/quick.yaml")
    bad = dataclasses.replace(sc, transfer_timeout_s=math.inf)
    with pytest.raises(AssertionError):
        check_in_range(bad)
    with pytest.raises(AssertionError):
        check_paste_safe(["XRD_A=1 curl $(id)"])
