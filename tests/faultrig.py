"""The fault tier's harness (tests/test_faults.py): a reduced `rig run` in its own
session, its output read as it comes, events waited for (a line, a process in one of the
run's namespaces, a row in results.sqlite), never slept on; and what the run left.

The run's processes are found from the rig's own records: its state file (`/run/rig/
<prefix>.json`, written by the run whose pid it names) and `ip netns pids` of the run's
own namespaces, never by a name across the host."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from rig.realization import data, netns

REPO = Path(__file__).resolve().parent.parent
RIG = [sys.executable, "-m", "rig"]
SCEN = REPO / "tests/data/scenarios/faults-small.yaml"
WAIT_S = 180.0          # generous: a loaded 2-core VM runs these 2-3x slower


class FaultRun:
    def __init__(self, out: Path, scenario: Path = SCEN) -> None:
        self.out = out
        self.p = subprocess.Popen([*RIG, "run", str(scenario), "--out", str(out)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True)
        self.err: list[str] = []
        self.stdout: list[str] = []
        self._threads = [threading.Thread(target=self._pump, args=(s, d), daemon=True)
                         for s, d in ((self.p.stderr, self.err), (self.p.stdout, self.stdout))]
        for t in self._threads:
            t.start()
        self.prefix = self.wait(self._prefix, "the run's state file")

    @staticmethod
    def _pump(stream, dest: list[str]) -> None:
        for line in stream:
            dest.append(line.rstrip("\n"))

    def wait(self, what: Callable[[], object], label: str, timeout: float = WAIT_S):
        """Poll `what` until it returns something true; fail with the run's last lines."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = what()
            if got:
                return got
            if self.p.poll() is not None:
                got = what()
                if got:
                    return got
                raise AssertionError(f"run ended (rc {self.p.returncode}) before {label}: "
                                     + "\n".join(self.err[-8:]))
            time.sleep(0.02)
        raise AssertionError(f"no {label} within {timeout:.0f} s: " + "\n".join(self.err[-8:]))

    def _prefix(self) -> str | None:
        for prefix, st in netns.read_states().items():
            if st.get("pid") == self.p.pid:
                return prefix
        return None

    def state(self) -> dict:
        return netns.read_states().get(self.prefix, {})

    def line(self, text: str, after: int = 0) -> int:
        """Wait for a stderr line holding `text` (from line index `after`); its index."""
        def find() -> int | None:
            for i in range(after, len(self.err)):
                if text in self.err[i]:
                    return i + 1      # 1-based, so a match on line 0 is true
            return None
        return self.wait(find, f"a line with {text!r}") - 1

    def procs(self, node: str, comm: str | None) -> list[int]:
        """Pids of `comm` (None: all) in this run's namespace <prefix>-0<node> (c, r, s)."""
        ns = f"{self.prefix}-0{node}"
        if ns not in netns.list_namespaces():
            return []
        out = []
        for pid in netns.ns_pids(ns):
            try:
                if comm is None or Path(f"/proc/{pid}/comm").read_text().strip() == comm:
                    out.append(pid)
            except OSError:
                continue
        return out

    def rows(self, table: str, where: str = "1") -> list[dict]:
        """Rows already committed to results.sqlite (read-only, while the run writes)."""
        db = self.out / "results.sqlite"
        if not db.exists():
            return []
        try:
            c = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
            try:
                c.row_factory = sqlite3.Row
                return [dict(r) for r in c.execute(f"SELECT * FROM {table} WHERE {where}")]
            finally:
                c.close()
        except sqlite3.OperationalError:
            return []

    def finish(self, timeout: float = 300.0) -> int:
        try:
            self.p.wait(timeout=timeout)
        finally:
            if self.p.poll() is None:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait(timeout=30)
        for t in self._threads:
            t.join(timeout=10)
        return self.p.returncode

    def kill_if_running(self) -> None:
        """A run still going after a failed test: killed, then only its own prefix cleaned
        (never `rig clean --force`, which would end other people's live runs)."""
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait(timeout=30)
            from rig.orchestration.clean import clean
            clean(force=True, say=lambda _: None, prefixes={self.prefix})


def proc_state(pid: int) -> str | None:
    """The kernel's one-letter state of pid (R, S, T, Z, ...), None when gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def leftovers(prefix: str) -> dict:
    """Everything of this run that could outlive it, each kind as a list."""
    procs = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if f"/run/rig/{prefix}/" in cmd or f"{prefix}-" in cmd:
                procs.append(cmd[:120])
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True,
                           timeout=20).stdout
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True, timeout=20).stdout
    return {"ns": [n for n in netns.list_namespaces() if n.startswith(prefix)]
            + [d.name for d in netns.ETC_NETNS.glob(f"{prefix}-*")],
            "mounts": [m for s, m in data.rig_mounts() if s.startswith(prefix)],
            "procs": procs, "state": (netns.STATE_DIR / f"{prefix}.json").exists(),
            "workdir": (netns.STATE_DIR / prefix).exists(),
            "links": [ln for ln in links.splitlines() if prefix in ln],
            "iptables": [ln for ln in rules.splitlines() if prefix in ln]}


CLEAN = {"ns": [], "mounts": [], "procs": [], "state": False, "workdir": False, "links": [],
         "iptables": []}


def end_run(p: subprocess.Popen, sig: int) -> None:
    """End a `rig run` started in its own session: SIGTERM and wait up to 90 s (its group
    SIGKILLed should it outlive that), or SIGKILL its whole group at once."""
    if sig == signal.SIGTERM:
        p.send_signal(signal.SIGTERM)
        try:
            p.communicate(timeout=90)
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    else:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate(timeout=30)
