"""The hostile-input probe's findings of issue 43, one test each: a lone surrogate in a
scenario's text, a blank path option of `rig doctor --host`, a plan too large to print
whole. (The read plan of a large ROOT file: tests/test_rootfile_plan_bound.py.)
Pure: in process, no root, no network, nothing made."""
from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
import yaml

from rig import cli

REPO = Path(__file__).resolve().parent.parent


def _rig(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv) or 0
        except SystemExit as e:
            code = int(e.code or 0)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("text", ['"\\ud800"', '"a lone \\udfff in a sentence"',
                                  '"\\U0001F600 \\ud83d"'])
def test_a_lone_surrogate_in_a_description_is_refused_in_one_line(tmp_path, text):
    doc = yaml.safe_load((REPO / "scenarios/quick.yaml").read_text())
    doc.pop("description", None)
    p = tmp_path / "s.yaml"          # YAML's escapes are how a file holds one
    p.write_text(yaml.safe_dump(doc) + f"description: {text}\n")
    code, out, err = _rig(["plan", str(p)])
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"rig: {p}: description: contains a lone surrogate"), err


def test_a_surrogate_pair_written_as_one_character_is_text(tmp_path):
    """The control: a real astral character (one code point, valid UTF-8) is accepted."""
    doc = yaml.safe_load((REPO / "scenarios/quick.yaml").read_text())
    doc["description"] = "caf\u00e9 \U0001F600"
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    code, out, err = _rig(["plan", str(p)])
    assert code == 0 and err == "", err


@pytest.mark.parametrize("opt", ["--identity", "--known-hosts"])
@pytest.mark.parametrize("value", ["", " ", "   "])
def test_a_blank_path_option_of_doctor_host_is_refused_in_one_line(monkeypatch, opt, value):
    from rig.orchestration import hosts

    def reached(*a, **k):
        raise AssertionError("rig doctor reached the host with a blank path option")
    monkeypatch.setattr(hosts, "doctor", reached)
    code, out, err = _rig(["doctor", "--host", "user@192.0.2.1", opt, value])
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"rig: {opt}: expected a path, got "), err


def test_a_blank_identity_in_a_scenarios_host_is_refused(tmp_path):
    from rig.description import scenario
    from rig.errors import InputError
    with pytest.raises(InputError) as e:
        scenario.S.load(scenario.S.Ctx("h.yaml", "hosts.dtn1"),
                        {"ssh": "user@192.0.2.1", "identity": "  "}, scenario.HostSpec)
    assert "hosts.dtn1.identity: expected a path, got only blanks" in str(e.value)


def _sweep(tmp_path: Path, rtts: int, repeats: int) -> Path:
    """rtt-sweep.yaml with `rtts` RTTs and `repeats` repeats: rtts x 6 clients x repeats
    transfer groups."""
    doc = yaml.safe_load((REPO / "scenarios/rtt-sweep.yaml").read_text())
    doc["paths"][0]["rtt"] = [f"{i}ms" for i in range(rtts)]
    doc["sweep"]["repeats"] = repeats
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def _groups(described: list[str]) -> list[tuple[str, str]]:
    """(step, group) of each action `rig plan --actions` lists, in order, once each."""
    out: dict[tuple[str, str], None] = {}
    for ln in described:
        if ln.startswith("[") and " group=" in ln:
            out[(ln.split(" step=")[1].split()[0], ln.split(" group=")[1].split()[0])] = None
    return list(out)


def test_a_large_plan_prints_its_count_then_its_first_groups(tmp_path):
    p = _sweep(tmp_path, 64, 1)                         # 384 groups in 64 steps
    code, short, err = _rig(["plan", str(p)])
    assert code == 0 and err == "", err
    code, full, err = _rig(["plan", str(p), "--all"])
    assert code == 0 and err == "", err
    short_l, full_l = short.splitlines(), full.splitlines()
    note = [ln for ln in short_l if "transfer groups in" in ln]
    assert note == [f"# 384 transfer groups in 64 step(s): the first {cli.PLAN_SHOWN_GROUPS} "
                    f"shown, {note[0].split('shown, ')[1].split()[0]} action(s) of the "
                    "others left out (rig plan --all prints every one)"], note
    assert not [ln for ln in full_l if "transfer groups in" in ln]
    # what is shown is the whole plan's own lines, in order, from its start
    rest = iter(full_l)
    assert all(any(ln == x for x in rest) for ln in short_l if ln not in note)
    assert len(short_l) < len(full_l)
    code, desc, _ = _rig(["plan", str(p), "--actions"])
    code, desc_all, _ = _rig(["plan", str(p), "--actions", "--all"])
    shown, every = _groups(desc.splitlines()), _groups(desc_all.splitlines())
    assert len(every) == 384 and shown == every[:cli.PLAN_SHOWN_GROUPS]


def test_a_plan_within_the_limit_prints_whole(tmp_path):
    p = _sweep(tmp_path, 4, 1)                          # 24 groups
    assert _rig(["plan", str(p)]) == _rig(["plan", str(p), "--all"])
