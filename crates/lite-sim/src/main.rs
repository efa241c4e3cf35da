//! `lite-sim`: SW-Pri at line rate, in simulation (docs/measurements/simulation.md).

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use lite_kernel_logic::sw_pri::Mode;
use lite_sim::report::{table, timer_need, timer_table, Row};
use lite_sim::scenario::{HostCosts, Phases, Slack};
use lite_sim::sets::{self, Job};

/// Simulates the module's SW-Pri (its own pacer, AIMD, WF²Q+ and token bucket
/// code) on a model of a sending host, its RNIC and a switch with a lossless queue
/// in front of the link. Every figure it prints is SIMULATED.
#[derive(Parser)]
#[command(name = "lite-sim", version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Print the runs (settings and results) as JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
    /// Runs simulated at once (each on one thread); default: the CPUs available.
    #[arg(long, global = true)]
    jobs: Option<usize>,
}

#[derive(Subcommand)]
enum Command {
    /// The standard set (the default): the mixed workload at 25 and 100 Gbit/s,
    /// the slack set and the calibration.
    Standard,
    /// Justitia's mixed workload: one latency-class flow of 16 B operations beside
    /// bulk flows of 1 MiB writes.
    Mixed {
        /// Link rates, Gbit/s.
        #[arg(long, value_delimiter = ',', default_values_t = [25, 100], value_parser = clap::value_parser!(u64).range(1..=800))]
        gbps: Vec<u64>,
        /// Bulk flow counts.
        #[arg(long, value_delimiter = ',', default_values_t = [1, 4, 16], value_parser = clap::value_parser!(u64).range(1..=1000))]
        bulk: Vec<u64>,
        /// Modes of the module (`lite-admin mode`).
        #[arg(long, value_delimiter = ',', default_values = ["none", "sw-pri"])]
        modes: Vec<ModeArg>,
        #[command(flatten)]
        host: HostArgs,
        #[command(flatten)]
        phases: PhaseArgs,
    },
    /// SW-Pri beside bulk flows with hrtimer slacks `module`, `rt` (0) or a number
    /// of microseconds, and sleeping tasks' wakeup times.
    Slack {
        /// Link rates, Gbit/s.
        #[arg(long, value_delimiter = ',', default_values_t = [25, 100], value_parser = clap::value_parser!(u64).range(1..=800))]
        gbps: Vec<u64>,
        /// Bulk flows.
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=1000))]
        bulk: u64,
        #[arg(long, value_delimiter = ',', default_values = ["rt", "module", "50"], value_parser = parse_slack)]
        slacks: Vec<Slack>,
        /// Wakeup times, µs (each with every slack).
        #[arg(long, value_delimiter = ',', default_values_t = [1.0, 5.0])]
        wakeups_us: Vec<f64>,
        /// A work request's post (ns).
        #[arg(long, default_value_t = 500)]
        post_ns: u64,
        #[command(flatten)]
        phases: PhaseArgs,
    },
    /// The virtual cluster's link regime at 1 and 4 MiB/s with its measured round
    /// trips, to compare with qos_bench.py's results.
    Calibrate {
        /// Modes of the module (`lite-admin mode`).
        #[arg(long, value_delimiter = ',', default_values = ["none", "sw-pri"])]
        modes: Vec<ModeArg>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum ModeArg {
    None,
    SwPri,
}

impl From<ModeArg> for Mode {
    fn from(mode: ModeArg) -> Mode {
        match mode {
            ModeArg::None => Mode::None,
            ModeArg::SwPri => Mode::SwPri,
        }
    }
}

/// The sending host's costs at line rate.
#[derive(Args)]
struct HostArgs {
    /// A work request's post (ns).
    #[arg(long, default_value_t = 500)]
    post_ns: u64,
    /// A sleeping task's wakeup, until it runs (µs).
    #[arg(long, default_value_t = 5.0)]
    wakeup_us: f64,
    /// hrtimer slack for token sleeps: `module` (what the module asks: an eighth of
    /// the sleep, at most 50 µs), `rt` (none) or microseconds.
    #[arg(long, default_value = "module", value_parser = parse_slack)]
    slack: Slack,
}

impl HostArgs {
    fn costs(&self) -> Result<HostCosts, String> {
        Ok(HostCosts {
            post_ns: self.post_ns,
            wakeup_ns: wakeup_ns(self.wakeup_us)?,
            jitter_mean_ns: 0,
            slack: self.slack,
        })
    }
}

/// How long the phases of a line-rate run last.
#[derive(Args)]
struct PhaseArgs {
    /// The latency flow alone (ms).
    #[arg(long, default_value_t = Phases::line_rate().alone_ns / 1_000_000)]
    alone_ms: u64,
    /// Bulk beside it (ms).
    #[arg(long, default_value_t = Phases::line_rate().beside_ns / 1_000_000)]
    beside_ms: u64,
    /// Left out of the statistics beside bulk at its start (ms; of the phase alone,
    /// its first fifth).
    #[arg(long, default_value_t = Phases::line_rate().warmup_ns / 1_000_000)]
    warmup_ms: u64,
}

impl PhaseArgs {
    fn phases(&self) -> Result<Phases, String> {
        if self.warmup_ms >= self.beside_ms || self.alone_ms == 0 {
            return Err(format!(
                "--warmup-ms {} must be shorter than --beside-ms {}, and --alone-ms more than 0",
                self.warmup_ms, self.beside_ms
            ));
        }
        // A phase is also what the warmup leaves of it: at most a day in all.
        if self.alone_ms.saturating_add(self.beside_ms) > 86_400_000 {
            return Err("--alone-ms and --beside-ms: at most a day together".to_string());
        }
        Ok(Phases {
            alone_ns: self.alone_ms * 1_000_000,
            beside_ns: self.beside_ms * 1_000_000,
            warmup_ns: self.warmup_ms * 1_000_000,
        })
    }
}

/// A wakeup time given in µs, in ns.
fn wakeup_ns(us: f64) -> Result<u64, String> {
    if (0.0..=10_000.0).contains(&us) {
        Ok((us * 1000.0).round() as u64)
    } else {
        Err(format!("wakeup of {us} µs: give 0 to 10000 microseconds"))
    }
}

fn parse_slack(text: &str) -> Result<Slack, String> {
    match text {
        "module" => Ok(Slack::Module),
        "rt" => Ok(Slack::Fixed(0)),
        us => match us.parse::<f64>() {
            Ok(us) if (0.0..=10_000.0).contains(&us) => Ok(Slack::Fixed((us * 1000.0).round() as u64)),
            _ => Err(format!("`{us}`: give `module`, `rt` or microseconds from 0 to 10000")),
        },
    }
}

fn jobs_of(command: Command) -> Result<Vec<Job>, String> {
    Ok(match command {
        Command::Standard => sets::standard(),
        Command::Mixed { gbps, bulk, modes, host, phases } => {
            let bulk: Vec<usize> = bulk.iter().map(|&n| n as usize).collect();
            let modes: Vec<Mode> = modes.into_iter().map(Mode::from).collect();
            sets::mixed(&gbps, &bulk, &modes, host.costs()?, phases.phases()?)
        }
        Command::Slack { gbps, bulk, slacks, wakeups_us, post_ns, phases } => {
            let wakeups_ns = wakeups_us.iter().map(|&us| wakeup_ns(us)).collect::<Result<Vec<_>, _>>()?;
            let host = HostCosts { post_ns, ..sets::line_rate_host() };
            sets::slack(&gbps, bulk as usize, &slacks, &wakeups_ns, host, phases.phases()?)
        }
        Command::Calibrate { modes } => {
            let modes: Vec<Mode> = modes.into_iter().map(Mode::from).collect();
            sets::calibration(&modes)
        }
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let threads =
        cli.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get));
    let rows: Result<Vec<Row>, String> =
        jobs_of(cli.command.unwrap_or(Command::Standard)).and_then(|jobs| sets::run_jobs(jobs, threads));
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("lite-sim: {e}");
            return ExitCode::FAILURE;
        }
    };
    let timers: Vec<_> = [25, 100].map(timer_need).into();
    if cli.json {
        let json = serde_json::json!({ "simulated": true, "timers": timers, "runs": rows });
        match serde_json::to_string_pretty(&json) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("lite-sim: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{}{}", timer_table(&timers), table(&rows));
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slacks_are_module_rt_or_microseconds() {
        assert_eq!(parse_slack("module"), Ok(Slack::Module));
        assert_eq!(parse_slack("rt"), Ok(Slack::Fixed(0)));
        assert_eq!(parse_slack("50"), Ok(Slack::Fixed(50_000)));
        assert_eq!(parse_slack("0.5"), Ok(Slack::Fixed(500)));
        assert!(parse_slack("-1").is_err());
        assert!(parse_slack("soon").is_err());
    }

    #[test]
    fn the_cli_refuses_a_warmup_as_long_as_the_phase_beside_bulk() {
        let cli = Cli::try_parse_from(["lite-sim", "mixed", "--beside-ms", "5", "--warmup-ms", "5"]);
        let Ok(Cli { command: Some(command), .. }) = cli else {
            panic!("the arguments parse");
        };
        assert!(jobs_of(command).is_err());
        assert!(Cli::try_parse_from(["lite-sim", "mixed", "--gbps", "0"]).is_err());
    }
}
