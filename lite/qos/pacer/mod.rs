// SPDX-License-Identifier: GPL-2.0
//! SW-Pri's sender-side arithmetic: how big a bulk chunk is, when the next one may
//! go, which flow sends it, and how fast bulk traffic may go while latency traffic
//! is active.
//!
//! - `link_chunk`, `chunk_len` (chunk.rs): bulk messages go in chunks while latency
//!   traffic is active (1 MB otherwise), sized to the link: a chunk lasts a few
//!   packet times on the wire, the queue a latency-class packet may find in front of
//!   it. Justitia's fixed 5 KB is a microsecond at 40 Gbit/s but milliseconds on a
//!   slow link.
//! - `TokenBucket` (bucket.rs): bytes and operations issued at SafeUtil, at most two
//!   chunks banked, and the time at which a chunk will be affordable, so the kernel
//!   arms a timer instead of spinning.
//! - `Wf2q` (wf2q.rs): WF²Q+ (Tassel) among the backlogged bulk flows: virtual start
//!   and finish times by weight, so 1 000 flows get accurate weighted shares.
//! - `Aimd` and `LatencyWindow` (aimd.rs): SafeUtil starts one step below its
//!   ceiling when latency traffic begins, drops by the p99's excess (at most a
//!   quarter) when the latency class's p99 is above Target99 (never below the bulk
//!   classes' share), grows additively below it, never exceeds `headroom` of the
//!   link's rate (a queue fed at the rate it drains never empties), and is
//!   unlimited when no latency traffic exists (work conserving).
//! - `AimdControl` (control.rs): the loop around it: pacing's start, when a step is
//!   due and on which samples, and the rate it leaves the bucket at.
//! - `DeliveryRate` (link_rate.rs): the link's rate as this node finds it: the best
//!   rate at which its device delivered bytes over whole intervals of backlogged time.
//! - `UnpacedDrain` (drain.rs): when the bulk bytes sent unpaced before latency
//!   traffic began drain: token waits count from then, and latency operations that
//!   started before then do not judge SafeUtil.
//! - `PlaceHold` (hold.rs): how long a paced work request holds its place, from
//!   post to completion, the least of the recent means.
//! - `paced_window`, `paced_places`, `transfer_share` (window.rs): the paced bytes
//!   and work requests the node may have in flight (what SafeUtil carries in a
//!   hold), and one transfer's share.
//! - `ChunkScale` (chunk.rs): chunks grow (to 8x) while backlogged flows get less
//!   than 90 % of SafeUtil: each chunk is a hand-off between the flows' tasks, and
//!   where those wake slowly (emulated vCPUs) small chunks cannot carry the rate.
//! - here: `per_second` and `bytes_in`, and the re-exports the rest of qos uses;
//!   `sim` (tests only) runs backlogged flows through WF²Q+ and the bucket.
//!
//! Everything is in nanoseconds, bytes and bytes per second; nothing allocates, and
//! nothing divides a 128-bit number (the kernel's Rust has no such division).

mod aimd;
mod alone;
mod bucket;
mod chunk;
mod control;
mod drain;
mod hold;
mod link_rate;
#[cfg(test)]
mod sim;
mod tuning;
mod wf2q;
mod window;

pub(crate) use aimd::{bulk_floor, headroom, Aimd, LatencyWindow, WINDOW};
pub(crate) use alone::AloneP99;
pub(crate) use bucket::{TokenBucket, MAX_RATE};
pub(crate) use chunk::{chunk_len, link_chunk, ChunkScale, CHUNK_MAX};
pub(crate) use control::{AimdControl, ControlInput, StepSamples};
pub(crate) use drain::UnpacedDrain;
pub(crate) use hold::PlaceHold;
pub(crate) use link_rate::{port_rate, Delivered, DeliveryRate};
pub(crate) use tuning::{
    ACTIVE_NS, DEFAULT_TARGET_NS, DEFAULT_TARGET_RATIO_PCT, DEFAULT_WEIGHTS, MIN_INFLIGHT,
    MIN_STEP_SAMPLES, STEP_SAMPLES, UNPACED_WINDOW_NS, UPDATE_NS,
};
pub(crate) use wf2q::{Flow, Wf2q};
pub(crate) use window::{paced_places, paced_window, transfer_share};

const NS_PER_S: u64 = 1_000_000_000;

/// The rate (bytes/s, at most `MAX_RATE`) of `bytes` over `ns`. Milliseconds keep
/// the product in 64 bits.
pub(crate) fn per_second(bytes: u64, ns: u64) -> u64 {
    (bytes.saturating_mul(1000) / (ns / 1_000_000).max(1)).min(MAX_RATE)
}

/// The bytes `rate` carries in `ns`. Whole milliseconds and the rest apart keep
/// both products in 64 bits; each loses under a byte.
pub(crate) fn bytes_in(rate: u64, ns: u64) -> u64 {
    let rate = rate.min(MAX_RATE);
    (rate.saturating_mul(ns / 1_000_000) / 1000).saturating_add(rate * (ns % 1_000_000) / NS_PER_S)
}
