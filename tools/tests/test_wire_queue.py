"""Tests of the wire queue sampler and the holder's table (run by `make test`)."""

import struct
import unittest
from unittest import mock

from litebench.cluster import wire_queue
from litebench.qos.flows import HOLDER
from litebench.qos.runner import cpu_busy
from litebench.qos.summary import holder_note, holder_table, sender_cost, sender_table
from qos_fakes import HOLDER_CPU, PROC_STAT, FakeCluster


def diag_message(inode, peer=None, wqueue=0):
    """One sock_diag answer for a unix socket, as the kernel writes it."""
    body = struct.pack("=BBBBIII", 1, 2, 7, 0, inode, 0, 0)
    if peer is not None:
        body += struct.pack("=HHI", 8, wire_queue.UNIX_DIAG_PEER, peer)
    body += struct.pack("=HHII", 12, wire_queue.UNIX_DIAG_RQLEN, 1082, wqueue)
    return struct.pack("=IHHII", 16 + len(body), 20, 2, 1, 0) + body


def qdisc_message(ifindex, parent, backlog):
    """One rtnetlink answer for a qdisc with its queue statistics, as the kernel writes it."""
    queue = struct.pack("=HHIIIII", 24, wire_queue.TCA_STATS_QUEUE, 3, backlog, 0, 0, 0)
    stats2 = struct.pack("=HH", 4 + len(queue), wire_queue.TCA_STATS2 | 0x8000) + queue
    body = struct.pack("=BBHiIII", 0, 0, 0, ifindex, 0x80010000, parent, 1) + struct.pack("=HH4s", 8, 1, b"tbf\0")
    body += stats2
    return struct.pack("=IHHII", 16 + len(body), 36, 2, 1, 0) + body


