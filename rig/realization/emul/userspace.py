"""The userspace emulation backend: NFQUEUE rules in the router's FORWARD chain (on an end
host in its OUTPUT and INPUT chains, matched on the path's server address) feed the
rig's own engine process (`python -m rig.realization.emul.engine`), which delays, drops and
duplicates packets; rate limiting is the kernel's TBF on the router's egress.

On a remote router host (LinkSite.host, rig.realization.remote_router) the same commands
run there through the agent, the engine is a service of that host (started through the
agent, its pid file in the run's directory there, killed with its channel), its profile
is written there and its control socket is reached by the agent's `ctl` op.

Fail-closed: the rules have no --queue-bypass, so a dead engine stops the path instead
of letting undelayed packets through, and check() raises StepAborted. Every rule carries
`--comment <prefix>`; everything apply() creates is undone by remove().

Command builders are pure. Must not import services, orchestration or reports.
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from rig.process import proc
from rig.errors import RigError, StepAborted
from rig.description.linkstats import EmulStats, StatsFormatError
from rig.realization.emul import registry
from rig.realization.emul.base import (LinkSite, egress_direction, ifb_setup_argv,
                                       ifb_teardown_argv, qdisc_del_argv, tbf_argv, where)
from rig.realization.emul.engine import control, native
from rig.description.profile import Direction, LinkProfile

CMD_TIMEOUT = 20.0
READY_TIMEOUT = 15.0
CONTROL_TIMEOUT = 3.0
# a remote engine's answer and rules cost an SSH channel each (~0.17 s wall, ~0.16 s CPU
# on the router host, bench/README "Remote commands"): read at most this often; its
# process is checked on every call (its ssh channel ends when it dies)
REMOTE_CHECK_EVERY_S = 2.0
# The control socket answers in milliseconds; a local ping that took longer than this
# means the engine (all of it: SIGSTOP, starved of CPU) did not run meanwhile, so the
# packets it held were held that much too long, unseen by its own lateness counters.
STALL_S = 1.0
_SUN_PATH_MAX = 100


# --- pure command builders --------------------------------------------------------------

def _iptables(site: LinkSite) -> str:
    return "ip6tables" if ":" in site.client_net else "iptables"


def legs(site: LinkSite, profile: LinkProfile) -> list[tuple[str, str, str, int, Direction]]:
    """(direction, in_if, out_if, queue, profile) for forward then reverse."""
    return [("forward", site.to_client_if, site.to_server_if, site.queue_base, profile.forward),
            ("reverse", site.to_server_if, site.to_client_if, site.queue_base + 1,
             profile.reverse)]


def nfqueue_rule_argv(site: LinkSite, action: str, in_if: str, out_if: str,
                      queue: int) -> list[str]:
    """iptables -I/-D/-C of one direction's NFQUEUE rule (fail-closed: no bypass)."""
    if action not in ("-I", "-D", "-C"):
        raise ValueError(f"bad iptables action {action!r}")
    if site.end:
        return proc.ns_argv(site.router_ns, [_iptables(site), "-w", "5", action,
                                             *end_rule_match(site, queue)] + [
            "-m", "comment", "--comment", site.prefix, "-j", "NFQUEUE", "--queue-num",
            str(queue)])
    return proc.ns_argv(site.router_ns, [
        _iptables(site), "-w", "5", action, "FORWARD", "-i", in_if, "-o", out_if,
        "-m", "comment", "--comment", site.prefix, "-j", "NFQUEUE", "--queue-num", str(queue)])


def end_rule_match(site: LinkSite, queue: int) -> list[str]:
    """Chain and match of one direction's rule on an end host: the packets it sends
    leave in OUTPUT by its interface, those it receives arrive in INPUT (after any IFB
    redirect), both matched on the path's server address, so nothing else the host
    says (the rig's own SSH, the agent) is ever queued."""
    direction = "forward" if queue == site.queue_base else "reverse"
    addr = site.server_net.split("/")[0]
    # forward goes to the server address, reverse comes from it
    peer = ["-d", addr] if direction == "forward" else ["-s", addr]
    if direction == egress_direction(site):
        return ["OUTPUT", "-o", site.to_client_if, *peer]
    return ["INPUT", "-i", site.to_client_if, *peer]


