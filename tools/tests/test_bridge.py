"""Tests of the bridge segment's scripts (cluster/bridge.py; run by `make test`)."""

import unittest

from litebench.cluster import bridge


class SetupScriptTest(unittest.TestCase):
    def test_a_bottleneck_node_sits_behind_a_veth_shaped_both_ways(self):
        script = bridge.port_script(1, (1 << 20, 2 << 20))
        self.assertIn("ip link set tap1 mtu 9000 master br1 up", script)
        self.assertIn("ip link add wseg1 type veth peer name wnode1", script)
        # 1 MiB/s is 8388608 bit/s; a 2 MiB FIFO; a bucket of two jumbo frames.
        for dev in ("wseg1", "wnode1"):
            self.assertIn(f"tc qdisc add dev {dev} root tbf rate 8388608bit burst 18400 limit 2097152", script)
        self.assertIn("ip link set tap0 mtu 9000 master seg up", bridge.port_script(0))
        self.assertNotIn(" br", bridge.port_script(0))

    def test_a_node_that_boots_again_keeps_its_port(self):
        self.assertEqual(bridge.port_script(2).splitlines()[1], "ip link show tap2 >/dev/null 2>&1 && exit 0")

    def test_the_scripts_stop_at_the_first_failure(self):
        self.assertTrue(bridge.setup_script().startswith("set -e\n"))
        self.assertTrue(bridge.port_script(0).startswith("set -e\n"))
