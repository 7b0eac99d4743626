"""`rig net up` owners and names, and what `rig clean` may remove (issue #12).

Other users may have live paths on the host running these tests: every test looks only
at its own names and prefixes, never runs `rig clean --force` (force is tested through
`clean.clean(prefixes=...)`, restricted to the test's own prefix), and asserts that
nothing of its own remains.
"""
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rig.orchestration import clean, netcmd

from rig.realization import netns

from rig.process import owner, proc

from rig.description import scenario, schema
from rig.errors import InputError

REPO = Path(__file__).resolve().parent.parent
RIG = [sys.executable, "-m", "rig"]
UNIQUE = f"hc{os.getpid()}"


def rig(*args, env=None, timeout=60):
    return subprocess.run([*RIG, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env=env)


def _mine(prefix: str) -> dict:
    """Everything of `prefix` still on the host (empty lists and False: nothing)."""
    leases = netns.STATE_DIR / "leases"
    return {"ns": [n for n in netns.list_namespaces() if n.startswith(prefix + "-")]
            + [d.name for d in netns.ETC_NETNS.glob(f"{prefix}-*")],
            "state": (netns.STATE_DIR / f"{prefix}.json").exists(),
            "dir": (netns.STATE_DIR / prefix).exists(),
            "lease": leases.is_dir() and any(f.read_text().strip() == prefix
                                             for f in leases.iterdir())}


NOTHING = {"ns": [], "state": False, "dir": False, "lease": False}


def _states_named(name: str) -> dict[str, dict]:
    return {p: st for p, st in netns.read_states().items()
            if st.get("kind") == "net" and st.get("name") == name}


def _ping_ms(info: dict) -> float:
    from rig.orchestration.pathcheck import parse_ping
    r = proc.run(["ping", "-n", "-q", "-c", "10", "-i", "0.05", info["server_addr"]],
                 netns=info["client_ns"], timeout=20)
    assert r.returncode == 0, r.stdout + r.stderr
    return parse_ping(r.stdout).mean_ms


# --- pure: owners, verdicts, options -------------------------------------------------

def test_parse_stat_survives_spaces_and_parens_in_the_name():
    line = "4242 (a b) c) S 17 4242 4242 0 -1 4194560 1 0 0 0 3 4 0 0 20 0 1 0 987654 1 2"
    i = owner.parse_stat(line)
    assert (i.pid, i.comm, i.state, i.ppid, i.start) == (4242, "a b) c", "S", 17, 987654)


def test_a_reused_pid_is_not_the_owner():
    me = owner.start_time(os.getpid())
    assert me is not None and owner.alive(os.getpid(), me)
    assert not owner.alive(os.getpid(), me + 1)      # same pid, another process
    p = subprocess.Popen(["true"])
    p.wait(timeout=10)
    assert not owner.alive(p.pid, None)               # exited and reaped


def test_judge_keeps_live_and_legacy_owners_and_drops_dead_ones():
    me = owner.record(os.getpid())
    live = dict(kind="net", name="lab", **me)
    in_use, why, hint = clean.judge(live)
    assert in_use and why == f"net up 'lab', owner pid {os.getpid()} ({me['owner_comm']}) alive"
    assert hint == "use rig net down --name lab, or rig clean --force"
    assert not clean.judge(dict(live, owner_start=me["owner_start"] + 1))[0]
    assert clean.judge({"kind": "net", "name": "old", "pid": 1})[0]     # no owner recorded
    assert not clean.judge(None)[0]
    run = {"kind": "run", "pid": os.getpid(), "pid_start": me["owner_start"]}
    assert clean.judge(run)[0] and not clean.judge(dict(run, pid_start=1))[0]


def _scenario_error(tmp_path, **path) -> str:
    doc = (REPO / "scenarios/quick.yaml").read_text()
    import yaml
    d = yaml.safe_load(doc)
    d["paths"] = [dict({"name": "wan", "rtt": "10ms"}, **path)]
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(d))
    with pytest.raises(InputError) as e:
        scenario.load(f)
    return e.value.message


