"""The `rig` command line: a thin edge that maps exceptions to one-line errors and typed
exit codes (0 ok, 1 could not proceed / regression, 2 bad input). `program()` holds the
logic so tests can run the CLI in-process.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

from rig.description import limits as L
from rig.description.units import THROUGHPUT_UNITS
from rig.errors import ExitStatus, InputError, RigError, clip, quote


def _load(path: str):
    """A scenario, checked against every client tool, server kind and emulation backend
    (rig.catalog fills the description's registries first)."""
    import rig.catalog  # noqa: F401
    from rig.description import scenario
    return scenario.load(path)


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise RigError(f"{what} needs root (network namespaces, tc, iptables)")


def _path(key: str, value: str | None) -> None:
    """A path named on the command line, checked before anything reads it: not empty, no
    longer than PATH_MAX, no component longer than NAME_MAX (else the OS's own error
    would be the first to say so, deep inside a command)."""
    if value is None:
        return
    raw = os.fsencode(value)
    if not raw:
        raise InputError("expected a path, got nothing", key=key, value=value)
    if not raw.strip():
        raise InputError("expected a path, got only blanks", key=key, value=value)
    if b"\0" in raw:
        raise InputError("a path holds no NUL character", key=key, value=value)
    if len(raw) > L.MAX_PATH_BYTES:
        raise InputError(f"longer than {L.MAX_PATH_BYTES} bytes", key=key, value=value)
    if any(len(part) > L.MAX_NAME_BYTES for part in raw.split(b"/")):
        raise InputError(f"a name in it is longer than {L.MAX_NAME_BYTES} bytes", key=key,
                         value=value)


def _ranged(key: str, value: float | None, lo: float, hi: float) -> None:
    if value is not None and not lo <= value <= hi:      # also refuses nan
        raise InputError(f"must be within {lo:.6g}..{hi:.7g}", key=key, value=value)


def _paths(a: argparse.Namespace) -> None:
    """Every path option of every command, and the numbers argparse only typed."""
    for key in ("scenario", "out", "dir", "baseline", "candidate", "tuning", "identity",
                "known_hosts"):
        if isinstance(getattr(a, key, None), str):
            opt = key if key in ("scenario", "dir", "baseline", "candidate") else \
                "--" + key.replace("_", "-")
            _path(opt.upper() if not opt.startswith("--") else opt, getattr(a, key))
    if a.cmd == "plan":      # read-plan options: checked even where a scenario ignores them
        from rig.description.rootfile import cli as rootfile_cli
        rootfile_cli.options(a)
    if a.cmd == "run" and a.out and (Path(a.out) / "results.sqlite").exists():
        # a second run into the same folder would add its rows to the first's (same run
        # id): two runs read back as one, the killed one's faults on the new one's points
        raise InputError("already holds a run's results.sqlite: give a new or empty folder",
                         key="--out", value=a.out)
    if a.cmd == "doctor":
        _ranged("--port", a.port, 1, 65535)
    if a.cmd == "compare":
        _ranged("--floor", a.threshold, 1e-6, 1.0 - 1e-6)
        _ranged("--margin", a.margin, 1e-6, 1.0 - 1e-6)
    if a.cmd == "history":
        for d in a.runs:
            _path("RUN", d)
        _ranged("--floor", a.floor, 1e-6, 1.0 - 1e-6)
    if a.cmd == "net" and a.net_cmd == "up":
        _ranged("--owner-pid", a.owner_pid, 1, L.MAX_PID)


def cmd_doctor(a) -> int:
    from rig import packages
    from rig.orchestration import hostinfo
    if a.host:
        return _doctor_host(a)
    info = hostinfo.summary()
    info["emulation"] = hostinfo.emulation() if os.geteuid() == 0 else {"note": "run as root to probe"}
    info["distribution"] = d = hostinfo.distribution()
    from rig import extras
    info["python_extras"] = extras.status()
    if a.json:
        print(json.dumps(info, indent=2))
        return 0
    e = info["emulation"]
    print(f"kernel            {info['kernel']} ({info['machine']}, {info['cpus']} cpus)")
    if d["family"] is None:
        print(f"distribution      {d['os']}: no package map (rig/packages.py knows Debian and "
              "the RHEL 9 family); install the tools below by hand")
    else:
        print(f"distribution      {d['os']}, family {d['family']}: " + (
            "missing packages, by feature below" if d["missing"]
            else "every package of its map installed"))
        for f, (what, _) in packages.FEATURES.items():
            miss = d["missing_by_feature"].get(f)
            print(f"  {f:<15} " + (f"MISSING {', '.join(miss)} (make install FEATURES={f}): {what}"
                                   if miss else f"ok: {what}"))
    for x, ok in info["python_extras"].items():
        mod, what = extras.EXTRAS[x]
        print(f"python extra      {x:<9} " + (f"ok ({mod}): {what}" if ok else
                                              f"MISSING {mod} ({extras.hint(x)}): {what}"))
    print(f"kernel netem      {'yes' if e.get('kernel_netem') else 'no'}")
    print(f"userspace engine  {'usable (iptables NFQUEUE)' if e.get('userspace_nfqueue') else 'not usable'}")
    if e.get("userspace_engine"):
        print(f"  data path       {e['userspace_engine']}")
    if e.get("userspace_stamps"):
        print(f"  arrival stamps  {e['userspace_stamps']}")
    print(f"backend auto      {e.get('auto')}")
    sch = info["scheduling"]
    print(f"preemption        {sch['preemption'] or 'unknown'}")
    if (sch["preemption"] or "").startswith(("none", "voluntary")):
        print("                  (a userspace engine's wake-up waits for a syscall running on its"
              " CPU: give it a core, RIG_ENGINE_TIMING=cpu=N)")
    if sch["cpuidle_driver"]:
        poll = sch["guest_halt_poll_ns"]
        print(f"cpuidle           {sch['cpuidle_driver']}"
              + (f" (guest_halt_poll_ns {poll})" if poll is not None else ""))
    return _print_versions_and_sysctls(info["tools"], info["sysctls"])


def _print_versions_and_sysctls(versions: dict, sysctls: dict) -> int:
    for k, v in versions.items():
        print(f"{k:<17} {v or 'MISSING'}")
    for k, v in sysctls.items():
        print(f"{k:<42} {v}")
    return 0


def _doctor_host(a) -> int:
    """`rig doctor --host NAME --scenario FILE` (a host the scenario declares) or
    `rig doctor --host user@addr [--port N] [--identity F] [--known-hosts F]`."""
    from rig.description import scenario
    from rig.orchestration import hostinfo, hosts
    if a.scenario:
        sc = _load(a.scenario)
        if a.host not in sc.hosts:
            raise InputError(f"no such host (declared: {', '.join(sc.hosts) or 'none'})",
                             file=a.scenario, key="hosts", value=a.host, has_value=True)
        h = hosts.make_host(a.host, sc.hosts[a.host])
    else:
        spec = scenario.S.load(scenario.S.Ctx("--host"), {
            "ssh": a.host, "port": a.port, **({"identity": a.identity} if a.identity else {}),
            **({"known_hosts": a.known_hosts} if a.known_hosts else {})}, scenario.HostSpec)
        h = hosts.make_host(a.host.split("@")[-1], spec)
    info = hosts.doctor(h, hostinfo.SYSCTLS, hostinfo.version_argvs())
    if a.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"host              {h.name} ({h.ssh} port {h.port}): {info['hostname']}")
    print(f"kernel            {info['kernel']} ({info['machine']}, {info['cpus']} cpus), "
          f"python {info['python']}")
    print(f"kernel netem      {'yes' if info['kernel_netem'] else 'no (module not found)'}")
    print(f"clock offset      {info['clock_offset_s'] * 1e3:+.1f} ms "
          f"(± {info['clock_offset_bound_s'] * 1e3:.1f} ms; durations are measured on "
          "each host, never across)")
    return _print_versions_and_sysctls(info["versions"], info["sysctls"])


