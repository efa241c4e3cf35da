//! lite-graph: PageRank in gather-apply-scatter style on LITE (LITE-Graph, paper §8.3).
//!
//! Every worker builds the same power-law graph from the seed and owns a contiguous
//! range of vertices. The ranks live in two LMRs spread over the nodes (`NAME.ranks.0`
//! and `.1`, one per iteration parity). An iteration: gather (LT_read the current
//! ranks), apply (new ranks of the owned vertices from their in-neighbours), scatter
//! (LT_write them into the other array), add the owned vertices' change to the
//! iteration's shared total under LT_lock, and LT_barrier. After the last iteration
//! worker 0 compares every rank with a single-process run of the same iterations.

use clap::{Parser, Subcommand};
use lite::{Error, Lite, Lmr, MallocOptions, Perm};
use lite_apps::Zipf;
use lite_stats::Rng;
use std::process::ExitCode;
use std::time::{Duration, Instant};

const DAMPING: f64 = 0.85;
const MAX_ITERATIONS: u32 = 1000;
/// Meta words: barrier counter, lock word, ready mark, then per iteration the
/// summed change.
const META_BARRIER: u64 = 0;
const META_LOCK: u64 = 8;
const META_READY: u64 = 16;
const META_DELTA: u64 = 64;
/// Worker 0 writes this once the meta words are zero: others may use them then.
const READY: u64 = 0x4c47_5241_5048_2121; // "LGRAPH!!"
const BARRIER_TIMEOUT: Duration = Duration::from_secs(600);
/// Ranks move in pieces of this many bytes.
const PIECE: usize = 1 << 20;

#[derive(Parser)]
#[command(
    name = "lite-graph",
    about = "PageRank on LITE: ranks in LMRs, LT_barrier between steps, LT_lock around shared sums"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Clone)]
struct GraphArgs {
    #[arg(long, default_value_t = 100_000)]
    vertices: u32,
    #[arg(long, default_value_t = 1_000_000)]
    edges: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Subcommand)]
enum Command {
    /// One of WORKERS workers (RANK 0 creates the shared LMRs on NODES and checks the
    /// result); start one per node, each with its rank.
    Run {
        #[command(flatten)]
        graph: GraphArgs,
        #[arg(long)]
        rank: u32,
        #[arg(long)]
        workers: u32,
        /// Nodes that hold the rank arrays (rank 0 only; default: its own).
        #[arg(long, value_delimiter = ',')]
        holders: Vec<u32>,
        #[arg(long, default_value_t = 20)]
        iterations: u32,
        /// Stop early once the ranks change by less than this in total.
        #[arg(long, default_value_t = 0.0)]
        tolerance: f64,
        #[arg(long, default_value = "pagerank")]
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// PageRank in this process only (the reference), printing the top vertices.
    Reference {
        #[command(flatten)]
        graph: GraphArgs,
        #[arg(long, default_value_t = 20)]
        iterations: u32,
    },
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Run { graph, rank, workers, holders, iterations, tolerance, name, json } => {
            Lite::open().map_err(|e| e.to_string()).and_then(|lite| {
                let a = RunArgs { graph, rank, workers, holders, iterations, tolerance, name, json };
                run(&lite, &a)
            })
        }
        Command::Reference { graph, iterations } => {
            let started = Instant::now();
            let g = Graph::generate(&graph);
            let ranks = reference(&g, iterations);
            let mut top: Vec<_> = ranks.iter().enumerate().collect();
            top.sort_by(|a, b| b.1.total_cmp(a.1));
            println!(
                "{} vertices, {} edges, {iterations} iterations in {:.2} s; top vertices:",
                g.vertices,
                graph.edges,
                started.elapsed().as_secs_f64()
            );
            for (v, r) in top.iter().take(5) {
                println!("  {v:>10} {r:.9}");
            }
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lite-graph: {e}");
            ExitCode::FAILURE
        }
    }
}

// ---- the graph and the rank computation (pure) ----

/// In-edges in compressed form, and out-degrees.
struct Graph {
    vertices: usize,
    /// In-neighbours of v: `sources[first[v]..first[v + 1]]`.
    first: Vec<usize>,
    sources: Vec<u32>,
    out_degree: Vec<u32>,
}