@pytest.mark.parametrize("opt,value", [("rtt", "100s"), ("loss", "100%"), ("rtt", "1parsec"),
                                        ("jitter", "20ms"), ("rate", "0gbit"),
                                        ("backend", "tcp"), ("name", "a/b")])
def test_net_up_rejects_what_a_scenario_rejects_with_the_same_message(tmp_path, opt, value):
    kw = {"name": "x", "rtt": "10ms", opt: value}
    with pytest.raises(InputError) as e:
        netcmd.parse_options(kw.pop("name"), **kw)
    assert e.value.key == f"--{opt}" and e.value.value == value
    assert e.value.message == _scenario_error(tmp_path, **{opt: value})


def test_net_up_values_are_the_scenario_values():
    name, prof, backend = netcmd.parse_options("lab", rtt="60ms", jitter="2ms", loss="0.5%",
                                               rate="1gbit", backend="none")
    spec = scenario.parse_path(schema.Ctx("x"), {"name": "lab", "rtt": "60ms", "jitter": "2ms",
                                                 "loss": "0.5%", "rate": "1gbit"})
    assert (name, backend) == ("lab", "none")
    assert prof == spec.profile(0.060)
    assert prof.rtt_s == pytest.approx(0.060) and prof.reverse.loss == pytest.approx(0.005)


# --- CLI misuse: one line, exit 2, nothing created ------------------------------------

BAD = [
    ["net", "up", "--name", "a/b"],
    ["net", "up", "--name", "x;rm -rf /"],
    ["net", "up", "--name", "$(id)"],
    ["net", "up", "--name", "../etc"],
    ["net", "up", "--name", ""],
    ["net", "up", "--name", "n" * 41],
    ["net", "up", "--rtt", "10ms"],                               # no --name
    ["net", "up", "--name", "x", "--rtt", "100s"],
    ["net", "up", "--name", "x", "--rtt", "60"],                  # no unit
    ["net", "up", "--name", "x", "--rtt=-5ms"],
    ["net", "up", "--name", "x", "--rtt", "fast"],
    ["net", "up", "--name", "x", "--rtt", "10ms", "--jitter", "20ms"],
    ["net", "up", "--name", "x", "--jitter", "1parsec"],
    ["net", "up", "--name", "x", "--loss", "100%"],
    ["net", "up", "--name", "x", "--loss", "150%"],
    ["net", "up", "--name", "x", "--loss=-1%"],
    ["net", "up", "--name", "x", "--rate", "0gbit"],
    ["net", "up", "--name", "x", "--rate", "fast"],
    ["net", "up", "--name", "x", "--rate", "1000"],               # no unit
    ["net", "up", "--name", "x", "--backend", "tcp"],
    ["net", "up", "--name", "x", "--owner-pid", "abc"],
    ["net", "up", "--name", "x", "--owner-pid", "999999999"],
    ["net", "up", "--name", "x", "--bogus"],
    ["net", "up", "--name", "x", "--reverse-loss", "100%"],
    ["net", "up", "--name", "x", "--reverse-loss", "lots"],
    ["net", "up", "--name", "x", "--rmem", "12"],                 # no unit
    ["net", "up", "--name", "x", "--wmem", "3GiB"],               # above the limit (2 GiB)
    ["net", "up", "--name", "x", "--cc", "vegas"],
    ["net", "up", "--name", "x", "--mtu", "100"],
    ["net", "up", "--name", "x", "--tuning", "/nonexistent/t.yaml"],
    ["net", "down", "--name", "a/b"],
    ["net", "down"],
]


