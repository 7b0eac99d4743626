"""Every number the README and docs/ state about a shipped scenario is the scenario file's
(issue 31.5).

README.md and the pages of docs/ (most of what the README said moved there, issue 39.6:
the shipped list to docs/scenarios.md, the point counts to docs/reports.md) name each
shipped scenario as `scenarios/NAME.yaml` followed by a parenthesis
of facts (RTTs, streams, sources, transfers, repeats, branches, loss, rate, file size,
cores, TLS modes). Each fact is parsed by one CLAIM below and compared with the loaded
scenario; a digit no claim accounts for fails the test, so a new number in the README
needs a check here, and a scenario file that changes under the README fails it too.
"""
import re
from pathlib import Path
from typing import Callable

import pytest

from rig.description import scenario, steps

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
# every page whose mentions are checked: the README and docs/*.md (docs/reproductions/
# quotes studies, not scenario files, and is not read here)
PAGES = {"README.md": README} | {f"docs/{p.name}": p.read_text()
                                 for p in sorted((REPO / "docs").glob("*.md"))}
SCENARIOS_DOC = PAGES["docs/scenarios.md"]
REPORTS_DOC = PAGES["docs/reports.md"]
SHIPPED = sorted(p.name.removesuffix(".yaml") for p in (REPO / "scenarios").glob("*.yaml"))
MENTION = re.compile(r"`scenarios/([\w.-]+)\.yaml`(?:\s+is seed \d+'s figure \d+)?\s+\(")


def _paren(text: str, start: int) -> str:
    """The text of the parenthesis opening at text[start - 1], up to its first
    top-level ';' (what follows it is about measurements, not the file)."""
    depth, i = 1, start
    while depth:
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
    body = text[start:i - 1]
    return " ".join(body.split(";")[0].split())      # one line: claims may wrap


def mentions() -> list[tuple[str, str]]:
    return [(m.group(1), _paren(text, m.end()))
            for text in PAGES.values() for m in MENTION.finditer(text)]


def _nums(s: str) -> list[float]:
    return [float(x) for x in re.findall(r"\d+(?:\.\d+)?", s)]


def _rtts_ms(sc) -> list[float]:
    return sorted({round(r * 1e3, 6) for p in sc.paths for r in p.rtts_s})


def _rtt(sc, m: re.Match) -> None:
    got, want = m.group(1), _rtts_ms(sc)
    if "–" in got:
        assert _nums(got) == [min(want), max(want)], (got, want)
    else:
        assert sorted(_nums(got)) == want, (got, want)


def _span(values: list[float], got: str) -> None:
    assert _nums(got) == [min(values), max(values)], (got, values)


def _set(values, got: str) -> None:
    assert sorted(_nums(got)) == sorted(float(v) for v in set(values)), (got, values)


def _cores(spec: str) -> int:
    return sum(int(b) - int(a) + 1 if "-" in x else 1
               for x in spec.split(",") for a, _, b in [x.partition("-")])


def _origins(sc, m: re.Match) -> None:
    one = [s for s in sc.servers if s.count == 1 and s.cpus]
    two = [s for s in sc.servers if s.count == 2 and s.cpus]
    assert [_cores(c) for s in one for c in s.cpus] == [int(m.group(1))], one
    assert {_cores(c) for s in two for c in s.cpus} == {int(m.group(2))}, two


def _points(sc) -> int:
    """Measurement points: steps x distinct (client, streams, concurrency, TLS) groups."""
    return len(steps.expand(sc)) * len({(g.client.name, g.streams, g.concurrency, g.tls)
                                        for g in steps.groups(sc)})


