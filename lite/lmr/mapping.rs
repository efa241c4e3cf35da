// SPDX-License-Identifier: GPL-2.0
//! A mapping: a mapper's copy of an LMR's extents behind a handle, the users of it
//! in flight, and its revocation (which waits for them).

use kernel::prelude::*;
use kernel::sync::{new_condvar, new_mutex, Arc, CondVar, Mutex};

use super::holder::LocalMemory;
use super::layout::Extent;

pub(crate) struct MapState {
    /// Why the mapping is dead (a negative errno), once it is.
    pub(crate) revoked: Option<i32>,
    /// Operations running on the mapping.
    pub(crate) users: u32,
    /// This node's memory of the LMR, if it holds some.
    pub(crate) local: Option<Arc<LocalMemory>>,
}

/// What one handle reaches: a copy of the LMR's extents, taken at map time.
#[pin_data]
pub(crate) struct Mapping {
    pub(crate) master: u32,
    pub(crate) id: u64,
    pub(crate) size: u64,
    pub(crate) extents: KVec<Extent>,
    #[pin]
    pub(crate) state: Mutex<MapState>,
    #[pin]
    pub(crate) idle: CondVar,
}

/// An 8-byte word of an LMR: held by node `holder` at DMA address `addr`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Word {
    pub(crate) holder: u32,
    pub(crate) master: u32,
    pub(crate) id: u64,
    pub(crate) addr: u64,
}

/// A word of memory this node holds, with that memory: while the kernel works on
/// the word itself (a lock's owner), the memory outlives a free of its LMR.
pub(crate) struct HeldWord {
    pub(crate) word: Word,
    /// The key of the chunk holding it, for this node's own atomics on it.
    pub(crate) rkey: u32,
    pub(crate) memory: Arc<LocalMemory>,
}

impl HeldWord {
    pub(crate) fn new(word: Word, rkey: u32, memory: Arc<LocalMemory>) -> Self {
        HeldWord { word, rkey, memory }
    }
}

/// A word reached through a handle: its mapping says whether the LMR still exists.
pub(crate) struct WordRef {
    pub(crate) mapping: Arc<Mapping>,
    pub(crate) word: Word,
    /// The key its holder's chunk is reached with.
    pub(crate) rkey: u32,
}

/// An operation in progress on a mapping; ends when dropped.
pub(crate) struct Use<'a> {
    pub(crate) mapping: &'a Mapping,
    pub(crate) local: Option<Arc<LocalMemory>>,
}

impl Drop for Use<'_> {
    fn drop(&mut self) {
        let mut st = self.mapping.state.lock();
        st.users -= 1;
        if st.users == 0 {
            self.mapping.idle.notify_all();
        }
    }
}

impl Use<'_> {
    pub(crate) fn local(&self) -> Result<&LocalMemory> {
        self.local.as_deref().ok_or(EINVAL)
    }

    /// Fails once the mapping is being revoked: long operations stop early.
    pub(crate) fn check(&self) -> Result {
        match self.mapping.state.lock().revoked {
            Some(errno) => Err(Error::from_errno(errno)),
            None => Ok(()),
        }
    }
}

impl Mapping {
    pub(crate) fn new(
        master: u32,
        id: u64,
        size: u64,
        extents: KVec<Extent>,
        local: Option<Arc<LocalMemory>>,
    ) -> Result<Arc<Mapping>> {
        Arc::pin_init(
            pin_init!(Mapping {
                master,
                id,
                size,
                extents,
                state <- new_mutex!(MapState { revoked: None, users: 0, local }, "lite:mapping.state"),
                idle <- new_condvar!("lite:mapping.idle"),
            }),
            GFP_KERNEL,
        )
    }

    pub(crate) fn begin(&self) -> Result<Use<'_>> {
        let mut st = self.state.lock();
        if let Some(errno) = st.revoked {
            return Err(Error::from_errno(errno));
        }
        st.users += 1;
        Ok(Use {
            mapping: self,
            local: st.local.clone(),
        })
    }

    /// Fails new operations with `err`, waits for the running ones to end, and lets
    /// go of this node's memory of the LMR.
    pub(crate) fn revoke(&self, err: Error) {
        let mut st = self.state.lock();
        if st.revoked.is_none() {
            st.revoked = Some(err.to_errno());
        }
        while st.users > 0 {
            self.idle.wait(&mut st);
        }
        st.local = None;
    }
}
