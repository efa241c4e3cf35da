//! What a run measures, by phase: the latency class's operations alone and beside
//! bulk, the bulk bytes completed beside latency, and the switch queue.

use std::sync::{Arc, Mutex, MutexGuard};

use lite_kernel_logic::sw_pri::Control;

/// The time windows statistics are taken over (ns since the run's start).
#[derive(Clone, Copy, Debug)]
pub struct Windows {
    pub alone: (u64, u64),
    pub beside: (u64, u64),
}

impl Windows {
    fn phase(&self, at: u64) -> Option<Phase> {
        let within = |(from, to): (u64, u64)| (from..to).contains(&at);
        if within(self.alone) {
            Some(Phase::Alone)
        } else if within(self.beside) {
            Some(Phase::Beside)
        } else {
            None
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Alone,
    Beside,
}

pub struct Recorder {
    windows: Windows,
    /// Latency-class operations' times (ns), started and ended within a phase.
    pub alone_ns: Vec<u64>,
    pub beside_ns: Vec<u64>,
    /// Bulk payload bytes whose work requests completed within the beside phase.
    pub bulk_bytes: u64,
    /// Bytes of every work request posted and completed, for conservation checks.
    pub posted_bytes: u64,
    pub completed_bytes: u64,
    /// Each packet's wait at the switch within the beside phase (ns), and the wire
    /// bytes the link carried then.
    pub switch_waits_ns: Vec<u64>,
    pub link_bytes: u64,
    /// The node's SW-Pri state as of its latest latency-class operation.
    pub control: Control,
    pub node_alone_p99_ns: Option<u64>,
}

impl Recorder {
    pub fn new(windows: Windows) -> Arc<Mutex<Recorder>> {
        Arc::new(Mutex::new(Recorder {
            windows,
            alone_ns: Vec::new(),
            beside_ns: Vec::new(),
            bulk_bytes: 0,
            posted_bytes: 0,
            completed_bytes: 0,
            switch_waits_ns: Vec::new(),
            link_bytes: 0,
            control: Control::default(),
            node_alone_p99_ns: None,
        }))
    }

    pub fn windows(&self) -> Windows {
        self.windows
    }

    /// A latency-class operation ran from `start` to `end`.
    pub fn latency(&mut self, start: u64, end: u64) {
        let phase = self.windows.phase(start);
        if phase.is_some() && phase == self.windows.phase(end) {
            match phase {
                Some(Phase::Alone) => self.alone_ns.push(end - start),
                Some(Phase::Beside) => self.beside_ns.push(end - start),
                None => {}
            }
        }
    }

    /// A work request of `bytes` completed at `at`; `bulk`: a bulk transfer's.
    pub fn completed(&mut self, at: u64, bytes: u64, bulk: bool) {
        self.completed_bytes += bytes;
        if bulk && self.windows.phase(at) == Some(Phase::Beside) {
            self.bulk_bytes += bytes;
        }
    }

    pub fn posted(&mut self, bytes: u64) {
        self.posted_bytes += bytes;
    }

    /// A packet of `wire_bytes` went onto the link at `at` after waiting `wait_ns`.
    pub fn queued(&mut self, at: u64, wait_ns: u64, wire_bytes: u64) {
        if self.windows.phase(at) == Some(Phase::Beside) {
            self.switch_waits_ns.push(wait_ns);
            self.link_bytes += wire_bytes;
        }
    }
}

/// The recorder, also if a model panicked while holding it (its figures are
/// still what was recorded).
pub fn lock(recorder: &Mutex<Recorder>) -> MutexGuard<'_, Recorder> {
    recorder.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
