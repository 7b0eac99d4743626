"""Two bottlenecks in series, as a Mininet Topo (scenarios/mininet-two-bottlenecks.yaml).

    h1 --- s1 ==(10 ms, 1000 Mbit/s)== s2 ==(20 ms, 500 Mbit/s)== h2

TCLink options: delay is one way (each direction), bw in Mbit/s. The round trip h1-h2
is 2 x (10 + 20) = 60 ms; the capacity is the smaller bw, 500 Mbit/s. The rig reads this
Topo as data and builds it itself (rig.description.mininet): a Linux bridge for each
segment of switches, a router namespace with the rig's emulation for each link with
options. Mininet's own runtime never runs.
"""
from mininet.link import TCLink
from mininet.topo import Topo


class TwoBottlenecks(Topo):
    def build(self, wan_delay="10ms", tail_delay="20ms"):
        h1 = self.addHost("h1")
        h2 = self.addHost("h2")
        s1 = self.addSwitch("s1")
        s2 = self.addSwitch("s2")
        self.addLink(h1, s1)
        self.addLink(s1, s2, cls=TCLink, delay=wan_delay, bw=1000)
        self.addLink(s2, h2, cls=TCLink, delay=tail_delay, bw=500)
