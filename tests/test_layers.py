"""Data flows one way: measurement never imports plotting; reports never import the
code that builds or runs anything."""
import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "rig"
MEASUREMENT = ["rig.orchestrate", "rig.transfer", "rig.validate", "rig.netns", "rig.proc",
               "rig.services.servers", "rig.services.servers.start", "rig.services.tools", "rig.emul.userspace",
               "rig.emul.netem", "rig.results", "rig.cli", "rig.netcmd", "rig.clean", "rig.plan"]


def test_measurement_runs_with_matplotlib_unavailable():
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            + "".join(f"import {m}\n" for m in MEASUREMENT)
            + "assert not [m for m in sys.modules if m.startswith('matplotlib') and sys.modules[m]]\n"
            + "print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            out.add(base)
            out |= {f"{base}.{a.name}" if base.endswith(".") is False else base + a.name
                    for a in node.names}
    return out


def test_no_measurement_module_imports_plotting_at_module_level():
    for f in PKG.rglob("*.py"):
        if "report" in f.parts or f.name == "compare.py":
            continue
        bad = {i for i in _imports(f) if "matplotlib" in i}
        assert not bad, f"{f}: {bad}"


def test_reports_do_not_import_realization_or_services():
    forbidden = ("netns", "proc", "services", "emul", "orchestrate", "transfer", "tuning")
    for f in list((PKG / "report").rglob("*.py")) + [PKG / "compare.py"]:
        for i in _imports(f):
            parts = i.replace("rig.", ".").strip(".").split(".")
            assert not (set(parts) & set(forbidden)), f"{f} imports {i}"
