// SPDX-License-Identifier: GPL-2.0
//! The module's workqueue, for work that may sleep (serving peers' requests,
//! refilling the reserve, zeroing on more CPUs).

use crate::ffi;

/// The module's workqueue.
pub(crate) fn module_queue() -> &'static kernel::workqueue::Queue {
    // SAFETY: the C glue creates the workqueue before it registers the ib_client and
    // /dev/lite (the only ways into the module) and destroys it after both are gone.
    unsafe { kernel::workqueue::Queue::from_raw(ffi::lite_workqueue().cast()) }
}
