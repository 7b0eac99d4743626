"""The rig's adapter for rig-fdt: pure argv builders and the parser on captured output."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rig.fdt import adapter

DATA = Path(__file__).parent / "data"


def test_server_argv_is_absolute_and_complete() -> None:
    argv = adapter.server_argv("/srv/data", "10.0.0.2", 54321, bufsize=4 << 20)
    assert argv[:3] == [sys.executable, "-m", "rig.fdt"] and Path(argv[0]).is_absolute()
    assert argv[3:] == ["serve", "--root", "/srv/data", "--bind", "10.0.0.2",
                        "--port", "54321", "--bufsize", str(4 << 20)]
    assert "--bufsize" not in adapter.server_argv("/d", "0.0.0.0", 1, bufsize=None)


def test_client_argv_carries_every_option() -> None:
    argv = adapter.client_argv("10.0.0.2", 54321, "f1G", "/dev/null", streams=8,
                               block_bytes=8 << 20, bufsize=None, timeout_s=120)
    assert argv[3:] == ["get", "--streams", "8", "--port", "54321", "--timeout", "120",
                        "--stall-timeout", "30", "--block", str(8 << 20),
                        "10.0.0.2", "f1G", "/dev/null"]
    short = adapter.client_argv("a", 1, "n", "d", streams=1, block_bytes=None,
                                bufsize=1 << 20, timeout_s=5)
    assert short[short.index("--stall-timeout") + 1] == "5"
    assert short[short.index("--bufsize") + 1] == str(1 << 20)


@pytest.mark.parametrize("kw", [dict(streams=0), dict(streams=257), dict(port=0),
                                dict(port=70000), dict(timeout_s=0), dict(block_bytes=0),
                                dict(bufsize=-1), dict(name=""), dict(streams=True)])
def test_client_argv_rejects_bad_input(kw: dict) -> None:
    args = dict(addr="a", port=1, name="n", dest="/dev/null", streams=4, block_bytes=None,
                bufsize=None, timeout_s=10.0)
    args.update(kw)
    with pytest.raises(ValueError):
        adapter.client_argv(**args)


def test_the_argv_actually_runs() -> None:
    """The builder's argv starts a working program (its --help), not just a list."""
    argv = adapter.client_argv("a", 1, "n", "d", streams=1, block_bytes=None,
                               bufsize=None, timeout_s=5)
    r = subprocess.run(argv[:3] + ["get", "--help"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0 and "--streams" in r.stdout


def test_parse_captured_success() -> None:
    res = adapter.parse((DATA / "fdt-get-ok.txt").read_text(), "")
    assert res["bytes"] == 314572800 and res["streams"] == 8
    assert res["seconds"] == res["duration_s"] == pytest.approx(0.268087)
    assert res["throughput_bps"] == pytest.approx(314572800 * 8 / 0.268087, rel=1e-4)
    assert sum(res["per_stream_bytes"]) == res["bytes"]
    assert res["cpu_user_s"] >= 0 and res["cpu_sys_s"] > 0 and res["block_bytes"] == 4 << 20


def test_parse_takes_the_last_line() -> None:
    text = "noise\n" + (DATA / "fdt-get-ok.txt").read_text() + "\n\n"
    assert adapter.parse(text, "")["bytes"] == 314572800


@pytest.mark.parametrize("stdout, match", [
    ((DATA / "fdt-get-refused.txt").read_text(), "No such file"),
    ("", "no result"),
    ("not json\n", "not JSON"),
    ("[1, 2]\n", "not a JSON object"),
    ('{"bytes": 1, "seconds": 1}\n', "lacks"),
    ('{"bytes": "x", "seconds": 1, "throughput_bps": 1, "streams": 1, "cpu_user_s": 0,'
     ' "cpu_sys_s": 0}\n', "bad field"),
])
def test_parse_rejects_failures_and_garbage(stdout: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        adapter.parse(stdout, "rig-fdt get: error: something")
