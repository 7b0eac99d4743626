"""Every relative link in README.md and docs/ points to a file that exists (issue 39.6:
most of the README moved to docs/ by topic, and the README links each page). Pure."""
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")

# Links to files another change adds. Each entry is removed once that change is merged.
EXPECTED_FROM_ANOTHER_CHANGE: set[str] = set()


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)    # code is not prose
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:|#", t)]


def test_pages_are_found():
    names = {p.relative_to(REPO).as_posix() for p in PAGES}
    assert {"README.md", "docs/scenarios.md", "docs/commands.md", "docs/reports.md",
            "docs/compare.md", "docs/internals.md", "docs/several-hosts.md"} <= names


def test_every_relative_link_points_to_a_file():
    broken = []
    for page in PAGES:
        for target in links(page):
            path = (page.parent / target.split("#")[0]).resolve()
            rel = path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else str(path)
            if not path.exists() and rel not in EXPECTED_FROM_ANOTHER_CHANGE:
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert not broken, broken


def test_the_readme_links_every_topic_page():
    readme = {t.split("#")[0] for t in links(REPO / "README.md")}
    for page in ("docs/scenario-reference.md", "docs/scenarios.md", "docs/commands.md",
                 "docs/reports.md", "docs/emulation.md", "docs/compare.md",
                 "docs/several-hosts.md", "docs/reproductions/README.md",
                 "docs/internals.md", "docs/lab-notes.md"):
        assert page in readme, page


def test_the_readme_is_a_guide():
    """Issue 39.6's measure: under about 400 lines, "Your own scenario" within 150."""
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 400
    assert lines.index("## Your own scenario") < 150
