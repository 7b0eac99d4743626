"""The scenario key reference, docs/scenario-reference.md, generated from the schema itself.

Every section of a scenario is a frozen dataclass whose fields carry their YAML key,
parser and default (rig.description.schema.spec); each parser says what it accepts
(schema.described: type, limits, choices). This module walks those declarations from
the top of a scenario (rig.description.scenario.document.Scenario) down, with the
client tools' own keys (rig/services/tools/, each tool's option section) and the server
kinds' settings (rig/services/servers/), and writes one table per section: key, type,
unit, default, limits, an example and what the key does, taken from the comment beside
the field (or the spec's `doc=`). Nothing is listed by hand, so a key added to the
schema appears here, and tests/test_scenario_reference.py fails until the file is made
again:

    .venv/bin/python -m rig.scenario_reference > docs/scenario-reference.md   (make reference)

Pure: imports the registries (rig.catalog) and reads the declarations; runs nothing.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import io
import textwrap
import tokenize
from dataclasses import dataclass
from typing import Any, Callable

import rig.catalog  # noqa: F401  (fills the registries: tools, server kinds, backends)
from rig.description import kinds, limits as L, schema as S, units
from rig.description.scenario.clients import ClientSpec, ServerSpec
from rig.description.scenario.document import Scenario

REGENERATE = ".venv/bin/python -m rig.scenario_reference > docs/scenario-reference.md"

UNITS = {"duration": "time", "size": "bytes", "rate": "bit/s", "fraction": "%"}

# example values of keys the parser cannot suggest one for (a name, a text), by YAML key
EXAMPLES: dict[str, Any] = {
    "name": "wan", "description": "xrdcp against curl over a 10 Gbit/s WAN",
    "server": "origin", "source": "origin2", "file": "f1g", "path": "wan",
    "client_host": "dtn1", "server_host": "dtn2", "router_host": "router1",
    "node": "server2", "origin": "origin", "protocol": "https", "binary": "/usr/bin/xrdcp",
    "together": ["wan", "wan2"], "paths": ["wan"], "client_ns": "client",
    "server_ns": "server", "server_addr": "192.0.2.10", "reproduces":
    "../reproductions/seed-000.yaml", "cipher": "aes128-gcm@openssh.com",
    "client": "h1", "shadow_dir": "/var/tmp", "dest_dir": "/var/tmp/rig-dest",
    "known_hosts": "~/.ssh/known_hosts", "mtu": 9000, "queue": 1000,
}
# the same, where a key means another thing in another section: (section, key)
SECTION_EXAMPLES: dict[tuple[str, str], Any] = {
    ("files[]", "name"): "f1g", ("servers[]", "name"): "origin",
    ("clients[]", "name"): "xrdcp-S4", ("background[]", "name"): "bulk",
    ("files[]", "path"): "/data/AOD.root", ("topology", "server"): "h2",
    ("paths[].router_ifaces", "server"): "eth2",
}
# section titles (how a key path is written) -> a line said under the title
SECTION_NOTES = {
    "": "The top level of a scenario file.",
    "topology": "`topology:` as a Mininet Topo (a topology name is the other form).",
    "hosts.NAME": "A remote host reached over SSH, under its name in `hosts:`.",
    "paths[]": "Each entry of `paths:`, emulated (the rig builds it) or real (used as-is).",
    "clients[]": "Each entry of `clients:`; a tool's own keys are in the next table.",
}


@dataclass(frozen=True)
class Row:
    key: str
    type: str
    unit: str
    default: str
    limits: str
    example: str
    doc: str
    parse: Any
    users: str = ""         # the tools (or server kinds) a key belongs to


@dataclass(frozen=True)
class Section:
    title: str              # the key path of the section: "paths[]", "paths[].gemodel"
    cls: type | None
    note: str
    rows: tuple[Row, ...]
    users_title: str = ""


# --- the comment beside a field: its description -------------------------------------
@functools.cache
def _comments(cls: type) -> dict[str, str]:
    """Attribute -> the comment lines directly above its field and the comment at the
    end of its line(s), joined, in the class that declares it."""
    try:
        src = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    lines = src.splitlines()
    trailing: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT and lines[tok.start[0] - 1].strip() != tok.string:
            trailing[tok.start[0]] = tok.string
    out = {}
    for node in ast.parse(src).body[0].body:        # type: ignore[attr-defined]
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above: list[str] = []
        i = node.lineno - 2
        while i >= 0 and lines[i].strip().startswith("#"):
            above.insert(0, lines[i].strip())
            i -= 1
        after = [trailing[n] for n in range(node.lineno, node.end_lineno + 1)  # type: ignore[operator]
                 if n in trailing]
        words = [c.lstrip("#").strip() for c in above + after]
        words = [w for w in words if w and not w.startswith(("noqa", "type:"))]
        if words:
            out[node.target.id] = " ".join(words)
    return out


def _comment(cls: type, attr: str) -> str:
    for c in cls.__mro__:
        if attr in getattr(c, "__annotations__", {}):
            return _comments(c).get(attr, "")
    return ""


# --- what a parser accepts, in words -------------------------------------------------
def _choices(info: dict) -> tuple:
    c = info.get("choices", ())
    return tuple(c() if callable(c) else c)


def _yaml(v: Any) -> str:
    """A value as a scenario writes it (YAML flow style)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_yaml(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_yaml(x)}" for k, x in v.items()) + "}"
    return str(v)


