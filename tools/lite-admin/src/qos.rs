//! Priority classes: `mode`, `class set/unset/list/show`, `target`, `weights`,
//! `stats` and `top`.

use crate::stats::human;
use lite::{Class, ClassRule, Lite, Pacing, Phases, QosChange, QosMode, QosStat, RuleTarget};
use serde::Serialize;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// Whom `class set` and `class unset` are about.
#[derive(clap::Args)]
#[group(required = true, multiple = false)]
pub struct Target {
    /// A process (and the children it starts from now on).
    #[arg(long)]
    pid: Option<u32>,
    /// A user id.
    #[arg(long)]
    uid: Option<u32>,
    /// A cgroup v2 directory, such as /sys/fs/cgroup/batch.
    #[arg(long)]
    cgroup: Option<String>,
}

impl Target {
    /// The rule's target; a new process rule needs a running process (a rule of an
    /// exited one can still be removed).
    fn resolve(&self, new_rule: bool) -> Result<RuleTarget, String> {
        match (self.pid, self.uid, &self.cgroup) {
            (Some(pid), _, _) => {
                if new_rule && !Path::new(&format!("/proc/{pid}")).exists() {
                    return Err(format!("no process {pid} on this node"));
                }
                Ok(RuleTarget::Pid(pid))
            }
            (_, Some(uid), _) => Ok(RuleTarget::Uid(uid)),
            (_, _, Some(dir)) => {
                // A cgroup's id is the inode number of its directory in cgroup2fs.
                let meta = std::fs::metadata(dir).map_err(|e| format!("cgroup {dir}: {e}"))?;
                if !meta.is_dir() {
                    return Err(format!("cgroup {dir}: not a directory"));
                }
                Ok(RuleTarget::Cgroup(meta.ino()))
            }
            _ => Err("name a --pid, --uid or --cgroup".into()),
        }
    }
}

fn open() -> Result<Lite, String> {
    Lite::open().map_err(|e| e.to_string())
}

pub fn mode(mode: Option<QosMode>) -> Result<(), String> {
    let lite = open()?;
    if let Some(mode) = mode {
        lite.set_qos(&QosChange { mode: Some(mode), ..Default::default() }).map_err(|e| e.to_string())?;
    }
    let settings = lite.qos().map_err(|e| e.to_string())?;
    println!("mode {}", settings.mode.as_str());
    Ok(())
}

pub fn target(target: Option<Duration>, ratio: Option<f64>) -> Result<(), String> {
    let lite = open()?;
    let ratio_pct = match ratio {
        None => None,
        Some(0.0) => Some(0),
        Some(r) if (1.01..=10.0).contains(&r) => Some((r * 100.0).round() as u32),
        Some(r) => return Err(format!("--ratio must be 1.01 to 10, or 0 (off), not {r}")),
    };
    if target.is_some() || ratio_pct.is_some() {
        let change = QosChange { target99: target, target99_ratio_pct: ratio_pct, ..Default::default() };
        lite.set_qos(&change).map_err(|e| e.to_string())?;
    }
    let settings = lite.qos().map_err(|e| e.to_string())?;
    let absolute = human(settings.target99.as_nanos() as u64);
    match settings.target99_ratio_pct {
        None => println!("Target99 {absolute}"),
        Some(pct) => {
            let stat = lite.qos_stat().map_err(|e| e.to_string())?;
            let ratio = f64::from(pct) / 100.0;
            match stat.alone_p99 {
                Some(alone) => println!(
                    "Target99 {ratio:.2} x the latency class's p99 alone ({}): {}",
                    human(alone.as_nanos() as u64),
                    human(stat.target99.as_nanos() as u64)
                ),
                None => println!(
                    "Target99 {ratio:.2} x the latency class's p99 alone (not known yet: {absolute} until it is)"
                ),
            }
        }
    }
    Ok(())
}

