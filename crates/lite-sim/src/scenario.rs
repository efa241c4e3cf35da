//! What one simulation run models: the link, the sender's RNIC and host, the
//! workload, and how long each phase lasts.

use lite_kernel_logic::sw_pri::Mode;
use serde::Serialize;

pub const NS_PER_S: u64 = 1_000_000_000;

/// How the kernel's hrtimer sleeps for tokens end after their expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Slack {
    /// What `lite_sleep_ns` (lite/helpers.c) asks `schedule_hrtimeout_range` for:
    /// an eighth of the sleep, at most 50 µs.
    Module,
    /// A fixed slack (ns): 0 is a real-time task's (the kernel drops the slack of
    /// RT tasks), 50 000 a normal task's default `timer_slack_ns`.
    Fixed(u64),
}

impl Slack {
    /// The timer of a sleep of `sleep_ns` fires this much after its expiry. On an
    /// otherwise idle CPU nothing else fires inside the range, so the hard expiry,
    /// its end, is when it fires.
    pub fn late_ns(self, sleep_ns: u64) -> u64 {
        match self {
            Slack::Module => (sleep_ns / 8).min(50_000),
            Slack::Fixed(ns) => ns,
        }
    }
}

/// One latency-class flow: back-to-back operations of `bytes`, each followed by a
/// pause of `think_ns`.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct LatencyFlow {
    pub bytes: u64,
    pub think_ns: u64,
}

/// The sending host's CPU as the model sees it: fixed costs, no contention.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct HostCosts {
    /// A work request's post, from the task's turn to the RNIC's doorbell.
    pub post_ns: u64,
    /// A sleeping task runs again this long after it was woken (timer, turn,
    /// place or completion); latency-class operations poll and never sleep.
    pub wakeup_ns: u64,
    /// Mean of an exponential extra delay before each latency-class post: the
    /// spread of the host's own time per operation (interrupts, scheduling).
    pub jitter_mean_ns: u64,
    pub slack: Slack,
}

/// How long a run's phases last (ns): the latency flows alone, then bulk beside
/// them. The first fifth of the phase alone, and the first `warmup_ns` beside
/// bulk, are left out of the statistics.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Phases {
    pub alone_ns: u64,
    pub beside_ns: u64,
    pub warmup_ns: u64,
}

impl Phases {
    /// At line rate: 10 ms alone (thousands of operations, enough for the p99
    /// alone, which needs 256), 600 ms beside bulk of which the last 300 count:
    /// the place hold the paced window follows is first measured after 250 ms.
    pub fn line_rate() -> Phases {
        Phases { alone_ns: 10_000_000, beside_ns: 600_000_000, warmup_ns: 300_000_000 }
    }

    /// The statistics' start in the phase alone: the first operations of a run
    /// find everything idle, which later ones alone do not.
    pub fn alone_warmup_ns(&self) -> u64 {
        self.alone_ns / 5
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Scenario {
    pub name: String,
    #[serde(serialize_with = "mode_name")]
    pub mode: Mode,
    /// The bottleneck link's rate, bytes/s (the switch's egress toward the holder);
    /// also the rate the operator sets for SW-Pri (`weights --link-mbps`).
    pub link_rate: u64,
    /// The sender RNIC's rate onto its own port, bytes/s.
    pub nic_rate: u64,
    /// Round trip of a minimal packet through the empty path, without
    /// serialization: propagation, switch and RNIC processing, the ACK.
    pub base_rtt_ns: u64,
    /// Payload bytes per packet (RoCE MTU) and header bytes added to each.
    pub mtu: u64,
    pub header_bytes: u64,
    /// The module's RC QPs to the peer (`qps_per_peer`).
    pub qps: usize,
    pub latency_flows: Vec<LatencyFlow>,
    pub bulk_flows: usize,
    /// Bytes of each bulk transfer (an LT_write); each bulk flow writes back to back.
    pub bulk_bytes: u64,
    pub host: HostCosts,
    pub phases: Phases,
    pub seed: u64,
}

fn mode_name<S: serde::Serializer>(mode: &Mode, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(mode_label(*mode))
}

pub fn mode_label(mode: Mode) -> &'static str {
    match mode {
        Mode::None => "none",
        Mode::SwPri => "sw-pri",
    }
}

/// RoCEv2 over Ethernet: Ethernet, IPv4, UDP, BTH, RETH, ICRC and FCS, plus the
/// preamble and inter-frame gap the wire spends on every frame.
pub const ROCE_HEADER_BYTES: u64 = 14 + 20 + 8 + 12 + 16 + 4 + 4 + 20;

impl Scenario {
    /// Justitia's mixed workload (NSDI'22 §6.1.1): one latency-class flow of 16 B
    /// operations back to back beside `bulk_flows` flows of 1 MiB writes, on a
    /// `gbps` link with a sender RNIC of the same rate.
    pub fn mixed(gbps: u64, bulk_flows: usize, mode: Mode, host: HostCosts, phases: Phases) -> Scenario {
        let link_rate = gbps * NS_PER_S / 8;
        Scenario {
            name: format!("{gbps}G, {bulk_flows} bulk"),
            mode,
            link_rate,
            nic_rate: link_rate,
            base_rtt_ns: 3_000,
            mtu: 4096,
            header_bytes: ROCE_HEADER_BYTES,
            qps: 4,
            latency_flows: vec![LatencyFlow { bytes: 16, think_ns: 0 }],
            bulk_flows,
            bulk_bytes: 1 << 20,
            host,
            phases,
            seed: 1,
        }
    }

