"""Tests of cluster/wire.py (run by `make test`): the argument parsers, and a real
wirefilter between two vde_switches on unix sockets in a temporary directory
(no network, no guests) changed through its management socket as `vcluster.py
fault` and `partition` do."""

import shutil
import subprocess
import tempfile
import time
import unittest
from pathlib import Path

from litebench.cluster import wire


class ParseTest(unittest.TestCase):
    def test_sizes_are_powers_of_1024_as_wirefilter_takes_them(self):
        self.assertEqual(wire.parse_bytes("4M"), 4 << 20)
        self.assertEqual(wire.parse_bytes("4MB/s"), 4 << 20)
        self.assertEqual(wire.parse_bytes("512K"), 512 << 10)
        self.assertEqual(wire.parse_bytes("1000"), 1000)
        self.assertRaises(ValueError, wire.parse_bytes, "fast")

    def test_bottleneck_defaults_to_a_deep_queue(self):
        self.assertEqual(wire.parse_bottleneck("1:4M"), (1, 4 << 20, wire.DEFAULT_QUEUE))
        self.assertEqual(wire.parse_bottleneck("2:1M:8M"), (2, 1 << 20, 8 << 20))
        for bad in ("4M", "x:4M", "1:4M:8M:9"):
            self.assertRaises(ValueError, wire.parse_bottleneck, bad)

    def test_faults_become_management_commands(self):
        self.assertEqual(wire.fault_commands(["loss=1%", "burst=4", "dup=0.5%", "delay=5ms+2", "noise=8"]),
                         ["loss 1", "lostburst 4", "dup 0.5", "delay 5+2U", "noise 8"])
        for bad in (["loss=150%"], ["jitter=3"], ["loss"]):
            self.assertRaises(ValueError, wire.fault_commands, bad)

    def test_noise_takes_a_direction_and_stays_where_wirefilter_does_not_hang(self):
        self.assertEqual(wire.fault_commands(["noise=RL300", "noise=lr5"]), ["noise RL300", "noise LR5"])
        for bad in (["noise=700"], ["noise=RL1000"], ["noise=XY3"], ["noise=-1"]):
            self.assertRaises(ValueError, wire.fault_commands, bad)


@unittest.skipUnless(shutil.which("wirefilter") and shutil.which("vde_switch"), "vde2 not installed")
class WirefilterTest(unittest.TestCase):
    def setUp(self):
        self.dir = Path(tempfile.mkdtemp(prefix="vwire-"))
        self.procs = []
        for name in ("segment", "port"):
            self._start(f"tail -f /dev/null | exec vde_switch -s {self.dir / name} -m 700", self.dir / name / "ctl")
        self.mgmt = self.dir / "mgmt"
        self._start(f"tail -f /dev/null | exec wirefilter -v {self.dir / 'segment'}:{self.dir / 'port'} "
                    f"-M {self.mgmt} -s 4194304", self.mgmt)

    def _start(self, command, ready):
        self.procs.append(subprocess.Popen(["sh", "-c", command], start_new_session=True,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.time() + 10
        while not ready.exists():
            self.assertLess(time.time(), deadline, f"{command} did not start")
            time.sleep(0.05)

    def tearDown(self):
        for p in self.procs:
            subprocess.run(["pkill", "-KILL", "-s", str(p.pid)], check=False)
            p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def assertClose(self, both_ways, want):
        """Both directions of a setting within wirefilter's 6 printed digits of `want`."""
        for value in both_ways.split("/"):
            self.assertLess(abs(wire.base(value) - want) / want, 1e-5, both_ways)

    def test_settings_show_the_limits_it_started_with(self):
        st = wire.settings(self.mgmt)
        self.assertEqual(st["loss"], "0+0U/0+0U")
        self.assertClose(st["rate"], 4 << 20)

    def test_faults_change_the_running_wire(self):
        wire.apply(self.mgmt, wire.fault_commands(["loss=1%", "dup=0.5%", "delay=5ms+2"]))
        st = wire.settings(self.mgmt)
        self.assertEqual(st["loss"], "1+0U/1+0U")
        self.assertEqual(st["dup"], "0.5+0U/0.5+0U")
        self.assertEqual(st["delay"], "5+2U/5+2U")

    def test_partition_loses_everything_then_restores_the_loss(self):
        wire.apply(self.mgmt, ["loss 2"])
        seen = []
        wire.partition(self.mgmt, 0.2, log=lambda m: seen.append((m, wire.settings(self.mgmt)["loss"])))
        self.assertEqual(seen[0][1], "100+0U/100+0U")
        self.assertEqual(wire.settings(self.mgmt)["loss"], "2+0U/2+0U")

    def test_a_refused_command_raises(self):
        self.assertRaises(RuntimeError, wire.apply, self.mgmt, ["no-such-command 1"])
