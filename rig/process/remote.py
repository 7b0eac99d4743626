"""Remote hosts for the process layer: how to reach a host over SSH, and the small agent
that runs one argv there with the local contract (new session, deadline, TERM -> grace ->
KILL of the group, exit code, CPU of the tree, bytes written).

Why OpenSSH with a ControlMaster rather than asyncssh: the ssh client honours what a site
already has (ssh_config, agents, ProxyJump, known_hosts, Kerberos), adds no dependency,
and stays a local child started by rig.process.proc like every other process, so the
rule "one module starts processes" holds; the master gives one TCP connection per host,
reused by every command of the run (a command costs a channel, not a handshake).

A remote command is `python3 -c AGENT SPEC`, quoted once here with shlex.join: the argv
travels inside the JSON SPEC, so no scenario text is ever parsed by the remote shell.
The agent writes one line `\\x1eRIG-AGENT {json}` last on stderr (exit code, rusage of
the reaped child tree, wall time measured on that host, timed_out, io_wchar/io_done_s),
keeps a pid file (pgid + start time) in the run directory while the child lives, and
kills the child's group when its deadline passes or when the ssh channel goes away (its
stdout pipe reports POLLERR): a killed local rig leaves no remote process running.

Pure: builds argv and parses output; starting anything is rig.process.proc's job.
Must not import anything above rig.process.
"""
from __future__ import annotations

import base64
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

MARK = "\x1eRIG-AGENT "
RUNDIR_RE = re.compile(r"/(?:[\w.-]+/)*rig[0-9a-f]{4}(?:-[\w.-]+)?")   # what clean may remove
CONNECT_TIMEOUT_S = 10


@dataclass(frozen=True)
class Host:
    """How to reach one remote host. `control_path`: the run's ControlMaster socket
    (None: each command opens its own connection, e.g. `rig clean`, `rig doctor`)."""
    name: str
    ssh: str                       # user@host, as ssh takes it
    port: int = 22
    identity: str | None = None
    known_hosts: str | None = None
    rundir_base: str = "/dev/shm"  # a tmpfs on Debian: data files live in memory as locally
    control_path: str | None = None

    def rundir(self, prefix: str) -> str:
        return f"{self.rundir_base.rstrip('/')}/{prefix}"

    def ssh_options(self) -> list[str]:
        o = ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}",
             "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
             "-o", "LogLevel=ERROR", "-p", str(self.port)]
        if self.identity:
            o += ["-i", str(Path(self.identity).expanduser()), "-o", "IdentitiesOnly=yes"]
        if self.known_hosts:
            o += ["-o", f"UserKnownHostsFile={Path(self.known_hosts).expanduser()}",
                  "-o", "StrictHostKeyChecking=yes"]
        return o

    def master_argv(self) -> list[str]:
        """The run's one connection to this host (kept by a proc.Service)."""
        assert self.control_path
        return ["ssh", "-M", "-N", "-o", f"ControlPath={self.control_path}",
                "-o", "ControlPersist=no", *self.ssh_options(), self.ssh]

    def check_argv(self) -> list[str]:
        assert self.control_path
        return ["ssh", "-o", f"ControlPath={self.control_path}", "-O", "check", self.ssh]

    def ssh_argv(self, command: str) -> list[str]:
        mux = (["-o", f"ControlPath={self.control_path}", "-o", "ControlMaster=no"]
               if self.control_path else [])
        return ["ssh", "-T", *mux, *self.ssh_options(), self.ssh, command]


def agent_command(spec: dict) -> str:
    """The one string the remote shell sees: every token quoted once."""
    return shlex.join(["python3", "-I", "-S", "-c", AGENT, json.dumps(spec, separators=(",", ":"))])