    /// The virtual cluster's link regime (`qos_bench.py --regime link`): three
    /// latency-class flows (16 B, and 64 B for the RPC and the read) pausing 5 ms,
    /// beside two bulk-class processes writing 1 MiB each, node 1 behind a link of
    /// `link_rate` bytes/s, with the cluster's measured round trips.
    pub fn cluster(link_rate: u64, mode: Mode, calibration: &Calibration) -> Scenario {
        let flows = [16, 64, 64].map(|bytes| LatencyFlow { bytes, think_ns: 5_000_000 });
        Scenario {
            name: format!("cluster {} MiB/s", link_rate >> 20),
            mode,
            link_rate,
            nic_rate: calibration.nic_rate,
            base_rtt_ns: calibration.base_rtt_ns,
            mtu: calibration.mtu,
            header_bytes: ROCE_HEADER_BYTES,
            qps: 4,
            latency_flows: flows.to_vec(),
            bulk_flows: 2,
            bulk_bytes: 1 << 20,
            host: HostCosts {
                post_ns: calibration.post_ns,
                wakeup_ns: calibration.wakeup_ns,
                jitter_mean_ns: calibration.jitter_mean_ns,
                slack: Slack::Module,
            },
            // qos_bench.py's 8 s phases; the module's p99 alone needs 256
            // operations, about 1 s of them alone.
            phases: Phases { alone_ns: 4 * NS_PER_S, beside_ns: 8 * NS_PER_S, warmup_ns: NS_PER_S },
            seed: 1,
        }
    }
}

/// The virtual cluster's measured figures a calibration run takes
/// (docs/measurements/priority-classes.md).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Calibration {
    /// The latency flows' pause after each operation.
    pub think_ns: u64,
    pub base_rtt_ns: u64,
    pub jitter_mean_ns: u64,
    pub nic_rate: u64,
    pub mtu: u64,
    pub post_ns: u64,
    pub wakeup_ns: u64,
}

impl Calibration {
    /// The bridge segment at 1 MiB/s with jumbo frames (RoCE MTU 4096), the
    /// latency flows pausing 5 ms (since 2026-11-28): a 16 B LT_write alone takes
    /// 2.3-2.9 ms at the median and 7.4-7.8 ms at p99. An exponential spread of
    /// mean m over a base b gives p50 = b + 0.69 m and p99 = b + 4.6 m: b = 1.55
    /// ms, m = 1.35 ms. The emulated NIC sends 32 MB/s where no link bounds it (the
    /// plain segment).
    pub fn bridge_1m() -> Calibration {
        Calibration {
            think_ns: 5_000_000,
            base_rtt_ns: 1_550_000,
            jitter_mean_ns: 1_350_000,
            nic_rate: 32_000_000,
            mtu: 4096,
            post_ns: 50_000,
            wakeup_ns: 200_000,
        }
    }

    /// The vde wire at 4 MiB/s, MTU 1500 (RoCE MTU 1024), one vCPU per guest, the
    /// latency flows back to back (2026-11-27): a 16 B LT_write alone 1.63-1.69 ms
    /// at the median, and 8.4-12.1 ms at p99 (Target99 12.6-18.2 ms was 1.5 x it):
    /// with p99 10 ms, b = 0.18 ms, m = 2.14 ms.
    pub fn vde_4m() -> Calibration {
        Calibration {
            think_ns: 0,
            base_rtt_ns: 180_000,
            jitter_mean_ns: 2_140_000,
            nic_rate: 32_000_000,
            mtu: 1024,
            post_ns: 50_000,
            wakeup_ns: 200_000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_module_asks_an_eighth_of_a_sleep_as_slack_at_most_50_us() {
        assert_eq!(Slack::Module.late_ns(2_800), 350);
        assert_eq!(Slack::Module.late_ns(80_000), 10_000);
        assert_eq!(Slack::Module.late_ns(10_000_000), 50_000);
        assert_eq!(Slack::Fixed(0).late_ns(10_000_000), 0);
    }

    #[test]
    fn the_calibrations_reproduce_the_measured_median_and_p99_alone() {
        // p50 = b + ln 2 m, p99 = b + ln 100 m of an exponential spread over b.
        for (c, p50_ms, p99_ms) in [(Calibration::bridge_1m(), 2.5, 7.8), (Calibration::vde_4m(), 1.66, 10.0)] {
            let (b, m) = (c.base_rtt_ns as f64 / 1e6, c.jitter_mean_ns as f64 / 1e6);
            assert!((b + 2f64.ln() * m - p50_ms).abs() < 0.05, "{c:?}");
            assert!((b + 100f64.ln() * m - p99_ms).abs() < 0.1, "{c:?}");
        }
    }
}
