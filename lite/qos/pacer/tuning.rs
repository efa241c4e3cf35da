// SPDX-License-Identifier: GPL-2.0
//! SW-Pri's tuning: when latency traffic counts as active, how often and on how
//! many samples AIMD steps, the default Target99 and weights, and what unpaced
//! bulk may keep in flight. Pure, so that the host crate (and the simulator
//! driving it) runs with the module's own values.

/// Latency traffic counts as active for this long after its last operation.
pub(crate) const ACTIVE_NS: u64 = 200_000_000;
/// An AIMD step takes the p99 of this many latency samples, or of at least
/// `MIN_STEP_SAMPLES` once `UPDATE_NS` passed: the p99 of fewer is their maximum,
/// and at emulated millisecond latencies that is noise, not queueing.
pub(crate) const STEP_SAMPLES: usize = 128;
pub(crate) const MIN_STEP_SAMPLES: usize = 32;
pub(crate) const UPDATE_NS: u64 = 500_000_000;
/// Target99 until the operator sets one and the latency class's p99 alone is known ...
pub(crate) const DEFAULT_TARGET_NS: u64 = 2_000_000;
/// ... and then, by default, 1.5 x the latency class's p99 alone: an absolute
/// default means nothing across hardware (RNICs' p99s are microseconds, emulated
/// ones milliseconds).
pub(crate) const DEFAULT_TARGET_RATIO_PCT: u32 = 150;
/// Default weights: latency, default, bulk.
pub(crate) const DEFAULT_WEIGHTS: [u32; 3] = [8, 4, 1];
/// In SW-Pri mode, bytes in flight per node while nothing is paced: what the link
/// carries in this time. Work conserving (several emulated round trips; 30 ms cost
/// bulk a quarter of a 4 MiB/s wire), yet the queue bulk leaves at the bottleneck
/// when latency traffic starts drains in this long: unbounded (128 KiB per
/// transfer) it held 250 ms of a 1 MiB/s wire, and the latency class's first
/// operations waited for all of it (p99 ratio 9.3 instead of 2.5).
pub(crate) const UNPACED_WINDOW_NS: u64 = 60_000_000;
/// Bytes in flight per unpaced transfer at the least (its work requests are no
/// larger): a page. 32 KiB, a full work request, let 32 bulk processes keep 1 MiB
/// in the queue, 280 ms of a 3.6 MB/s wire, whatever `UNPACED_WINDOW_NS` said.
pub(crate) const MIN_INFLIGHT: u64 = 4 << 10;
