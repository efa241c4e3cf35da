//! What LITE's own code costs per operation on this host: the pure paths every
//! operation crosses, run through the module's own files (`lite_kernel_logic::per_op`).
//! `tools/host_bench.py` runs this and turns the medians into the share of a core
//! the pacer needs at line rate (docs/measurements/host-cost.md).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use intrusive_collections::{intrusive_adapter, KeyAdapter, RBTree, RBTreeLink};
use lite_kernel_logic::per_op::{
    Bucket, Classifier, Control, Lmr, Pacer, RpcRing, Schedule, Xorshift,
};

/// 100 Gbit/s in bytes/s: the link the pacer's benches run at.
const LINK_100G: u64 = 100_000_000_000 / 8;
const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;
/// Permissions of a handle mapped for reading and writing (`LITE_PERM_*`).
const PERM_RW: u32 = 3;
/// Calls one node may have in flight to another (`CALL_SLOTS`), so records
/// claimed and not yet released.
const CALLS_IN_FLIGHT: u64 = 64;

/// Values drawn before the clock runs, so that an operation's handle, offset or
/// latency costs a load, not the generator's division.
struct Draws {
    values: Vec<u64>,
    next: usize,
}

/// Values per `Draws`, a power of two: more than the handles of most tables, so
/// that the lookups range over the whole tree.
const DRAWS: usize = 1 << 16;

impl Draws {
    /// Values in `0..bound` (`bound` > 0).
    fn below(seed: u64, bound: u64) -> Draws {
        let mut rng = Xorshift::new(seed);
        Draws {
            values: (0..DRAWS).map(|_| rng.below(bound)).collect(),
            next: 0,
        }
    }

    fn next(&mut self) -> u64 {
        let value = self.values[self.next];
        self.next = (self.next + 1) & (DRAWS - 1);
        value
    }
}

/// What `FileLmrs::get` clones the `Arc` of.
struct Mapping {
    size: u64,
}

/// A handle as the module's handle table keeps it. That table is the kernel's
/// `RBTree<u64, Handle>`, which cannot be built on the host; its lookup walks
/// `rb_node`s (three words, like `RBTreeLink`) from the root, comparing keys, one
/// allocation per node, which is what this tree does. The node has the kernel
/// node's fields and size: link, handle, and the `Handle` (mapping, permissions,
/// registry key).
struct HandleNode {
    link: RBTreeLink,
    lh: u64,
    mapping: Arc<Mapping>,
    perm: u32,
    // Not read by a lookup: it makes the node as large as the kernel's, which
    // decides how many nodes the caches hold.
    #[allow(dead_code)]
    registry_key: (u32, u64, u64),
}

intrusive_adapter!(ByHandle = Box<HandleNode>: HandleNode { link => RBTreeLink });

impl<'a> KeyAdapter<'a> for ByHandle {
    type Key = u64;
    fn get_key(&self, node: &'a HandleNode) -> u64 {
        node.lh
    }
}

/// An open file's handles: `count` LMRs mapped, with the handles a node's
/// counter hands out, in order.
struct HandleTable {
    tree: RBTree<ByHandle>,
    first: u64,
}

impl HandleTable {
    fn new(count: u64) -> HandleTable {
        let first = 1 << 20;
        let mapping = Arc::new(Mapping { size: 4 * KIB });
        let mut tree = RBTree::new(ByHandle::new());
        for lh in first..first + count {
            tree.insert(Box::new(HandleNode {
                link: RBTreeLink::new(),
                lh,
                mapping: mapping.clone(),
                perm: PERM_RW,
                registry_key: (0, lh, lh),
            }));
        }
        HandleTable { tree, first }
    }

    /// `FileLmrs::get`: the mapping (one more reference to it) and the permissions.
    fn get(&self, lh: u64) -> Option<(Arc<Mapping>, u32)> {
        let node = self.tree.find(&lh).get()?;
        Some((node.mapping.clone(), node.perm))
    }
}

fn handle_lookup(c: &mut Criterion<ThreadCpu>) {
    let mut group = c.benchmark_group("handle_lookup");
    for lmrs in [1, 1000, 100_000] {
        let table = HandleTable::new(lmrs);
        let mut handles = Draws::below(lmrs, lmrs);
        group.bench_function(BenchmarkId::new("lmrs", lmrs), |b| {
            b.iter(|| {
                let found = table.get(table.first + handles.next());
                found.map(|(mapping, perm)| black_box(mapping.size) ^ u64::from(perm))
            })
        });
    }
    group.finish();
}

fn layout(c: &mut Criterion<ThreadCpu>) {
    let mut group = c.benchmark_group("layout");
    let small = Lmr::allocated(4 * KIB, 0b10);
    let big = Lmr::allocated(GIB, 0b110);
    assert_eq!((small.extents(), big.extents()), (1, 256), "4 MiB chunks");
    let mut at = Draws::below(7, small.size() - 8);
    group.bench_function("8B_of_4KiB", |b| {
        b.iter(|| small.access(PERM_RW, false, at.next(), 8))
    });
    for (name, len) in [("4KiB_of_1GiB", 4 * KIB), ("1MiB_of_1GiB", MIB)] {
        let mut at = Draws::below(len, big.size() - len);
        group.bench_function(name, |b| {
            b.iter(|| big.access(PERM_RW, true, at.next(), len))
        });
    }
    let mut word = Draws::below(8, big.size() / 8);
    group.bench_function("atomic_of_1GiB", |b| {
        b.iter(|| big.atomic_word(PERM_RW, word.next() * 8))
    });
    group.finish();
}

