"""The router role on a remote host: an emulated path between two remote hosts through a
third one that forwards between two interfaces (`router_host`, `router_ifaces`), or on
one of the two end hosts (`router_host` = an end, `router_iface`: its interface on the
path; rules in OUTPUT/INPUT, the received direction's qdisc on an IFB; ip_forward is not
touched there).

The emulation backends do the work (rig.realization.emul: the LinkSite carries the host,
every command runs there through the agent); this module holds what is particular to a
router host: its site (no namespace: the host's own network), the checks made before
anything is created (interfaces exist, neither carries the rig's own SSH connection, the
rig is installed there for the userspace engine), forwarding (old value recorded in the
run's state before it is written, restored at the end), and what `rig clean` undoes after
a SIGKILL: the run's NFQUEUE rules (they carry the prefix as comment), the rate/netem
root qdiscs on the two interfaces, and ip_forward.

Must not import services, orchestration or reports.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from rig.description.scenario.paths import PathSpec
from rig.errors import InputError, RigError
from rig.process import proc
from rig.process.remote import Host
from rig.realization.emul.choose import auto_choice
from rig.realization.emul.base import LinkSite, ifb_teardown_argv, qdisc_del_argv
from rig.realization.emul.netem import parse_qdiscs, show_argv
from rig.realization.emul.userspace import nfqueue_rule_argv

FORWARD = "net.ipv4.ip_forward"
CMD_TIMEOUT = 20.0
ENGINE_MODULE = "rig.realization.emul.engine"
QUEUE_SPAN = 16000          # NFQUEUE numbers 1024 .. 1024 + 2 * QUEUE_SPAN (16-bit)


def queue_base(prefix: str, index: int) -> int:
    """The first of two NFQUEUE numbers on the router host: from the run's prefix, so
    two runs through one router host do not share a queue (pure)."""
    return 1024 + 2 * ((int(prefix[3:], 16) * 8 + index) % QUEUE_SPAN)


def end_of(p: PathSpec) -> str:
    """"client" or "server" when the router role is on that end host, else ""."""
    return ("client" if p.router_host == p.client_host else
            "server" if p.router_host == p.server_host else "")


def ifb_name(prefix: str, index: int) -> str:
    """The end host's IFB device of path `index`: carries the run's prefix (<= 15 chars)."""
    return f"{prefix}-{index}ifb"


def make_site(prefix: str, index: int, p: PathSpec, host: Host) -> LinkSite:
    assert p.server_addr is not None
    if end_of(p):           # the router role on an end host: its one interface
        assert p.router_iface is not None
        return LinkSite(path=p.name, prefix=prefix, router_ns="", to_client_if=p.router_iface,
                        to_server_if=p.router_iface, client_net=p.server_addr,
                        server_net=p.server_addr, queue_base=queue_base(prefix, index),
                        workdir=Path(host.rundir(prefix), p.name), host=host,
                        end=end_of(p), ifb=ifb_name(prefix, index))
    assert p.router_ifaces is not None
    return LinkSite(path=p.name, prefix=prefix, router_ns="",
                    to_client_if=p.router_ifaces.client, to_server_if=p.router_ifaces.server,
                    client_net=p.server_addr, server_net=p.server_addr,
                    queue_base=queue_base(prefix, index),
                    workdir=Path(host.rundir(prefix), p.name), host=host)


def backend_name(choice: str, kernel_netem: bool) -> str:
    """`auto` on a router host: the one rule (rig.realization.emul.choose.auto_choice);
    NFQUEUE there is checked below with the engine's other needs (iptables)."""
    if choice == "auto":
        return auto_choice({"netem": kernel_netem, "userspace": True}) or "userspace"
    return choice


def addresses(ip_addr_json: str) -> dict[str, list[str]]:
    """`ip -j addr show` -> interface name -> its addresses (pure)."""
    try:
        data = json.loads(ip_addr_json or "[]")
    except ValueError as e:
        raise RigError(f"ip -j addr: unparsable output: {ip_addr_json[:80]!r}") from e
    return {d["ifname"]: [a.get("local", "") for a in d.get("addr_info", [])]
            for d in data if isinstance(d, dict) and "ifname" in d}


def ssh_local_addr(ssh_connection: str | None) -> str | None:
    """The router host's own address of the rig's SSH connection (SSH_CONNECTION is
    `client_ip client_port server_ip server_port`)."""
    words = (ssh_connection or "").split()
    return words[2] if len(words) == 4 else None