class WireQueueTest(unittest.TestCase):
    def test_the_dump_names_each_socket_s_peer_and_send_queue(self):
        data = diag_message(10, peer=99, wqueue=4608) + diag_message(11) + struct.pack("=IHHIIi", 20, 3, 2, 1, 0, 0)
        sockets, done = wire_queue.parse_dump(data)
        self.assertTrue(done)
        self.assertEqual(sockets, {10: (99, 4608), 11: (None, 0)})
        self.assertEqual(wire_queue.parse_dump(diag_message(12, 5))[1], False, "more to come")

    def test_a_netlink_error_is_an_oserror(self):
        with self.assertRaises(OSError):
            wire_queue.parse_dump(struct.pack("=IHHIIi", 36, 2, 0, 1, 0, -13) + bytes(16))

    def test_the_qdisc_dump_gives_each_root_qdisc_s_backlog(self):
        data = (qdisc_message(7, wire_queue.TC_H_ROOT, 9014) + qdisc_message(7, 0x80010000, 555)
                + qdisc_message(8, wire_queue.TC_H_ROOT, 0))
        self.assertEqual(wire_queue.parse_qdisc_dump(data), ({7: 9014, 8: 0}, False), "a child qdisc is not the link's")
        self.assertEqual(wire_queue.parse_qdisc_dump(struct.pack("=IHHIIi", 20, 3, 2, 1, 0, 0)), ({}, True))
        with self.assertRaises(OSError):
            wire_queue.parse_qdisc_dump(struct.pack("=IHHIIi", 36, 2, 0, 1, 0, -1) + bytes(16))

    def test_the_bridge_samples_both_veths_in_the_segment_s_namespace(self):
        c = FakeCluster()
        c.meta = {"segment": "bridge", "netns": 4242, "wires": {str(HOLDER): {"rate": 1 << 20, "queue": 1}}}
        spawned = []
        with mock.patch.object(wire_queue.os, "geteuid", return_value=0), \
                mock.patch.object(wire_queue.shutil, "which", return_value="/usr/bin/nsenter"), \
                mock.patch.object(wire_queue, "spawn", lambda netns, options: spawned.append((netns, options[-1]))):
            samplers = wire_queue.start(c, HOLDER, 1)
            self.assertEqual(set(samplers), {"to_node", "from_node"})
            self.assertEqual(sorted(spawned), [(4242, f"wnode{HOLDER}"), (4242, f"wseg{HOLDER}")])
            del c.meta["netns"]
            self.assertEqual(wire_queue.start(c, HOLDER, 1), {}, "no namespace, no sampler")

    def test_the_queue_is_bytes_and_time_on_the_wire(self):
        # Two full frames queued half the time: one frame's wire time on average.
        frames = [0, 2 * wire_queue.FRAME_BYTES] * 50
        s = wire_queue.summarize([(i / 1000, q) for i, q in enumerate(frames)], rate=1_082_000)
        self.assertEqual(s["samples"], 100)
        self.assertEqual(s["bytes"]["mean"], wire_queue.FRAME_BYTES)
        self.assertEqual((s["ms"]["mean"], s["ms"]["p50"], s["ms"]["p99"]), (1.0, 2.0, 2.0))
        self.assertIsNone(wire_queue.summarize([], 1))

    def test_the_timeline_is_the_mean_per_interval(self):
        # 4 ms of queue for the first 0.25 s, none in the next, no sample in the third,
        # 1 ms in the fourth.
        rate = 1_000_000
        samples = ([(i / 1000, 4000) for i in range(250)] + [(0.25 + i / 1000, 0) for i in range(250)]
                   + [(0.8, 1000)])
        s = wire_queue.summarize(samples, rate)
        self.assertEqual(s["interval_ms"], 250)
        self.assertEqual(s["timeline_ms"], [4.0, 0.0, None, 1.0])

    def test_no_wire_no_sampler(self):
        self.assertEqual(wire_queue.start(FakeCluster(), HOLDER, 1), {})
        c = FakeCluster()
        c.meta = {"wires": {str(HOLDER): {"rate": 0, "queue": 1}}}
        self.assertEqual(wire_queue.start(c, HOLDER, 1), {}, "a wire without a rate queues nothing")

    def test_the_tables_show_the_queue_and_the_cpu_a_pass_found(self):
        queue = {"to_node": {"ms": {"mean": 1.5, "p99": 6.25}}, "from_node": {"ms": {"mean": 0.0, "p99": 0.1}}}
        table = holder_table({"sw-pri": {"write": {"wire_queue": queue, "holder_cpu": HOLDER_CPU,
                                                     "sender_cpu": {"busy": 0.95, "softirq": 0.3},
                                                     "sender_cpu_alone": {"busy": 0.55, "softirq": 0.1},
                                                     "host_cpu": {"busy": 0.9}}},
                                "none": {"write": {}}, "hw-sep": {"read": {"holder_cpu": HOLDER_CPU}}})
        self.assertIn("queue to the holder: mean", table)
        self.assertIn("sender CPU busy", table.splitlines()[0])
        self.assertIn("sender CPU, latency alone", table.splitlines()[0])
        self.assertRegex(table.splitlines()[1],
                         r"sw-pri\s+1 MiB write\s+1\.50\s+6\.25\s+0\.00\s+0\.10\s+40%\s+20%\s+95%\s+55%\s+90%$")
        self.assertRegex(table.splitlines()[2], r"hw-sep\s+1 MiB read\s+-\s+-\s+-\s+-\s+40%", "the cpu regime")
        self.assertEqual(len(table.splitlines()), 3, "a pass without either has no row")
        self.assertEqual(holder_table({"none": {"write": {}}}), "")
        note = holder_note(queue, HOLDER_CPU)
        self.assertIn("wire queue to the holder 1.50 ms mean, 6.25 p99", note)
        self.assertIn("holder CPU 40% busy (20% softirq)", note)
        self.assertIn("holder CPU 40% busy (20% softirq); sender CPU 95% busy (30% softirq); host 90% busy",
                      holder_note(queue, HOLDER_CPU, {"busy": 0.9}, {"busy": 0.95, "softirq": 0.3}))
        self.assertIn("sender CPU 95% busy (30% softirq) (55% with the latency flows alone); host 90% busy",
                      holder_note(queue, HOLDER_CPU, {"busy": 0.9}, {"busy": 0.95, "softirq": 0.3},
                                    {"busy": 0.55, "softirq": 0.1}))

    def test_a_sample_with_uptimes_counts_context_switches_and_interrupts_a_second(self):
        # Two CPUs over 5 s (1000 ticks), as runner.PROC_SAMPLE reads them.
        sample = ("100.00 150.00\ncpu  100 0 200 1000 0 0 0 0 0 0\nctxt 5000\n"
                  "softirq 900 0 100 0 200 0 0 50 0 300 250\n"
                  " LOC:       1000        500   Local timer interrupts\n"
                  "105.00 157.00\ncpu  200 0 300 1600 0 0 200 0 0 0\nctxt 7500\n"
                  "softirq 2900 0 600 0 700 0 0 100 0 1300 450\n"
                  " LOC:       2000        1000   Local timer interrupts\n")
        cpu = cpu_busy(sample)
        self.assertEqual({k: cpu[k] for k in HOLDER_CPU}, HOLDER_CPU)
        self.assertEqual((cpu["seconds"], cpu["cpus"], cpu["ctxt_per_s"], cpu["local_timer_per_s"]),
                         (5.0, 2, 500.0, 300.0))
        self.assertEqual(cpu["softirqs_per_s"], {"hi": 0.0, "timer": 100.0, "net_tx": 0.0, "net_rx": 100.0,
                                                 "block": 0.0, "irq_poll": 0.0, "tasklet": 10.0, "sched": 0.0,
                                                 "hrtimer": 200.0, "rcu": 40.0})
        self.assertNotIn("ctxt_per_s", cpu_busy(PROC_STAT), "without uptimes, no rates")

    def test_pacing_s_cost_per_paced_work_request_leaves_out_the_flows_own_work(self):
        def cpu(busy, ctxt, local, timer):
            return {"busy": busy, "cpus": 2, "ctxt_per_s": ctxt, "local_timer_per_s": local,
                    "softirqs_per_s": {"timer": timer, "net_rx": 0.0}, "user": 0.1, "system": 0.1, "softirq": 0.0}
        modes = {"none": {"write": {"sender_cpu": cpu(0.1, 500.0, 100.0, 20.0)}},
                 "sw-pri": {"write": {"sender_cpu": cpu(0.7, 4500.0, 700.0, 20.0),
                                      "sender_cpu_alone": cpu(0.4, 2000.0, 200.0, 0.0),
                                      "pacing": {"paced_wrs_per_s": 200.0, "probes_per_s": 3.0}}}}
        cost = sender_cost(modes)["write"]
        self.assertAlmostEqual(cost["cpu_us"], 2000.0)
        self.assertEqual((cost["ctxt_per_s"], cost["local_timer_per_s"], cost["timer"], cost["net_rx"]),
                         (10.0, 2.0, 0.0, 0.0))
        self.assertEqual(sender_cost({"sw-pri": modes["sw-pri"]}), {}, "nothing to compare with")
        table = sender_table(modes).splitlines()
        self.assertEqual(len(table), 4)
        self.assertRegex(table[3], r"sw-pri\s+1 MiB write\s+beside bulk\s+70% of 2\s+10%\s+10%\s+0%"
                                   r"\s+4500\s+700\s+20\s+0\s+200\s+3$")
        self.assertRegex(table[2], r"sw-pri .*latency alone .* -\s+-$")

    def test_the_holder_s_cpu_is_read_from_two_proc_stat_lines(self):
        self.assertEqual(cpu_busy("noise\n" + PROC_STAT), HOLDER_CPU)
        self.assertIsNone(cpu_busy("cpu  1 2 3 4 5 6 7 8\n"), "one line is no interval")
        self.assertIsNone(cpu_busy("cpu  1 2 3 4 5 6 7 8\ncpu  1 2 3 4 5 6 7 8\n"), "no time passed")
