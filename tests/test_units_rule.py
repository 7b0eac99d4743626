"""The units rule (issue 31): every dimensioned quantity carries its unit; a bare number
(a YAML number, or a string of digits) is refused unless it is 0.

Found, not listed: every field of every section class of the scenario and topology
schemas is probed with quantities in units; a field that takes one is dimensioned, and
must then refuse the same quantity as a bare number, in the base unit and as written.
Also the command line: `rig net up`, `rig plan`'s read-plan options. Pure.
"""
from __future__ import annotations

import dataclasses

import pytest

from rig import cli
from rig.description import scenario, schema as S, topology, tuningspec, units
from rig.errors import InputError

UNITS = ["20ms", "2s", "100ms", "1h", "1MiB", "64KiB", "16MiB", "4MiB", "1GiB", "20MiB",
         "10gbit", "1mbit", "100mbit"]


def _base(v: str) -> float:
    for parse in (units.parse_duration, units.parse_size, units.parse_rate):
        try:
            return parse(v)
        except ValueError:
            pass
    raise AssertionError(v)


def _bare_forms(v: str) -> list:
    n = _base(v)
    number = v.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZµ")
    forms = [n, str(n), f"{n:g}", number, float(number)]
    if n == int(n):
        forms += [int(n), str(int(n))]
    return forms


def _sections() -> list[type]:
    out = []
    for mod in (*_scenario_modules(), topology, tuningspec):
        for obj in vars(mod).values():
            if isinstance(obj, type) and dataclasses.is_dataclass(obj) \
                    and obj.__module__ == mod.__name__ and S._doc_fields(obj):
                out.append(obj)
    return out


def _scenario_modules() -> list:
    """The modules of the scenario model (rig/description/scenario/), which declare its
    sections."""
    import importlib
    import pkgutil
    return [importlib.import_module(f"{scenario.__name__}.{m.name}")
            for m in pkgutil.iter_modules(scenario.__path__)]


def _accepts(parse, value) -> bool:
    try:
        S.call(S.Ctx("t.yaml", "k"), parse, value)
        return True
    except InputError:
        return False


def _quantity(parse, value) -> bool:
    """Whether `parse` reads `value` as a number (a text field takes any text)."""
    try:
        got = S.call(S.Ctx("t.yaml", "k"), parse, value)
    except InputError:
        return False
    got = got[0] if isinstance(got, list) and got else got
    return isinstance(got, (int, float)) and not isinstance(got, bool)


def _dimensioned() -> list[tuple[str, object, list[str]]]:
    out = []
    for cls in _sections():
        for key, (_, field) in S._doc_fields(cls).items():
            took = [u for u in UNITS if _quantity(field.parse, u)]
            if took:
                out.append((f"{cls.__name__}.{key}", field.parse, took))
    return out


DIMENSIONED = _dimensioned()


def test_the_probe_finds_the_dimensioned_keys():
    names = {n for n, _, _ in DIMENSIONED}
    for must in ("PathSpec.rtt", "PathSpec.rate", "FileSpec.size", "Tuning.tcp_rmem_max",
                 "Validation.iperf_duration", "Scenario.transfer_timeout"):
        assert must in names, sorted(names)
    assert len(DIMENSIONED) >= 15, sorted(names)


@pytest.mark.parametrize("name, parse, took", DIMENSIONED, ids=[d[0] for d in DIMENSIONED])
def test_every_dimensioned_key_refuses_a_bare_number(name, parse, took):
    for u in took:
        for bare in _bare_forms(u):
            if bare in (0, "0", 0.0):
                continue
            assert not _accepts(parse, bare), f"{name} took {bare!r} (for {u})"


@pytest.mark.parametrize("key, doc", [
    ("paths[0].rtt", {"rtt": "0.05"}), ("paths[0].rtt", {"rtt": 0.05}),
    ("files[0].size", {"size": 7}), ("files[0].size", {"size": "7"}),
])
def test_the_issue_s_cases_are_refused(key, doc):
    base = {"name": "t", "topology": "client-router-server",
            "paths": [{"name": "wan", "kind": "emulated", "rtt": ["0ms"]}],
            "files": [{"name": "f", "size": "1MiB"}],
            "servers": [{"name": "x", "kind": "xrootd"}],
            "clients": [{"name": "c", "tool": "xrdcp", "file": "f"}]}
    section = "paths" if key.startswith("paths") else "files"
    base[section] = [{**base[section][0], **doc}]
    with pytest.raises(InputError) as e:
        scenario.parse(base, source="t.yaml")
    assert f"{key}" in str(e.value) and "give a unit" in str(e.value)


def test_zero_needs_no_unit():
    assert units.parse_duration(0) == 0 and units.parse_duration("0") == 0
    assert units.parse_size("0") == 0


@pytest.mark.parametrize("argv", [
    ["net", "up", "--name", "lab", "--rtt", "0.05"], ["net", "up", "--name", "lab", "--rtt", "50"],
    ["net", "up", "--name", "lab", "--rmem", "67108864"],
    ["net", "up", "--name", "lab", "--jitter", "1"],
    ["plan", "--generate", "--size", "4096"], ["plan", "--generate", "--cluster", "1048576"],
    ["plan", "--generate", "--cache-size", "20971520"],
    ["plan", "--generate", "--segment-size", "134217728"],
])
def test_the_command_line_follows_the_rule(argv, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ("unit" in err), err
