"""wget and scp as clients, sshd as their server kind, and `args:` (issue 26 items 2, 6):
argv builders, parsers on captured output (tests/data/wget, tests/data/scp), the sshd
config and key commands, and bad input (one line, exit 2, nothing created). Pure."""
from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
import yaml

from rig import cli
from rig.description.scenario import ClientSpec, ServerSpec
from rig.realization import netns
from rig.services import servers, tools
from rig.services.servers.sshd import CLIENT_KEY, HOST_KEY, KNOWN_HOSTS
from rig.services.tools import Job
from rig.services.tools.scp import DEFAULT_CIPHER, parse_scp
from rig.services.tools.wget import parse_wget, wget_seconds

DATA = Path(__file__).resolve().parent / "data"
SCEN = DATA / "scenarios/clients-small.yaml"


def _client(**kw) -> ClientSpec:
    return ClientSpec.of(**{"name": "c", "tool": "wget", "file": "f", **kw})


def _sshd_plan(workdir: Path) -> servers.ServerPlan:
    return servers.ServerPlan(ServerSpec(name="sshd", kind="sshd"), "rigab12-0s", "198.18.0.6",
                              {"ssh": 2232}, workdir, Path("/run/rig/rigab12/data"))


# --- wget -----------------------------------------------------------------------------

def test_wget_parse_captured_download():
    p = parse_wget((DATA / "wget/ok-300MB.txt").read_text(), 0)
    assert p.error is None and p.bytes == 300_000_000
    assert p.seconds == pytest.approx(0.3) and p.extra["http_code"] == 200


@pytest.mark.parametrize("name, rc, code, words", [
    ("http-404", 8, 404, "ERROR 404: File not found"),
    ("refused", 4, None, "failed: Connection refused"),
])
def test_wget_parse_captured_failures(name, rc, code, words):
    p = parse_wget((DATA / f"wget/{name}.txt").read_text(), rc)
    assert p.bytes is None and words in p.error and p.extra["http_code"] == code


def test_wget_parse_without_output_names_the_exit_code():
    assert parse_wget("", 4).error == "exit 4"


@pytest.mark.parametrize("text, s", [("0.3s", 0.3), ("12s", 12), ("1m 5s", 65),
                                     ("2h 3m", 7380), ("", None)])
def test_wget_durations(text, s):
    assert wget_seconds(text) == s


def test_wget_argv_http_and_https():
    w = tools.get("wget")
    job = Job(_client(), 1, url="http://198.18.0.6:8080/f", timeout_s=120)
    argv = w.argv(job)
    assert argv[0] == "wget" and argv[-3:] == ["-O", "/dev/null", "http://198.18.0.6:8080/f"]
    assert {"--no-config", "--no-hsts", "--tries=1", "--read-timeout=120"} <= set(argv)
    assert not any(a.startswith("--ca-certificate") for a in argv)
    assert "--no-check-certificate" not in argv
    tls = Job(_client(), 1, url="https://198.18.0.6:8443/f", tls="all", ca_file="/x/ca.pem")
    assert "--ca-certificate=/x/ca.pem" in w.argv(tls)
    assert w.env(job) == {"LC_ALL": "C"}
    assert w.env(Job(_client(env={"LC_ALL": "de_DE.UTF-8"}), 1))["LC_ALL"] == "de_DE.UTF-8"


# --- scp and sshd ---------------------------------------------------------------------

def test_scp_parse_captured_download_and_refusal():
    ok = parse_scp((DATA / "scp/v-ok.txt").read_text(), 0)
    assert ok.error is None and ok.bytes is None        # bytes: what the process wrote
    assert ok.extra == {"cipher": "aes256-gcm@openssh.com", "ssh_sent": 9480,
                        "ssh_received": 20017592, "ssh_seconds": 0.2}
    bad = parse_scp((DATA / "scp/v-refused.txt").read_text(), 255)
    assert bad.error == "ssh: connect to host 127.0.0.1 port 18822: Connection refused"


def test_scp_job_and_argv_use_only_the_run_keys(tmp_path):
    plan = _sshd_plan(tmp_path / "wan-sshd")
    scp = tools.get("scp")
    c = ClientSpec(name="s", tool="scp", server="sshd", file="f", protocol="ssh")
    from rig.description.scenario import FileSpec
    job = scp.job(c, 1, 0, server=plan, file=FileSpec(name="f", size=1 << 20),
                  iperf=("", 0), timeout_s=60)
    argv = scp.argv(job)
    assert job.url == "sftp://www-data@198.18.0.6:2232/f"
    assert argv[-2:] == ["www-data@198.18.0.6:/run/rig/rigab12/data/f", "/dev/null"]
    assert argv[argv.index("-P") + 1] == "2232" and argv[argv.index("-F") + 1] == "/dev/null"
    assert argv[argv.index("-i") + 1] == str(plan.workdir / CLIENT_KEY)
    assert f"UserKnownHostsFile={plan.workdir / KNOWN_HOSTS}" in argv
    assert {"StrictHostKeyChecking=yes", "BatchMode=yes", "GlobalKnownHostsFile=/dev/null"} \
        <= set(argv)
    assert argv[argv.index("-c") + 1] == DEFAULT_CIPHER == "aes256-gcm@openssh.com"
    chacha = Job(ClientSpec.of(name="s", tool="scp", cipher="chacha20-poly1305@openssh.com"), 1,
                 addr="a", port=1, relpath="/d/f", keys="/k")
    assert scp.argv(chacha)[scp.argv(chacha).index("-c") + 1] == "chacha20-poly1305@openssh.com"


