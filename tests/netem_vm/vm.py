"""Boot Debian's stock kernel (which has sch_netem) in qemu and run the rig inside it.

The host kernel of this project's machines has no sch_netem, so the netem backend could
never run here. This driver:
1. fetches the versioned kernel package linux-image-amd64 depends on with
   `apt-get download` and unpacks it with `dpkg-deb -x` into a cache directory (no
   kernel is installed on the host, /boot is never touched), runs `busybox depmod` there;
2. builds a tiny initramfs (static busybox, the modules needed to reach the root: virtio,
   9p, overlay, and an /init) as a newc cpio written in Python;
3. boots it under TCG (`-nographic -no-reboot`, no network device at all): /init mounts
   the host's `/` read-only over virtio-9p, puts a tmpfs overlay on top (every write
   stays in the guest), mounts the unpacked modules on /lib/modules (so the kernel can
   autoload sch_netem, veth ... through busybox modprobe), a writable 9p share for
   results, switches root and runs `guest.py` from this worktree with its venv;
4. waits with a deadline (rig.process.proc: new session, TERM/KILL of qemu's group on timeout)
   and returns guest.py's JSON.

Usage: python -m tests.netem_vm.vm [--out DIR]   (from the worktree, as root)
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import stat
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKTREE = HERE.parents[1]
sys.path.insert(0, str(WORKTREE))

from rig.process import proc  # noqa: E402

CACHE = Path(os.environ.get("RIG_NETEMVM_CACHE",
                            Path(os.environ.get("XDG_CACHE_HOME", "/root/.cache"))
                            / "rig" / "netem-vm"))
BUSYBOX = Path("/bin/busybox")
# Needed before the root is mounted; everything else is autoloaded inside the guest.
BOOT_MODULES = ("virtio_pci", "virtio_rng", "9pnet_virtio", "9p", "overlay")
# A hang guard, at least twice the loaded time: on a shared 2-vCPU VM the tier took 664 s
# of a former 900 s deadline (issue 43); TCG emulates every guest instruction, so another
# process's load stretches it more than the host tiers.
VM_TIMEOUT_S = float(os.environ.get("RIG_NETEMVM_TIMEOUT", "1800"))
VM_CPUS = int(os.environ.get("RIG_NETEMVM_CPUS", "2"))
VM_MEM_MB = int(os.environ.get("RIG_NETEMVM_MEM", "2048"))


def kernel_package(timeout: float = 60.0) -> str:
    """The versioned package linux-image-amd64 depends on, e.g. linux-image-6.1.0-56-amd64."""
    r = proc.run(["apt-cache", "depends", "linux-image-amd64"], timeout=timeout, check=True)
    m = re.search(r"Depends:\s*(linux-image-[0-9][^\s]*)", r.stdout)
    if not m:
        raise RuntimeError(f"apt-cache depends linux-image-amd64: no kernel package in {r.stdout!r}")
    return m.group(1)


def fetch_kernel(cache: Path = CACHE) -> tuple[Path, Path, str]:
    """(vmlinuz, modules root dir holding <version>/, version), downloaded once."""
    pkg = kernel_package()
    version = pkg.removeprefix("linux-image-")
    root = cache / pkg
    vmlinuz = root / "boot" / f"vmlinuz-{version}"
    moddir = root / "lib" / "modules"
    if not (moddir / version / "modules.dep").exists():
        dl = cache / "deb"
        dl.mkdir(parents=True, exist_ok=True)
        debs = sorted(dl.glob(f"{pkg}_*.deb"))
        if not debs:
            _download(pkg, dl)
            debs = sorted(dl.glob(f"{pkg}_*.deb"))
        shutil.rmtree(root, ignore_errors=True)
        proc.run(["dpkg-deb", "-x", str(debs[-1]), str(root)], timeout=600, check=True)
        proc.run([str(BUSYBOX), "depmod", "-b", str(root), version], timeout=300, check=True)
    if not vmlinuz.exists():
        raise RuntimeError(f"{vmlinuz} missing after unpacking {pkg}")
    return vmlinuz, moddir, version


def _download(pkg: str, dest: Path) -> None:
    """`apt-get download` writes into its working directory: run it from dest."""
    proc.run(["env", f"--chdir={dest}", "apt-get", "download", pkg], timeout=900, check=True)


def parse_modules_dep(text: str) -> dict[str, list[str]]:
    """modules.dep -> {relative path: [dependency paths]} (pure)."""
    deps: dict[str, list[str]] = {}
    for line in text.splitlines():
        if ":" in line:
            mod, rest = line.split(":", 1)
            deps[mod.strip()] = rest.split()
    return deps


def load_order(deps: dict[str, list[str]], wanted: list[str]) -> list[str]:
    """Module paths to insmod, every dependency before its user (pure)."""
    by_name = {Path(p).name.split(".ko")[0].replace("-", "_"): p for p in deps}
    out: list[str] = []

    def visit(path: str, stack: tuple[str, ...] = ()) -> None:
        if path in out:
            return
        if path in stack:
            raise ValueError(f"module dependency cycle at {path}")
        for d in deps.get(path, []):
            visit(d, stack + (path,))
        out.append(path)

    for name in wanted:
        key = name.replace("-", "_")
        if key not in by_name:
            raise KeyError(f"module {name} not in modules.dep")
        visit(by_name[key])
    return out


def newc_cpio(entries: list[tuple[str, int, bytes]]) -> bytes:
    """A newc ("070701") cpio archive of (name, mode, data) entries; directories have
    stat.S_IFDIR modes and empty data, symlinks S_IFLNK and the target as data (pure)."""
    out = bytearray()

    def add(name: str, mode: int, data: bytes, ino: int) -> None:
        nb = name.encode() + b"\0"
        fields = [ino, mode, 0, 0, 2 if stat.S_ISDIR(mode) else 1, 0, len(data),
                  0, 0, 0, 0, len(nb), 0]
        out.extend(b"070701" + b"".join(b"%08X" % f for f in fields))
        out.extend(nb)
        out.extend(b"\0" * (-len(out) % 4))
        out.extend(data)
        out.extend(b"\0" * (-len(out) % 4))

    for i, (name, mode, data) in enumerate(entries, start=1):
        add(name, mode, data, i)
    add("TRAILER!!!", 0, b"", 0)
    return bytes(out)


INIT = r"""#!/bin/busybox sh
# initramfs /init of the netem VM: modules, 9p root + tmpfs overlay, results share.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
say() { echo "rigvm-init: $*" > /dev/console; }
for m in $(cat /boot.modules); do insmod /$m || say "insmod $m failed"; done
mkdir -p /lower /rw /newroot
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=262144 hostroot /lower \
  || { say "cannot mount the host root"; poweroff -f; }
