//! The model's own checks: bytes are conserved, a simple case matches its
//! analytic time, and SW-Pri paces bulk at the rate it sets.

use lite_kernel_logic::sw_pri::Mode;
use lite_sim::net::wire_ns;
use lite_sim::run::{run, Outcome};
use lite_sim::scenario::{Calibration, HostCosts, Phases, Scenario, Slack, ROCE_HEADER_BYTES};
use lite_sim::sets::line_rate_host;

/// A short run of the mixed workload: 2 ms alone, 10 ms beside bulk.
fn short(gbps: u64, bulk: usize, mode: Mode, host: HostCosts) -> Scenario {
    let phases = Phases { alone_ns: 2_000_000, beside_ns: 10_000_000, warmup_ns: 1_000_000 };
    Scenario::mixed(gbps, bulk, mode, host, phases)
}

fn outcome(scenario: &Scenario) -> Outcome {
    match run(scenario) {
        Ok(outcome) => outcome,
        Err(e) => panic!("{}: {e}", scenario.name),
    }
}

#[test]
fn every_byte_posted_is_delivered_or_still_in_flight() {
    for mode in [Mode::None, Mode::SwPri] {
        let scenario = short(25, 4, mode, line_rate_host());
        let o = outcome(&scenario);
        assert!(o.completed_bytes <= o.posted_bytes);
        // At most each bulk transfer's window and a latency operation in flight.
        let in_flight = o.posted_bytes - o.completed_bytes;
        assert!(in_flight <= 4 * (128 << 10) + 16, "{mode:?}: {in_flight} B in flight");
        // Bulk payload is part of what the link carried, which is at most its rate.
        assert!(o.bulk_bytes_per_s > 0.0, "{o:?}");
        assert!(o.bulk_vs_line_rate <= o.link_utilization, "{o:?}");
        assert!(o.link_utilization <= 1.0 + 1e-9, "{o:?}");
    }
}

#[test]
fn a_latency_operation_alone_takes_its_post_its_serialization_and_the_round_trip() {
    let host = HostCosts { post_ns: 500, wakeup_ns: 5_000, jitter_mean_ns: 0, slack: Slack::Module };
    let scenario = short(25, 1, Mode::None, host);
    let o = outcome(&scenario);
    let wire = 16 + ROCE_HEADER_BYTES;
    // The switch forwards cut-through: one serialization.
    let expected = 500 + wire_ns(wire, scenario.link_rate) + scenario.base_rtt_ns;
    assert_eq!(o.alone_p50_us, expected as f64 / 1000.0);
    assert_eq!(o.alone_p99_us, o.alone_p50_us, "nothing varies alone");
}

#[test]
fn bulk_alone_fills_the_link_in_none_mode() {
    // A 16 B operation every 10 ms barely counts beside the bulk flows.
    let mut scenario = short(25, 4, Mode::None, line_rate_host());
    scenario.latency_flows[0].think_ns = 10_000_000;
    let o = outcome(&scenario);
    assert!(o.link_utilization > 0.98, "{o:?}");
}

#[test]
fn sw_pri_paces_bulk_at_safe_util_and_below_its_ceiling() {
    let scenario = short(25, 4, Mode::SwPri, line_rate_host());
    let o = outcome(&scenario);
    assert!(o.safe_util_vs_link > 0.0 && o.safe_util_vs_link <= 15.0 / 16.0);
    // Bulk never exceeds the ceiling, and gets most of what SafeUtil offers.
    assert!(o.bulk_vs_line_rate <= 15.0 / 16.0 + 0.01, "{o:?}");
    assert!(o.bulk_vs_line_rate >= 0.5 * o.safe_util_vs_link, "{o:?}");
}

#[test]
fn sw_pri_keeps_the_latency_tail_far_below_none_mode() {
    let none = outcome(&short(25, 4, Mode::None, line_rate_host()));
    let sw_pri = outcome(&short(25, 4, Mode::SwPri, line_rate_host()));
    assert!(sw_pri.beside_p99_us * 3.0 < none.beside_p99_us, "{none:?}\n{sw_pri:?}");
}

#[test]
fn none_mode_queues_both_bulk_windows_at_a_slow_link() {
    // Two bulk transfers keep 128 KiB each in flight, in 4 KiB packets with their
    // headers; a NIC 30 times faster than the link puts all of it in the switch's
    // queue, which every packet then waits through.
    let mut scenario = Scenario::cluster(1 << 20, Mode::None, &Calibration::bridge_1m());
    scenario.phases = Phases { alone_ns: 500_000_000, beside_ns: 3_000_000_000, warmup_ns: 1_000_000_000 };
    let o = outcome(&scenario);
    let packets = 2 * (128 << 10) / 4096;
    let queue_us = wire_ns(packets * (4096 + ROCE_HEADER_BYTES), scenario.link_rate) as f64 / 1000.0;
    assert!((o.switch_wait_p99_us / queue_us - 1.0).abs() < 0.05, "{o:?} against {queue_us} us");
    assert!(o.beside_p50_us > 0.9 * queue_us, "{o:?}");
}

#[test]
fn the_waits_copied_from_the_module_still_read_the_same_there() {
    // crates/lite-sim/src/host.rs copies these; the module's files are the truth.
    let admission = include_str!("../../../lite/qos/admission.rs");
    assert!(admission.contains("const UNPACED_POLL_NS: u64 = 2_000_000;"));
    let qos = include_str!("../../../lite/qos/mod.rs");
    assert!(qos.contains("const TURN_WAIT_MS: u32 = 200;"));
    let verbs = include_str!("../../../lite/verbs/verbs.c");
    assert!(verbs.contains("#define LITE_UNPACED_STALL_NS (500 * NSEC_PER_MSEC)"));
    let helpers = include_str!("../../../lite/helpers.c");
    assert!(
        helpers.contains("schedule_hrtimeout_range(&expires, min_t(u64, ns / 8, 50 * NSEC_PER_USEC)"),
        "Slack::Module models lite_sleep_ns's range"
    );
}
