// SPDX-License-Identifier: GPL-2.0
//! Tests only: backlogged flows run through WF²Q+ and the token bucket.

use super::{Flow, TokenBucket, Wf2q};

/// Runs backlogged flows of `chunk`-byte chunks through the bucket at `rate`
/// until `chunks` chunks went; returns (bytes per flow, elapsed ns).
pub(super) fn simulate(weights: &[u32], chunk: u64, rate: u64, chunks: usize) -> (Vec<u64>, u64) {
    let mut flows: Vec<Flow> = weights.iter().map(|&w| Flow::new(w)).collect();
    let mut sched = Wf2q::default();
    for i in 0..flows.len() {
        sched.arrive(&mut flows, i, chunk);
    }
    let mut bucket = TokenBucket::new(rate, 0);
    bucket.set_chunk(chunk, 0);
    // Start with an empty bank, like a flow that just became active.
    let _ = bucket.take(bucket.bank_bytes, 0);
    let mut sent = vec![0u64; flows.len()];
    let mut now = 0;
    for _ in 0..chunks {
        let i = sched.pick().unwrap_or(0);
        loop {
            match bucket.take(flows[i].head, now) {
                Ok(()) => break,
                Err(at) => now = at,
            }
        }
        sent[i] += flows[i].head;
        sched.served(&mut flows, i, chunk);
    }
    (sent, now)
}
