"""Issue 25, item 2: a client tool with its own options, a server kind and an emulation
backend are each one module. Here each is registered in-process, as its module would at
import, and the scenario schema, `rig plan`, the run's job and row builders, `rig doctor`
and the backend factory all take it without a change elsewhere.

The last test drops the three as files into rig/ and runs `rig plan` in a fresh process:
what it prints comes from those three files and nothing else."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rig.description import kinds, scenario, schema as S, steps
from rig.errors import InputError
from rig.orchestration import hostinfo, plan, transfer
from rig.realization.emul import choose, registry as backends
from rig.services import servers, tools
from rig.services.servers import ServerKind, ServerPlan
from rig.services.tools import Capabilities, ClientTool, Column, Job, Parsed

REPO = Path(__file__).resolve().parent.parent


# --- the three modules, as their files would hold them ------------------------------

@dataclass(frozen=True)
class GetterOptions:
    """getter-test's own client keys."""
    bwlimit: float | None = S.spec(S.optional(S.rate), None)
    retries: int = S.spec(S.integer(0, 9), 2)


class Getter(ClientTool):
    name = "getter-test"
    caps = Capabilities(servers=frozenset({"httpd-test"}), protocols=("http",),
                        timed_by_written_bytes=True)
    options = GetterOptions
    columns = (Column("page_checksum", int),)
    version_argv = ["getter", "--version"]

    def checked(self, ctx: Any, d: dict[str, Any]) -> dict[str, Any]:
        if d["retries"] > 5 and d["bwlimit"] is None:
            raise ctx.child("retries").error("more than 5 retries need a bwlimit", d["retries"])
        return super().checked(ctx, d)

    def argv(self, job: Job) -> list[str]:
        o: GetterOptions = job.client.options
        bw = ["--bwlimit", f"{o.bwlimit:g}"] if o.bwlimit else []
        return ["getter", "--retries", str(o.retries), *bw, job.url, job.dest]

    def parse(self, stdout: str, stderr: str, returncode: int, job: Job) -> Parsed:
        return Parsed(bytes=None, error=None if returncode == 0 else "getter failed")

    def row_fields(self, job: Job, env: dict[str, str]) -> dict:
        return {"page_checksum": 0}


class Httpd(ServerKind):
    kind = "httpd-test"
    ports = {"http": 8180}
    version_argv = ["httpd-test", "-v"]
    settings = {"keepalive": True}      # its own scenario key, with its default

    def files(self, p: ServerPlan) -> dict[str, str]:
        on = "on" if self.setting(p, "keepalive") else "off"
        return {"httpd.conf": f"root {p.datadir}\nlisten {p.addr}:{p.ports['http']}\n"
                              f"keepalive {on}\n"}

    def argv(self, p: ServerPlan) -> list[str]:
        return ["httpd-test", "-f", str(p.workdir / "httpd.conf")]


class Delayline:
    name = "delayline-test"
    auto_rank = None            # never picked by auto
    auto_note = ""
    needs = "a delay line"
    doctor_key = "delayline"
    takes_options = False

    @staticmethod
    def usable() -> bool:
        return True

    def plan(self, site: Any, profile: Any) -> list[list[str]]:
        return [["delayline", "--ns", site.router_ns,
                 "--delay", f"{profile.forward.delay_s * 1e3:g}ms"]]


DOC = {"name": "t",
       "paths": [{"name": "p", "rtt": ["10ms", "40ms"], "backend": "delayline-test"}],
       "files": [{"name": "f", "size": "1MiB"}],
       "servers": [{"name": "web", "kind": "httpd-test", "keepalive": False}],
       "clients": [{"name": "g", "tool": "getter-test", "file": "f", "bwlimit": "100mbit",
                    "retries": 3}]}


@pytest.fixture
def extended():
    tools.register(Getter)
    servers.register(Httpd)
    backends.register(Delayline)
    try:
        yield
    finally:
        tools.unregister(Getter.name)
        servers.unregister(Httpd.kind)
        backends.unregister(Delayline.name)


def test_a_new_tool_server_kind_and_backend_work_everywhere(extended):
    sc = scenario.parse(DOC, source="t.yaml")
    c = sc.clients[0]
    assert c.options == GetterOptions(bwlimit=100e6, retries=3)
    assert (c.server, c.protocol, sc.paths[0].backend) == ("web", "http", "delayline-test")
    lines = plan.plan_lines(sc)
    text = "\n".join(lines)
    assert "getter --retries 3 --bwlimit 1e+08 http://198.18.0.6:8180/f /dev/null" in text
    assert "httpd-test -f " in text and "# backend delayline-test" in text
    assert "delayline --ns " in text and "--delay 20ms" in text and "--delay 5ms" in text
    g = steps.groups(sc)[0]
    plans = {"web": [ServerPlan(sc.servers[0], "ns", "10.0.0.1",
                                servers.default_ports("httpd-test", 0), Path("/w"), Path("/d"))]}
    job = transfer.build_jobs(sc, g, plans, "10.0.0.1", 5201)[0]
    assert job.url == "http://10.0.0.1:8180/f"
    assert sc.servers[0].settings == {"keepalive": False}
    assert "keepalive off" in servers.server_files(plans["web"][0])["httpd.conf"]
    o = transfer.Outcome(job, ["getter"], {}, None, 0.0, 0.0, error="boom")
    assert transfer.rows([o], {})[0].page_checksum == 0
    assert hostinfo.version_argvs()["getter-test"] == ["getter", "--version"]
    assert isinstance(choose.make_backend("delayline-test"), Delayline)
    assert backends.auto_choice({"delayline-test": True}) is None   # not auto's