def _quantity(info: dict, v: Any) -> str:
    """A parsed value written back in the unit a scenario writes it in."""
    kind = info.get("type")
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return _yaml(v)
    if v == 0 and kind in ("duration", "size", "rate", "fraction"):
        return "0" if kind != "fraction" else "0%"
    if kind == "duration":
        return S.fmt_s(v * info.get("scale", 1.0))
    if kind == "size":
        return S.fmt_size(v)
    if kind == "rate":
        return units.fmt_rate(v).replace(" ", "").lower()
    if kind == "fraction":
        return f"{v * 100:g}%"
    return _yaml(v)


def _type(info: dict) -> str:
    kind = info.get("type", "")
    if kind == "list":
        inner = _type(S.info(info["item"]))
        inner = {"section": "mappings", "choice": "choices"}.get(inner, inner)
        return f"list of {inner}" + (" (or one value)" if info.get("scalar_ok") else "")
    if kind == "section" or (kind in ("mapping", "topology") and info.get("cls")):
        base = info.get("text") or "section"
    else:
        base = {"choice": "choice", "boolean": "true or false", "address": "IP address",
                "cpus": "CPU list"}.get(kind, kind)
        if info.get("text"):
            base = f"{base}: {info['text']}" if base != "text" else info["text"]
    if info.get("off"):
        base += ", or off"
    return base


def _limits(info: dict) -> str:
    kind = info.get("type")
    lo: Any = info.get("lo")
    hi: Any = info.get("hi")
    if info.get("limits"):          # a parser that states its own
        return str(info["limits"])
    if kind == "list":
        n = f"{info.get('min_len', 1)}..{info['max_len']} items" if info.get("max_len") \
            else f"at least {info.get('min_len', 1)} item(s)"
        each = _limits(S.info(info["item"]))
        return f"{n}; each {each}" if each else n
    if kind in ("choice", "topology") and _choices(info):
        return " | ".join(_yaml(c) for c in _choices(info))
    if kind == "integer":
        return f"{lo}..{hi}" if hi is not None else (f"≥ {lo}" if lo is not None else "")
    if kind == "duration":
        low = max(lo, L.MIN_NONZERO_S)
        span = f"{S.fmt_s(low)}..{S.fmt_s(hi)}"
        out = span if lo > 0 else f"0, or {span}"
        return out + (", whole seconds" if info.get("whole") else "")
    if kind == "size":
        return f"{S.fmt_size(lo)}..{S.fmt_size(hi)}"
    if kind == "rate":
        return f"{_quantity(info, lo)}..{_quantity(info, hi)}"
    if kind == "fraction":
        return "above 0%, up to 100%" if info.get("above_lo") else "0%..100%"
    if kind == "name":
        return f"letters, digits, _ . + -; at most {L.MAX_NAME_CHARS}"
    if kind in ("text", "path"):
        return f"at most {L.MAX_TEXT_CHARS} characters"
    return ""


def _default(info: dict, default: Any) -> str:
    if default is S._MISSING:
        return "required"
    if default is S.EMPTY:
        return "{} (every key's default)"
    if default is None:
        return "unset"
    if isinstance(default, (list, tuple)) and info.get("type") == "list":
        item = S.info(info["item"])
        return "[" + ", ".join(_quantity(item, x) for x in default) + "]"
    if isinstance(default, dict) and not default:
        return "{}"
    return _quantity(info, default)


_CANDIDATES: dict[str, list[Any]] = {"duration": ["50ms", "10s", "100ms", "20ms", "1s"],
               "size": ["1GiB", "64MiB", "4MiB", "1MiB", "64KiB", "16KiB"],
               "rate": ["10gbit", "1gbit", "100mbit"], "fraction": ["1%", "0.5%", "25%"],
               "boolean": [True], "cpus": ["0"], "address": ["192.0.2.10"],
               "namespace": ["client"], "path": ["/var/tmp/file"], "text": ["text"]}