def run_spec(argv: list[str], *, timeout: float, env: dict | None, rundir: str | None,
             io_target: int | None, grace: float, ident: str | None = None) -> dict:
    """`rundir`: where the pid file lives while the child runs (what `clean` kills);
    `ident`: the pid file's name (a service's, so `kill` can stop exactly it)."""
    return {"op": "run", "argv": [str(a) for a in argv], "timeout": timeout, "grace": grace,
            "env": {k: str(v) for k, v in (env or {}).items()}, "rundir": rundir,
            "io_target": io_target, "id": ident}


def put_spec(path: str, data: bytes, mode: int = 0o644) -> dict:
    return {"op": "put", "path": path, "b64": base64.b64encode(data).decode(), "mode": mode}


def parse_agent(stderr: str) -> tuple[dict | None, str]:
    """(the agent's report or None, stderr without it)."""
    i = stderr.rfind(MARK)
    if i < 0:
        return None, stderr
    line = stderr[i + len(MARK):].split("\n", 1)[0]
    try:
        rep = json.loads(line)
    except ValueError:
        return None, stderr
    head = stderr[:i].rstrip("\n")
    return rep, (head + "\n") if head else ""


# The agent runs on the remote host with the system python3 (3.7+), stdlib only.
AGENT = r'''
import base64, json, os, random, select, shutil, signal, socket, sys, time
S = json.loads(sys.argv[1])
MARK = "\x1eRIG-AGENT "
def report(d):
    sys.stderr.write("\n" + MARK + json.dumps(d) + "\n"); sys.stderr.flush()
def start_of(pid):
    try:
        return open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None
def killpg(pg, sig):
    try:
        os.killpg(pg, sig)
    except (ProcessLookupError, PermissionError):
        pass
def group_alive(pg):
    try:
        os.killpg(pg, 0); return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
def stop_group(pg, grace, pfd=None):
    """TERM, grace, KILL. Our own child: its exit (pidfd) ends the grace, as a zombie
    leader keeps its group alive; someone else's group: until it is gone."""
    killpg(pg, signal.SIGTERM)
    if pfd is not None:
        select.select([pfd], [], [], grace)
    else:
        end = time.monotonic() + grace
        while time.monotonic() < end and group_alive(pg):
            time.sleep(0.02)
    killpg(pg, signal.SIGKILL)
def wchar(pid):
    try:
        for ln in open("/proc/%d/io" % pid):
            if ln.startswith("wchar:"):
                return int(ln.split()[1])
    except (OSError, ValueError):
        pass
    return None

def watch(pid, target, wc, done, t0):
    """Bytes the child wrote so far, and when it first reached target."""
    if target is not None:
        x = wchar(pid)
        if x is not None:
            wc = x
            if done is None and wc >= target:
                done = time.monotonic() - t0
    return wc, done

def op_run():
    env = dict(os.environ); env.update(S["env"])
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r); os.setsid()
        fd = os.open(os.devnull, os.O_RDONLY); os.dup2(fd, 0)
        try:
            os.execvpe(S["argv"][0], S["argv"], env)
        except OSError as e:
            os.write(w, str(e).encode()); os._exit(127)
    os.close(w)
    t0 = time.monotonic()
    err = os.read(r, 4096).decode(errors="replace"); os.close(r)
    pidfile = None
    if S.get("rundir"):
        d = os.path.join(S["rundir"], "pids"); os.makedirs(d, exist_ok=True)
        pidfile = os.path.join(d, "%s.json" % (S.get("id") or pid))
        with open(pidfile + ".tmp", "w") as f:
            json.dump({"pgid": pid, "start": start_of(pid), "argv0": S["argv"][0]}, f)
        os.rename(pidfile + ".tmp", pidfile)
    pfd = os.pidfd_open(pid)
    p = select.poll(); p.register(pfd, select.POLLIN); p.register(1, 0)
    deadline = t0 + S["timeout"]; target = S.get("io_target")
    timed_out = orphaned = False; wc = None; done = None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True; stop_group(pid, S["grace"], pfd); break
        step = min(left, 0.005 if target is not None else 0.5)
        ev = dict(p.poll(step * 1000))
        wc, done = watch(pid, target, wc, done, t0)
        if pfd in ev:
            break
        if ev.get(1, 0) & (select.POLLERR | select.POLLHUP):
            orphaned = True; stop_group(pid, S["grace"], pfd); break
    wc, done = watch(pid, target, wc, done, t0)
    _, status, ru = os.wait4(pid, 0)
    wall = time.monotonic() - t0
    killpg(pid, signal.SIGKILL)
    if pidfile:
        try:
            os.unlink(pidfile)
        except OSError:
            pass
    rc = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else (
        os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status))
    if err:
        sys.stderr.write("%s: %s\n" % (S["argv"][0], err))
    report({"rc": rc, "user": ru.ru_utime, "sys": ru.ru_stime, "wall": wall,
            "timed_out": timed_out, "orphaned": orphaned, "io_wchar": wc, "io_done_s": done,
            "exec_error": err or None})
def kill_recorded(rundir, grace, only=None):
    d = os.path.join(rundir, "pids"); killed = []
    if not os.path.isdir(d):
        return killed
    for n in sorted(os.listdir(d)):
        if only is not None and n != only + ".json":
            continue
        try:
            rec = json.load(open(os.path.join(d, n)))
        except (OSError, ValueError):
            continue
        pg = rec["pgid"]
        if start_of(pg) == rec["start"] or (start_of(pg) is None and group_alive(pg)):
            stop_group(pg, grace); killed.append([pg, rec["argv0"]])
        try:
            os.unlink(os.path.join(d, n))
        except OSError:
            pass
    return killed
def op_clean():
    rd = S["rundir"]
    killed = kill_recorded(rd, S.get("grace", 3.0))
    existed = os.path.isdir(rd)
    shutil.rmtree(rd, ignore_errors=True)
    report({"rc": 0, "killed": killed, "removed": existed})
def op_kill():
    report({"rc": 0, "killed": kill_recorded(S["rundir"], S.get("grace", 3.0), S.get("id"))})
def op_put():
    os.makedirs(os.path.dirname(S["path"]), exist_ok=True)
    tmp = S["path"] + ".rigtmp"
    with open(tmp, "wb") as f:
        f.write(base64.b64decode(S["b64"]))
    os.chmod(tmp, S["mode"]); os.rename(tmp, S["path"])
    report({"rc": 0})
def op_gen():
    os.makedirs(os.path.dirname(S["path"]), exist_ok=True)
    rng = random.Random(S["seed"]); left = S["size"]
    with open(S["path"], "wb") as f:
        while left:
            n = min(8 << 20, left); f.write(rng.randbytes(n)); left -= n
    os.chmod(S["path"], 0o644)
    report({"rc": 0})
def op_ports():
    out = []
    for p in S["ports"]:
        while True:
            s = socket.socket(socket.AF_INET6 if ":" in S["addr"] else socket.AF_INET)
            try:
                s.bind((S["addr"], p)); break
            except OSError:
                p += 1
            finally:
                s.close()
        out.append(p)
    report({"rc": 0, "ports": out})
def op_probe():
    try:
        socket.create_connection((S["addr"], S["port"]), timeout=S.get("timeout", 0.5)).close()
        ok = True
    except OSError:
        ok = False
    report({"rc": 0, "open": ok})
def op_info():
    u = os.uname(); sc = {}
    for k in S.get("sysctls", []):
        try:
            sc[k] = open("/proc/sys/" + k.replace(".", "/")).read().strip()
        except OSError:
            sc[k] = None
    tools = {t: shutil.which(t) for t in S.get("tools", [])}
    netem = any(os.path.exists(p) for p in ("/sys/module/sch_netem",
        "/lib/modules/%s/kernel/net/sched/sch_netem.ko" % u.release,
        "/lib/modules/%s/kernel/net/sched/sch_netem.ko.xz" % u.release))
    report({"rc": 0, "kernel": u.release, "machine": u.machine, "hostname": u.nodename,
            "cpus": os.cpu_count(), "python": sys.version.split()[0], "sysctls": sc,
            "tools": tools, "kernel_netem": netem, "time": time.time(),
            "ssh_connection": os.environ.get("SSH_CONNECTION")})
def op_sysctl():
    """Read S["read"] keys, then write S["write"] (key -> value); values as one line."""
    vals = {}
    for k in S.get("read", []):
        try:
            vals[k] = " ".join(open("/proc/sys/" + k.replace(".", "/")).read().split())
        except OSError:
            vals[k] = None
    for k, v in S.get("write", {}).items():
        try:
            with open("/proc/sys/" + k.replace(".", "/"), "w") as f:
                f.write(v)
        except OSError as e:
            sys.stderr.write("sysctl %s=%s: %s\n" % (k, v, e)); report({"rc": 1}); return
    report({"rc": 0, "values": vals})
def tree_cpu(root):
    """user, sys seconds of root and its descendants (reaped children included)."""
    tick = os.sysconf("SC_CLK_TCK"); st = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                f = open("/proc/%s/stat" % d).read().rsplit(")", 1)[1].split()
                st[int(d)] = (int(f[1]), int(f[11]) + int(f[13]), int(f[12]) + int(f[14]))
            except (OSError, IndexError, ValueError):
                pass
    if root not in st:
        return None
    kids = {}
    for p, v in st.items():
        kids.setdefault(v[0], []).append(p)
    u = s = 0; todo = [root]
    while todo:
        p = todo.pop(); u += st[p][1]; s += st[p][2]; todo.extend(kids.get(p, ()))
    return [u / tick, s / tick]
def op_cpu():
    """CPU of the process trees the run's pid files name (S["ids"]); None if gone."""
    out = {}
    for i in S["ids"]:
        try:
            rec = json.load(open(os.path.join(S["rundir"], "pids", i + ".json")))
        except (OSError, ValueError):
            out[i] = None; continue
        out[i] = tree_cpu(rec["pgid"]) if start_of(rec["pgid"]) == rec["start"] else None
    report({"rc": 0, "cpu": out, "host": host_cpu()})
def host_cpu():
    """[busy_s, total_s, cpus, irq_s, steal_s] of the whole host (/proc/stat: idle and iowait are not
    busy, steal is), as rig.process.cputree.parse_proc_stat; None if unreadable."""
    tick = os.sysconf("SC_CLK_TCK"); agg = None; n = 0
    try:
        for line in open("/proc/stat"):
            if line.startswith("cpu "):
                agg = [int(x) for x in line.split()[1:]]
            elif line.startswith("cpu") and line[3:4].isdigit():
                n += 1
    except (OSError, ValueError):
        return None
    if not agg or len(agg) < 4:
        return None
    agg = (agg + [0] * 8)[:8]
    return [(sum(agg) - agg[3] - agg[4]) / float(tick), sum(agg) / float(tick), n,
            (agg[5] + agg[6]) / float(tick), agg[7] / float(tick)]
def op_ctl():
    """One JSON request line to a unix socket (the emulation engine's control), the
    answer line back; a refused or dead socket is an answer too (error)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.settimeout(S.get("timeout", 2.0))
    buf = b""
    try:
        s.connect(S["path"]); s.sendall(json.dumps(S["req"]).encode() + b"\n")
        while not buf.endswith(b"\n"):
            c = s.recv(65536)
            if not c:
                break
            buf += c
    except OSError as e:
        report({"rc": 0, "error": str(e)}); return
    finally:
        s.close()
    report({"rc": 0, "answer": buf.decode("utf-8", "replace")})
{"run": op_run, "kill": op_kill, "ctl": op_ctl, "clean": op_clean, "put": op_put, "gen": op_gen, "ports": op_ports,
 "probe": op_probe, "sysctl": op_sysctl, "cpu": op_cpu,
 "info": op_info}[S["op"]]()
'''