def test_sshd_config_keys_and_argv(tmp_path):
    plan = _sshd_plan(tmp_path / "wan-sshd")
    kind = servers.get("sshd")
    keygen = kind.prepare_argv(plan)
    assert [a[0] for a in keygen] == ["ssh-keygen", "ssh-keygen"]
    assert [a[a.index("-f") + 1] for a in keygen] == [str(plan.workdir / HOST_KEY),
                                                      str(plan.workdir / CLIENT_KEY)]
    assert all(a[a.index("-C") + 1].startswith(f"{tmp_path.name}-sshd-") for a in keygen)
    assert {HOST_KEY, CLIENT_KEY} <= kind.private
    files = kind.files(plan)
    conf = files["sshd_config"]
    assert "ListenAddress 198.18.0.6:2232\n" in conf
    assert f"HostKey {plan.workdir / HOST_KEY}\n" in conf
    assert f"PidFile {plan.workdir / 'sshd.pid'}\n" in conf
    assert f"AuthorizedKeysFile {plan.workdir / CLIENT_KEY}.pub\n" in conf
    assert "ForceCommand internal-sftp -R -d /run/rig/rigab12/data\n" in conf
    assert "/etc/ssh" not in conf and "PasswordAuthentication no" in conf
    assert files[KNOWN_HOSTS].startswith("[198.18.0.6]:2232 <")      # `rig plan`: no key yet
    plan.workdir.mkdir()
    (plan.workdir / f"{HOST_KEY}.pub").write_text("ssh-ed25519 AAAAC3Nz rigab12-sshd-host\n")
    assert kind.files(plan)[KNOWN_HOSTS] == \
        "[198.18.0.6]:2232 ssh-ed25519 AAAAC3Nz rigab12-sshd-host\n"
    argv = kind.argv(plan)
    assert argv[:2] == ["setpriv", "--reuid=www-data"] and "/usr/sbin/sshd" in argv
    assert argv[-2:] == ["-f", str(plan.workdir / "sshd_config")] and "-D" in argv


# --- args: ----------------------------------------------------------------------------

def test_args_are_appended_to_any_client_and_before_scp_operands():
    curl = tools.get("curl")
    job = Job(_client(tool="curl", args=["--limit-rate", "1M"]), 1, url="http://a/f")
    assert curl.command(job) == curl.argv(job) + ["--limit-rate", "1M"]
    scp = tools.get("scp")
    sjob = Job(ClientSpec(name="s", tool="scp", args=["-l", "8000"]), 1, addr="a", port=1,
               relpath="/d/f", keys="/k")
    cmd = scp.command(sjob)
    assert cmd[-4:] == ["-l", "8000", "www-data@a:/d/f", "/dev/null"]
    assert tools.get("wget").command(Job(_client(), 1, url="u")) == \
        tools.get("wget").argv(Job(_client(), 1, url="u"))


def _plan(tmp_path: Path, edit) -> tuple[int, str, str, Path]:
    doc = yaml.safe_load(SCEN.read_text())
    edit(doc)
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(doc))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.main(["plan", str(p)])
            code = 0
        except SystemExit as e:
            code = int(e.code or 0)
    return code, out.getvalue(), err.getvalue(), p


def test_plan_prints_args_keygen_and_both_clients(tmp_path):
    code, out, err, _ = _plan(tmp_path, lambda d: None)
    assert code == 0, err
    # its copy kept in the run's downloads/ tmpfs, checksummed after the group
    assert "--progress=dot:giga -O /run/rig/rig0000/downloads/rig0000-wget-0 http://" in out
    assert "--no-dns-cache" in out
    assert "--ca-certificate=" in out and "ssh-keygen -q -t ed25519" in out
    assert "-c chacha20-poly1305@openssh.com" in out and "setpriv --reuid=www-data" in out


@pytest.mark.parametrize("client, change, expect", [
    (0, {"streams": 2}, "clients[0].streams: wget supports at most 1 stream(s)"),
    (0, {"cipher": "aes128-ctr"}, "clients[0].cipher: only for scp"),
    (1, {"tls": "all"}, "clients[1].tls: scp cannot use TLS mode all"),
    (0, {"tls": "control"}, "clients[0].tls: wget cannot use TLS mode control"),
    (0, {"page_checksum": False}, "clients[0].page_checksum: only for xrdcp"),
    (1, {"cipher": "blowfish"}, "clients[1].cipher: must be one of aes128-ctr"),
    (1, {"server": "nginx"}, "clients[1].server: scp cannot talk to a nginx server"),
    (0, {"server": "sshd"}, "clients[0].server: wget cannot talk to a sshd server"),
    (0, {"args": "--no-dns-cache"}, "clients[0].args: expected a list"),
    (0, {"args": ["-q", 5]}, "clients[0].args[1]: expected text"),
    (0, {"args": ["a\nb"]}, "clients[0].args[0]: expected text on one line"),
])
def test_bad_input_is_one_line_exit_2_nothing_created(tmp_path, monkeypatch, client, change,
                                                     expect):
    # a state folder of its own: the host's changes under any other run on the host
    state = tmp_path / "state"
    monkeypatch.setattr(netns, "STATE_DIR", state)
    code, out, err, p = _plan(tmp_path, lambda d: d["clients"][client].update(change))
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"rig: {p}: ") and expect in err, err
    assert "Traceback" not in err and out == ""
    assert not state.exists()
    assert sorted(x.name for x in tmp_path.iterdir()) == ["s.yaml"]
