// SPDX-License-Identifier: GPL-2.0
//! /dev/lite: per-open state, the shared page and ioctl dispatch. Each family of
//! ioctls is served by the `ioctl` function of its file here (`cluster`, `lmr`,
//! `locks`, `rpc`, `qos`, and `reach` in debug test builds); `uarg` copies and
//! checks their arguments.

mod cluster;
mod lmr;
mod locks;
mod qos;
#[cfg(lite_test_hooks)]
mod reach;
mod rpc;

use crate::client::Client;
use crate::node::Lite;
use crate::uapi::*;
use kernel::prelude::*;
#[cfg(lite_test_hooks)]
use kernel::sync::{new_mutex, Mutex};

/// State of one open file of /dev/lite.
pub(crate) struct OpenFile {
    client: Client,
    /// Its canary page for `LITE_IOC_REACH` (debug test builds only).
    #[cfg(lite_test_hooks)]
    reach: Pin<KBox<Mutex<reach::FileReach>>>,
}

impl OpenFile {
    pub(crate) fn new() -> Result<KBox<OpenFile>> {
        Ok(KBox::new(
            OpenFile {
                client: Client::new()?,
                #[cfg(lite_test_hooks)]
                reach: KBox::pin_init(
                    new_mutex!(reach::FileReach::new(), "lite:file.reach"),
                    GFP_KERNEL,
                )?,
            },
            GFP_KERNEL,
        )?)
    }

    /// Last close: the client's end (`Client::release`).
    pub(crate) fn release(&self, lite: &Lite) {
        self.client.release(lite);
    }

    /// Kernel address of the shared page, for mmap.
    pub(crate) fn shared_page(&self) -> *mut core::ffi::c_void {
        self.client.rpc.shared_page()
    }

    /// Every command that acts and then writes its result back first writes the
    /// argument back unchanged: one whose memory is not writable fails with EFAULT
    /// before acting. Where the final write can still fail (another thread unmapped
    /// the memory meanwhile), what was made is undone.
    pub(crate) fn ioctl(&self, lite: &Lite, cmd: u32, arg: usize) -> Result<isize> {
        let Client {
            id,
            lmrs,
            rpc,
            locks,
        } = &self.client;
        rpc.count_crossing();
        match cmd {
            LITE_IOC_INFO
            | LITE_IOC_DEV_CAPS
            | LITE_IOC_JOIN
            | LITE_IOC_LEAVE
            | LITE_IOC_PEER_PREPARE
            | LITE_IOC_PEER_CONNECT
            | LITE_IOC_PEER_DOWN
            | LITE_IOC_PEERS
            | LITE_IOC_PING => cluster::ioctl(lite, cmd, arg),
            LITE_IOC_MALLOC | LITE_IOC_REGISTER | LITE_IOC_MAP | LITE_IOC_UNMAP | LITE_IOC_FREE
            | LITE_IOC_GRANT | LITE_IOC_READ | LITE_IOC_WRITE | LITE_IOC_MEMSET
            | LITE_IOC_MEMCPY | LITE_IOC_MEM_STAT | LITE_IOC_RESERVE | LITE_IOC_ATOMIC
            | LITE_IOC_LMR_STAT => {
                let locked = |lh| lite.locks.held_through(locks, lh);
                lmr::ioctl(lite, lmrs, locked, cmd, arg)
            }
            LITE_IOC_LOCK | LITE_IOC_BARRIER => locks::ioctl(lite, lmrs, locks, cmd, arg),
            LITE_IOC_RPC_REGISTER
            | LITE_IOC_RPC_UNREGISTER
            | LITE_IOC_RPC_CALL
            | LITE_IOC_WAIT
            | LITE_IOC_RPC_RECV
            | LITE_IOC_RPC_REPLY
            | LITE_IOC_RPC_REPLY_RECV
            | LITE_IOC_RPC_BENCH
            | LITE_IOC_RPC_STAT => rpc::ioctl(lite, rpc, cmd, arg),
            LITE_IOC_QOS_GET
            | LITE_IOC_QOS_SET
            | LITE_IOC_CLASS_RULE_ADD
            | LITE_IOC_CLASS_RULE_DEL
            | LITE_IOC_CLASS_RULES
            | LITE_IOC_CLASS_SELF
            | LITE_IOC_QOS_STAT => qos::ioctl(lite, *id, cmd, arg),
            #[cfg(lite_test_hooks)]
            LITE_IOC_REACH => reach::ioctl(lite, lmrs, &self.reach, arg),
            _ => Err(ENOTTY),
        }
        .map(|()| 0)
    }
}