impl Graph {
    /// A power-law graph: targets drawn Zipf-distributed (scattered over the ids),
    /// sources uniform; the same for every worker with the same arguments.
    fn generate(a: &GraphArgs) -> Graph {
        let n = a.vertices.max(1) as usize;
        let zipf = Zipf::new(n as u64, 0.8);
        let mut rng = Rng::new(a.seed);
        let mut edges = Vec::with_capacity(a.edges as usize);
        for _ in 0..a.edges {
            let to = (zipf.sample(&mut rng).wrapping_mul(2_654_435_761) % n as u64) as u32;
            let from = rng.below(n as u64) as u32;
            edges.push((to, from));
        }
        edges.sort_unstable();
        let mut first = vec![0usize; n + 1];
        let mut out_degree = vec![0u32; n];
        for &(to, from) in &edges {
            first[to as usize + 1] += 1;
            out_degree[from as usize] += 1;
        }
        for v in 0..n {
            first[v + 1] += first[v];
        }
        Graph { vertices: n, first, sources: edges.into_iter().map(|(_, from)| from).collect(), out_degree }
    }

    /// The rank mass of vertices without out-edges, spread over all vertices.
    fn dangling(&self, ranks: &[f64]) -> f64 {
        ranks.iter().zip(&self.out_degree).filter(|(_, &d)| d == 0).map(|(r, _)| r).sum()
    }

    /// New rank of `v` from the current ranks (and their dangling mass).
    fn apply(&self, ranks: &[f64], dangling: f64, v: usize) -> f64 {
        let n = self.vertices as f64;
        let gathered: f64 = self.sources[self.first[v]..self.first[v + 1]]
            .iter()
            .map(|&u| ranks[u as usize] / f64::from(self.out_degree[u as usize]))
            .sum();
        (1.0 - DAMPING) / n + DAMPING * (gathered + dangling / n)
    }
}

fn reference(g: &Graph, iterations: u32) -> Vec<f64> {
    let mut ranks = vec![1.0 / g.vertices as f64; g.vertices];
    for _ in 0..iterations {
        let dangling = g.dangling(&ranks);
        ranks = (0..g.vertices).map(|v| g.apply(&ranks, dangling, v)).collect();
    }
    ranks
}

/// Worker `rank`'s vertices out of `n` for `workers` workers.
fn owned(n: usize, workers: u32, rank: u32) -> std::ops::Range<usize> {
    let at = |k: u32| n * k as usize / workers as usize;
    at(rank)..at(rank + 1)
}

// ---- the distributed run ----

struct RunArgs {
    graph: GraphArgs,
    rank: u32,
    workers: u32,
    holders: Vec<u32>,
    iterations: u32,
    tolerance: f64,
    name: String,
    json: bool,
}

struct Shared<'a> {
    ranks: [Lmr<'a>; 2],
    meta: Lmr<'a>,
}