def test_its_options_are_its_own_and_checked_in_one_line(extended):
    def err(**client: Any) -> str:
        d = dict(DOC, clients=[{**DOC["clients"][0], **client}])
        with pytest.raises(InputError) as e:
            scenario.parse(d, source="t.yaml")
        return str(e.value)
    assert err(bwlimit="fast").startswith("t.yaml: clients[0].bwlimit: ")
    assert err(retries=7, bwlimit=None) == \
        "t.yaml: clients[0].retries: more than 5 retries need a bwlimit (got 7)"
    assert err(page_checksum=True) == \
        "t.yaml: clients[0].page_checksum: only for xrdcp (got True)"
    d = dict(DOC, clients=[{"name": "c", "tool": "xrdcp", "file": "f", "retries": 1}],
             servers=[{"name": "x", "kind": "xrootd"}])
    with pytest.raises(InputError, match=r"clients\[0\]\.retries: only for getter-test"):
        scenario.parse(d, source="t.yaml")
    d = dict(DOC, servers=[{"name": "web", "kind": "nginx", "keepalive": True}])
    with pytest.raises(InputError, match=r"servers\[0\]\.keepalive: a nginx server has no "
                                         r"keepalive setting \(has it: httpd-test\)"):
        scenario.parse(d, source="t.yaml")


def test_a_shared_key_must_be_one_declaration(extended):
    @dataclass(frozen=True)
    class Other:
        buffer: int | None = S.spec(S.optional(S.size), None)   # not tools.BUFFER
    odd = type("Odd", (Getter,), {"name": "odd-test", "options": Other})
    with pytest.raises(ValueError, match="client option 'buffer' of odd-test differs"):
        tools.register(odd)
    assert "odd-test" not in kinds.CLIENTS.names() and "odd-test" not in tools.names()

    @dataclass(frozen=True)
    class Needy:
        level: int = S.spec(S.integer(0, 3))                      # no default
    needy = type("Needy", (Getter,), {"name": "needy-test", "options": Needy})
    with pytest.raises(ValueError, match="client option 'level' of needy-test needs a default"):
        tools.register(needy)


def test_without_them_nothing_of_theirs_is_known():
    assert "getter-test" not in kinds.CLIENTS.names()
    with pytest.raises(InputError, match=r"paths\[0\]\.backend: must be one of auto, netem, "
                                         r"userspace, none \(got 'delayline-test'\)"):
        scenario.parse(DOC, source="t.yaml")


def test_every_declared_column_is_a_typed_transfers_column():
    from rig.results.store import TransferRow
    types = {f.name: f.type for f in dataclasses.fields(TransferRow)}
    for t in tools.all_tools():
        for col in t.columns:
            assert col.name in types, (t.name, col.name)
            assert col.type.__name__ in str(types[col.name]), (t.name, col, types[col.name])


TOOL_FILE = '''"""A tool dropped in by tests/test_extension.py."""
from __future__ import annotations
from dataclasses import dataclass
from rig.description import schema as S
from rig.services.tools import Capabilities, ClientTool, register

@dataclass(frozen=True)
class GetterOptions:
    retries: int = S.spec(S.integer(0, 9), 2)

@register
class Getter(ClientTool):
    name = "getter-test"
    caps = Capabilities(servers=frozenset({"httpd-test"}), protocols=("http",))
    options = GetterOptions

    def argv(self, job):
        return ["getter", "--retries", str(job.client.options.retries), job.url]
'''
SERVER_FILE = '''"""A server kind dropped in by tests/test_extension.py."""
from rig.services.servers import ServerKind, register

@register
class Httpd(ServerKind):
    kind = "httpd-test"
    ports = {"http": 8180}

    def argv(self, p):
        return ["httpd-test", str(p.workdir)]
'''
BACKEND_FILE = '''"""A backend dropped in by tests/test_extension.py."""
from rig.realization.emul import registry

@registry.register
class Delayline:
    name = "delayline-test"
    auto_rank = None
    auto_note = ""
    needs = ""
    doctor_key = ""
    takes_options = False

    @staticmethod
    def usable():
        return True

    def plan(self, site, profile):
        return [["delayline", site.router_ns]]
'''


@pytest.mark.slow
def test_each_is_one_file_in_rig(tmp_path: Path):
    """Three new files, nothing else changed: `rig plan` uses all three."""
    files = {REPO / "rig/services/tools/zz_getter_test.py": TOOL_FILE,
             REPO / "rig/services/servers/zz_httpd_test.py": SERVER_FILE,
             REPO / "rig/realization/emul/zz_delayline_test.py": BACKEND_FILE}
    y = tmp_path / "t.yaml"
    y.write_text("name: t\npaths: [{name: p, rtt: [10ms], backend: delayline-test}]\n"
                 "files: [{name: f, size: 1MiB}]\nservers: [{name: web, kind: httpd-test}]\n"
                 "clients: [{name: g, tool: getter-test, file: f, retries: 4}]\n")
    try:
        for f, text in files.items():
            f.write_text(text)
        r = subprocess.run([sys.executable, "-m", "rig", "plan", str(y)], capture_output=True,
                           text=True, timeout=120, cwd=REPO)
    finally:
        for f in files:
            f.unlink(missing_ok=True)
    assert r.returncode == 0, r.stderr
    assert "getter --retries 4 http://" in r.stdout
    assert "httpd-test " in r.stdout and "# backend delayline-test" in r.stdout