def cmd_plan(a) -> int:
    if a.generate or not a.scenario or a.scenario.endswith(".root"):
        from rig.description.rootfile import cli as rootfile_cli   # caching-mode read plans
        return rootfile_cli.run(a)
    from rig.orchestration import plan
    sc = _load(a.scenario)
    p = plan.build_plan(sc)
    if not a.all:
        p = _first_groups(p, PLAN_SHOWN_GROUPS)
    print("\n".join(p.described() if a.actions else p.lines()))
    return 0


PLAN_SHOWN_GROUPS = 200     # `rig plan` prints a larger plan's count, then its first groups


def _first_groups(p: Any, shown: int) -> Any:
    """The plan with only its first `shown` transfer groups (and the steps they are in)
    when it has more, and a comment that says how many it has and how to see them all:
    a sweep of 100,000 groups is a count to read, not 10^6 lines to scroll (issue 43)."""
    from rig.orchestration import actions
    groups = list(dict.fromkeys((a.step, a.group) for a in p.actions if a.group is not None))
    if len(groups) <= shown:
        return p
    keep = set(groups[:shown])
    steps = {s for s, _ in keep}
    out, hidden = [], 0
    for a in p.actions:
        if (a.group is None and (a.step is None or a.step in steps)) \
                or (a.step, a.group) in keep:
            out.append(a)
        else:
            hidden += 1
    note = actions.comment(
        f"{len(groups):,} transfer groups in {len({s for s, _ in groups}):,} step(s): "
        f"the first {shown} shown, {hidden:,} action(s) of the others left out "
        "(rig plan --all prints every one)")
    return dataclasses.replace(p, header=(*p.header, note), actions=tuple(out))