/// Rank 0 creates the LMRs; the others map them once they exist.
fn shared<'a>(lite: &'a Lite, a: &RunArgs, n: usize) -> Result<Shared<'a>, String> {
    let names = [format!("{}.ranks.0", a.name), format!("{}.ranks.1", a.name), format!("{}.meta", a.name)];
    let bytes = [n as u64 * 8, n as u64 * 8, META_DELTA + 8 * u64::from(MAX_ITERATIONS)];
    let rw = Perm::READ | Perm::WRITE;
    let mut lmrs = Vec::new();
    if a.rank == 0 {
        let holders = a.holders.clone();
        for (name, &size) in names.iter().zip(&bytes) {
            // The meta words (barrier, lock, sums) must start at zero; the ranks are
            // written before anyone reads them.
            let placed = if name.ends_with(".meta") { Vec::new() } else { holders.clone() };
            let opts = MallocOptions { holders: placed, perm: rw, namespace: 0 };
            let lmr = lite.malloc(size, name, &opts).map_err(|e| format!("create {name}: {e}"))?;
            lmrs.push(lmr);
        }
        lmrs[2].memset(0, bytes[2], 0).map_err(|e| format!("clear {}: {e}", names[2]))?;
        lmrs[2].write(META_READY, &READY.to_le_bytes()).map_err(|e| format!("mark {}: {e}", names[2]))?;
    } else {
        let deadline = Instant::now() + Duration::from_secs(120);
        // The meta LMR is created last: once it exists, all do.
        for (i, name) in names.iter().enumerate().rev() {
            let lmr = loop {
                match lite.map(name, rw, 0) {
                    Ok(l) => break l,
                    Err(Error::NoSuchName(_)) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(200))
                    }
                    Err(e) => return Err(format!("map {name} (is worker 0 running?): {e}")),
                }
            };
            if lmr.size() != bytes[i] {
                return Err(format!(
                    "{name} has {} bytes, not {}: do all workers have the same --vertices?",
                    lmr.size(),
                    bytes[i]
                ));
            }
            lmrs.push(lmr);
        }
        lmrs.reverse();
        // Created is not yet cleared: wait for worker 0's mark.
        let mut word = [0u8; 8];
        loop {
            lmrs[2].read(META_READY, &mut word).map_err(|e| format!("read {}: {e}", names[2]))?;
            if u64::from_le_bytes(word) == READY {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("{} never became ready", names[2]));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let meta = lmrs.pop().ok_or("no meta LMR")?;
    let second = lmrs.pop().ok_or("no rank LMR")?;
    let first = lmrs.pop().ok_or("no rank LMR")?;
    Ok(Shared { ranks: [first, second], meta })
}

fn read_ranks(lmr: &Lmr<'_>, n: usize) -> lite::Result<Vec<f64>> {
    let mut bytes = vec![0u8; n * 8];
    for (i, piece) in bytes.chunks_mut(PIECE).enumerate() {
        lmr.read((i * PIECE) as u64, piece)?;
    }
    Ok(bytes.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap_or([0; 8]))).collect())
}

fn write_ranks(lmr: &Lmr<'_>, first: usize, ranks: &[f64]) -> lite::Result<()> {
    let bytes: Vec<u8> = ranks.iter().flat_map(|r| r.to_le_bytes()).collect();
    for (i, piece) in bytes.chunks(PIECE).enumerate() {
        lmr.write((first * 8 + i * PIECE) as u64, piece)?;
    }
    Ok(())
}

/// Adds `value` to the f64 at `offset` under the shared lock: no RDMA atomic adds
/// floating point numbers.
fn add_shared(meta: &Lmr<'_>, offset: u64, value: f64) -> lite::Result<()> {
    let guard = meta.lock(META_LOCK)?;
    let mut word = [0u8; 8];
    meta.read(offset, &mut word)?;
    meta.write(offset, &(f64::from_le_bytes(word) + value).to_le_bytes())?;
    guard.unlock()
}

