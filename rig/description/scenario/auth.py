"""Authentication (issue 40 item 3): a server's `auth:` and its clients' `credential:`
checked together. A client of a server with `auth:` presents a credential the rig made
(`valid` unless it says otherwise); a client of an external endpoint presents a file of
the user's (`{proxy: PATH}`), or nothing. Each refusal is one line naming the key.
Pure; imports the description only.
"""
from __future__ import annotations

from typing import Any

from rig.description import kinds, schema as S
from rig.description.scenario.clients import EXTERNAL, ClientSpec, ServerSpec

# which server `auth:` a credential file serves (kinds.CREDENTIAL_FILES)
FILE_AUTH = {"proxy": "x509"}


def presenters(auth: str) -> str:
    return ", ".join(sorted(t.name for t in kinds.CLIENTS.all() if auth in t.caps.auth))


def client_auth(c: ClientSpec, s: ServerSpec) -> str:
    """The authentication a client of server `s` presents: the server's `auth:`, or,
    against an external endpoint, the kind of its credential file (none without one)."""
    if s.kind == EXTERNAL:
        return FILE_AUTH[next(iter(c.credential))] if isinstance(c.credential, dict) else "none"
    return s.auth


def credential(c: ClientSpec, s: ServerSpec) -> str | dict | None:
    """The client's credential as it runs: its own, `valid` against a server with `auth:`
    when it names none, None when it authenticates with nothing."""
    if c.credential is not None:
        return c.credential
    return "valid" if s.kind != EXTERNAL and s.auth != "none" else None


def check_client(cc: S.Ctx, c: ClientSpec, s: ServerSpec) -> None:
    cred = c.credential
    if s.kind == EXTERNAL:
        if isinstance(cred, str):
            raise cc.child("credential").error(
                f"the rig makes {cred} credentials for a server it starts with auth:; "
                f"endpoint {s.name} takes a file of yours, e.g. {{proxy: /tmp/x509up_u1000}}",
                cred)
    elif cred is not None:
        if s.auth == "none":
            raise cc.child("credential").error(
                f"server {s.name} authenticates nobody: give it auth: x509", cred)
        if isinstance(cred, dict):
            raise cc.child("credential").error(
                f"server {s.name} trusts only the run's CA: a file credential is for an "
                f"external endpoint (here: {', '.join(kinds.MADE_CREDENTIALS)})", cred)
    auth = client_auth(c, s)
    if auth == "none":
        return
    if auth not in kinds.client(c.tool).caps.auth:
        raise cc.child("credential" if cred is not None else "tool").error(
            f"{c.tool} cannot present an {auth} credential (can: {presenters(auth)})",
            cred if cred is not None else c.tool)
    if s.kind != EXTERNAL and c.protocol == "http" and c.tls not in (None, "all"):
        raise cc.child("tls").error(f"server {s.name} (auth: {auth}) takes a client "
                                    "certificate over HTTPS only: tls: all", c.tls)


def check(ctx: S.Ctx, sc: Any) -> None:
    """A server with `auth:` runs on this host: its CA directory, VOMS directory and the
    clients' proxies are the run's local files (not copied to another host)."""
    from rig.description.scenario.paths import LOCAL
    for i, s in enumerate(sc.servers):
        if s.auth == "none":
            continue
        far = [p.name for p in sc.paths if p.server_host not in (None, LOCAL)
               or p.client_host not in (None, LOCAL)]
        if far:
            raise ctx.child("servers").child(i).child("auth").error(
                f"path {far[0]} runs on another host: auth: {s.auth} runs on this host "
                "only (not yet on hosts:)", s.auth)


def needs_https(sc: Any, c: ClientSpec) -> bool:
    """An HTTP client of a server with `auth:` presents its proxy over HTTPS (its TLS
    mode is `all`, whatever the sweep says)."""
    s = next((s for s in sc.servers if s.name == c.server), None)
    return s is not None and s.kind != EXTERNAL and s.auth != "none" and c.protocol == "http"
