"""A client tool is one module: registering it is all the scenario schema, `rig plan`,
the run's job builder, row builder and `rig doctor` need."""
from pathlib import Path

import pytest

from rig.orchestration import hostinfo, plan, transfer

from rig.description import scenario, steps
from rig.errors import InputError, RigError
from rig.services import servers, tools
from rig.services.tools import Capabilities, ClientTool, Column, Job, Parsed

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def wget():
    @tools.register
    class Wget(ClientTool):
        name = "wget-test"
        caps = Capabilities(servers=frozenset({"nginx"}), protocols=("http",),
                            timed_by_written_bytes=True)
        version_argv = ["wget", "--version"]
        columns = (Column("page_checksum", int),)

        def argv(self, job: Job) -> list[str]:
            return ["wget", "-q", "-O", job.dest, job.url]

        def parse(self, stdout, stderr, returncode, job) -> Parsed:
            return Parsed(bytes=None, error=None if returncode == 0 else "wget failed")

        def row_fields(self, job, env):
            return {"page_checksum": 7}
    yield Wget
    tools.unregister("wget-test")


def _scenario(tool: str) -> scenario.Scenario:
    return scenario.parse({
        "name": "t", "paths": [{"name": "p", "rtt": ["10ms"]}],
        "files": [{"name": "f", "size": "1MiB"}],
        "servers": [{"name": "web", "kind": "nginx"}],
        "clients": [{"name": "w", "tool": tool, "file": "f"}]}, source="t.yaml")


def test_a_registered_tool_is_usable_everywhere(wget):
    sc = _scenario("wget-test")
    assert sc.clients[0].protocol == "http" and sc.clients[0].server == "web"
    lines = plan.plan_lines(sc)
    assert any("wget -q -O /dev/null http://198.18.0.6:8080/f" in ln for ln in lines), lines
    g = steps.groups(sc)[0]
    plans = {"web": [servers.ServerPlan(sc.servers[0], "ns", "10.0.0.1",
                                        servers.default_ports("nginx", 0), Path("/w"), Path("/d"))]}
    job = transfer.build_jobs(sc, g, plans, "10.0.0.1", 5201)[0]
    assert job.url == "http://10.0.0.1:8080/f" and job.file_bytes == 1 << 20
    assert hostinfo.version_argvs()["wget-test"] == ["wget", "--version"]
    o = transfer.Outcome(job, ["wget"], {}, None, 0.0, 0.0, error="boom")
    assert transfer.rows([o], {})[0].page_checksum == 7
    # a column the table lacks is an error naming it, not a value dropped unseen
    wget.row_fields = lambda self, job, env: {"page_cheksum": 7}
    with pytest.raises(RigError, match="tool wget-test fills transfers columns that do not "
                                       "exist: page_cheksum"):
        transfer.rows([o], {})


def test_unregistered_tool_is_refused_with_the_registry_in_the_message():
    with pytest.raises(InputError, match=r"clients\[0\]\.tool: must be one of .*xrdcp"):
        _scenario("wget-test")


def test_capabilities_drive_validation():
    d = {"name": "t", "paths": [{"name": "p"}], "files": [{"name": "f", "size": "1MiB"}],
         "servers": [{"name": "x", "kind": "xrootd"}],
         "clients": [{"name": "c", "tool": "curl", "file": "f", "protocol": "root"}]}
    with pytest.raises(InputError, match=r"clients\[0\]\.protocol: curl here speaks http"):
        scenario.parse(d, source="t.yaml")
    d["clients"] = [{"name": "c", "tool": "davix-get", "file": "f", "buffer": "1MiB"}]
    with pytest.raises(InputError, match=r"clients\[0\]\.buffer: only for fdt, iperf3"):
        scenario.parse(d, source="t.yaml")


def test_every_tool_and_server_kind_declares_itself():
    assert set(tools.names()) >= {"xrdcp", "davix-get", "curl", "iperf3", "fdt"}
    assert set(servers.kinds()) >= {"xrootd", "nginx", "fdt"}
    for t in tools.all_tools():
        assert t.caps.max_streams >= 1
        assert t.caps.uses_iperf_servers or t.caps.servers <= set(servers.kinds()), t.name
        for k in t.caps.servers:
            assert set(t.caps.protocols) & set(servers.get(k).ports) or k == "fdt", (t.name, k)
    for k in servers.all_kinds():
        # an external endpoint is not started by the rig: it listens on nothing of its own
        assert (k.ports or k.kind == "external") and all(1 <= p < 65536
                                                         for p in k.ports.values())
