"""rig: network-emulation and WAN-latency test rig for HEP data transfer."""

__version__ = "0.1.0"
