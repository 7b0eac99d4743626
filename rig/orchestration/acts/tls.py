"""Tls: a CA for this run only (in its work directory, removed with it); the servers'
certificates are signed by it as they start (rig.orchestration.acts.servers)."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from rig.description.scenario.document import Scenario
from rig.orchestration.actions import Action, Item, cmd, comment, text
from rig.orchestration.context import Context
from rig.description.scenario.queries import uses_x509
from rig.realization import tls, x509
from rig.services import servers


@dataclass(frozen=True)
class Tls(Action):
    kind: str = "tls"

    def execute(self, ctx: Context, stack: contextlib.ExitStack) -> None:
        ctx.make_ca()


def items(sc: Scenario, wd: Path, path: str, addr: str) -> list[Item]:
    d = wd / "tls"
    ca = tls.Ca(d, d / "ca.pem", d / "ca.key", d / "certs")
    rsa = uses_x509(sc)
    out = [text(comment(f"TLS: a CA for this run only in {d}"))]
    out += [cmd(tls.ca_argv(d, rsa)), cmd(tls.hash_argv(ca.cert)),
            text(f"# copy {ca.cert} to {ca.hashed_dir}/<hash>.0")]
    if rsa:
        out.append(text(comment(f"X.509: a user, a fake VOMS server, their proxies in "
                                f"{x509.x509_dir(d)} (keys and proxies 0600)")))
        out += [cmd(a) for a in x509.plan_argvs(d)]
        out.append(text(f"# {x509.vomsdir(d) / x509.VO / 'rig-voms.lsc'}: "
                        + " ".join(x509.lsc_text().split("\n")).strip()))
    for spec in sc.servers:
        if servers.get(spec.kind).tls_ports:
            name = f"{path}-{spec.name}"
            out += [cmd(tls.csr_argv(d, name, spec.auth == "x509")),
                    text(f"# {d / (name + '.ext')}: {tls.san(name, addr)}"),
                    cmd(tls.sign_argv(ca, d, name))]
    return out
