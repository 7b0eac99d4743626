"""Userspace link-emulation engine: netem-like delay, jitter, loss and duplication for
kernels without sch_netem, applied to packets the kernel hands over through NFQUEUE.

core.py (sans-IO scheduling, pure) · nfq.py (netlink binding) · mmsg.py (recvmmsg) ·
timer.py (timerfd) · server.py (asyncio process) · control.py (control-channel client) ·
__main__.py (entry).
Must not import services, orchestration or reports.
"""
