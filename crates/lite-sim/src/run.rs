//! One run: the models assembled on nexosim, run through both phases, and what
//! they measured.

use std::time::Duration;

use lite_stats::{percentile, Summary};
use nexosim::ports::Output;
use nexosim::simulation::{Mailbox, SimInit, SimulationError};
use nexosim::time::MonotonicTime;
use serde::Serialize;

use crate::host::{Host, HostLogic, ProtoHost};
use crate::net::{Fabric, ProtoFabric, Rnic};
use crate::record::{lock, Recorder, Windows};
use crate::scenario::{mode_label, Scenario};

#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    pub scenario: String,
    pub mode: &'static str,
    pub link_gbps: f64,
    /// The latency class's operations alone and beside bulk.
    pub alone_ops: usize,
    pub alone_p50_us: f64,
    pub alone_p99_us: f64,
    pub beside_ops: usize,
    pub beside_p50_us: f64,
    pub beside_p99_us: f64,
    pub p99_ratio: f64,
    /// Bulk payload completed beside latency, per second, and against the link's rate.
    pub bulk_bytes_per_s: f64,
    pub bulk_vs_line_rate: f64,
    /// Wire bytes (headers included) the link carried beside latency, against its rate.
    pub link_utilization: f64,
    /// Each packet's wait at the switch beside latency.
    pub switch_wait_mean_us: f64,
    pub switch_wait_p99_us: f64,
    /// The node's SW-Pri state at the end.
    pub safe_util_vs_link: f64,
    pub target99_us: f64,
    pub node_alone_p99_us: Option<f64>,
    pub aimd_decreases: u64,
    pub aimd_increases: u64,
    /// Bytes posted and completed by the end: what is still in flight.
    pub posted_bytes: u64,
    pub completed_bytes: u64,
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// Runs `scenario` to its end and sums it up.
pub fn run(scenario: &Scenario) -> Result<Outcome, SimulationError> {
    let windows = Windows {
        alone: (scenario.phases.alone_warmup_ns(), scenario.phases.alone_ns),
        beside: (
            scenario.phases.alone_ns + scenario.phases.warmup_ns,
            scenario.phases.alone_ns + scenario.phases.beside_ns,
        ),
    };
    let recorder = Recorder::new(windows);

    let host_mbox = Mailbox::new();
    let rnic_mbox = Mailbox::new();
    let fabric_mbox = Mailbox::new();

    let mut rnic = Rnic::new(scenario.qps, scenario.nic_rate, scenario.mtu, scenario.header_bytes);
    rnic.packets.connect(Fabric::arrive, &fabric_mbox);
    rnic.completions.connect(Host::completion, &host_mbox);
    let mut posts = Output::default();
    posts.connect(Rnic::post, &rnic_mbox);
    let mut acks = Output::default();
    acks.connect(Rnic::acked, &rnic_mbox);

    let host = ProtoHost { posts, logic: HostLogic::new(scenario, recorder.clone()) };
    let fabric =
        ProtoFabric { acks, rate: scenario.link_rate, base_rtt_ns: scenario.base_rtt_ns, recorder: recorder.clone() };
    // One thread: the models' order of events is then the same from run to run.
    let mut simu = SimInit::with_num_threads(1)
        .add_model(host, host_mbox, "host")
        .add_model(rnic, rnic_mbox, "rnic")
        .add_model(fabric, fabric_mbox, "fabric")
        .init(MonotonicTime::EPOCH)?;
    let end = scenario.phases.alone_ns + scenario.phases.beside_ns;
    simu.step_until(MonotonicTime::EPOCH + Duration::from_nanos(end))?;

    let rec = lock(&recorder);
    let (alone, beside) = (summary(&rec.alone_ns), summary(&rec.beside_ns));
    let beside_s = (windows.beside.1 - windows.beside.0) as f64 / 1e9;
    let mut waits = rec.switch_waits_ns.clone();
    waits.sort_unstable();
    let wait_mean = if waits.is_empty() { 0.0 } else { waits.iter().sum::<u64>() as f64 / waits.len() as f64 };
    let bulk_rate = rec.bulk_bytes as f64 / beside_s;
    let link = scenario.link_rate as f64;
    Ok(Outcome {
        scenario: scenario.name.clone(),
        mode: mode_label(scenario.mode),
        link_gbps: link * 8.0 / 1e9,
        alone_ops: alone.map_or(0, |s| s.count),
        alone_p50_us: alone.map_or(0.0, |s| us(s.median_ns)),
        alone_p99_us: alone.map_or(0.0, |s| us(s.p99_ns)),
        beside_ops: beside.map_or(0, |s| s.count),
        beside_p50_us: beside.map_or(0.0, |s| us(s.median_ns)),
        beside_p99_us: beside.map_or(0.0, |s| us(s.p99_ns)),
        p99_ratio: match (alone, beside) {
            (Some(a), Some(b)) => b.p99_ns as f64 / a.p99_ns.max(1) as f64,
            _ => 0.0,
        },
        bulk_bytes_per_s: bulk_rate,
        bulk_vs_line_rate: bulk_rate / link,
        link_utilization: rec.link_bytes as f64 / beside_s / link,
        switch_wait_mean_us: wait_mean / 1000.0,
        switch_wait_p99_us: us(percentile(&waits, 99.0)),
        safe_util_vs_link: rec.control.safe_util as f64 / link,
        target99_us: us(rec.control.target99_ns),
        node_alone_p99_us: rec.node_alone_p99_ns.map(us),
        aimd_decreases: rec.control.decreases,
        aimd_increases: rec.control.increases,
        posted_bytes: rec.posted_bytes,
        completed_bytes: rec.completed_bytes,
    })
}

fn summary(samples: &[u64]) -> Option<Summary> {
    let mut samples = samples.to_vec();
    Summary::of(&mut samples)
}
