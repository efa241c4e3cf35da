// SPDX-License-Identifier: GPL-2.0
//! A client of the services: what one open file of /dev/lite, or one user of the
//! kernel API, holds of them (handles and the LMRs it masters, the RPC ids it
//! serves and calls in flight, locks), and what its end releases.

use crate::lmr::FileLmrs;
use crate::locks::FileLocks;
use crate::node::Lite;
use crate::rpc::FileRpc;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::prelude::*;
use kernel::sync::{new_mutex, Arc, Mutex};

/// Identifies clients for the class choices made through them.
static NEXT_CLIENT_ID: AtomicU64 = AtomicU64::new(1);

/// What one client holds of the services.
pub(crate) struct Client {
    pub(crate) id: u64,
    /// Its handles and the LMRs it masters.
    pub(crate) lmrs: Pin<KBox<Mutex<FileLmrs>>>,
    /// The shared page, calls in flight, servers and owed replies.
    pub(crate) rpc: Arc<FileRpc>,
    /// Locks it holds.
    pub(crate) locks: Pin<KBox<Mutex<FileLocks>>>,
}

impl Client {
    pub(crate) fn new() -> Result<Client> {
        Ok(Client {
            id: NEXT_CLIENT_ID.fetch_add(1, Ordering::Relaxed),
            lmrs: KBox::pin_init(new_mutex!(FileLmrs::new(), "lite:file.lmrs"), GFP_KERNEL)?,
            rpc: FileRpc::new()?,
            locks: KBox::pin_init(new_mutex!(FileLocks::new(), "lite:file.locks"), GFP_KERNEL)?,
        })
    }

    /// Its end: the locks it holds pass on, every handle goes, the LMRs it
    /// mastered are freed, the ids it served are unregistered, the replies it
    /// owed fail and the class its process chose for itself lapses.
    pub(crate) fn release(&self, lite: &Lite) {
        lite.net.qos.file_closed(self.id);
        lite.locks.release_file(&self.locks);
        lite.rpc.release(&self.rpc);
        lite.lmr.file_release(&self.lmrs);
    }
}