def end_profile(site: LinkSite, profile: LinkProfile) -> LinkProfile:
    """What the engine applies on an end host: the delay and jitter of both directions on
    the forward one (client -> server: what the server end receives, what the client end
    sends); the reverse (data) direction keeps its loss and duplication, held by nobody.

    Why not half each way: (1) a packet the host itself sends stays charged to its socket
    while the engine holds it (NFQUEUE does not orphan it; netem does), and TCP small
    queues then let a socket keep only ~1 ms of its pacing rate in the host: the server
    delayed 10 ms in its own OUTPUT chain moved 4.5 Mbit/s here (curl, 20 ms,
    tests/test_end_router.py); (2) a packet the host receives is timestamped by the
    kernel before INPUT, so ping (SO_TIMESTAMP) on the client end does not see a delay
    added there (it read 0.058 ms for 20 ms). The round trip, which is what TCP and ping
    measure, is the configured one. A client end that sends bulk data (an upload) is
    still throttled by (1): put the router role on the server end for uploads."""
    if not site.end:
        return profile
    f, r = profile.forward, profile.reverse
    return LinkProfile(forward=replace(f, delay_s=f.delay_s + r.delay_s,
                                       jitter_s=f.jitter_s + r.jitter_s),
                       reverse=replace(r, delay_s=0.0, jitter_s=0.0))


def rate_devs(site: LinkSite, profile: LinkProfile) -> list[tuple[str, Direction]]:
    """(device, direction profile) of each direction that has a rate: its egress on a
    forwarding router; on an end host the interface for what it sends and the IFB for
    what it receives."""
    out = []
    for name, _, out_if, _, d in legs(site, profile):
        if d.rate_bps:
            out.append((out_if if not site.end or name == egress_direction(site)
                        else site.ifb, d))
    return out


def is_passthrough(d: Direction) -> bool:
    """Nothing for the engine to do in this direction (rate is the kernel's TBF)."""
    return (d.delay_s == 0 and d.jitter_s == 0 and d.mean_loss == 0 and d.duplicate == 0)


def control_path(site: LinkSite) -> Path:
    p = site.workdir / f"{site.prefix}-{site.path}-engine.sock"
    if len(str(p)) > _SUN_PATH_MAX and site.host is None:      # unix socket paths are limited to 108 bytes
        p = Path(tempfile.gettempdir()) / f"{site.router_ns}-q{site.queue_base}.sock"
    return p


def profile_path(site: LinkSite) -> Path:
    return site.workdir / f"{site.prefix}-{site.path}-profile.json"


def engine_argv(site: LinkSite, *, python: str = sys.executable,
                seed: int | None = None, native_bin: str | None = None) -> list[str]:
    """The engine's command line; with `native_bin` the same entry loads the eBPF
    programs and execs the native engine (engine/native.py)."""
    argv = [python, "-m", "rig.realization.emul.engine",
            "--queues", str(site.queue_base), str(site.queue_base + 1),
            "--control", str(control_path(site)), "--profile", str(profile_path(site))]
    if native_bin:
        argv += ["--native", native_bin]
    if not site.end:     # a forwarding router: arrival stamps and audit in the kernel
        argv += ["--stamp-ifs", site.to_client_if, site.to_server_if]
    return argv + (["--seed", str(seed)] if seed is not None else [])


def rate_argv(site: LinkSite, profile: LinkProfile) -> list[list[str]]:
    """TBF on each egress whose direction has a rate (forward leaves to the server); on
    an end host the received direction's TBF sits on the IFB (made first)."""
    devs = rate_devs(site, profile)
    pre = ifb_setup_argv(site) if any(dev == site.ifb for dev, _ in devs) else []
    return pre + [tbf_argv(site.router_ns, dev, d, profile.rtt_s) for dev, d in devs]