def _accepts(parse: Any, value: Any) -> bool:
    try:
        S.call(S.Ctx("reference"), parse, value)
        return True
    except Exception:       # noqa: BLE001  (any refusal: try the next candidate)
        return False


def _example(key: str, info: dict, default: Any, given: Any = None, title: str = "") -> Any:
    """A value of the key, as a scenario writes it (None: a section, shown below)."""
    kind = info.get("type")
    if kind == "section" or kind == "list" and S.info(info["item"]).get("type") == "section":
        return None
    for v in (given, info.get("example"), SECTION_EXAMPLES.get((title, key)),
              EXAMPLES.get(key)):
        if v is not None:
            return v
    if kind in ("duration", "size", "rate", "fraction", "integer") and default not in (
            None, S._MISSING, S.EMPTY, [], 0):
        return _quantity(info, default) if not isinstance(default, list) else \
            [_quantity(S.info(info["item"]), x) for x in default]
    if kind == "list":
        one = _example(key, {**S.info(info["item"]), "_parse": info["item"]}, None)
        return None if one is None else [one]
    if kind == "boolean":
        return default is not True
    if kind == "choice":
        cs = _choices(info)
        rest = [c for c in cs if c != default]
        return (rest or list(cs) or [None])[0]
    if kind == "integer":
        lo, hi = info.get("lo") or 0, info.get("hi")
        for v in (default, 4, 1, lo):
            if isinstance(v, int) and v >= lo and (hi is None or v <= hi):
                return v
    if kind == "name":
        return "wan"
    parse = info.get("_parse")
    candidates: list[Any] = _CANDIDATES.get(kind or "", [])
    for v in candidates:
        if parse is None or _accepts(parse, v):
            return v
    return None


# --- the walk ---------------------------------------------------------------------
def _row(cls: type, f: dataclasses.Field, users: str = "", title: str = "") -> Row:
    md = f.metadata
    parse = md["parse"]
    info = {**S.info(parse), "_parse": parse}
    key = md["key"] or f.name
    ex = _example(key, info, md["default"], md.get("example"), title)
    kind = info.get("type", "")
    unit = UNITS.get(S.info(info["item"]).get("type", "") if kind == "list" else kind, "")
    if unit == "time" and (info.get("whole") or S.info(info.get("item")).get("whole")):
        unit = "time (whole s)"
    return Row(key=key, type=_type(info), unit=unit, default=_default(info, md["default"]),
               limits=_limits(info), example="" if ex is None else _yaml(ex),
               doc=_sentence(md.get("doc") or _comment(cls, f.name)), parse=parse,
               users=users)


def _nested(parse: Any) -> tuple[type | None, str]:
    """The section a key holds, and how its keys are written below it."""
    info = S.info(parse)
    if info.get("type") == "list":
        cls, _ = _nested(info["item"])
        return cls, "[]"
    if info.get("type") == "mapping" and info.get("cls"):
        return info["cls"], ".NAME"
    return info.get("cls"), ""


def _fields(cls: type) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if "parse" in f.metadata]


def sections() -> list[Section]:
    """Every section a scenario can hold, from the top down, each once."""
    out: list[Section] = []
    seen: dict[type, str] = {}
    todo: list[tuple[str, type]] = [("", Scenario)]
    while todo:
        title, cls = todo.pop(0)
        seen[cls] = title
        rows = []
        children: list[tuple[str, type]] = []
        for f in _fields(cls):
            row = _row(cls, f, title=title)
            sub, how = _nested(f.metadata["parse"])
            if sub is not None:
                where = f"{title}.{row.key}" if title else row.key
                where += how
                if sub in seen or any(c is sub for _, c in todo):
                    known = seen.get(sub) or next(t for t, c in todo if c is sub)
                    row = dataclasses.replace(row, doc=_join(row.doc, f"The keys of `{known}`."))
                else:
                    children.append((where, sub))
                    row = dataclasses.replace(row, doc=_join(row.doc, f"Keys: `{where}` below."))
            rows.append(row)
        note = SECTION_NOTES.get(title) or _docstring(cls)
        out.append(Section(title, cls, note, tuple(rows)))
        if cls is ClientSpec:
            out.append(_tool_keys())
        if cls is ServerSpec:
            out.append(_server_settings())
        todo[:0] = children          # a section's own sections follow it
    return out