pub fn weights(weights: Option<[u32; 3]>, link_rate: Option<u64>, chunk_bytes: Option<u32>) -> Result<(), String> {
    let lite = open()?;
    if weights.is_some() || link_rate.is_some() || chunk_bytes.is_some() {
        lite.set_qos(&QosChange { weights, link_rate, chunk_bytes, ..Default::default() })
            .map_err(|e| e.to_string())?;
    }
    let s = lite.qos().map_err(|e| e.to_string())?;
    let stat = lite.qos_stat().map_err(|e| e.to_string())?;
    let found = stat.found_rate.map_or("none yet".to_string(), rate);
    // Until a rate is found, the node assumes its port's (or a fixed one).
    let assumed = match (s.link_rate, stat.found_rate) {
        (None, None) => format!(", assuming {}", rate(stat.link_rate)),
        _ => String::new(),
    };
    println!(
        "weights latency {} default {} bulk {}, link rate {}, paced chunks of {}",
        s.weights[0],
        s.weights[1],
        s.weights[2],
        s.link_rate.map_or(format!("found: {found}{assumed}"), |r| format!("{} (set; found: {found})", rate(r))),
        match s.chunk_bytes {
            Some(b) => format!("{} KiB (set)", f64::from(b) / 1024.0),
            None => format!("{} KiB (sized to the link)", stat.chunk_bytes as f64 / 1024.0),
        }
    );
    Ok(())
}

pub fn class_set(target: &Target, class: Class) -> Result<(), String> {
    let target = target.resolve(true)?;
    open()?.add_class_rule(ClassRule { target, class }).map_err(|e| e.to_string())?;
    println!("{target}: {class}");
    Ok(())
}

pub fn class_unset(target: &Target) -> Result<(), String> {
    let target = target.resolve(false)?;
    open()?.remove_class_rule(target).map_err(|e| e.to_string())?;
    println!("{target}: rule removed");
    Ok(())
}

#[derive(Serialize)]
struct RuleJson {
    kind: &'static str,
    id: u64,
    class: &'static str,
}

pub fn class_list(json: bool) -> Result<(), String> {
    let rules = open()?.class_rules().map_err(|e| e.to_string())?;
    if json {
        let out: Vec<RuleJson> = rules
            .iter()
            .map(|r| {
                let (kind, id) = match r.target {
                    RuleTarget::Pid(p) => ("pid", u64::from(p)),
                    RuleTarget::Uid(u) => ("uid", u64::from(u)),
                    RuleTarget::Cgroup(c) => ("cgroup", c),
                };
                RuleJson { kind, id, class: r.class.as_str() }
            })
            .collect();
        println!("{}", serde_json::to_string(&out).map_err(|e| e.to_string())?);
        return Ok(());
    }
    if rules.is_empty() {
        println!("no rules: every process is in class default (set one with `lite-admin class set`)");
    }
    for r in rules {
        println!("{:<20} {}", r.target.to_string(), r.class);
    }
    Ok(())
}

/// `class show`: this command's own class (or, with a command, what it runs under).
pub fn class_show(lower: Option<Class>, command: &[String]) -> Result<(), String> {
    let lite = open()?;
    if let Some(class) = lower {
        lite.lower_my_class(class).map_err(|e| e.to_string())?;
    }
    if !command.is_empty() {
        // The child inherits the class; keep the handle open while it runs.
        let status = std::process::Command::new(&command[0])
            .args(&command[1..])
            .status()
            .map_err(|e| format!("{}: {e}", command[0]))?;
        drop(lite);
        return if status.success() { Ok(()) } else { Err(format!("{} exited with {status}", command[0])) };
    }
    let (class, source) = lite.my_class().map_err(|e| e.to_string())?;
    println!("class {class} (from {})", source.as_str());
    Ok(())
}

fn rate(bytes_per_s: u64) -> String {
    let b = bytes_per_s as f64;
    if b >= 1e9 {
        format!("{:.2} GB/s", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1} MB/s", b / 1e6)
    } else {
        format!("{:.0} kB/s", b / 1e3)
    }
}

#[derive(Serialize)]
struct ClassJson {
    class: &'static str,
    bytes: u64,
    ops: u64,
    bytes_per_s: f64,
    ops_per_s: f64,
    p50_ns: u64,
    p99_ns: u64,
    active: u32,
    queued: u32,
    paced_chunks: u64,
    paced_ns: u64,
}

/// The latency class's one-sided operations of one kind over the interval: how
/// many, and their mean time in each phase in the kernel.
#[derive(Serialize)]
struct PhasesJson {
    op: &'static str,
    ops: u64,
    before_post_ns: u64,
    in_network_ns: u64,
    wakeup_ns: u64,
}

#[derive(Serialize)]
struct StatsJson {
    mode: &'static str,
    latency_active: bool,
    safe_util: Option<u64>,
    link_rate: u64,
    found_rate: Option<u64>,
    chunk_bytes: u64,
    tokens: u64,
    probes: u64,
    last_probe_ns: u64,
    decreases: u64,
    increases: u64,
    target99_ns: u64,
    alone_p99_ns: Option<u64>,
    alone_samples: u64,
    classes: Vec<ClassJson>,
    latency_phases: Vec<PhasesJson>,
    paced_in_flight: u32,
    paced_places: u32,
    pacing: PacingJson,
}