fn run(lite: &Lite, a: &RunArgs) -> Result<(), String> {
    if a.workers == 0 || a.rank >= a.workers || a.iterations == 0 || a.iterations > MAX_ITERATIONS {
        return Err(format!("need --rank below --workers and 1 to {MAX_ITERATIONS} iterations"));
    }
    let started = Instant::now();
    let g = Graph::generate(&a.graph);
    let n = g.vertices;
    let mine = owned(n, a.workers, a.rank);
    let built = started.elapsed().as_secs_f64();
    let s = shared(lite, a, n)?;
    let barrier = |what: &str| {
        s.meta.barrier(META_BARRIER, a.workers, BARRIER_TIMEOUT).map_err(|e| format!("barrier {what}: {e}"))
    };
    write_ranks(&s.ranks[0], mine.start, &vec![1.0 / n as f64; mine.len()]).map_err(|e| format!("scatter: {e}"))?;
    barrier("after the initial ranks")?;
    let computing = Instant::now();
    let (mut done, mut delta) = (0, f64::INFINITY);
    while done < a.iterations && delta >= a.tolerance {
        let (cur, next) = (&s.ranks[done as usize % 2], &s.ranks[(done as usize + 1) % 2]);
        let ranks = read_ranks(cur, n).map_err(|e| format!("gather: {e}"))?;
        let dangling = g.dangling(&ranks);
        let new: Vec<f64> = mine.clone().map(|v| g.apply(&ranks, dangling, v)).collect();
        write_ranks(next, mine.start, &new).map_err(|e| format!("scatter: {e}"))?;
        let change: f64 = new.iter().zip(&ranks[mine.clone()]).map(|(x, y)| (x - y).abs()).sum();
        let slot = META_DELTA + 8 * u64::from(done);
        add_shared(&s.meta, slot, change).map_err(|e| format!("add the change: {e}"))?;
        barrier(&format!("of iteration {done}"))?;
        let mut word = [0u8; 8];
        s.meta.read(slot, &mut word).map_err(|e| format!("read the change: {e}"))?;
        delta = f64::from_le_bytes(word);
        done += 1;
        eprintln!("lite-graph [{:6.1} s] iteration {done}: total change {delta:.3e}", started.elapsed().as_secs_f64());
    }
    let seconds = computing.elapsed().as_secs_f64();
    let mut summary = serde_json::json!({
        "vertices": n,
        "edges": a.graph.edges,
        "workers": a.workers,
        "rank": a.rank,
        "iterations": done,
        "last_change": delta,
        "build_s": built,
        "seconds": seconds,
        "s_per_iteration": seconds / f64::from(done),
    });
    if a.rank == 0 {
        let ranks = read_ranks(&s.ranks[done as usize % 2], n).map_err(|e| format!("read the result: {e}"))?;
        let checking = Instant::now();
        let want = reference(&g, done);
        let reference_s = checking.elapsed().as_secs_f64();
        let max_diff = ranks.iter().zip(&want).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
        summary["max_diff"] = max_diff.into();
        summary["reference_s"] = reference_s.into();
        summary["rank_sum"] = ranks.iter().sum::<f64>().into();
        if !a.json {
            println!(
                "{n} vertices, {} edges, {} workers: {done} iterations in {seconds:.2} s ({:.3} s each); \
                 single-process reference {reference_s:.2} s; largest difference {max_diff:.2e}",
                a.graph.edges,
                a.workers,
                seconds / f64::from(done)
            );
        }
        if max_diff > 1e-6 {
            println!("{summary}");
            return Err(format!("ranks differ from the reference by up to {max_diff:e}"));
        }
    }
    // Everyone has read what it needs before rank 0 frees the arrays.
    barrier("at the end")?;
    if a.json {
        println!("{summary}");
    } else if a.rank != 0 {
        println!("worker {} of {}: {done} iterations in {seconds:.2} s", a.rank, a.workers);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        <Cli as clap::CommandFactory>::command().debug_assert();
    }

    fn small() -> GraphArgs {
        GraphArgs { vertices: 500, edges: 4000, seed: 3 }
    }

    #[test]
    fn the_graph_is_deterministic_and_power_law() {
        let (g, h) = (Graph::generate(&small()), Graph::generate(&small()));
        assert_eq!(g.sources, h.sources);
        assert_eq!(g.sources.len(), 4000);
        let mut in_degrees: Vec<usize> = (0..g.vertices).map(|v| g.first[v + 1] - g.first[v]).collect();
        in_degrees.sort_unstable();
        // The most popular vertex has many times the median in-degree.
        assert!(in_degrees[499] > 5 * in_degrees[250].max(1), "{:?}", &in_degrees[490..]);
    }

    #[test]
    fn ranks_stay_a_distribution_and_converge() {
        let g = Graph::generate(&small());
        let r = reference(&g, 50);
        assert!((r.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        let r2 = reference(&g, 51);
        let change: f64 = r.iter().zip(&r2).map(|(a, b)| (a - b).abs()).sum();
        assert!(change < 1e-4, "{change}");
    }

    #[test]
    fn workers_split_the_vertices_exactly_and_compute_the_same_ranks() {
        let g = Graph::generate(&small());
        let ranks = reference(&g, 3);
        let dangling = g.dangling(&ranks);
        let mut pieced = Vec::new();
        for w in 0..3 {
            pieced.extend(owned(g.vertices, 3, w).map(|v| g.apply(&ranks, dangling, v)));
        }
        assert_eq!(pieced, reference(&g, 4));
    }
}