def cmd_run(a) -> int:
    from rig.orchestration import run as orchestrate
    sc = _load(a.scenario)   # invalid input fails here, before anything is made
    from rig.description.storage import check_room
    check_room(sc)                   # storage: disk: the files fit its free space now
    from rig.services.tools.replay import require_helper
    require_helper(sc)               # davix/curl replays need tools/rig-replay-http built
    from rig.services.tools.xrdcl import require_side_env
    require_side_env(sc)             # xrdcl clients need .venv-xrdcl6 (make xrdcl6)
    if a.corrupt is not None and a.corrupt not in {f.name for f in sc.files}:
        from rig.errors import InputError
        raise InputError(f"--corrupt names no file of the scenario (files: "
                         f"{', '.join(f.name for f in sc.files)})", key="--corrupt",
                         value=a.corrupt)
    _need_root("rig run")
    out = orchestrate.run(sc, Path(a.out).resolve() if a.out else None, corrupt=a.corrupt)
    _draw(out)
    print(out)
    return 0


def _draw(out: Path) -> None:
    try:
        from rig import report
    except ImportError as e:   # measurement never depends on plotting
        print(f"rig: report not drawn ({e}); run `rig report {out}` later", file=sys.stderr)
        return
    from rig.orchestration.reporter import verbosity
    files = report.render(out)
    # the page that answers, not a line per file (-v: every file drawn)
    shown = files if verbosity() > 0 else [f for f in files if f.name == "report.html"]
    if verbosity() >= 0:
        for p in shown:
            print(f"report: {p}", file=sys.stderr)


def cmd_report(a) -> int:
    from rig import report
    for p in report.render(Path(a.dir), Path(a.out) if a.out else None,
                           reference_file=a.reference, unit=a.unit):
        print(p)
    return 0


