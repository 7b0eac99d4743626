"""sshd (OpenSSH server) for the scp client: SFTP, read-only, of the run's data
directory, with its own config, port, pid file and keys in the instance's run directory.

Per run, `ssh-keygen` makes an ed25519 host key and an ed25519 client key there (their
comments carry the run prefix); the client key's public half is the only authorized key,
and `known_hosts` pins the host key for the client, so nothing prompts and nothing in
/etc/ssh, /root/.ssh or the host's sshd is read or written. The keys go with the run
directory (at the end of a run, on SIGTERM, and by `rig clean`).

sshd runs as www-data (setpriv), not root: a root sshd needs /run/sshd (its privilege
separation directory, the host's), and an unprivileged one can only log in as itself,
which is all a download needs. Its shell being nologin, the session is sshd's built-in
SFTP server (`ForceCommand internal-sftp -R`): OpenSSH 9 scp speaks SFTP by default.
Pure: config text and argv; the one file read is the host key's public half, written by
`prepare_argv` before `files` is asked (`rig plan` shows a placeholder).
"""
from __future__ import annotations

from rig.netaddr import hostport
from rig.services.servers import ServerKind, ServerPlan, register

USER = "www-data"
HOST_KEY, CLIENT_KEY, KNOWN_HOSTS = "ssh-host-key", "ssh-client-key", "known_hosts"
# every cipher OpenSSH 9.2 can still negotiate: the client's `cipher:` picks one
CIPHERS = ("aes128-ctr", "aes192-ctr", "aes256-ctr", "aes128-gcm@openssh.com",
           "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com",
           "aes128-cbc", "aes192-cbc", "aes256-cbc", "3des-cbc")


@register
class Sshd(ServerKind):
    kind = "sshd"
    writes = True                # uploads into UPLOAD_DIR
    ports = {"ssh": 2222}
    version_argv = ["/usr/sbin/sshd", "-V"]
    run_as = USER
    logs = ("stdout.log",)
    private = frozenset({HOST_KEY, CLIENT_KEY})

    def prepare_argv(self, p: ServerPlan) -> list[list[str]]:
        who = f"{p.workdir.parent.name}-{p.origin}"      # the run prefix and the instance
        return [["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{who}-{role}",
                 "-f", str(p.workdir / key)]
                for role, key in (("host", HOST_KEY), ("client", CLIENT_KEY))]

    def files(self, p: ServerPlan) -> dict[str, str]:
        w = p.workdir
        pub = w / f"{HOST_KEY}.pub"
        host_pub = (pub.read_text().strip() if pub.exists()
                    else "<the host key's public half>")
        return {"sshd_config": f"""ListenAddress {hostport(p.addr, p.ports['ssh'])}
HostKey {w / HOST_KEY}
PidFile {w / 'sshd.pid'}
AuthorizedKeysFile {w / CLIENT_KEY}.pub
AllowUsers {USER}
StrictModes no
UsePAM no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
AllowTcpForwarding no
X11Forwarding no
PermitTTY no
PrintMotd no
MaxStartups 256
MaxSessions 256
Ciphers {','.join(CIPHERS)}
Subsystem sftp internal-sftp
ForceCommand internal-sftp{'' if p.uploads else ' -R'} -d {p.datadir}
LogLevel ERROR
""", KNOWN_HOSTS: f"[{p.addr.strip('[]')}]:{p.ports['ssh']} {host_pub}\n"}

    def argv(self, p: ServerPlan) -> list[str]:
        # absolute path: sshd re-executes itself for every connection
        return ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups", "--",
                p.spec.binary or "/usr/sbin/sshd", "-D", "-e", "-f", str(p.workdir / "sshd_config")]

    def url(self, p: ServerPlan, protocol: str, relpath: str, tls: bool = False) -> str:
        return f"sftp://{USER}@{hostport(p.addr, p.ports['ssh'])}/{relpath}"
