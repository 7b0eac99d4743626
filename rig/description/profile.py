"""Link profiles: what an emulated path does to packets, per direction.

Pure data shared by every emulation backend (netem, userspace engine). Validated in
__post_init__; no I/O, no imports from the rest of rig except errors.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

JITTER_DISTS = ("uniform", "normal")
MTU_WIRE_BYTES = 1514          # Ethernet frame for a 1500-byte MTU packet


@dataclass(frozen=True)
class GilbertElliott:
    """Two-state burst loss (netem `loss gemodel p r 1-h 1-k`).

    p: P(good -> bad), r: P(bad -> good), loss_good: loss prob in good state (1-k),
    loss_bad: loss prob in bad state (1-h).
    """
    p: float
    r: float
    loss_bad: float = 1.0
    loss_good: float = 0.0

    def __post_init__(self) -> None:
        for name in ("p", "r", "loss_bad", "loss_good"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"gemodel {name} must be within 0..1")
        if self.r == 0.0 and self.p > 0.0:
            raise ValueError("gemodel r must be > 0 (the bad state must end)")

    def mean_loss(self) -> float:
        if self.p + self.r == 0:
            return self.loss_good
        pi_bad = self.p / (self.p + self.r)
        return pi_bad * self.loss_bad + (1 - pi_bad) * self.loss_good


@dataclass(frozen=True)
class Direction:
    """What happens to packets travelling one way through the router."""
    delay_s: float = 0.0
    jitter_s: float = 0.0
    jitter_dist: str = "uniform"
    reorder: bool = False            # False: order-preserving jitter (netem default w/ rate)
    loss: float = 0.0                # random loss probability per packet
    gemodel: GilbertElliott | None = None
    duplicate: float = 0.0
    rate_bps: float | None = None    # None: unlimited
    queue_pkts: int | None = None    # None: sized from the bandwidth-delay product

    def __post_init__(self) -> None:
        if self.delay_s < 0 or self.jitter_s < 0:
            raise ValueError("delay and jitter must be >= 0")
        if self.jitter_s > self.delay_s and self.jitter_s > 0:
            raise ValueError("jitter must not exceed the one-way delay")
        if self.jitter_dist not in JITTER_DISTS:
            raise ValueError(f"jitter distribution must be one of {JITTER_DISTS}")
        for name in ("loss", "duplicate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be within 0..1")
        if self.loss and self.gemodel:
            raise ValueError("give either random loss or a gemodel, not both")
        if self.rate_bps is not None and self.rate_bps <= 0:
            raise ValueError("rate must be > 0")
        if self.queue_pkts is not None and self.queue_pkts < 1:
            raise ValueError("queue must hold at least one packet")

    @property
    def mean_loss(self) -> float:
        return self.gemodel.mean_loss() if self.gemodel else self.loss

    @property
    def per_segment(self) -> bool:
        """Must loss or duplication act per wire segment, so a whole GSO packet (up to
        64 KiB) is not one loss event? The userspace engine then asks the kernel for
        segments, netem's senders send one segment per skb."""
        return self.mean_loss > 0 or self.duplicate > 0

    def bdp_packets(self, rtt_s: float, *, fallback_rate_bps: float = 100e9,
                    headroom: float = 2.0, minimum: int = 1000) -> int:
        """Queue limit in packets that never caps throughput: headroom × BDP."""
        if self.queue_pkts is not None:
            return self.queue_pkts
        rate = self.rate_bps or fallback_rate_bps
        bdp = rate / 8.0 * max(rtt_s, 0.001) / MTU_WIRE_BYTES
        return max(minimum, int(headroom * bdp))


@dataclass(frozen=True)
class LinkProfile:
    """Both directions of one emulated path. `forward` is client -> server."""
    forward: Direction = field(default_factory=Direction)
    reverse: Direction = field(default_factory=Direction)

    @classmethod
    def symmetric(cls, rtt_s: float, *, jitter_s: float = 0.0, loss: float = 0.0,
                  rate_bps: float | None = None, queue_pkts: int | None = None,
                  jitter_dist: str = "uniform", loss_both_ways: bool = False,
                  **extra) -> "LinkProfile":
        """Half the RTT each way; loss applied to the data direction (server->client)
        only unless loss_both_ways, so configured loss equals the data-packet loss."""
        half = rtt_s / 2.0
        common = dict(delay_s=half, jitter_s=jitter_s / 2.0 if jitter_s else 0.0,
                      jitter_dist=jitter_dist, rate_bps=rate_bps, queue_pkts=queue_pkts,
                      **extra)
        rev = Direction(loss=loss, **common)
        fwd = Direction(loss=loss if loss_both_ways else 0.0, **common)
        return cls(forward=fwd, reverse=rev)

    @property
    def rtt_s(self) -> float:
        return self.forward.delay_s + self.reverse.delay_s

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "LinkProfile":
        def one(x: dict) -> Direction:
            x = dict(x)
            ge = x.pop("gemodel", None)
            return Direction(gemodel=GilbertElliott(**ge) if ge else None, **x)
        return cls(forward=one(d["forward"]), reverse=one(d["reverse"]))