def cmd_export(a) -> int:
    from rig.report import archive, export
    if a.post is None:
        for d in a.dirs:
            where = export.write(Path(d), a.format,
                                 a.out if len(a.dirs) == 1 else None)
            if where != "-":
                print(where)
        return 0
    if a.out is not None:
        raise InputError("--out writes a file, --post sends the records: give one",
                         key="--out", value=a.out)
    for d in a.dirs:
        recs = export.records(export.load_run(Path(d)))
        n = archive.post(recs, a.post, shape=a.shape, index=a.index,
                         token_file=a.token_file, timeout_s=a.timeout)
        print(f"{d}: {n} records posted to {a.post} ({a.shape})")
    return 0


def _pair(text: str | None) -> tuple[str, str] | None:
    if text is None:
        return None
    b, sep, c = text.partition("=")
    if not sep or not b or not c:
        raise InputError("expected BASE_CLIENT=CAND_CLIENT", key="--pair", value=text)
    return b, c


def cmd_compare(a) -> int:
    from rig.report import compare
    res = compare.compare(Path(a.baseline), Path(a.candidate),
                          Path(a.out) if a.out else None, threshold=a.threshold,
                          margin=a.margin, strict=a.strict, expect=a.expect or (),
                          pair=_pair(a.pair))
    from rig.report.compare_report import metadata_lines
    for line in metadata_lines(res):
        print(line)
    print(res.summary())
    if res.undecided_line():
        print(res.undecided_line())
    return int(res.exit_code)


def cmd_history(a) -> int:
    from rig.report import history
    res = history.history([Path(d) for d in a.runs], Path(a.out) if a.out else None,
                          floor=a.floor, last_only=a.last)
    print(res.summary())
    return int(res.exit_code)


def cmd_net(a) -> int:
    from rig.orchestration import netcmd
    if a.net_cmd == "list":
        print(json.dumps(netcmd.list_paths(), indent=1))
        return 0
    if a.net_cmd == "up":
        topts = {"tuning_file": a.tuning, "cc": a.cc, "rmem": a.rmem, "wmem": a.wmem,
                 "mtu": a.mtu}
        netcmd.parse_options(a.name, rtt=a.rtt, jitter=a.jitter, loss=a.loss, rate=a.rate,
                             backend=a.backend, reverse_loss=a.reverse_loss)
        netcmd.parse_tuning(**topts)        # bad input: exit 2, even without root
        _need_root("rig net up")
        print(json.dumps(netcmd.up(a.name, rtt=a.rtt, jitter=a.jitter, loss=a.loss, rate=a.rate,
                                   backend=a.backend, owner_pid=a.owner_pid,
                                   reverse_loss=a.reverse_loss, tuning_opts=topts,
                                   ip=int(a.ip))))
    else:
        _need_root("rig net down")
        netcmd.down(a.name)
    return 0


def cmd_clean(a) -> int:
    from rig.orchestration import clean
    _need_root("rig clean")
    res = clean.clean(force=a.force, say=lambda m: print(m, file=sys.stderr))
    left = f"; left {len(res.left)} in use (see above)" if res.left else ""
    print(f"removed {res.removed} leftover resource(s){left}")
    return 0