@pytest.mark.netns       # as root, so a bug would really build something
@pytest.mark.parametrize("argv", BAD, ids=lambda a: " ".join(a)[:40])
def test_bad_net_arguments_are_one_line_exit_2_and_create_nothing(tmp_path, argv):
    state = tmp_path / "state"      # a private state dir: nothing of this run can hide
    before = set(netns.list_namespaces())
    r = rig(*argv, env=dict(os.environ, RIG_STATE_DIR=str(state)))
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.startswith("rig: ") and r.stderr.count("\n") == 1, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert not state.exists() or not [f for f in state.rglob("*") if f.name != "registry.lock"]
    # any new namespace must belong to someone else's state (in the shared state dir)
    new = set(netns.list_namespaces()) - before
    assert all((netns.STATE_DIR / f"{netns.NS_RE.match(n).group(1)}.json").exists()
               for n in new), new


# --- namespace tier --------------------------------------------------------------------

@pytest.mark.netns
def test_clean_leaves_a_live_net_up_path_alone_and_force_removes_it():
    name = f"{UNIQUE}-live"
    r = rig("net", "up", "--name", name, "--rtt", "20ms")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout.strip().splitlines()[-1])
    prefix = info["prefix"]
    sleeper = None
    try:
        st = netns.read_states()[prefix]
        assert st["owner_pid"] == os.getpid()        # the process that ran rig net up
        sleeper = subprocess.Popen(["ip", "netns", "exec", info["client_ns"], "sleep", "120"])
        time.sleep(0.3)
        assert sleeper.poll() is None
        r = rig("clean", timeout=120)
        assert r.returncode == 0, r.stderr
        line = (f"left {prefix} (net up '{name}', owner pid {os.getpid()} "
                f"({st['owner_comm']}) alive): use rig net down --name {name}, "
                f"or rig clean --force")
        assert line in r.stderr.splitlines(), r.stderr
        assert sleeper.poll() is None                 # the process in the path still runs
        assert len(_mine(prefix)["ns"]) == 6          # 3 namespaces + their resolv.conf dirs
        assert _ping_ms(info) == pytest.approx(20.0, rel=0.15)   # and the path still works
        said = []
        res = clean.clean(force=True, prefixes={prefix}, say=said.append)
        assert res.removed == 3 and res.left == []
        assert any(s.startswith(f"removing {prefix} although in use") for s in said), said
        assert sleeper.wait(timeout=20) == -9
        assert _mine(prefix) == NOTHING
        assert not _states_named(name)
    finally:
        _give_back(sleeper, name)
    assert _mine(prefix) == NOTHING


def _give_back(sleeper: subprocess.Popen | None, name: str) -> None:
    """Whatever a test failed to remove: its sleeper, its path (by its own name)."""
    if sleeper and sleeper.poll() is None:
        sleeper.kill()
        sleeper.wait(timeout=10)
    if _states_named(name):
        rig("net", "down", "--name", name)


@pytest.mark.netns
def test_clean_removes_a_net_up_whose_owner_is_gone():
    name = f"{UNIQUE}-dead"
    # the owner is this bash: it runs rig net up, then exits (a closed terminal, a
    # finished script)
    sh = subprocess.run(["bash", "-c", '"$@"; echo "owner=$$"', "bash",
                         *RIG, "net", "up", "--name", name, "--rtt", "5ms"],
                        capture_output=True, text=True, timeout=60, cwd=REPO)
    assert sh.returncode == 0, sh.stderr
    out = sh.stdout.strip().splitlines()
    info, bash_pid = json.loads(out[-2]), int(out[-1].split("=")[1])
    prefix = info["prefix"]
    sleeper = None
    try:
        st = netns.read_states()[prefix]
        assert st["owner_pid"] == bash_pid and st["owner_comm"] == "bash"
        assert not owner.alive(bash_pid, st["owner_start"])
        sleeper = subprocess.Popen(["ip", "netns", "exec", info["server_ns"], "sleep", "120"])
        time.sleep(0.3)
        r = rig("clean", timeout=120)
        assert r.returncode == 0, r.stderr
        assert f"removing {prefix} (net up '{name}', owner pid {bash_pid} (bash) gone)" \
            in r.stderr.splitlines(), r.stderr
        assert f"deleted namespace {info['server_ns']} (killed 1 process(es) inside: sleep)" \
            in r.stderr.splitlines(), r.stderr
        assert sleeper.wait(timeout=20) == -9
        assert _mine(prefix) == NOTHING
        assert not _states_named(name)
    finally:
        _give_back(sleeper, name)
    assert _mine(prefix) == NOTHING


