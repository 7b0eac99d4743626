"""The commands.log-against-plan matcher (tests/planlog.py): pure, no run."""
from planlog import fills, missing

from rig.orchestration.actions import Action, Plan, cmd


def _plan(*argvs: list[str]) -> Plan:
    return Plan((), (Action("a", "path", tuple(cmd(a) for a in argvs)),))


def test_placeholders_are_filled_and_a_stray_command_is_named():
    plan = _plan(["ip", "netns", "add", "rig0000-0c"],
                 ["ip", "-n", "rig0000-0c", "addr", "add", "198.18.0.1/30", "dev", "x"],
                 ["sysctl", "-q", "-w", "net.ipv4.tcp_rmem=<before>"])
    log = ["ip netns add rig5a5a-0c", "ip -n rig5a5a-0c addr add 198.18.3.1/30 dev x",
           "sysctl -q -w 'net.ipv4.tcp_rmem=4096 131072 6291456'"]
    assert fills(log) == {"rig0000": "rig5a5a", "198.18.0.": "198.18.3."}
    assert missing(plan, log) == []
    stray = ["ip netns del rig5a5a-0c", "ip -n rig5a5a-0c addr add 198.18.0.1/30 dev x"]
    assert missing(plan, log + stray) == stray      # not in the plan; the wrong range


def test_a_placeholder_stands_for_text_inside_one_token_only():
    plan = _plan(["iperf3", "-P", "<streams>", "-t", "1"])
    assert missing(plan, ["iperf3 -P 4 -t 1"]) == []
    assert missing(plan, ["iperf3 -P 4 -t 1 -w 8M"]) == ["iperf3 -P 4 -t 1 -w 8M"]