mount -t tmpfs -o mode=755 rw /rw
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot \
  || { say "cannot mount the overlay"; poweroff -f; }
mkdir -p /newroot/lib/modules /newroot/rigvm-out
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 mods /newroot/lib/modules
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 rigout /newroot/rigvm-out
rm -f /newroot/sbin/modprobe && ln -s /bin/busybox /newroot/sbin/modprobe
echo /sbin/modprobe > /proc/sys/kernel/modprobe
mount --move /proc /newroot/proc
mount --move /sys /newroot/sys
mount --move /dev /newroot/dev
say "switching root at $(cut -d' ' -f1 /newroot/proc/uptime) s"
exec switch_root /newroot /bin/busybox sh /rigvm-out/stage2.sh
"""

STAGE2 = r"""# stage 2, in the guest's overlay root: writable dirs, then guest.py, then power off.
# The checkout may live below a directory that gets a tmpfs here (a CI clone in /tmp):
# keep it visible by binding it aside first and back into place after.
mkdir -p /.rigwt && mount --bind {worktree} /.rigwt
mount -t tmpfs -o mode=755 tmpfs /run
mount -t tmpfs -o mode=1777 tmpfs /tmp
mkdir -p /dev/pts /dev/shm /etc/netns
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /var/tmp
# the host's /etc/netns holds the files of its own live runs: not the guest's
mount -t tmpfs -o mode=755 tmpfs /etc/netns
mkdir -p {worktree} && mount --bind /.rigwt {worktree}
hostname rigvm
# xrootd resolves its own host name and stops when it cannot (the host's /etc/hosts
# knows only the host's name): the overlay's copy learns the guest's
echo '127.0.1.1 rigvm' >> /etc/hosts
ip link set lo up
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
export PYTHONDONTWRITEBYTECODE=1 LANG=C.UTF-8
echo "rigvm-stage2: guest.py starting at $(cut -d' ' -f1 /proc/uptime) s" > /dev/console
cd {worktree}
{python} {guest} --out /rigvm-out {args} > /rigvm-out/guest.log 2>&1
echo $? > /rigvm-out/guest.rc
echo "rigvm-stage2: guest.py done (rc $(cat /rigvm-out/guest.rc)) at $(cut -d' ' -f1 /proc/uptime) s" > /dev/console
sync
poweroff -f
"""


def build_initramfs(moddir: Path, version: str, dest: Path) -> Path:
    deps = parse_modules_dep((moddir / version / "modules.dep").read_text())
    order = load_order(deps, list(BOOT_MODULES))
    entries: list[tuple[str, int, bytes]] = []
    dirs = {"bin", "proc", "sys", "dev", "lib", "lower", "rw", "newroot"}
    for m in order:
        p = Path("lib/modules") / version / m
        dirs.update(str(x) for x in p.parents if str(x) != ".")
    for d in sorted(dirs, key=lambda s: (s.count("/"), s)):
        entries.append((d, stat.S_IFDIR | 0o755, b""))
    entries.append(("bin/busybox", stat.S_IFREG | 0o755, BUSYBOX.read_bytes()))
    entries.append(("bin/sh", stat.S_IFLNK | 0o777, b"busybox"))
    entries.append(("init", stat.S_IFREG | 0o755, INIT.encode()))
    mods = [f"lib/modules/{version}/{m}" for m in order]
    entries.append(("boot.modules", stat.S_IFREG | 0o644, ("\n".join(mods) + "\n").encode()))
    for m, rel in zip(order, mods):
        entries.append((rel, stat.S_IFREG | 0o644, (moddir / version / m).read_bytes()))
    dest.write_bytes(newc_cpio(entries))
    return dest


def qemu_argv(vmlinuz: Path, initrd: Path, moddir: Path, out: Path, console: Path) -> list[str]:
    """No network device at all (-nic none): rig traffic stays in the guest's namespaces."""
    fs = "local,security_model=none,multidevs=remap"
    return ["qemu-system-x86_64", "-machine", "q35", "-accel", "tcg,thread=multi",
            "-cpu", "max", "-smp", str(VM_CPUS), "-m", str(VM_MEM_MB),
            "-nographic", "-no-reboot", "-nodefaults", "-no-user-config", "-nic", "none",
            "-monitor", "none", "-serial", f"file:{console}",
            "-kernel", str(vmlinuz), "-initrd", str(initrd),
            "-append", "console=ttyS0 panic=-1 loglevel=4 rdinit=/init",
            "-device", "virtio-rng-pci",
            "-virtfs", f"{fs},path=/,mount_tag=hostroot,readonly=on",
            "-virtfs", f"{fs},path={moddir},mount_tag=mods,readonly=on",
            "-virtfs", f"{fs},path={out},mount_tag=rigout"]