/// Pacing over the interval: what SafeUtil offered, what went, and per paced work
/// request its waits and how long it held its place.
#[derive(Serialize)]
struct PacingJson {
    offered_bytes_per_s: f64,
    paced_bytes_per_s: f64,
    /// Paced over offered; None when nothing was offered (no pacing).
    delivered_ratio: Option<f64>,
    paced_wrs: u64,
    paced_wrs_per_s: f64,
    /// Reference probes sent per second (8-byte READs when latency samples are sparse).
    probes_per_s: f64,
    token_wait_ns: u64,
    place_wait_ns: u64,
    place_hold_ns: u64,
    places_in_use: f64,
}

/// Pacing between two totals, `secs` apart, in which `probes` reference probes went.
fn pacing_json(before: &Pacing, now: &Pacing, probes: u64, secs: f64) -> PacingJson {
    let offered = now.offered_bytes.wrapping_sub(before.offered_bytes);
    let paced = now.paced_bytes.wrapping_sub(before.paced_bytes);
    let wrs = now.place_wrs.wrapping_sub(before.place_wrs);
    let held = now.place_held.saturating_sub(before.place_held);
    let per_wr =
        |now: Duration, before: Duration| (now.saturating_sub(before).as_nanos() / u128::from(wrs.max(1))) as u64;
    PacingJson {
        offered_bytes_per_s: offered as f64 / secs,
        paced_bytes_per_s: paced as f64 / secs,
        delivered_ratio: (offered > 0).then(|| paced as f64 / offered as f64),
        paced_wrs: wrs,
        paced_wrs_per_s: wrs as f64 / secs,
        probes_per_s: probes as f64 / secs,
        token_wait_ns: per_wr(now.token_wait, before.token_wait),
        place_wait_ns: per_wr(now.place_wait, before.place_wait),
        place_hold_ns: per_wr(now.place_held, before.place_held),
        places_in_use: held.as_secs_f64() / secs,
    }
}

/// The means of each phase between two totals.
fn phases_json(op: &'static str, before: Option<&Phases>, now: &Phases) -> PhasesJson {
    let zero = Phases::default();
    let b = before.unwrap_or(&zero);
    let ops = now.ops.wrapping_sub(b.ops);
    let mean = |now: Duration, before: Duration| {
        (now.as_nanos().saturating_sub(before.as_nanos()) / u128::from(ops.max(1))) as u64
    };
    PhasesJson {
        op,
        ops,
        before_post_ns: mean(now.before_post, b.before_post),
        in_network_ns: mean(now.in_network, b.in_network),
        wakeup_ns: mean(now.wakeup, b.wakeup),
    }
}

/// Rates over `elapsed` between two snapshots (since load when `before` is None).
fn stats_json(before: Option<&QosStat>, now: &QosStat, elapsed: Duration) -> StatsJson {
    let secs = elapsed.as_secs_f64().max(1e-9);
    StatsJson {
        mode: now.mode.as_str(),
        latency_active: now.latency_active,
        safe_util: now.safe_util,
        link_rate: now.link_rate,
        found_rate: now.found_rate,
        chunk_bytes: now.chunk_bytes,
        tokens: now.tokens,
        probes: now.probes,
        last_probe_ns: now.last_probe.as_nanos() as u64,
        decreases: now.decreases,
        increases: now.increases,
        target99_ns: now.target99.as_nanos() as u64,
        alone_p99_ns: now.alone_p99.map(|d| d.as_nanos() as u64),
        alone_samples: now.alone_samples,
        classes: Class::ALL
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let s = &now.classes[i];
                let (b0, o0) = before.map_or((0, 0), |b| (b.classes[i].bytes, b.classes[i].ops));
                ClassJson {
                    class: c.as_str(),
                    bytes: s.bytes,
                    ops: s.ops,
                    bytes_per_s: s.bytes.wrapping_sub(b0) as f64 / secs,
                    ops_per_s: s.ops.wrapping_sub(o0) as f64 / secs,
                    p50_ns: s.p50.as_nanos() as u64,
                    p99_ns: s.p99.as_nanos() as u64,
                    active: s.active,
                    queued: s.queued,
                    paced_chunks: s.paced_chunks,
                    paced_ns: s.paced.as_nanos() as u64,
                }
            })
            .collect(),
        latency_phases: ["write", "read"]
            .iter()
            .enumerate()
            .map(|(i, op)| phases_json(op, before.map(|b| &b.latency_phases[i]), &now.latency_phases[i]))
            .collect(),
        paced_in_flight: now.paced_in_flight,
        paced_places: now.paced_places,
        pacing: pacing_json(
            before.map_or(&Pacing::default(), |b| &b.pacing),
            &now.pacing,
            now.probes.wrapping_sub(before.map_or(0, |b| b.probes)),
            secs,
        ),
    }
}

