// SPDX-License-Identifier: GPL-2.0
//! `Staging`: a few pages allocated and mapped for the device once, which small
//! reads land in before they are copied out, and atomics' results. Pinning and
//! mapping a user page per call, and unpinning it after, cost a small read more
//! than copying its bytes (about 40 us of 1.5 ms under TCG); allocating and mapping
//! a page for an 8-byte result cost each atomic the same way.
//!
//! No peer holds a key to them: only this node's work requests reach them, and a
//! page goes back to the pool only once its caller's op completed (or was flushed).

use super::free_slots::{FreeSlots, SLOTS_MAX};
use super::{Device, DmaBuf, PAGE_SIZE};
use core::ops::Deref;
use kernel::prelude::*;
use kernel::sync::Arc;

/// Bytes of one staging page: the most a staged read carries.
pub(crate) const STAGING_BYTES: usize = PAGE_SIZE;

/// Pages mapped for the device once, shared by the callers of small operations.
pub(crate) struct Staging {
    pages: KVec<DmaBuf>,
    free: FreeSlots,
}

/// One page of a `Staging` pool, its caller's until dropped.
pub(crate) struct StagingPage<'a> {
    page: &'a DmaBuf,
    free: &'a FreeSlots,
    slot: usize,
}

/// A page to stage through: the pool's, or one of its own when all are taken.
pub(crate) enum Staged<'a> {
    Pooled(StagingPage<'a>),
    Own(DmaBuf),
}

impl Staging {
    /// `count` pages (at most `SLOTS_MAX`) of `dev`.
    pub(crate) fn new(dev: &Arc<Device>, count: usize) -> Result<Staging> {
        let count = count.min(SLOTS_MAX);
        let mut pages = KVec::with_capacity(count, GFP_KERNEL)?;
        for _ in 0..count {
            pages.push(DmaBuf::new(dev, STAGING_BYTES)?, GFP_KERNEL)?;
        }
        Ok(Staging {
            pages,
            free: FreeSlots::new(count),
        })
    }

    /// A free page of the pool; `None` while every one is taken.
    pub(crate) fn take(&self) -> Option<StagingPage<'_>> {
        let slot = self.free.take()?;
        // The CPU read what the device wrote last time: the page is the device's again.
        let Some(page) = self
            .pages
            .get(slot)
            .filter(|page| page.give_to_device(0, STAGING_BYTES).is_ok())
        else {
            self.free.give(slot);
            return None;
        };
        Some(StagingPage {
            page,
            free: &self.free,
            slot,
        })
    }

    /// A page of the pool, or a new one of `dev` when all are taken.
    pub(crate) fn page(&self, dev: &Arc<Device>) -> Result<Staged<'_>> {
        match self.take() {
            Some(page) => Ok(Staged::Pooled(page)),
            None => Ok(Staged::Own(DmaBuf::new(dev, STAGING_BYTES)?)),
        }
    }
}

impl Deref for StagingPage<'_> {
    type Target = DmaBuf;

    fn deref(&self) -> &DmaBuf {
        self.page
    }
}

impl Drop for StagingPage<'_> {
    fn drop(&mut self) {
        self.free.give(self.slot);
    }
}

impl Deref for Staged<'_> {
    type Target = DmaBuf;

    fn deref(&self) -> &DmaBuf {
        match self {
            Staged::Pooled(page) => page,
            Staged::Own(buf) => buf,
        }
    }
}