def _share(text: str) -> float:
    """A relative change on the command line: '5%' as in scenarios, or a bare fraction
    (0.05, as these options always took)."""
    t = text.strip()
    try:
        return float(t[:-1]) / 100.0 if t.endswith("%") else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a percentage like '5%': {text[:40]!r}") \
            from None


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line `rig: ...`, exit 2, like every other bad input."""

    def error(self, message: str):
        # every line the rig prints about bad input starts "rig: "; a subcommand's parser
        # (prog "rig net up") adds its words once: "rig: net up: ..." (was "rig: rig net up:")
        sub = self.prog.removeprefix("rig").strip()
        self.exit(int(ExitStatus.BAD_INPUT),
                  clip(f"rig: {sub + ': ' if sub else ''}{message}") + "\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="rig", description="WAN-latency test rig for HEP data transfer")
    from rig import __version__
    p.add_argument("--version", action="version", version=f"rig {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("doctor", help="what this host can do")
    d.add_argument("--json", action="store_true")
    d.add_argument("--host", help="a remote host over SSH: a name of --scenario's hosts, "
                   "or user@address")
    d.add_argument("--scenario", help="the scenario declaring --host")
    d.add_argument("--port", type=int, default=22)
    d.add_argument("--identity")
    d.add_argument("--known-hosts")
    d.set_defaults(fn=cmd_doctor)
    pl = sub.add_parser("plan", help="print every command a run would execute; run nothing")
    pl.add_argument("scenario", nargs="?", help="scenario YAML, or a ROOT file for a read plan")
    pl.add_argument("--actions", action="store_true",
                    help="each action of the plan (its id in results.sqlite's actions table, "
                         "kind, host, dependencies) above its commands")
    pl.add_argument("--all", action="store_true",
                    help=f"print every transfer group of a plan that has more than "
                         f"{PLAN_SHOWN_GROUPS} (default: their count, then the first "
                         f"{PLAN_SHOWN_GROUPS})")
    from rig.description.rootfile import cli as rootfile_cli
    rootfile_cli.add_arguments(pl)
    pl.set_defaults(fn=cmd_plan)
    r = sub.add_parser("run", help="run a scenario; prints the output folder last")
    r.add_argument("scenario")
    r.add_argument("--out", help="output folder (default reports/<time>-<name>-<prefix>)")
    r.add_argument("--corrupt", metavar="FILE",
                   help="a self-test of the checksums: change one byte of the served FILE "
                        "(this host's copy) after its adler32 was taken; every download "
                        "of it must then fail with 'adler32 mismatch'")
    r.set_defaults(fn=cmd_run)
    rp = sub.add_parser("report", help="redraw charts and tables from DIR/results.sqlite")
    rp.add_argument("dir")
    rp.add_argument("--out", help="draw into this folder instead of DIR (DIR is only read)")
    rp.add_argument("--reference", metavar="FILE",
                    help="compare against this study reference (reproductions/*.yaml) "
                         "instead of the one stored with the run")
    rp.add_argument("--unit", choices=list(THROUGHPUT_UNITS),
                    help="throughput unit of the page, charts and CSVs, instead of the "
                         "run's (its scenario's report.unit; default Gbit/s)")
    rp.set_defaults(fn=cmd_report)
    c = sub.add_parser(
        "compare", help="regression check between two runs (exit 1: regression)",
        description="Regression check between two runs, one verdict per matched point. "
        "Regressed / improved: the geometric-mean throughput moved by --floor or more and "
        "a t on log throughput (noise shrunk toward the grid's, limma's moderated t) is "
        "significant after Holm's correction over all matched points (family-wise 5 %); "
        "failed: every candidate repeat failed while most baseline repeats succeeded. "
        "Same: the 90 % interval lies within +-margin. Undecided: neither, with about how "
        "many repeats a side would decide it; also points with fewer than 3 successful "
        "repeats on a side. Metadata differences (kernel, host, backends, tool versions, "
        "tuning, scenario hash) are printed first.",
        epilog="exit status: 0 no regression (also when some points are only undecided), "
        "1 regression, 2 unusable input (or, with --strict, an environment difference "
        "not named by --expect)")
    c.add_argument("baseline")
    c.add_argument("candidate")
    c.add_argument("--out")
    c.add_argument("--floor", "--threshold", dest="threshold", type=_share, default=0.05,
                   help="magnitude floor: smallest relative change called regressed or "
                   "improved, e.g. 5%% (a bare 0.05 is read as a fraction; default 5%%; "
                   "must not exceed --margin)")
    c.add_argument("--margin", type=_share, default=0.05,
                   help="equivalence margin of 'same', e.g. 5%% (default 5%%)")
    c.add_argument("--strict", action="store_true",
                   help="an environment difference (kernel, host, backend, tool version) "
                   "is bad input: exit 2, nothing written")
    c.add_argument("--expect", action="append", metavar="NAME",
                   help="a metadata difference that is intended, e.g. kernel, tools.xrdcp, "
                   "backend (repeatable)")
    c.add_argument("--pair", metavar="B=C",
                   help="compare the baseline's client configuration B with the "
                   "candidate's C (two releases in one run: give the run twice)")
    c.set_defaults(fn=cmd_compare)
    ex = sub.add_parser("export", help="a run's transfers as JSON, NDJSON or CSV records "
                        "(docs/export-format.md), or posted to an archive over HTTP")
    ex.add_argument("dirs", nargs="+", metavar="DIR", help="run folders (results.sqlite)")
    ex.add_argument("--format", default="ndjson", choices=("json", "ndjson", "csv"),
                    help="default ndjson: one record per line")
    ex.add_argument("--out", help="file to write (default DIR/export.FORMAT; - : standard "
                    "output); with several DIRs each goes to its own folder")
    ex.add_argument("--post", metavar="URL", help="send the records to this http(s) URL "
                    "instead of writing them")
    ex.add_argument("--shape", default="opensearch", choices=("opensearch", "http"),
                    help="opensearch: one POST URL/_bulk; http: one POST URL per record "
                         "(pScheduler's HTTP archiver)")
    ex.add_argument("--index", default="rig-transfers", help="the OpenSearch index")
    ex.add_argument("--token-file", help="a file holding a bearer token for the archive")
    ex.add_argument("--timeout", type=float, default=30.0, help="seconds per request")
    ex.set_defaults(fn=cmd_export)
    h = sub.add_parser(
        "history", help="change points over a series of runs (exit 1: a drop)",
        description="Reads the runs' results.sqlite in the order given (one per release "
        "or night), charts each point's geometric mean with its 95 % interval across the "
        "runs and finds change points: binary segmentation between runs, a permutation "
        "test of the squared t summed over the grid (5 %), the points that changed named "
        "by a t on log throughput with Holm over the points and the magnitude floor.",
        epilog="exit status: 0 no drop, 1 a point dropped by --floor or more at a change "
        "point (with --last: at the last run), 2 unusable input (fewer than 2 runs, runs "
        "of different scenarios)")
    h.add_argument("runs", nargs="+", metavar="RUN")
    h.add_argument("--out", help="output folder (default LAST_RUN/history)")
    h.add_argument("--floor", type=_share, default=0.05,
                   help="smallest relative change called a change, e.g. 5%% (a bare 0.05 "
                   "is read as a fraction; default 5%%)")
    h.add_argument("--last", action="store_true",
                   help="only a drop at the last run sets exit 1 (a nightly job)")
    h.set_defaults(fn=cmd_history)
    n = sub.add_parser("net", help="build a path by hand and leave it running")
    nsub = n.add_subparsers(dest="net_cmd", required=True)
    up = nsub.add_parser("up")
    up.add_argument("--name", required=True)
    up.add_argument("--rtt", default="0ms")
    up.add_argument("--jitter", default="0ms")
    up.add_argument("--loss", default="0%", help="random loss on the data direction, "
                    "server -> client (as a scenario's loss:), e.g. 0.5%%")
    up.add_argument("--reverse-loss", help="random loss on the client -> server direction "
                    "(requests, ACKs); default none")
    up.add_argument("--rate")
    up.add_argument("--cc", help="congestion control in the client and server namespaces "
                    "(as tuning.congestion_control)")
    up.add_argument("--rmem", help="tcp_rmem max, e.g. 64MiB (as tuning.tcp_rmem_max)")
    up.add_argument("--wmem", help="tcp_wmem max (as tuning.tcp_wmem_max)")
    up.add_argument("--mtu", help="MTU of the path's links (as tuning.mtu)")
    up.add_argument("--tuning", metavar="FILE", help="YAML with a scenario's tuning: keys "
                    "(the options above win); the JSON printed says the window it implies "
                    "(window_bytes, window_bound_bps_at_rtt)")
    up.add_argument("--backend", default="auto", help="auto | netem | userspace | none")
    up.add_argument("--ip", default="4", choices=("4", "6"),
                    help="address family (6: the rig's fd72:6967::/96, as a path's ip: 6)")
    up.add_argument("--owner-pid", type=int, help="the path lives until this process exits "
                    "(default: the shell or script that ran rig net up, past sudo & co. and "
                    "subshells; 1: until rig net down)")
    down = nsub.add_parser("down")
    down.add_argument("--name", required=True)
    nsub.add_parser("list")
    n.set_defaults(fn=cmd_net)
    cl = sub.add_parser("clean", help="remove what a killed run left behind (rig's own only)")
    cl.add_argument("--force", action="store_true",
                    help="also remove what is in use: live runs and net up paths")
    cl.set_defaults(fn=cmd_clean)
    co = sub.add_parser("completion", help="print the bash completion script (. <(rig "
                        "completion bash)) or the man page (rig completion man > rig.1), "
                        "both generated from this parser")
    co.add_argument("what", choices=("bash", "man"))
    co.set_defaults(fn=cmd_completion)
    _verbosity_options(p)
    return p


def _verbosity_options(p: argparse.ArgumentParser, top: bool = True) -> None:
    """-v/--verbose and -q/--quiet on `rig` and on every command under it (given after
    the command's name, they win: a command's parser leaves them unset otherwise)."""
    d: dict = {} if top else {"default": argparse.SUPPRESS}
    p.add_argument("-v", "--verbose", action="count", help="more: each command a run "
                   "starts, as it starts; every report file", **({"default": 0} if top else d))
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines: the "
                   "result and errors only", **({"default": False} if top else d))
    for act in p._actions:
        if isinstance(act, argparse._SubParsersAction):
            for sp in dict.fromkeys(act.choices.values()):
                _verbosity_options(sp, top=False)


def cmd_completion(a) -> int:
    from rig import cli_docs
    sys.stdout.write(cli_docs.bash_completion(parser()) if a.what == "bash"
                     else cli_docs.man_page(parser()))
    return 0


def program(argv: list[str] | None = None) -> int:
    p = parser()
    a = p.parse_args(argv)
    if a.verbose and a.quiet:
        p.error("-v and -q: give one")
    from rig.orchestration.reporter import set_verbosity
    set_verbosity(-1 if a.quiet else a.verbose)
    _paths(a)
    return a.fn(a)


CLOSED_STDOUT = 128 + 13     # 141, as a shell reports `cat` killed by SIGPIPE


def _closed_stdout() -> int:
    """stdout's reader went away (`rig plan ... | head`): end quietly, as cat does. Later
    writes (and the interpreter's flush at exit) go to /dev/null."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    finally:
        os.close(devnull)
    return CLOSED_STDOUT


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            code = program(argv)
        except SystemExit:       # --help or a usage error: argparse printed and exits;
            sys.stdout.flush()   # a closed stdout is ours to report (Python < 3.11.4: 120)
            raise
        sys.stdout.flush()
    except BrokenPipeError:
        code = _closed_stdout()
    except InputError as e:
        for line in str(e).splitlines() or [""]:     # InputErrors: one line per defect
            print(clip(f"rig: {line}"), file=sys.stderr)
        code = ExitStatus.BAD_INPUT
    except RigError as e:
        print(clip(f"rig: {e}"), file=sys.stderr)
        code = e.exit_status
    except OSError as e:         # the environment said no where no layer expected it
        where = f"{quote(e.filename)}: " if e.filename else ""
        print(clip(f"rig: {where}{e.strerror or e}"), file=sys.stderr)
        code = ExitStatus.ERROR
    except KeyboardInterrupt as e:
        print(f"rig: interrupted ({e or 'Ctrl-C'}); everything the rig made was removed",
              file=sys.stderr)
        code = 130
    sys.exit(int(code))
