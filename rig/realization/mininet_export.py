"""Print a Mininet `Topo` as JSON: run by Debian's /usr/bin/python3 (whose dist-packages
hold the `mininet` module), never imported by the rig.

    /usr/bin/python3 -I mininet_export.py FILE CLASS

Imports FILE (a user's Python file), builds CLASS() (a subclass of mininet.topo.Topo)
and prints one JSON object: {"hosts": [[name, opts]...], "switches": [[name, opts]...],
"links": [[node1, node2, key, info]...]}, with every option value a string, number,
boolean or null (a class, as Mininet's `cls=TCLink`, by its name). Only the Topo API is
used (`hosts()`, `switches()`, `nodeInfo()`, `links(withKeys=True, withInfo=True)`):
nothing of Mininet's runtime (no `Mininet()`, no mnexec, no Open vSwitch) runs here.

Exit 0 with the JSON on stdout; with one line on stderr: 2 when the file cannot be
imported, 4 when it names no such class, or the class is not a Topo or fails to build,
3 when the mininet module itself is missing. Standalone: imports nothing from the rig.
"""
import importlib.util
import json
import os
import sys
from typing import NoReturn


def _plain(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, type):
        return v.__name__
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    return repr(v)


def _fail(msg: str, code: int = 2) -> NoReturn:
    sys.stderr.write(" ".join(str(msg).split())[:300] + "\n")
    sys.exit(code)


def main(argv: list) -> None:
    if len(argv) != 3:
        _fail("usage: mininet_export.py FILE CLASS")
    path, cls_name = argv[1], argv[2]
    try:
        from mininet.topo import Topo
    except ImportError as e:
        _fail(f"the mininet module is missing ({e}): apt-get install mininet", 3)
    sys.path.insert(0, os.path.dirname(path) or ".")    # the user's own modules beside it
    spec = importlib.util.spec_from_file_location("rig_mininet_topo", path)
    if spec is None or spec.loader is None:
        _fail("not a Python file (name it *.py)")
    out = sys.stdout
    sys.stdout = sys.stderr          # what the user's code prints never mixes with the JSON
    try:
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    except BaseException as e:      # a broken user file (even sys.exit): one line, no traceback
        _fail(f"cannot import: {type(e).__name__}: {e}")
    cls = getattr(mod, cls_name, None)
    if cls is None:
        have = sorted(k for k, v in vars(mod).items()
                      if isinstance(v, type) and issubclass(v, Topo) and v is not Topo)
        _fail(f"no class {cls_name} (Topo subclasses there: {', '.join(have) or 'none'})", 4)
    if not (isinstance(cls, type) and issubclass(cls, Topo)):
        _fail(f"{cls_name} is not a subclass of mininet.topo.Topo", 4)
    try:
        topo = cls()
        doc = {"hosts": [[h, _plain(topo.nodeInfo(h))] for h in topo.hosts(sort=False)],
               "switches": [[s, _plain(topo.nodeInfo(s))] for s in topo.switches(sort=False)],
               "links": [[a, b, _plain(k), _plain(info)]
                         for a, b, k, info in topo.links(withKeys=True, withInfo=True)]}
    except BaseException as e:
        _fail(f"{cls_name}() failed: {type(e).__name__}: {e}", 4)
    out.write(json.dumps(doc) + "\n")


if __name__ == "__main__":
    main(sys.argv)