def check(h: Host, p: PathSpec, index: int, source: str, backend: str) -> str:
    """Before anything is created anywhere: the interfaces exist on h, neither carries
    the rig's SSH connection, and the userspace engine can start there. Returns the
    backend the host gets (InputError naming file, key and value; RigError naming the
    host when it lacks something)."""
    if end_of(p):
        assert p.router_iface is not None
        devs = [(f"paths[{index}].router_iface", p.router_iface)]
    else:
        assert p.router_ifaces is not None
        devs = [(f"paths[{index}].router_ifaces.{role}", getattr(p.router_ifaces, role))
                for role in ("client", "server")]
    info = proc.remote_op(h, {"op": "info", "tools": ["ip", "tc", "iptables"]}, timeout=30)
    name = backend_name(backend, bool(info.get("kernel_netem")))
    res = proc.run(["ip", "-j", "addr", "show"], timeout=CMD_TIMEOUT, host=h)
    if not res.ok:
        raise RigError(f"host {h.name} ({h.ssh}): ip -j addr show: {res.tail(200)}")
    have = addresses(res.stdout)
    mine = ssh_local_addr(info.get("ssh_connection"))
    for key, dev in devs:
        if dev not in have:
            raise InputError(f"no such interface on host {h.name} (has: "
                             f"{', '.join(sorted(have))})", file=source, key=key, value=dev)
        if mine and mine in have[dev]:
            raise InputError(f"carries the rig's own SSH connection to host {h.name} "
                             f"({mine}): delay or loss there would cut the rig off",
                             file=source, key=key, value=dev)
    if end_of(p) and (name == "netem" or p.rate_bps):
        _check_ingress_free(h, devs[0][1], index)
    need = ["ip"] + (["iptables"] if name == "userspace" else []) + \
        (["tc"] if name == "netem" or p.rate_bps else [])
    missing = [t for t in need if not info["tools"].get(t)]
    if missing:
        raise RigError(f"host {h.name} ({h.ssh}): {missing[0]} not found there (needed by "
                       f"paths[{index}].router_host)")
    if name == "userspace":
        r = proc.run([sys.executable, "-c", f"import {ENGINE_MODULE}.server"],
                     timeout=CMD_TIMEOUT, host=h)
        if not r.ok:
            raise RigError(f"host {h.name} ({h.ssh}): the userspace engine needs the rig "
                           f"installed there at {sys.executable} (as kind: fdt servers do; "
                           f"needed by paths[{index}].router_host)")
    return name


def _check_ingress_free(h: Host, dev: str, index: int) -> None:
    """The end host's ingress redirect needs the interface's clsact qdisc: refused when
    one (or an ingress qdisc) is there already, since removing it would take the host's
    own filters with it."""
    res = proc.run(show_argv("", dev), timeout=CMD_TIMEOUT, host=h)
    if not res.ok:
        raise RigError(f"host {h.name} ({h.ssh}): tc qdisc show dev {dev}: {res.tail(200)}")
    if any(q.get("kind") in ("clsact", "ingress") for q in parse_qdiscs(res.stdout)):
        raise RigError(f"host {h.name} ({h.ssh}): {dev} already has an ingress (clsact) "
                       f"qdisc; the rig will not share it (paths[{index}].router_iface)")


def record(site: LinkSite, forward_before: str | None) -> dict:
    """What `rig clean` undoes on the router host after a SIGKILL, written in the run's
    state before any of it is made: the rules the run may insert (exact argv to delete
    them), the interfaces whose root qdisc it may set, ip_forward before the run."""
    rules = [nfqueue_rule_argv(site, "-D", site.to_client_if, site.to_server_if,
                               site.queue_base),
             nfqueue_rule_argv(site, "-D", site.to_server_if, site.to_client_if,
                               site.queue_base + 1)]
    if site.end:     # one interface; an IFB (named with the prefix) and its redirect
        return {"forward_before": None, "devs": [site.to_client_if], "rules": rules,
                "ifb": site.ifb, "ifb_teardown": ifb_teardown_argv(site)}
    return {"forward_before": forward_before, "devs": [site.to_client_if, site.to_server_if],
            "rules": rules}


def read_forwarding(h: Host) -> str | None:
    return proc.remote_op(h, {"op": "sysctl", "read": [FORWARD]}, timeout=30)["values"][FORWARD]


def set_forwarding(h: Host, value: str) -> None:
    proc.remote_op(h, {"op": "sysctl", "write": {FORWARD: value}}, timeout=30)


def undo(h: Host, rec: dict) -> list[str]:
    """Remove what `record` names on h (rules, the rig's root qdiscs) and restore
    ip_forward; what was done, for `rig clean` to say. Never raises for state already gone;
    RigError when the host cannot be reached."""
    # an agent op first: an unreachable host raises after one connect timeout, instead
    # of every command below waiting for its own
    now = read_forwarding(h)
    done = []
    for argv in rec.get("rules", []):
        for _ in range(4):          # inserted once: one -D removes it, the next fails
            if not proc.run(argv, timeout=CMD_TIMEOUT, host=h).ok:
                break
            done.append(f"removed NFQUEUE rule {argv[argv.index('--queue-num') + 1]}")
    for dev in rec.get("devs", []):
        res = proc.run(show_argv("", dev), timeout=CMD_TIMEOUT, host=h)
        roots = [q for q in parse_qdiscs(res.stdout) if q.get("root")] if res.ok else []
        # only a root the rig makes (TBF or netem, handle 1:), never the host's default
        if any(q.get("kind") in ("tbf", "netem") and q.get("handle") == "1:" for q in roots):
            if proc.run(qdisc_del_argv("", dev), timeout=CMD_TIMEOUT, host=h).ok:
                done.append(f"removed root qdisc of {dev}")
    ifb = rec.get("ifb")
    # set up IFB first, then clsact and the filter: no IFB of the run, none of them its own
    if ifb and proc.run(["ip", "link", "show", "dev", ifb], timeout=CMD_TIMEOUT, host=h).ok:
        for argv in rec.get("ifb_teardown", []):
            proc.run(argv, timeout=CMD_TIMEOUT, host=h)
        done.append(f"removed {ifb} and the ingress redirect to it")
    before = rec.get("forward_before")
    if before is not None and now != before:
        set_forwarding(h, before)
        done.append(f"restored {FORWARD}={before}")
    return done
