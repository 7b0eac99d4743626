"""Apache httpd (Debian apache2): HTTP with byte ranges and multi-range, its own config,
pid, mutex and log paths in the run directory; started in the foreground (-DFOREGROUND,
the parent stays the process the rig supervises) and stopped like nginx (TERM to the
group). HTTPS (mod_ssl) on a second port, a virtual host of its own, when the plan has
TLS material (the run's certificate; the key read by the root parent before it drops to
www-data). Pure: config text and argv only."""
from __future__ import annotations

from rig.netaddr import hostport
from rig.services.servers import (TLS_CERT, TLS_KEY, UPLOAD_DIR, ServerKind, ServerPlan,
                                  register)

MODULES = "/usr/lib/apache2/modules"


@register
class Apache(ServerKind):
    """apache2 -DFOREGROUND with a config of its own; ranges unlimited (MaxRanges)."""
    kind = "apache"
    writes = True                # uploads into UPLOAD_DIR
    ports = {"http": 8070}
    tls_ports = {"https": 8473}
    version_argv = ["apache2", "-v"]
    # EnableSendfile: httpd's default (Off) is Debian's, whose apache2.conf leaves it
    # unset. With either, Apache held a multi-range answer's last segment for one RTT in
    # some runs (docs/caching-modes.md, "One more round trip per fill").
    settings = {"sendfile": False}

    def files(self, p: ServerPlan) -> dict[str, str]:
        w = p.workdir
        sendfile = "On" if self.setting(p, "sendfile") else "Off"
        # MaxRanges: Apache answers more than 200 ranges with the whole file by default;
        # LimitRequestFieldSize: a vector read's Range header passes 8 KB
        tls = (f"""LoadModule ssl_module {MODULES}/mod_ssl.so
LoadModule socache_shmcb_module {MODULES}/mod_socache_shmcb.so
SSLSessionCache shmcb:{w / 'ssl_scache'}(512000)
Listen {hostport(p.addr, p.ports['https'])}
<VirtualHost {hostport(p.addr, p.ports['https'])}>
    SSLEngine on
    SSLCertificateFile {w / TLS_CERT}
    SSLCertificateKeyFile {w / TLS_KEY}
</VirtualHost>
""" if p.tls else "")
        # uploads: mod_dav's PUT into upload/; its lock database where www-data may write
        up = p.datadir / UPLOAD_DIR
        put = (f"""LoadModule dav_module {MODULES}/mod_dav.so
LoadModule dav_fs_module {MODULES}/mod_dav_fs.so
DavLockDB {up / ('.davlock-' + p.instance)}
<Directory {up}>
    Dav On
    LimitRequestBody 0
</Directory>
""" if p.uploads else "")
        return {**self.tls_files(p), "apache2.conf": f"""ServerRoot {w}
ServerName rig-apache
LoadModule mpm_event_module {MODULES}/mod_mpm_event.so
LoadModule authz_core_module {MODULES}/mod_authz_core.so
Listen {hostport(p.addr, p.ports['http'])}
PidFile {w / 'apache2.pid'}
DefaultRuntimeDir {w}
Mutex file:{w} default
ErrorLog {w / 'apache-error.log'}
LogLevel warn
User www-data
Group www-data
StartServers 1
ServerLimit 2
ThreadsPerChild 32
MaxRequestWorkers 64
KeepAlive On
MaxKeepAliveRequests 0
KeepAliveTimeout 60
EnableSendfile {sendfile}
MaxRanges unlimited
LimitRequestFieldSize 65536
DocumentRoot {p.datadir}
<Directory />
    Require all denied
</Directory>
<Directory {p.datadir}>
    Require all granted
</Directory>
{tls}{put}"""}

    def argv(self, p: ServerPlan) -> list[str]:
        return [p.spec.binary or "apache2", "-DFOREGROUND", "-f", str(p.workdir / "apache2.conf")]