# (pattern, check(scenario, match)); tried in order, each match consumed
Check = Callable[[scenario.Scenario, re.Match], None]
CLAIMS: list[tuple[str, Check]] = [
    (r"seed \d+", lambda sc, m: None),                      # names a study, not a value
    (r"(\d+)–(\d+) (?:active |concurrent )?transfers",
     lambda sc, m: _span(sc.sweep.concurrency, m.group(1) + " " + m.group(2))),
    (r"streams (\d+(?:, \d+)* and \d+)", lambda sc, m: _set(sc.sweep.streams, m.group(1))),
    (r"xrdcp -S (\d+(?:/\d+)*)|, -S (\d+(?:/\d+)*)",
     lambda sc, m: _set([c.streams for c in sc.clients
                         if c.tool == "xrdcp" and (c.streams or 1) > 1],
                        m.group(1) or m.group(2))),
    (r"FDT-style (\d+(?:/\d+)*) streams",
     lambda sc, m: _set([c.streams for c in sc.clients if c.tool == "fdt"], m.group(1))),
    (r"-y (\d+(?:/\d+)*)",
     lambda sc, m: _set([c.option("sources") for c in sc.clients if c.option("sources")], m.group(1))),
    (r"(\d+) repeats", lambda sc, m: _set([sc.sweep.repeats], m.group(1))),
    (r"branches (\d+(?:/\d+)*) %",
     lambda sc, m: _set([round(b * 100, 6) for b in sc.sweep.branches or []], m.group(1))),
    (r"(\d+(?:\.\d+)?) % loss",
     lambda sc, m: _set([round(p.loss * 100, 6) for p in sc.paths], m.group(1))),
    (r"(\d+(?: and \d+)+) Gbit/s",
     lambda sc, m: _set([p.rate_bps / 1e9 for p in sc.paths if p.rate_bps], m.group(1))),
    (r"(\d+) Gbit/s",
     lambda sc, m: _set([p.rate_bps / 1e9 for p in sc.paths if p.rate_bps], m.group(1))),
    (r"IPv(4|6)", lambda sc, m: _set(sorted({p.ip for p in sc.paths}), m.group(1))),
    (r"(\d+) × (\d+) MiB",                                 # a set of small files (count:)
     lambda sc, m: (_set([f.count for f in sc.files if f.count], m.group(1)),
                    _set([f.size / 2**20 for f in sc.files if f.count], m.group(2)))),
    (r"(\d+) MiB", lambda sc, m: _set([f.size / 2**20 for f in sc.files], m.group(1))),
    (r"(\d+) GiB", lambda sc, m: _set([f.size / 2**30 for f in sc.files], m.group(1))),
    (r"one origin on (\d+) cores vs two on (\d+) core each", _origins),
    (r"origins (\d+(?:/\d+)*) × cores (\d+(?:/\d+)*)",
     lambda sc, m: (_set(sc.sweep.origins, m.group(1)), _set(sc.sweep.server_cpus, m.group(2)))),
    (r"(\d+(?:(?:, | and |–)\d+)*) ms\b", _rtt),
    (r"TLS ([a-z]+(?:/[a-z]+)+)",
     lambda sc, m: _sameset(sc.sweep.tls, m.group(1).split("/"))),
    (r"TLS off and on", lambda sc, m: _sameset(sc.sweep.tls, ["off", "all"])),
    (r"page checksums on and off",
     lambda sc, m: _sameset([c.option("page_checksum") is not False for c in sc.clients
                             if c.tool == "xrdcp"], [True, False])),
    (r"\btwo xrdcp variants",
     lambda sc, m: _sameset([len([c for c in sc.clients if c.tool == "xrdcp"])], [2])),
]


def _sameset(have, want) -> None:
    assert sorted(set(have or [])) == sorted(set(want)), (have, want)


def check(name: str, text: str) -> list[str]:
    """Check every claim of `text` against scenarios/NAME.yaml; return what was checked."""
    sc = scenario.load(REPO / "scenarios" / f"{name}.yaml")
    done, rest = [], text
    for pat, fn in CLAIMS:
        for m in re.finditer(pat, rest):
            fn(sc, m)
            done.append(m.group(0))
        rest = re.sub(pat, " ", rest)
    assert not re.search(r"\d", rest), f"{name}: a number no claim checks: {rest!r}"
    return done


def test_every_shipped_scenario_is_named_in_the_scenarios_section():
    section = SCENARIOS_DOC.split("\n## Shipped scenarios\n")[1].split("\n## ")[0]
    shipped = section[section.index("Shipped: "):]
    assert sorted(set(re.findall(r"`scenarios/([\w.-]+)\.yaml`", shipped))) == SHIPPED


def test_the_mentions_are_still_found():
    # what the README held before issue 39.6 moved it to docs/: 38 mentions, every shipped
    # scenario among them; a page or a pattern that stops being read fails here rather
    # than checking nothing
    assert len(mentions()) >= 38
    assert {n for n, _ in mentions()} == set(SHIPPED)


def test_the_readme_s_own_scenario_example_is_a_valid_scenario():
    """The example a newcomer copies ("Your own scenario") loads as a scenario."""
    import yaml
    section = README.split("\n## Your own scenario\n")[1].split("\n## ")[0]
    block = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    sc = scenario.parse(yaml.safe_load(block), source="README.md", text=block)
    assert len(steps.expand(sc)) == 4 and {c.name for c in sc.clients} == {"xrdcp", "curl"}


@pytest.mark.parametrize("name,text", mentions(), ids=lambda x: x[:30])
def test_the_readme_s_numbers_are_the_scenario_s(name, text):
    assert name in SHIPPED
    check(name, text)


def test_the_numbers_are_really_checked():
    claims = {n: check(n, t) for n, t in mentions()}
    assert "streams 1, 2, 4, 8 and 15" in claims["lfn-regression"]
    assert "0, 20, 60 and 120 ms" in claims["lfn-regression"]
    assert "0–120 ms" in claims["rtt-sweep"] and "3 repeats" in claims["rtt-sweep"]
    # the case: the README's old line, and a file changed under the README
    with pytest.raises(AssertionError):
        check("lfn-regression", "streams 1, 2, 4, 8 and 16 at 20, 60 and 120 ms")
    with pytest.raises(AssertionError):
        check("lfn-regression", "streams 1–16 up to 120 ms")       # an unchecked number
    with pytest.raises(AssertionError):
        check("origins", "1–32 transfers, 20 and 60 ms")
    assert "20 × 1 MiB" in check("small-files", "a set of 20 × 1 MiB")
    with pytest.raises(AssertionError):
        check("small-files", "a set of 40 × 1 MiB")              # the set's count


def test_point_counts_the_reports_section_states():
    m = re.search(r"rtt-sweep 0 of (\d+) points unexplained, quick 0 of (\d+)", REPORTS_DOC)
    assert m, "docs/reports.md's point counts moved: update this test"
    assert (_points(scenario.load(REPO / "scenarios/rtt-sweep.yaml")),
            _points(scenario.load(REPO / "scenarios/quick.yaml"))) == \
        (int(m.group(1)), int(m.group(2)))
