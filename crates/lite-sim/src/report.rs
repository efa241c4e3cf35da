//! The runs' results as a table for people, or as JSON.

use lite_kernel_logic::sw_pri::chunk_and_ceiling;
use serde::Serialize;

use crate::run::Outcome;
use crate::scenario::{Scenario, Slack, NS_PER_S};

/// What the kernel's token timer must do on a link: one chunk per interval at
/// SafeUtil's ceiling, and the slack the module asks for such a sleep.
#[derive(Serialize)]
pub struct TimerNeed {
    pub link_gbps: u64,
    pub chunk_bytes: u64,
    pub ceiling_bytes_per_s: u64,
    pub chunk_interval_ns: u64,
    pub module_slack_ns: u64,
}

pub fn timer_need(gbps: u64) -> TimerNeed {
    let (chunk, ceiling) = chunk_and_ceiling(gbps * NS_PER_S / 8);
    let interval = (chunk * NS_PER_S).div_ceil(ceiling.max(1));
    TimerNeed {
        link_gbps: gbps,
        chunk_bytes: chunk,
        ceiling_bytes_per_s: ceiling,
        chunk_interval_ns: interval,
        module_slack_ns: Slack::Module.late_ns(interval),
    }
}

/// The timer needs as a table.
pub fn timer_table(needs: &[TimerNeed]) -> String {
    let mut out = format!(
        "timer granularity (from the module's chunk and ceiling)
{:<6} {:>9} {:>12} {:>16} {:>14}
",
        "link", "chunk", "ceiling", "chunk interval", "module slack"
    );
    for n in needs {
        out.push_str(&format!(
            "{:<6} {:>7} B {:>7.2} GB/s {:>13.2} us {:>11.2} us\n",
            format!("{}G", n.link_gbps),
            n.chunk_bytes,
            n.ceiling_bytes_per_s as f64 / 1e9,
            n.chunk_interval_ns as f64 / 1000.0,
            n.module_slack_ns as f64 / 1000.0,
        ));
    }
    out
}

/// A run's setting and what it measured.
#[derive(Serialize)]
pub struct Row {
    pub set: &'static str,
    /// What differs from the set's other rows beyond the scenario (e.g. the slack).
    pub variant: String,
    pub scenario: Scenario,
    pub outcome: Outcome,
}

/// The rows as a table, one line per run, grouped by set.
pub fn table(rows: &[Row]) -> String {
    let columns = [
        "scenario",
        "mode",
        "variant",
        "p99 alone",
        "p99 beside",
        "ratio",
        "bulk",
        "/line",
        "/none",
        "SafeUtil",
        "queue p99",
    ];
    let mut out = String::new();
    let mut set = "";
    for row in rows {
        if row.set != set {
            set = row.set;
            out.push_str(&format!("\n{set} (SIMULATED)\n{}\n", line(&columns.map(String::from))));
        }
        let o = &row.outcome;
        let cells = [
            o.scenario.clone(),
            o.mode.to_string(),
            row.variant.clone(),
            duration(o.alone_p99_us),
            duration(o.beside_p99_us),
            format!("{:.2}", o.p99_ratio),
            rate(o.bulk_bytes_per_s),
            format!("{:.3}", o.bulk_vs_line_rate),
            vs_none(rows, row).map_or("-".to_string(), |r| format!("{r:.3}")),
            if o.mode == "none" { "-".to_string() } else { format!("{:.3}", o.safe_util_vs_link) },
            duration(o.switch_wait_p99_us),
        ];
        out.push_str(&line(&cells));
        out.push('\n');
    }
    out
}

/// One line of the table: the first three cells left-aligned, the rest right.
fn line(cells: &[String; 11]) -> String {
    let widths = [18, 7, 24, 10, 11, 6, 12, 6, 6, 8, 10];
    let mut out = String::new();
    for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
        if i < 3 {
            out.push_str(&format!("{cell:<width$} "));
        } else {
            out.push_str(&format!("{cell:>width$} "));
        }
    }
    out.trim_end().to_string()
}

/// Bulk's rate in `row` against `none` mode's in the same set and scenario, as
/// qos_bench.py's aggregate compares them.
fn vs_none(rows: &[Row], row: &Row) -> Option<f64> {
    let none = rows
        .iter()
        .find(|r| r.set == row.set && r.outcome.scenario == row.outcome.scenario && r.outcome.mode == "none")?;
    (none.outcome.bulk_bytes_per_s > 0.0).then(|| row.outcome.bulk_bytes_per_s / none.outcome.bulk_bytes_per_s)
}

/// Microseconds, or milliseconds where they are long.
fn duration(us: f64) -> String {
    if us >= 10_000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else {
        format!("{us:.2} us")
    }
}

/// Bytes/s in Gbit/s, or MB/s on slow links.
fn rate(bytes_per_s: f64) -> String {
    if bytes_per_s >= 1e8 {
        format!("{:.2} Gb/s", bytes_per_s * 8.0 / 1e9)
    } else {
        format!("{:.3} MB/s", bytes_per_s / 1e6)
    }
}
