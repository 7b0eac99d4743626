"""The layers of docs/internals.md, checked on the code: data flows one way.

description -> realization -> services -> (process supervision) -> orchestration ->
results -> reports, with the CLI on top. Each rule of its layer table is one
test below; a rule broken by a new import fails here with the file and the import.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "rig"

LAYERS = ("description", "realization", "services", "process", "orchestration", "results",
          "report")
# layer -> layers (and top-level modules) it must not import
FORBIDDEN = {
    "description": {"realization", "services", "process", "orchestration", "results", "report",
                    "cli"},
    "realization": {"services", "orchestration", "results", "report", "cli"},
    "services": {"orchestration", "results", "report", "cli"},
    "process": {"description", "realization", "services", "orchestration", "results",
                "report", "cli"},
    "orchestration": {"report", "cli"},
    "results": {"realization", "services", "process", "orchestration", "report", "cli"},
    "report": {"realization", "services", "process", "orchestration", "cli"},
}
PROCESS_STARTERS = {"subprocess", "multiprocessing", "pty"}
PROCESS_CALLS = {"fork", "forkpty", "execv", "execve", "execvp", "execvpe", "execl", "execle",
                 "execlp", "execlpe", "posix_spawn", "posix_spawnp", "system", "popen",
                 "create_subprocess_exec", "create_subprocess_shell", "spawnv", "spawnve"}


def _module(f: Path) -> str:
    parts = list(f.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(f: Path) -> set[str]:
    """Absolute names of every rig module a file imports (relative imports resolved)."""
    mod = _module(f)
    pkg = mod if f.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(f.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
    return out


def _layer(name: str) -> str | None:
    parts = name.split(".")
    if parts[0] != "rig" or len(parts) < 2:
        return None
    return parts[1] if parts[1] in LAYERS or parts[1] == "cli" else None


def _files(layer: str) -> list[Path]:
    d = PKG / layer
    return sorted(d.rglob("*.py")) if d.is_dir() else []


def _violations(layer: str) -> list[str]:
    bad = []
    for f in _files(layer):
        for i in sorted(_imports(f)):
            target = _layer(i)
            if target in FORBIDDEN[layer]:
                bad.append(f"{f.relative_to(PKG.parent)} imports {i}")
    return bad


def test_every_layer_folder_exists_and_holds_code():
    for layer in LAYERS:
        assert _files(layer), f"rig/{layer}/ is missing or empty"


def test_description_imports_nothing_that_runs():
    assert not _violations("description")


def test_realization_does_not_import_services_or_above():
    assert not _violations("realization")


def test_services_do_not_import_orchestration_or_reports():
    assert not _violations("services")


def test_process_supervision_imports_no_other_layer():
    assert not _violations("process")


def test_orchestration_does_not_import_reports():
    assert not _violations("orchestration")


def test_results_do_not_import_realization():
    assert not _violations("results")


def test_reports_do_not_import_realization_or_services():
    assert not _violations("report")


def test_rig_fdt_stands_alone():
    """rig-fdt is also a tool labs run on their own: it imports only itself and the
    unit parsers."""
    ok = ("rig.fdt", "rig.description.units", "rig.errors")
    for f in sorted((PKG / "fdt").rglob("*.py")):
        bad = {i for i in _imports(f) if i.startswith("rig.") and not i.startswith(ok)}
        assert not bad, f"{f}: {bad}"


def test_nothing_imports_the_cli():
    for f in PKG.rglob("*.py"):
        if f.name in ("cli.py", "__main__.py"):
            continue
        assert not {i for i in _imports(f) if i == "rig.cli" or i.startswith("rig.cli.")}, f


def test_only_the_process_module_starts_processes():
    allowed = PKG / "process" / "proc.py"
    # a runner the rig starts through proc.run (one process per file of a set of small
    # files): its children stay in its process group, so the rig's deadline and watchdog,
    # which end that group, end them too (proc.run would give each a session of its own)
    runner = PKG / "process" / "eachfile.py"
    # the engine's entry becomes the native engine (os.execv: no child process, nothing to
    # wait for or kill; its own process is the Service proc.py started): that one call only
    becomes = {(PKG / "realization" / "emul" / "engine" / "__main__.py", "execv")}
    for f in PKG.rglob("*.py"):
        if f in (allowed, runner):
            continue
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                bad = {a.name.split(".")[0] for a in node.names} & PROCESS_STARTERS
                assert not bad, f"{f}: imports {bad}"
            elif isinstance(node, ast.ImportFrom) and not node.level:
                assert (node.module or "").split(".")[0] not in PROCESS_STARTERS, \
                    f"{f}: imports from {node.module}"
                assert not {a.name for a in node.names} & PROCESS_CALLS, f"{f}: {node.module}"
            elif isinstance(node, ast.Attribute) and node.attr in PROCESS_CALLS:
                owner = node.value
                name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
                if (f, node.attr) in becomes:
                    continue
                assert name not in ("os", "asyncio", "pty"), f"{f}:{node.lineno}: {name}.{node.attr}"


def _loaded_after_import(mods: list[str], block: list[str]) -> list[str]:
    code = ("import sys\n" + "".join(f"sys.modules[{b!r}] = None\n" for b in block)
            + "".join(f"import {m}\n" for m in mods)
            + "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('rig.'))))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_measurement_runs_with_matplotlib_unavailable():
    measurement = [_module(f) for layer in ("realization", "services", "process",
                                            "orchestration", "results")
                   for f in _files(layer) if f.name != "__main__.py"] + ["rig.cli"]
    _loaded_after_import(measurement, ["matplotlib"])


def test_loading_a_scenario_loads_nothing_that_runs():
    loaded = _loaded_after_import(["rig.description.scenario", "rig.description.steps"], [])
    bad = [m for m in loaded if _layer(m) in FORBIDDEN["description"]]
    assert not bad, bad


def test_the_checker_sees_a_violation(tmp_path: Path):
    """Control: the import scan finds a forbidden import when there is one."""
    f = PKG / "report" / "_layer_probe_tmp.py"
    f.write_text("from rig.realization import netns\nimport subprocess\n")
    try:
        assert _violations("report") == ["rig/report/_layer_probe_tmp.py imports rig.realization",
                                         "rig/report/_layer_probe_tmp.py imports rig.realization.netns"]
    finally:
        f.unlink()


def _graph() -> dict[str, set[str]]:
    """Module -> the rig modules it imports anywhere: at the top, inside functions, under
    TYPE_CHECKING. `from P import m` of a submodule m is an edge to P.m only, and a
    module's own parent packages are not edges (importing any submodule runs them)."""
    mods = {_module(f): f for f in PKG.rglob("*.py")}
    g: dict[str, set[str]] = {}
    for m, f in mods.items():
        pkg = m if f.name == "__init__.py" else m.rsplit(".", 1)[0]
        out: set[str] = set()
        for node in ast.walk(ast.parse(f.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                         for a in node.names]
            out |= {n for n in names if n in mods and n != m and not m.startswith(n + ".")}
        g[m] = out
    return g


def _cycles(g: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[frozenset[str]] = []
    for root in g:
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.add(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))
    return out


def test_no_import_cycle_even_inside_functions():
    """Issue 25: a cycle hidden in a function-level import is still a cycle."""
    cycles = _cycles(_graph())
    assert not cycles, [sorted(c) for c in cycles]


def test_the_cycle_checker_sees_a_cycle():
    """Control: two modules importing each other, one of them inside a function."""
    g = _graph()
    g["rig.report.tables"].add("rig.report.verdict")
    g["rig.report.verdict"] = set(g["rig.report.verdict"]) | {"rig.report.tables"}
    assert frozenset({"rig.report.tables", "rig.report.verdict"}) in _cycles(g)
    assert _cycles({"a": {"b"}, "b": set()}) == []
