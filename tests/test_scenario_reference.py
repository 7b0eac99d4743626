"""docs/scenario-reference.md is generated from the schema (rig.scenario_reference) and
kept current: the committed file is what the generator writes now, every key has a type
and an example its own parser accepts, and every key of the README's scenario example
is one the reference lists. Pure."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from rig.errors import InputError

from rig import scenario_reference as R
from rig.description import schema as S

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "scenario-reference.md"
ROWS = R.rows()


def test_the_reference_is_current():
    want = R.render() + "\n"
    have = DOC.read_text() if DOC.exists() else ""
    assert have == want, (f"{DOC.relative_to(ROOT)} is stale: make it again with "
                          f"`{R.REGENERATE}` (make reference)")


def test_every_key_has_a_type_and_an_example():
    for title, r in ROWS:
        assert r.type, (title, r.key)
        assert r.example or "below" in r.doc or "The keys of" in r.doc, (title, r.key)


def test_a_dimensioned_key_says_its_unit():
    """The units rule: a duration, size, rate or fraction key names its unit."""
    for title, r in ROWS:
        kind = S.info(r.parse).get("type")
        if kind == "list":
            kind = S.info(S.info(r.parse)["item"]).get("type")
        if kind in R.UNITS:
            assert r.unit, (title, r.key)


@pytest.mark.parametrize("title,row", [(t, r) for t, r in ROWS if r.example],
                         ids=lambda x: x if isinstance(x, str) else x.key)
def test_each_example_is_accepted_by_its_key(title, row):
    value = yaml.safe_load(row.example.strip("`"))
    if (title, row.key) == ("storage", "dir"):
        # an existing directory on a disk: the example (/var/tmp) is one on most hosts;
        # where this host keeps it in memory the refusal must say so, and be right
        from rig.description.storage import MEMORY_FS, fs_type
        if fs_type(value) in MEMORY_FS:
            with pytest.raises(InputError, match="memory"):
                S.call(S.Ctx("reference", f"{title}.{row.key}"), row.parse, value)
            return
    S.call(S.Ctx("reference", f"{title}.{row.key}"), row.parse, value)


def _examples() -> list[tuple[str, dict]]:
    """The scenario examples a user reads first: the README's (under "Your own scenario")
    and docs/scenarios.md's annotated one (its first YAML block)."""
    out = []
    for page, heading in (("README.md", "## Your own scenario"), ("docs/scenarios.md", "")):
        text = (ROOT / page).read_text()
        start = text.index(heading) if heading else 0
        block = re.search(r"```yaml\n(.*?)```", text[start:], re.S)
        assert block, f"{page}: no scenario example"
        out.append((page, yaml.safe_load(block.group(1))))
    return out


def _keys(doc: dict, title: str) -> list[tuple[str, str]]:
    out = []
    for k, v in doc.items():
        out.append((title, k))
        sub = f"{title}.{k}" if title else k
        if isinstance(v, dict) and k != "hosts":
            out += _keys(v, sub)
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            for item in v:
                out += _keys(item, sub + "[]")
    return out


def test_the_readme_example_uses_only_listed_keys():
    listed = {(t.split(" (")[0], r.key) for t, r in ROWS}
    for page, doc in _examples():
        missing = [f"{t}.{k}" if t else k for t, k in _keys(doc, "") if (t, k) not in listed]
        assert not missing, f"{page}'s scenario keys not in the reference: {missing}"


def test_the_readme_links_the_reference():
    assert "docs/scenario-reference.md" in (ROOT / "README.md").read_text()
