// SPDX-License-Identifier: GPL-2.0
//! What the services above lmr hear of its memory's lifetime, without lmr
//! importing them: node installs the listener (the locks service) after it built
//! both, and takes it out before they go.

use kernel::sync::Arc;

use super::LmrNode;

/// A listener to the memory this node holds.
pub(crate) trait LmrEvents: Send + Sync {
    /// This node no longer holds memory of LMR (`master`, `id`).
    fn released(&self, master: u32, id: u64);
}

impl LmrNode {
    /// Installs `events` (`None` takes it out, breaking the reference cycle).
    pub(crate) fn set_events(&self, events: Option<Arc<dyn LmrEvents>>) {
        *self.events.lock() = events;
    }

    pub(super) fn events_released(&self, master: u32, id: u64) {
        let events = self.events.lock().clone();
        if let Some(events) = events {
            events.released(master, id);
        }
    }
}