/// Times `iters` claims (`time_claims`) or releases of records in a ring that
/// `CALLS_IN_FLIGHT` calls share: records are claimed a batch of calls at a
/// time, then released in order, or last first (`reversed`), which leaves the
/// server a gap per record until the first one comes. The other half of each
/// cycle is not timed. A timed half lasts a microsecond or so, which the
/// scheduler seldom cuts into, so the wall clock times it: the thread's CPU clock
/// is a system call that would cost as much as the batch.
fn ring_batches(ring: &mut RpcRing, iters: u64, time_claims: bool, reversed: bool) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let batch = left.min(CALLS_IN_FLIGHT);
        left -= batch;
        let started = Instant::now();
        let claimed: Vec<_> = (0..batch as u32)
            .map(|slot| ring.claim(16, 1, slot).expect("the ring has room"))
            .collect();
        if time_claims {
            total += started.elapsed();
        }
        let started = Instant::now();
        if reversed {
            claimed
                .iter()
                .rev()
                .for_each(|record| assert!(ring.release(record)));
        } else {
            claimed
                .iter()
                .for_each(|record| assert!(ring.release(record)));
        }
        if !time_claims {
            total += started.elapsed();
        }
    }
    total
}

fn rpc_ring(c: &mut Criterion<ThreadCpu>) {
    let mut group = c.benchmark_group("rpc_ring");
    let mut ring = RpcRing::new();
    group.bench_function("claim", |b| {
        b.iter_custom(|iters| ring_batches(&mut ring, iters, true, false))
    });
    group.bench_function("release", |b| {
        b.iter_custom(|iters| ring_batches(&mut ring, iters, false, false))
    });
    group.bench_function("release_out_of_order", |b| {
        b.iter_custom(|iters| ring_batches(&mut ring, iters, false, true))
    });
    group.finish();
}

fn pacer(c: &mut Criterion<ThreadCpu>) {
    let mut group = c.benchmark_group("pacer_admit");
    for flows in [1, 100, 1000] {
        let mut pacer = Pacer::new(flows, LINK_100G);
        group.bench_function(BenchmarkId::new("flows", flows), |b| {
            b.iter(|| pacer.admit_chunk())
        });
    }
    group.finish();
    let mut group = c.benchmark_group("wf2q_select");
    for flows in [1, 100, 1000] {
        let mut schedule = Schedule::new(flows, LINK_100G);
        group.bench_function(BenchmarkId::new("flows", flows), |b| {
            b.iter(|| schedule.select())
        });
    }
    group.finish();
    let mut bucket = Bucket::new(LINK_100G);
    c.bench_function("token_bucket/take", |b| b.iter(|| bucket.take()));
}

fn control(c: &mut Criterion<ThreadCpu>) {
    let mut rng = Xorshift::new(11);
    let mut control = Control::new(LINK_100G, 0, &mut rng);
    let mut latencies = Draws::below(11, 20_000);
    c.bench_function("latency_sample", |b| {
        b.iter(|| control.sample(5_000 + latencies.next()))
    });
    let mut group = c.benchmark_group("aimd_step");
    for samples in [128, 1024] {
        let mut control = Control::new(LINK_100G, samples, &mut rng);
        group.bench_function(BenchmarkId::new("samples", samples), |b| {
            b.iter(|| control.step())
        });
    }
    group.finish();
}

fn classify(c: &mut Criterion<ThreadCpu>) {
    let mut group = c.benchmark_group("classify");
    let cases = [
        ("no_rules", Classifier::new(0, 4)),
        ("64_rules_16_ancestors", Classifier::new(64, 16)),
    ];
    for (name, classifier) in cases {
        let mut spread = 0;
        group.bench_function(name, |b| {
            b.iter(|| {
                spread += 1;
                classifier.classify(spread)
            })
        });
    }
    group.finish();
}

/// The calling thread's CPU time: the benches share two cores with other work,
/// and the time another task held the core is no cost of the code measured.
/// What is measured here is what a share of a core is made of.
struct ThreadCpu {
    /// Lends its formatter: the values are durations, as wall time's are.
    wall: WallTime,
}

fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for the call to fill in; the clock is the
    // calling thread's own, which always exists.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(rc, 0, "the thread's CPU clock");
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

impl Measurement for ThreadCpu {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        thread_cpu_time()
    }

    fn end(&self, started: Duration) -> Duration {
        thread_cpu_time().saturating_sub(started)
    }

    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }

    fn zero(&self) -> Duration {
        Duration::ZERO
    }

    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        self.wall.formatter()
    }
}

/// Short runs of the thread's CPU time (`ThreadCpu`): criterion's medians and
/// confidence intervals are enough at this length. The command line
/// (`--warm-up-time`, `--measurement-time`) overrides it.
fn short() -> Criterion<ThreadCpu> {
    Criterion::default()
        .with_measurement(ThreadCpu { wall: WallTime })
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = per_op;
    config = short();
    targets = handle_lookup, layout, rpc_ring, pacer, control, classify
}
criterion_main!(per_op);