@pytest.mark.netns
def test_concurrent_net_up_of_one_name_builds_exactly_one_path():
    name, n = f"{UNIQUE}-dup", 6
    leases = netns.STATE_DIR / "leases"

    def holders() -> set[str]:
        return {f.read_text().strip() for f in leases.iterdir()} if leases.is_dir() else set()

    ns_before, leases_before = set(netns.list_namespaces()), holders()
    ps = [subprocess.Popen([*RIG, "net", "up", "--name", name, "--rtt", "1ms",
                            "--backend", "none"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, cwd=REPO) for _ in range(n)]
    outs = [(p.wait(timeout=120), *p.communicate(timeout=10)) for p in ps]
    try:
        won = [o for o in outs if o[0] == 0]
        lost = [o for o in outs if o[0] != 0]
        assert len(won) == 1, outs
        assert all(rc == 2 and err.count("\n") == 1 and err.startswith(
            "rig: rig net up: --name: a path of that name is up (") for rc, _, err in lost), lost
        prefix = json.loads(won[0][1])["prefix"]
        assert list(_states_named(name)) == [prefix]
        # nothing else appeared that no state file explains, or that carries this name
        states = netns.read_states()

        def foreign(p: str) -> bool:
            return p in states and states[p].get("name") != name
        new_ns = {x for x in set(netns.list_namespaces()) - ns_before
                  if not foreign(netns.NS_RE.match(x).group(1))}
        assert new_ns == {f"{prefix}-0c", f"{prefix}-0r", f"{prefix}-0s"}
        assert {h for h in holders() - leases_before if not foreign(h)} == {prefix}
    finally:
        r = rig("net", "down", "--name", name)
    assert r.returncode == 0, r.stderr
    assert _mine(prefix) == NOTHING
    assert not _states_named(name)
    r = rig("net", "down", "--name", name)            # gone: a second down says so
    assert r.returncode == 1 and "no path named" in r.stderr


# --- a path made from a script (issue 31.1) ------------------------------------------

# The script captures the JSON in a `$( )` (with 2>/dev/null, so bash keeps a subshell
# between it and the rig: the subshell dies as soon as the JSON is captured), prints its
# own pid and the JSON, then waits for a line on stdin before it exits.
SCRIPT = ('j=$({wrap} "$@" net up --name {name} --rtt 5ms --backend none 2>/dev/null) '
          '|| exit 3; echo "$$"; echo "$j"; read -r _')
WRAPS = {"plain": "", "sudo": "sudo", "nohup": "nohup", "setsid": "setsid",
         "setsid-fork": "setsid -f", "sudo-timeout": "timeout 120 sudo"}


@pytest.mark.netns
@pytest.mark.parametrize("wrap", list(WRAPS))
def test_a_path_made_in_a_script_lives_as_long_as_the_script(wrap):
    name = f"{UNIQUE}-s{list(WRAPS).index(wrap)}"
    # timeout: a deadline for the script, should the rig or the script hang
    sh = subprocess.Popen(["timeout", "300", "bash", "-c",
                           SCRIPT.format(wrap=WRAPS[wrap], name=name), "bash",
                           *RIG], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, cwd=REPO)
    prefix = None
    try:
        first = sh.stdout.readline()
        assert first.strip().isdigit(), (first, sh.poll(), sh.stderr.read())
        script_pid = int(first)
        info = json.loads(sh.stdout.readline())
        prefix = info["prefix"]
        st = netns.read_states()[prefix]
        assert (st["owner_pid"], st["owner_comm"]) == (script_pid, "bash"), st
        assert owner.alive(st["owner_pid"], st["owner_start"])
        said: list[str] = []
        res = clean.clean(prefixes={prefix}, say=said.append)   # what `rig clean` runs
        assert res.removed == 0 and len(res.left) == 1, said
        assert said == [f"left {prefix} (net up '{name}', owner pid {script_pid} (bash) "
                        f"alive): use rig net down --name {name}, or rig clean --force"]
        assert len(_mine(prefix)["ns"]) == 6
        sh.stdin.write("done\n")
        sh.stdin.close()
        assert sh.wait(timeout=30) == 0, sh.stderr.read()
        said.clear()
        res = clean.clean(prefixes={prefix}, say=said.append)
        assert res.removed == 3 and res.left == [], said     # its 3 namespaces
        assert said[0] == f"removing {prefix} (net up '{name}', owner pid {script_pid} (bash) gone)"
        assert _mine(prefix) == NOTHING and not _states_named(name)
    finally:
        if sh.poll() is None:
            sh.kill()
            sh.wait(timeout=10)
        _give_back(None, name)
    assert prefix is None or _mine(prefix) == NOTHING


@pytest.mark.netns
def test_a_path_made_at_a_terminal_by_a_forking_setsid_belongs_to_the_terminal_s_shell(
        tmp_path):
    # `setsid -f rig net up ... > FILE` typed at a terminal: the rig is orphaned (PID 1
    # adopts it) and its stdout is a file, so the terminal's session leader owns the path
    name, out = f"{UNIQUE}-tty", tmp_path / "up.json"
    inner = (f'echo "pid=$$"; setsid -f "$@" net up --name {name} --rtt 5ms --backend none '
             f'>{out} 2>/dev/null; for i in $(seq 600); do [ -s {out} ] && break; sleep 0.1; '
             'done; echo ready; read -r _')
    # script(1) takes a string and runs it with $SHELL, or /bin/sh when SHELL is unset (as in
    # CI): dash then forks bash instead of exec'ing it, and dash leads the terminal's session
    cmd = "exec " + shlex.join(["bash", "-c", inner, "bash", *RIG])
    sh = subprocess.Popen(["timeout", "300", "script", "-qec", cmd, "/dev/null"],
                          stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    prefix = None
    try:
        lines: list[str] = []
        while not lines or lines[-1] != "ready":
            line = sh.stdout.readline()
            assert line, (lines, sh.stderr.read())
            lines.append(line.decode().strip())
        shell = int(next(x for x in lines if x.startswith("pid="))[4:])
        stat = Path(f"/proc/{shell}/stat").read_text()
        leader = int(stat[stat.rindex(")") + 2:].split()[3])     # field 6: the session id
        prefix = json.loads(out.read_text())["prefix"]
        st = netns.read_states()[prefix]
        assert st["owner_pid"] == leader and st["owner_how"] in ("terminal", "parent"), st
        said: list[str] = []
        assert clean.clean(prefixes={prefix}, say=said.append).left == [prefix], said
        assert len(_mine(prefix)["ns"]) == 6
        sh.stdin.write(b"done\n")
        sh.stdin.close()
        assert sh.wait(timeout=30) == 0
        deadline = time.monotonic() + 10
        while owner.alive(st["owner_pid"], st["owner_start"]) and time.monotonic() < deadline:
            time.sleep(0.1)
        said.clear()
        assert clean.clean(prefixes={prefix}, say=said.append).removed == 3, said
        assert _mine(prefix) == NOTHING and not _states_named(name)
    finally:
        if sh.poll() is None:
            sh.kill()
            sh.wait(timeout=10)
        _give_back(None, name)
