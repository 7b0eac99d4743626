"""The command line's bash completion and man page, generated from its argparse parser
(rig.cli.parser), so neither can drift from the options (issue 41 item 4):

    rig completion bash             # . <(rig completion bash)
    rig completion man > docs/rig.1   # tests/test_cli_docs.py: fails when stale

Pure: walks the parser it is given (never imports rig.cli); writes nothing itself.
"""
from __future__ import annotations

import argparse
import re
from datetime import date

from rig import __version__


def _subcommands(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for act in p._actions:
        if isinstance(act, argparse._SubParsersAction):
            return dict(act.choices)
    return {}


def _helps(p: argparse.ArgumentParser) -> dict[str, str]:
    for act in p._actions:
        if isinstance(act, argparse._SubParsersAction):
            return {c.dest: c.help or "" for c in act._choices_actions}
    return {}


def _options(p: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in p._actions if a.option_strings]


def _walk(p: argparse.ArgumentParser, words: tuple[str, ...] = ()):
    """(words after `rig`, parser) for `rig` and every command under it, depth first."""
    yield words, p
    for name, sp in _subcommands(p).items():
        yield from _walk(sp, (*words, name))


def bash_completion(p: argparse.ArgumentParser) -> str:
    """A bash completion function: commands, then each command's options; files where an
    argument takes a path or a scenario; an option's choices where it has them."""
    cases = []
    for words, sp in _walk(p):
        subs = " ".join(_subcommands(sp))
        opts = " ".join(o for a in _options(sp) for o in a.option_strings)
        choices = []
        for a in _options(sp):
            if a.choices:
                pat = "|".join(a.option_strings)
                choices.append(f'            {pat}) COMPREPLY=($(compgen -W "{" ".join(map(str, a.choices))}" -- "$cur")); return;;')
        key = " ".join(words)
        body = "\n".join(choices)
        cases.append(f'        "{key}")\n          case "$prev" in\n{body}\n            *) ;;\n'
                     f'          esac\n          subs_="{subs}"; opts_="{opts}";;')
    return f"""# bash completion for rig {__version__}, generated from its parser (rig.cli_docs)
_rig() {{
    local cur prev path_ i w subs_ opts_
    cur="${{COMP_WORDS[COMP_CWORD]}}"
    prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    path_=""
    for ((i = 1; i < COMP_CWORD; i++)); do
        w="${{COMP_WORDS[i]}}"
        [[ "$w" == -* ]] && continue
        case "$path_ $w" in
{_known_paths(p)}
            *) ;;
        esac
    done
    path_="${{path_# }}"
    case "$path_" in
{chr(10).join(cases)}
        *) subs_=""; opts_="";;
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$opts_" -- "$cur"))
    elif [[ -n "$subs_" ]]; then
        COMPREPLY=($(compgen -W "$subs_" -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}}
complete -o filenames -F _rig rig
"""


def _known_paths(p: argparse.ArgumentParser) -> str:
    """The case arms that extend the command path by a subcommand's name."""
    out = []
    for words, sp in _walk(p):
        for name in _subcommands(sp):
            here = " ".join(words)
            out.append(f'            "{(" " + here) if here else ""} {name}") path_="$path_ {name}";;')
    return "\n".join(out)


def _roff(text: str) -> str:
    text = text.replace("\\", "\\\\").replace("-", "\\-")
    return re.sub(r"^([.'])", r"\\&\1", text, flags=re.M)


def _usage(sp: argparse.ArgumentParser) -> str:
    return " ".join(sp.format_usage().split())[len("usage: "):]


def man_page(p: argparse.ArgumentParser, today: str | None = None) -> str:
    """rig(1) in man(7) roff: every command with its usage, help and options."""
    day = today or date.today().isoformat()
    out = [f'.TH RIG 1 "{day}" "rig {__version__}" "User Commands"',
           ".SH NAME", "rig \\- WAN\\-latency test rig for HEP data transfer",
           ".SH SYNOPSIS", f".B {_roff(_usage(p))}",
           ".SH DESCRIPTION", _roff(p.description or ""),
           ".SH OPTIONS"]
    out += _option_lines(p)
    out.append(".SH COMMANDS")
    for words, sp in _walk(p):
        if not words:
            continue
        helps = _helps(_parent(p, words))
        out += [f".SS {_roff(' '.join(words))}", f".B {_roff(_usage(sp))}", ".PP"]
        if helps.get(words[-1]):
            out.append(_roff(helps[words[-1]]))
        pos = [a for a in sp._actions if not a.option_strings
               and not isinstance(a, argparse._SubParsersAction)]
        for a in pos:
            out += [".TP", f".I {_roff(a.metavar or a.dest)}", _roff(_help(a) or "")]
        out += _option_lines(sp)
    out += [".SH EXIT STATUS", "0 done; 1 the run or check could not proceed (or a "
            "regression: rig compare, rig history); 2 bad input, nothing made; 130 "
            "interrupted; 141 standard output closed.",
            ".SH SEE ALSO", "README.md, docs/scenario\\-reference.md, docs/export\\-format.md"]
    return "\n".join(out) + "\n"


def _parent(p: argparse.ArgumentParser, words: tuple[str, ...]) -> argparse.ArgumentParser:
    for w in words[:-1]:
        p = _subcommands(p)[w]
    return p


def _help(a: argparse.Action) -> str | None:
    if a.help is None or a.help == argparse.SUPPRESS:
        return None
    return a.help.replace("%%", "%").replace("%(default)s", str(a.default))


def _option_lines(sp: argparse.ArgumentParser) -> list[str]:
    out = []
    for a in _options(sp):
        if a.help == argparse.SUPPRESS:
            continue
        name = ", ".join(a.option_strings)
        if a.nargs != 0:
            meta = a.metavar if isinstance(a.metavar, str) else a.dest.upper()
            name += " {" + ",".join(map(str, a.choices)) + "}" if a.choices else f" {meta}"
        out += [".TP", f".B {_roff(name)}", _roff(_help(a) or "")]
    return out
