"""netem and userspace backends: pure command builders (no root)."""
from __future__ import annotations

from pathlib import Path

import pytest

from rig.realization.emul import netem, userspace
from rig.realization.emul.base import LinkSite
from rig.realization.emul.choose import make_backend
from rig.errors import InputError
from rig.description.profile import Direction, GilbertElliott, LinkProfile

SITE = LinkSite(path="p0", prefix="rig1a2b", router_ns="rig1a2b-0r", to_client_if="rig1a2b0rc",
                to_server_if="rig1a2b0rs", client_net="198.18.0.0/30",
                server_net="198.18.0.4/30", queue_base=4, workdir=Path("/tmp/rigwd"))


def words(argv: list[str]) -> list[str]:
    return argv[argv.index("netem") + 1:]


def test_delay_and_bdp_limit():
    d = Direction(delay_s=0.060)
    argv = netem.netem_argv("rig1a2b-0r", "rig1a2b0rs", d, rtt_s=0.120)
    assert argv[:12] == ["ip", "netns", "exec", "rig1a2b-0r", "tc", "qdisc", "replace",
                         "dev", "rig1a2b0rs", "root", "handle", "1:"]
    w = words(argv)
    assert w[:4] == ["limit", str(d.bdp_packets(0.120)), "delay", "60000us"]
    assert int(w[1]) > 100e9 / 8 * 0.120 / 1514     # at least one BDP at 100 Gbit/s


def test_limit_follows_rate_and_explicit_queue():
    slow = Direction(delay_s=0.025, rate_bps=1e9)
    assert words(netem.netem_argv("n", "d", slow, 0.05))[1] == str(max(1000, int(2 * 1e9 / 8 * 0.05 / 1514)))
    fixed = Direction(delay_s=0.025, queue_pkts=77)
    assert words(netem.netem_argv("n", "d", fixed, 0.05))[1] == "77"


def test_jitter_normal_order_preserving():
    d = Direction(delay_s=0.010, jitter_s=0.002, jitter_dist="normal")
    w = words(netem.netem_argv("n", "d", d, 0.02))
    assert w[2:8] == ["delay", "10000us", "2000us", "distribution", "normal", "rate"]
    assert w[8] == "100000000000bit"


def test_jitter_uniform_with_reorder_has_no_rate_or_distribution():
    d = Direction(delay_s=0.010, jitter_s=0.002, reorder=True)
    w = words(netem.netem_argv("n", "d", d, 0.02))
    assert "distribution" not in w and "rate" not in w
    assert w[2:5] == ["delay", "10000us", "2000us"]


def test_random_loss_and_duplicate():
    d = Direction(delay_s=0.005, loss=0.01, duplicate=0.001)
    w = words(netem.netem_argv("n", "d", d, 0.01))
    assert w[w.index("loss"):] == ["loss", "random", "1%", "duplicate", "0.1%"]


def test_gemodel_percentages_in_netem_order():
    ge = GilbertElliott(p=0.02, r=0.25, loss_bad=0.9, loss_good=0.001)
    w = words(netem.netem_argv("n", "d", Direction(delay_s=0.005, gemodel=ge), 0.01))
    assert w[w.index("loss"):] == ["loss", "gemodel", "2%", "25%", "90%", "0.1%"]


def test_plan_puts_tbf_under_netem_for_rate():
    prof = LinkProfile.symmetric(0.050, rate_bps=1e9)
    cmds = netem.NetemBackend().plan(SITE, prof)
    assert [c[8] for c in cmds] == ["rig1a2b0rs", "rig1a2b0rs", "rig1a2b0rc", "rig1a2b0rc"]
    tbf = cmds[1]
    assert tbf[tbf.index("parent") + 1] == "1:1" and "tbf" in tbf
    assert tbf[tbf.index("rate") + 1] == "1000000000bit"


def test_bad_input_raises():
    with pytest.raises(ValueError):     # an empty ns is a router host's own network
        netem.netem_argv("ns", "", Direction(), 0.0)
    with pytest.raises(ValueError):
        userspace.nfqueue_rule_argv(SITE, "-A", "a", "b", 1)
    with pytest.raises(InputError):
        make_backend("tun")


def test_parse_qdiscs():
    out = ('[{"kind":"netem","handle":"1:","root":true,"options":{"limit":1000},'
           '"bytes":10,"packets":1,"drops":0}]')
    assert netem.parse_qdiscs(out)[0]["kind"] == "netem"
    assert netem.parse_qdiscs("") == []


def test_probe_uses_a_throwaway_namespace():
    argv = netem.netem_probe_argv()
    assert argv[:3] == ["unshare", "--net", "--"] and "netem" in argv