def _remote_exchange(site: LinkSite) -> control.Exchange:
    """The engine's control on a remote router host: the agent's `ctl` op there."""
    host = site.host
    assert host is not None

    def via(path: Path, req: dict, timeout: float) -> bytes:
        try:
            rep = proc.remote_op(host, {"op": "ctl", "path": str(path), "req": req,
                                        "timeout": timeout}, timeout=timeout + 15)
        except RigError as e:
            raise control.ControlError(f"engine control {path}: {e}") from e
        if rep.get("error"):
            raise control.ControlError(f"engine control {path} on {host.name}: {rep['error']}")
        return str(rep.get("answer", "")).encode()
    return via


def _write_profile(site: LinkSite, profile: LinkProfile) -> None:
    data = json.dumps(profile.to_dict())
    if site.host is None:
        profile_path(site).write_text(data)
    else:
        proc.put_file(site.host, str(profile_path(site)), data.encode())


# --- the backend -------------------------------------------------------------------------

@registry.register
class UserspaceBackend:
    """Backend protocol implementation; one engine process per LinkSite.

    bypass_passthrough: a direction with no delay, jitter, loss or duplication gets no
    NFQUEUE rule (its packets never visit the engine, as netem with nothing to do costs
    nothing); update() adds or removes the rule when the profile changes.
    """

    name = "userspace"
    auto_rank = 1                  # auto: the engine where the kernel lacks netem
    auto_note = "where the kernel lacks sch_netem"
    needs = "the iptables NFQUEUE target"
    doctor_key = "userspace_nfqueue"
    takes_options = True           # python, seed, ready_timeout, bypass_passthrough, engine, ...

    @staticmethod
    def usable() -> bool:
        return kernel_has_nfqueue()

    def __init__(self, *, python: str = sys.executable, seed: int | None = None,
                 ready_timeout: float = READY_TIMEOUT, bypass_passthrough: bool = True,
                 local_logs: Path | None = None, engine: str | None = None) -> None:
        self.python = python
        self.engine = engine           # auto, native, python; None: $RIG_ENGINE, else auto
        self.local_logs = local_logs or Path(tempfile.gettempdir())   # remote engines' logs
        self.seed = seed
        self.ready_timeout = ready_timeout
        self.bypass_passthrough = bypass_passthrough
        self._engines: dict[tuple[str, int], proc.Service] = {}
        self._rated: dict[tuple[str, int], set[str]] = {}
        self._rules: dict[tuple[str, int], set[tuple[str, str, int]]] = {}
        self._checked: dict[tuple[str, int], float] = {}    # remote: last full check
        self._ifbs: set[tuple[str, int]] = set()             # end hosts' IFB made
        self._stalls: dict[tuple[str, int], list[float]] = {}  # local pings >= STALL_S

    @staticmethod
    def _key(site: LinkSite) -> tuple[str, int]:
        return (site.router_ns or f"@{site.host.name if site.host else ''}", site.queue_base)

    def _wanted_rules(self, site: LinkSite, profile: LinkProfile) -> set[tuple[str, str, int]]:
        return {(i, o, q) for _, i, o, q, d in legs(site, profile)
                if not (self.bypass_passthrough and is_passthrough(d))}

    def engine_choice(self, site: LinkSite) -> tuple[str | None, str]:
        """(the native engine binary or None for the Python engine, why): engine/native.py."""
        try:
            return native.choose(self.engine, remote=site.host is not None)
        except native.EngineChoiceError as e:
            raise RigError(f"{where(site)}: {e}") from None

    def _argv(self, site: LinkSite) -> list[str]:
        return engine_argv(site, python=self.python, seed=self.seed,
                           native_bin=self.engine_choice(site)[0])

    def plan(self, site: LinkSite, profile: LinkProfile) -> list[list[str]]:
        profile = end_profile(site, profile)
        return ([proc.ns_argv(site.router_ns or None, self._argv(site))]
                + rate_argv(site, profile)
                + [nfqueue_rule_argv(site, "-I", i, o, q)
                   for i, o, q in sorted(self._wanted_rules(site, profile), key=lambda r: r[2])])

    def apply(self, site: LinkSite, profile: LinkProfile) -> None:
        key = self._key(site)
        if key in self._engines:
            raise RigError(f"{where(site)}: userspace emulation already applied")
        name = f"{site.prefix}-{site.path}-engine"
        profile = end_profile(site, profile)
        if site.host is None:
            site.workdir.mkdir(parents=True, exist_ok=True)
        _write_profile(site, profile)
        svc = proc.Service(self._argv(site),
                           netns=site.router_ns or None, name=name,
                           log_path=self.log_dir(site) / f"{name}.log", host=site.host,
                           rundir=site.host.rundir(site.prefix) if site.host else None,
                           ident=name if site.host else None)
        self._engines[key] = svc
        try:
            svc.start()
            proc.wait_until(lambda: self._responds(site), timeout=self.ready_timeout,
                            what=f"emulation engine in {where(site)}", service=svc)
            self._set_rates(site, profile)
            self._set_rules(site, profile)
        except BaseException:
            self.remove(site)
            raise

    def log_dir(self, site: LinkSite) -> Path:
        """Where the engine's log lands on this host (a remote engine's output comes
        back over its channel)."""
        if site.host is None:
            return site.workdir
        d = self.local_logs / site.path
        d.mkdir(parents=True, exist_ok=True)
        return d

    def _via(self, site: LinkSite) -> control.Exchange | None:
        return _remote_exchange(site) if site.host is not None else None

    def _responds(self, site: LinkSite) -> bool:
        try:
            control.ping(control_path(site), timeout=0.5, via=self._via(site))
            return True
        except control.ControlError:
            return False

    def _set_rates(self, site: LinkSite, profile: LinkProfile) -> None:
        key = self._key(site)
        rated = self._rated.setdefault(key, set())
        want = dict(rate_devs(site, profile))
        if site.ifb in want and key not in self._ifbs:     # an end host's ingress rate
            self._ifbs.add(key)
            for argv in ifb_setup_argv(site):
                proc.run(argv, timeout=CMD_TIMEOUT, check=True, host=site.host)
        for dev in sorted({*want, *rated}):
            if dev in want:
                proc.run(tbf_argv(site.router_ns, dev, want[dev], profile.rtt_s),
                         timeout=CMD_TIMEOUT, check=True, host=site.host)
                rated.add(dev)
            else:
                proc.run(qdisc_del_argv(site.router_ns, dev), timeout=CMD_TIMEOUT,
                         host=site.host)
                rated.discard(dev)

    def _set_rules(self, site: LinkSite, profile: LinkProfile) -> None:
        have = self._rules.setdefault(self._key(site), set())
        want = self._wanted_rules(site, profile)
        for rule in sorted(want - have):
            proc.run(nfqueue_rule_argv(site, "-I", *rule), timeout=CMD_TIMEOUT, check=True,
                     host=site.host)
            have.add(rule)
        for rule in sorted(have - want):
            proc.run(nfqueue_rule_argv(site, "-D", *rule), timeout=CMD_TIMEOUT, check=True,
                     host=site.host)
            have.discard(rule)

    def update(self, site: LinkSite, profile: LinkProfile) -> None:
        if self._key(site) not in self._engines:
            raise RigError(f"{where(site)}: userspace emulation not applied")
        profile = end_profile(site, profile)
        _write_profile(site, profile)
        try:
            control.configure(control_path(site), profile.to_dict(), timeout=CONTROL_TIMEOUT,
                              via=self._via(site))
        except control.ControlError as e:
            raise StepAborted(f"{where(site)}: cannot reconfigure the engine: {e}") from e
        self._set_rates(site, profile)
        self._set_rules(site, profile)

    def check(self, site: LinkSite) -> None:
        svc = self._engines.get(self._key(site))
        if svc is None:
            raise StepAborted(f"{where(site)}: userspace emulation not applied")
        if not svc.alive():
            raise StepAborted(f"{where(site)}: emulation engine died (exit "
                              f"{svc.stop()}): {svc.log_tail(300).strip()}")
        key = self._key(site)
        if site.host is not None and \
                time.monotonic() - self._checked.get(key, -1e9) < REMOTE_CHECK_EVERY_S:
            return
        t0 = time.monotonic()
        try:
            control.ping(control_path(site), timeout=CONTROL_TIMEOUT, via=self._via(site))
        except control.ControlError as e:
            raise StepAborted(f"{where(site)}: emulation engine not responding: {e}") from e
        took = time.monotonic() - t0
        if took >= STALL_S and site.host is None:   # a remote ping also waits for SSH
            self._stalls.setdefault(key, []).append(took)
        for rule in sorted(self._rules.get(key, ())):
            if not proc.run(nfqueue_rule_argv(site, "-C", *rule), timeout=CMD_TIMEOUT,
                            host=site.host).ok:
                raise StepAborted(f"{where(site)}: NFQUEUE rule {rule} missing")
        self._checked[key] = time.monotonic()

    def stalls(self, site: LinkSite) -> list[float]:
        """Seconds of each check since the last call whose ping took >= STALL_S."""
        return self._stalls.pop(self._key(site), [])

    def stats(self, site: LinkSite) -> EmulStats:
        key = self._key(site)
        svc = self._engines.get(key)
        queued = {"queued": sorted(q for _, _, q in self._rules.get(key, ()))}
        if not (svc and svc.alive()):
            return EmulStats(self.name, alive=False, extra=queued)
        try:
            st = EmulStats.from_json(control.stats(control_path(site), timeout=CONTROL_TIMEOUT,
                                                   via=self._via(site)))
        except control.ControlError as e:
            return EmulStats(self.name, alive=True, error=str(e), extra=queued)
        except StatsFormatError as e:
            return EmulStats(self.name, alive=True, error=f"engine stats unreadable: {e}",
                             extra=queued)
        return replace(st, extra={**st.extra, **queued})

    def remove(self, site: LinkSite) -> None:
        key = self._key(site)
        self._checked.pop(key, None)
        # Rules first (while the engine still serves what it holds), then the engine.
        for rule in sorted(self._rules.pop(key, set())):
            proc.run(nfqueue_rule_argv(site, "-D", *rule), timeout=CMD_TIMEOUT, host=site.host)
        svc = self._engines.pop(key, None)
        if svc is not None:
            svc.stop()
        for dev in self._rated.pop(key, set()):
            proc.run(qdisc_del_argv(site.router_ns, dev), timeout=CMD_TIMEOUT, host=site.host)
        if key in self._ifbs:
            self._ifbs.discard(key)
            for argv in ifb_teardown_argv(site):
                proc.run(argv, timeout=CMD_TIMEOUT, host=site.host)
        if site.host is None:     # on a router host: removed with the run's directory
            for p in (control_path(site), profile_path(site)):
                p.unlink(missing_ok=True)

    def engine_pids(self, site: LinkSite) -> list[int]:
        pid = self.engine_pid(site)
        return [pid] if pid else []

    def engine_pid(self, site: LinkSite) -> int | None:
        if site.host is not None:       # a router host's engine: its pid is not ours
            return None
        svc = self._engines.get(self._key(site))
        return svc.pid if svc else None


def arrival_stamp_probe(timeout: float = 15.0) -> str:
    """How the engine will stamp arrivals here: the tcx eBPF programs loaded and attached
    to the loopback of a throwaway anonymous namespace (engine/bpf.py), or why not."""
    code = ("from rig.realization.emul.engine import bpf\n"
            "bpf.Stamper(('lo', 'lo')).close()\n")
    try:
        res = proc.run(["unshare", "--net", "--", sys.executable, "-c", code], timeout=timeout)
    except RigError as e:
        return f"read time (probe failed: {e})"
    if res.ok:
        return "kernel (tcx-ingress eBPF), with a wire audit at tcx-egress"
    why = (res.stderr.strip().splitlines() or ["?"])[-1][-160:]
    return f"read time, no wire audit (tcx eBPF unavailable: {why})"


def kernel_has_nfqueue(timeout: float = 10.0) -> bool:
    """Can an NFQUEUE rule be installed? Probed in a throwaway anonymous namespace."""
    try:
        res = proc.run(["unshare", "--net", "--", "iptables", "-w", "5", "-A", "FORWARD",
                        "-j", "NFQUEUE", "--queue-num", "0"], timeout=timeout)
    except RigError:
        return False
    return res.ok