def run_vm(out: Path, guest_args: list[str] | None = None,
           timeout: float = VM_TIMEOUT_S) -> dict:
    """Boot, run guest.py, return its JSON plus host-side timings (t_*_s)."""
    t0 = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    for f in ("result.json", "guest.log", "guest.rc", "console.log"):
        (out / f).unlink(missing_ok=True)
    vmlinuz, moddir, version = fetch_kernel()
    t_fetch = time.monotonic() - t0
    initrd = build_initramfs(moddir, version, CACHE / f"initramfs-{version}.cpio")
    venv_py = WORKTREE / ".venv" / "bin" / "python"
    (out / "stage2.sh").write_text(STAGE2.format(
        worktree=WORKTREE, python=venv_py, guest=HERE / "guest.py",
        args=" ".join(guest_args or [])))
    console = out / "console.log"
    t1 = time.monotonic()
    res = proc.run(qemu_argv(vmlinuz, initrd, moddir, out, console), timeout=timeout)
    t_vm = time.monotonic() - t1
    log = console.read_text(errors="replace") if console.exists() else ""
    rpath = out / "result.json"
    result = json.loads(rpath.read_text()) if rpath.exists() else {}
    result["host"] = {"kernel_package": f"linux-image-{version}", "t_fetch_s": t_fetch,
                      "t_vm_s": t_vm, "t_total_s": time.monotonic() - t0,
                      "qemu_rc": res.returncode, "qemu_timed_out": res.timed_out,
                      "qemu_stderr": res.stderr[-2000:], "guest_rc": _read(out / "guest.rc"),
                      "vcpus": VM_CPUS, "mem_mb": VM_MEM_MB}
    m = re.search(r"switching root at ([0-9.]+) s", log)
    result["host"]["t_boot_s"] = float(m.group(1)) if m else None
    (out / "result.json").write_text(json.dumps(result, indent=2))
    return result


def _read(p: Path) -> str | None:
    return p.read_text().strip() if p.exists() else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/rig-netemvm-out")
    ap.add_argument("guest_args", nargs="*")
    a = ap.parse_args()
    r = run_vm(Path(a.out), a.guest_args)
    print(json.dumps(r, indent=2))
    return 0 if r.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
