//! The standard sets `make sim` runs, and running many scenarios on a few threads.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use lite_kernel_logic::sw_pri::Mode;

use crate::report::Row;
use crate::run::run;
use crate::scenario::{Calibration, HostCosts, Phases, Scenario, Slack};

/// A scenario to run, with the set it belongs to and what varies within the set.
pub struct Job {
    pub set: &'static str,
    pub variant: String,
    pub scenario: Scenario,
}

/// Justitia's mixed workload: every rate, bulk flow count and mode given.
pub fn mixed(gbps: &[u64], bulk: &[usize], modes: &[Mode], host: HostCosts, phases: Phases) -> Vec<Job> {
    let mut jobs = Vec::new();
    for &rate in gbps {
        for &flows in bulk {
            for &mode in modes {
                jobs.push(Job {
                    set: "mixed workload",
                    variant: host_label(host),
                    scenario: Scenario::mixed(rate, flows, mode, host, phases),
                });
            }
        }
    }
    jobs
}

/// SW-Pri beside `bulk` flows with each hrtimer slack and wakeup time given.
pub fn slack(
    gbps: &[u64],
    bulk: usize,
    slacks: &[Slack],
    wakeups_ns: &[u64],
    host: HostCosts,
    phases: Phases,
) -> Vec<Job> {
    let mut jobs = Vec::new();
    for &rate in gbps {
        for &wakeup_ns in wakeups_ns {
            for &slack in slacks {
                jobs.push(Job {
                    set: "hrtimer slack and wakeup",
                    variant: host_label(HostCosts { slack, wakeup_ns, ..host }),
                    scenario: Scenario::mixed(rate, bulk, Mode::SwPri, HostCosts { slack, wakeup_ns, ..host }, phases),
                });
            }
        }
    }
    jobs
}

/// The virtual cluster's link regime at 1 MiB/s (the bridge) and 4 MiB/s (vde).
pub fn calibration(modes: &[Mode]) -> Vec<Job> {
    let mut jobs = Vec::new();
    for (mib, calibration) in [(1, Calibration::bridge_1m()), (4, Calibration::vde_4m())] {
        for &mode in modes {
            jobs.push(Job {
                set: "calibration",
                variant: String::new(),
                scenario: Scenario::cluster(mib << 20, mode, &calibration),
            });
        }
    }
    jobs
}

/// The slack and the wakeup time of a run, which the sets vary.
pub fn host_label(host: HostCosts) -> String {
    let slack = match host.slack {
        Slack::Module => "module".to_string(),
        Slack::Fixed(ns) => format!("{}us", ns as f64 / 1000.0),
    };
    format!("slack {slack}, wake {}us", host.wakeup_ns as f64 / 1000.0)
}

/// The host costs of a line-rate node: a post (the module's path and the
/// doorbell) 0.5 µs, a sleeping task running 5 µs after its wakeup, no spread,
/// the module's slack.
pub fn line_rate_host() -> HostCosts {
    HostCosts { post_ns: 500, wakeup_ns: 5_000, jitter_mean_ns: 0, slack: Slack::Module }
}

/// Everything `make sim` runs.
pub fn standard() -> Vec<Job> {
    let host = line_rate_host();
    let modes = [Mode::None, Mode::SwPri];
    let phases = Phases::line_rate();
    let mut jobs = mixed(&[25, 100], &[1, 4, 16], &modes, host, phases);
    // Beside the mixed set's module slack and 5 µs wakeups: no slack (an RT task's)
    // and a normal task's default 50 µs, and every slack with 1 µs wakeups.
    let slacks = [Slack::Fixed(0), Slack::Module, Slack::Fixed(50_000)];
    jobs.extend(slack(&[25, 100], 4, &[Slack::Fixed(0), Slack::Fixed(50_000)], &[host.wakeup_ns], host, phases));
    jobs.extend(slack(&[25, 100], 4, &slacks, &[1_000], host, phases));
    jobs.extend(calibration(&modes));
    jobs
}

/// Runs the jobs on `threads` threads (each run is single-threaded), in order of
/// the jobs in the result.
pub fn run_jobs(jobs: Vec<Job>, threads: usize) -> Result<Vec<Row>, String> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<Row, String>>>> = Mutex::new((0..jobs.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, jobs.len().max(1)) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(job) = jobs.get(i) else { break };
                let row = run(&job.scenario)
                    .map(|outcome| Row {
                        set: job.set,
                        variant: job.variant.clone(),
                        scenario: job.scenario.clone(),
                        outcome,
                    })
                    .map_err(|e| format!("{} ({}): {e}", job.scenario.name, job.set));
                let mut results = results.lock().unwrap_or_else(|p| p.into_inner());
                results[i] = Some(row);
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        .map(|row| row.unwrap_or_else(|| Err("a run did not finish".to_string())))
        .collect()
}