fn print_stats(s: &StatsJson) {
    println!(
        "mode {}, latency traffic {}, SafeUtil {}, link {} (found {}), chunks {} KiB ({} of {} in flight), tokens {} B, {} probes (last {}), AIMD -{} +{} to Target99 {} (p99 alone {}, of {} operations alone)",
        s.mode,
        if s.latency_active { "active" } else { "idle" },
        s.safe_util.map_or("unlimited".to_string(), rate),
        rate(s.link_rate),
        s.found_rate.map_or("none yet".to_string(), rate),
        s.chunk_bytes as f64 / 1024.0,
        s.paced_in_flight,
        s.paced_places,
        s.tokens,
        s.probes,
        human(s.last_probe_ns),
        s.decreases,
        s.increases,
        human(s.target99_ns),
        s.alone_p99_ns.map_or("not known yet".to_string(), human),
        s.alone_samples
    );
    println!(
        "{:<8} {:>12} {:>10} {:>10} {:>10} {:>7} {:>7} {:>12}",
        "class", "bytes/s", "ops/s", "p50", "p99", "active", "queued", "paced"
    );
    for c in &s.classes {
        println!(
            "{:<8} {:>12} {:>10.0} {:>10} {:>10} {:>7} {:>7} {:>12}",
            c.class,
            rate(c.bytes_per_s as u64),
            c.ops_per_s,
            human(c.p50_ns),
            human(c.p99_ns),
            c.active,
            c.queued,
            human(c.paced_ns)
        );
    }
    let p = &s.pacing;
    if let Some(ratio) = p.delivered_ratio {
        println!(
            "paced {} of {} offered ({:.0} %); per paced work request: tokens {}, place {}, held {} ({:.1} places in use)",
            rate(p.paced_bytes_per_s as u64),
            rate(p.offered_bytes_per_s as u64),
            ratio * 100.0,
            human(p.token_wait_ns),
            human(p.place_wait_ns),
            human(p.place_hold_ns),
            p.places_in_use
        );
    }
    for p in s.latency_phases.iter().filter(|p| p.ops > 0) {
        println!(
            "latency LT_{} in the kernel ({} ops, means): before post {}, in the network {}, wakeup {}",
            p.op,
            p.ops,
            human(p.before_post_ns),
            human(p.in_network_ns),
            human(p.wakeup_ns)
        );
    }
}

/// `stats`: rates over `interval` (two snapshots).
pub fn stats(interval: Duration, json: bool) -> Result<(), String> {
    let lite = open()?;
    let before = lite.qos_stat().map_err(|e| e.to_string())?;
    let start = Instant::now();
    std::thread::sleep(interval);
    let now = lite.qos_stat().map_err(|e| e.to_string())?;
    let report = stats_json(Some(&before), &now, start.elapsed());
    if json {
        println!("{}", serde_json::to_string(&report).map_err(|e| e.to_string())?);
    } else {
        print_stats(&report);
    }
    Ok(())
}

/// `top`: the stats every `interval`, `count` times (0: until interrupted).
pub fn top(interval: Duration, count: u32, json: bool) -> Result<(), String> {
    let lite = open()?;
    let mut before = lite.qos_stat().map_err(|e| e.to_string())?;
    let mut at = Instant::now();
    let mut shown = 0;
    while count == 0 || shown < count {
        std::thread::sleep(interval);
        let now = lite.qos_stat().map_err(|e| e.to_string())?;
        let report = stats_json(Some(&before), &now, at.elapsed());
        if json {
            println!("{}", serde_json::to_string(&report).map_err(|e| e.to_string())?);
        } else {
            // Clear the screen and home the cursor, like top.
            print!("\x1b[2J\x1b[H");
            print_stats(&report);
        }
        before = now;
        at = Instant::now();
        shown += 1;
    }
    Ok(())
}
