"""The command line's conventions (issue 41 item 4): -v/-q on every command, bash
completion and the man page generated from the parser, the committed docs/rig.1 current.
Pure (bash runs the completion function; no root)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from rig import cli, cli_docs
from rig.orchestration import reporter

REPO = Path(__file__).resolve().parent.parent
MAN = REPO / "docs" / "rig.1"


def _all_commands():
    return [(w, sp) for w, sp in cli_docs._walk(cli.parser()) if w]


def test_every_command_takes_v_and_q():
    for words, sp in _all_commands():
        opts = {o for a in sp._actions for o in a.option_strings}
        assert {"-v", "--verbose", "-q", "--quiet"} <= opts, words


@pytest.mark.parametrize("argv, level", [
    (["plan", "scenarios/quick.yaml"], 0), (["-q", "plan", "scenarios/quick.yaml"], -1),
    (["plan", "-q", "scenarios/quick.yaml"], -1), (["plan", "-vv", "scenarios/quick.yaml"], 2),
    (["-v", "plan", "scenarios/quick.yaml"], 1)])
def test_v_and_q_set_the_verbosity_before_or_after_the_command(argv, level, monkeypatch):
    seen = []
    monkeypatch.setattr(cli, "cmd_plan", lambda a: seen.append(reporter.verbosity()) or 0)
    monkeypatch.chdir(REPO)
    try:
        assert cli.program(argv) == 0 and seen == [level]
    finally:
        reporter.set_verbosity(0)


def test_v_with_q_is_one_line_exit_2():
    p = subprocess.run([sys.executable, "-m", "rig", "plan", "-v", "-q", "scenarios/quick.yaml"],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    assert p.returncode == 2 and p.stderr.strip() == "rig: -v and -q: give one", p.stderr


def test_quiet_drops_progress_lines_and_verbose_echoes_commands(tmp_path, capsys):
    try:
        reporter.set_verbosity(-1)
        reporter.stderr_say("step 1 of 4")
        assert capsys.readouterr().err == ""
        reporter.set_verbosity(1)
        r = reporter.Reporter()
        r.open_command_log(tmp_path / "commands.log")
        r.command(["ip", "netns", "add", "rig0000-0c"])
        r.close()
        assert capsys.readouterr().err.strip() == "+ ip netns add rig0000-0c"
        assert "ip netns add rig0000-0c" in (tmp_path / "commands.log").read_text()
    finally:
        reporter.set_verbosity(0)


def test_the_man_page_names_every_command_and_option():
    page = cli_docs.man_page(cli.parser(), "2026-01-01")
    text = page.replace("\\-", "-")
    for words, sp in _all_commands():
        assert f".SS {' '.join(words)}" in text, words
        for a in sp._actions:
            for o in a.option_strings:
                assert o in text, (words, o)
    assert "%%" not in text


def test_the_committed_man_page_is_current():
    have = MAN.read_text()
    day = re.search(r'^\.TH RIG 1 "([^"]+)"', have, re.M).group(1)
    assert have == cli_docs.man_page(cli.parser(), day), (
        "docs/rig.1 is stale: .venv/bin/rig completion man > docs/rig.1")


def _complete(*words: str) -> list[str]:
    script = cli_docs.bash_completion(cli.parser())
    arr = " ".join(f"'{w}'" for w in words)
    prog = (f"{script}\nCOMP_WORDS=({arr}); COMP_CWORD={len(words) - 1}; _rig; "
            'printf "%s\\n" "${COMPREPLY[@]}"')
    p = subprocess.run(["bash", "-c", prog], capture_output=True, text=True, timeout=60,
                       cwd=REPO)
    assert p.returncode == 0, p.stderr
    return p.stdout.split()


def test_bash_completion_follows_the_parser():
    assert set(_complete("rig", "")) == set(cli_docs._subcommands(cli.parser()))
    assert _complete("rig", "net", "") == ["up", "down", "list"]
    assert _complete("rig", "net", "up", "--ba") == ["--backend"]
    assert _complete("rig", "export", "d", "--format", "") == ["json", "ndjson", "csv"]
    assert "--quiet" in _complete("rig", "compare", "--q")