def _sentence(text: str) -> str:
    """A comment as a sentence: its first letter up, a full stop at its end."""
    text = text.strip()
    if not text:
        return ""
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?", ")")) else text + "."


def _join(doc: str, more: str) -> str:
    return f"{_sentence(doc)} {more}" if doc else more


def _docstring(cls: type) -> str:
    """The class's own docstring on one line (not the signature dataclass writes)."""
    doc = cls.__doc__ or ""
    return "" if doc.startswith(cls.__name__ + "(") else " ".join(doc.split())


def _tool_keys() -> Section:
    """The client keys a tool declares in its own option section."""
    rows: dict[str, Row] = {}
    for tool in kinds.CLIENTS.all():
        for f in _fields(tool.options):
            key = f.metadata["key"] or f.name
            if key not in rows:
                rows[key] = _row(tool.options, f, ", ".join(kinds.option_users(key)))
    return Section("clients[] (a tool's own keys)", None,
                   "Keys a client tool declares in its own module (rig/services/tools/); "
                   "a client whose tool does not take the key is refused.",
                   tuple(rows[k] for k in sorted(rows)), users_title="tools")


def _server_settings() -> Section:
    """The on/off settings a server kind declares (`ServerKind.settings`)."""
    keys: dict[str, list[str]] = {}
    for kind in kinds.SERVERS.all():
        for k, dflt in kind.settings.items():
            keys.setdefault(k, []).append(f"{kind.kind}: {_yaml(dflt)}")
    field = S.Field(S.optional(S.boolean), None)
    rows = tuple(Row(key=k, type=_type(S.info(field.parse)), unit="",
                     default="the kind's (" + ", ".join(keys[k]) + ")",
                     limits="", example="false", doc="", parse=field.parse,
                     users=", ".join(u.split(":")[0] for u in keys[k]))
                 for k in sorted(keys))
    note = _sentence(_comment(ServerSpec, "settings"))
    return Section("servers[] (a server kind's settings)", None, note, rows,
                   users_title="kinds")


# --- the page ---------------------------------------------------------------------
HEAD = """# Scenario key reference

Generated from the schema (rig/description/scenario/, rig/description/tuningspec.py,
rig/description/storage.py, each client tool's options in rig/services/tools/ and each
server kind's settings in rig/services/servers/): do not edit by hand. Made again with

    {regenerate}

(`make reference`); tests/test_scenario_reference.py fails while this file is stale.
The README's "Scenarios" section shows a whole scenario; this page lists every key.

**Units.** Every dimensioned quantity carries its unit; a bare number is refused unless it
is 0. *time*: `ns us ms s min h` (`50ms`); *bytes*: `B kB MB GB TB KiB MiB GiB TiB`
(`256MiB`); *bit/s*: `bit kbit mbit gbit tbit` (`10gbit`; `mbps` is refused: tc reads it
as bytes); *%*: a percentage (`0.5%`). Units are case-exact where case changes the
meaning. A *list* key given one value reads it as a list of one where its type says so.
*unset* means the key has no value unless written; the description says what then happens.

{count} keys in {sections} sections.
"""


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    secs = sections()
    n = sum(len(s.rows) for s in secs)
    out = [HEAD.format(regenerate=REGENERATE, count=n, sections=len(secs))]
    out.append("## Sections\n")
    for s in secs:
        out.append(f"- [`{s.title or '(top level)'}`](#{_anchor(s.title)})")
    out.append("")
    for s in secs:
        out.append(f"## {s.title or '(top level)'}\n")
        if s.note:
            out.append(s.note + "\n")
        cols = ["key", "type", "unit", "default", "limits", "example", "description"]
        if s.users_title:
            cols.insert(1, s.users_title)
        out.append("| " + " | ".join(cols) + " |")
        out.append("|" + "---|" * len(cols))
        for r in s.rows:
            cells = [f"`{r.key}`", r.type, r.unit, r.default, r.limits,
                     f"`{r.example}`" if r.example else "", r.doc]
            if s.users_title:
                cells.insert(1, r.users)
            out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        out.append("")
    return "\n".join(out)


def _anchor(title: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to '-'."""
    t = (title or "(top level)").lower()
    return "".join(c for c in t if c.isalnum() or c in " -_").replace(" ", "-")


def rows() -> list[tuple[str, Row]]:
    """Every key as (section title, row): what the tests check against."""
    return [(s.title, r) for s in sections() for r in s.rows]


def main(write: Callable[[str], Any] = print) -> None:
    write(render())


if __name__ == "__main__":
    main()
