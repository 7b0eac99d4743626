"""nginx: HTTP with sendfile, its own config, pid and temp paths in the run directory;
HTTPS on a second port when the plan has TLS material."""
from __future__ import annotations

from rig.netaddr import hostport
from rig.services.servers import (TLS_CERT, TLS_KEY, UPLOAD_DIR, ServerKind, ServerPlan,
                                  register)


@register
class Nginx(ServerKind):
    kind = "nginx"
    writes = True                # uploads into UPLOAD_DIR
    ports = {"http": 8080}
    tls_ports = {"https": 8443}
    version_argv = ["nginx", "-v"]
    # Debian's /etc/nginx/nginx.conf: sendfile on; tcp_nopush on. With both, an answer is
    # written under TCP_CORK with Nagle on, and a multi-range answer's last sub-MSS segment
    # waits one round trip for an ACK (docs/caching-modes.md, "One more round trip ...")
    settings = {"sendfile": True, "tcp_nopush": True}

    def files(self, p: ServerPlan) -> dict[str, str]:
        w = p.workdir
        onoff = {True: "on", False: "off"}
        sendfile, nopush = (onoff[self.setting(p, k)] for k in ("sendfile", "tcp_nopush"))
        tls = (f"""
        listen {hostport(p.addr, p.ports['https'])} ssl;
        ssl_certificate {w / TLS_CERT};
        ssl_certificate_key {w / TLS_KEY};""" if p.tls else "")
        # uploads: PUT into upload/ (the dav module), the body staged on the same tmpfs
        up = p.datadir / UPLOAD_DIR
        put = (f"""
        location /{UPLOAD_DIR}/ {{
            dav_methods PUT;
            client_max_body_size 0;
            client_body_temp_path {up / ('.tmp-' + p.instance)};
        }}""" if p.uploads else "")
        return {**self.tls_files(p), "nginx.conf": f"""daemon off;
master_process on;
worker_processes 2;
user www-data;
pid {w / 'nginx.pid'};
error_log {w / 'nginx-error.log'} warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    sendfile {sendfile};
    tcp_nopush {nopush};
    client_body_temp_path {w / 'tmp'};
    proxy_temp_path {w / 'tmp'};
    fastcgi_temp_path {w / 'tmp'};
    uwsgi_temp_path {w / 'tmp'};
    scgi_temp_path {w / 'tmp'};
    default_type application/octet-stream;
    server {{
        listen {hostport(p.addr, p.ports['http'])};{tls}
        root {p.datadir};{put}
    }}
}}
"""}

    def argv(self, p: ServerPlan) -> list[str]:
        return [p.spec.binary or "nginx", "-e", str(p.workdir / "nginx-error.log"),
                "-p", str(p.workdir), "-c", str(p.workdir / "nginx.conf")]