# --- userspace backend commands --------------------------------------------------------

def test_userspace_plan_is_fail_closed_and_prefixed():
    prof = LinkProfile.symmetric(0.040, rate_bps=1e9)
    cmds = userspace.UserspaceBackend(python="/py").plan(SITE, prof)
    engine, *rest = cmds
    assert engine[:4] == ["ip", "netns", "exec", "rig1a2b-0r"]
    assert engine[4:7] == ["/py", "-m", "rig.realization.emul.engine"]
    assert engine[engine.index("--queues") + 1:engine.index("--queues") + 3] == ["4", "5"]
    tbfs = [c for c in rest if "tbf" in c]
    rules = [c for c in rest if "NFQUEUE" in c]
    assert {c[c.index("dev") + 1] for c in tbfs} == {"rig1a2b0rs", "rig1a2b0rc"}
    assert len(rules) == 2
    for r in rules:
        assert "--queue-bypass" not in r
        assert r[r.index("--comment") + 1] == "rig1a2b"
    fwd = next(r for r in rules if r[-1] == "4")
    assert fwd[fwd.index("-i") + 1] == "rig1a2b0rc" and fwd[fwd.index("-o") + 1] == "rig1a2b0rs"


def test_userspace_passthrough_direction_gets_no_rule():
    prof = LinkProfile(forward=Direction(), reverse=Direction(delay_s=0.01))
    rules = [c for c in userspace.UserspaceBackend().plan(SITE, prof) if "NFQUEUE" in c]
    assert [r[-1] for r in rules] == ["5"]
    always = userspace.UserspaceBackend(bypass_passthrough=False)
    assert len([c for c in always.plan(SITE, prof) if "NFQUEUE" in c]) == 2


def test_ipv6_site_uses_ip6tables():
    v6 = LinkSite(**{**SITE.__dict__, "client_net": "fd00::/64"})
    assert userspace.nfqueue_rule_argv(v6, "-I", "a", "b", 1)[4] == "ip6tables"


def _built_site() -> LinkSite:
    from rig.realization import netns
    p = netns.lay_out(netns.default_topology(), "rig1a2b", 0, "p0", "198.18.0.0/24")
    assert p.site is not None
    return p.site


def test_a_lossy_direction_s_senders_send_one_segment_per_skb():
    """netem drops whole skbs; the senders the rig built of a lossy direction are set to
    one segment per skb, so its loss acts per wire segment (as the userspace engine's)."""
    site = _built_site()
    assert (site.client_ends, site.server_ends) == ((("rig1a2b-0c", "rig1a2b0cr"),),
                                                    (("rig1a2b-0s", "rig1a2b0sr"),))
    seg = ["ip", "-n", "rig1a2b-0s", "link", "set", "dev", "rig1a2b0sr", "gso_max_segs", "1"]
    lossy = LinkProfile.symmetric(0.02, loss=0.005)
    assert netem.plan_argv(site, lossy)[-1] == seg
    assert sum("gso_max_segs" in a for a in netem.plan_argv(site, lossy)) == 1
    clean = LinkProfile.symmetric(0.02)
    assert not any("gso_max_segs" in a for a in netem.plan_argv(site, clean))
    ge = LinkProfile(forward=Direction(gemodel=GilbertElliott(0.01, 0.5, 1.0, 0.0)))
    assert [a[2] for a in netem.plan_argv(site, ge) if "gso_max_segs" in a] == ["rig1a2b-0c"]
    # a lab's own end hosts (remote router): nothing of theirs is changed
    assert not any("gso_max_segs" in a for a in netem.plan_argv(SITE, lossy))


def test_segmenting_follows_the_loss_from_step_to_step_and_is_undone(monkeypatch):
    ran: list[list[str]] = []

    class Done:
        ok, stdout = True, "[]"

    monkeypatch.setattr(netem.proc, "run", lambda argv, **kw: ran.append(argv) or Done())
    site, b = _built_site(), netem.NetemBackend()
    lossy = LinkProfile.symmetric(0.02, loss=0.005)
    segs = lambda: [(a[2], a[-1]) for a in ran if "gso_max_segs" in a]   # noqa: E731
    b.apply(site, lossy)
    b.update(site, lossy)
    assert segs() == [("rig1a2b-0s", "1")]
    b.update(site, LinkProfile.symmetric(0.02))
    b.update(site, LinkProfile.symmetric(0.06))
    assert segs() == [("rig1a2b-0s", "1"), ("rig1a2b-0s", "65535")]
    b.remove(site)
    assert len(segs()) == 2
    b.apply(site, lossy)
    b.remove(site)
    assert segs()[-2:] == [("rig1a2b-0s", "1"), ("rig1a2b-0s", "65535")]
