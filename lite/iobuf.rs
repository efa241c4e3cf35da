// SPDX-License-Identifier: GPL-2.0
//! The caller's side of a data operation: memory of the calling process, named by
//! address (/dev/lite), or kernel memory, as a slice (the kernel API, `kapi`).
//! The services copy through it, so that both callers share one path.

/// Where the bytes of a transfer come from.
pub(crate) enum Source<'a> {
    /// `len` bytes of the calling process's memory at `addr`.
    User { addr: usize, len: usize },
    /// Kernel memory of the calling module.
    Kernel(&'a [u8]),
}

/// Where the bytes of a transfer go.
pub(crate) enum Sink<'a> {
    /// `len` bytes of the calling process's memory at `addr`.
    User { addr: usize, len: usize },
    /// Kernel memory of the calling module.
    Kernel(&'a mut [u8]),
}

/// A read from an LMR into a sink, or a write to it from a source.
pub(crate) enum Transfer<'a> {
    Read(Sink<'a>),
    Write(Source<'a>),
}

impl Source<'_> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Source::User { len, .. } => *len,
            Source::Kernel(data) => data.len(),
        }
    }
}

impl Sink<'_> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Sink::User { len, .. } => *len,
            Sink::Kernel(data) => data.len(),
        }
    }
}

impl Transfer<'_> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Transfer::Read(sink) => sink.len(),
            Transfer::Write(source) => source.len(),
        }
    }

    pub(crate) fn is_write(&self) -> bool {
        matches!(self, Transfer::Write(_))
    }
}

/// Copies `src` into `dst`, which must be as long: EINVAL otherwise, where
/// `copy_from_slice` would panic.
pub(crate) fn copy_exact(dst: &mut [u8], src: &[u8]) -> kernel::error::Result {
    if dst.len() != src.len() {
        return Err(kernel::error::code::EINVAL);
    }
    dst.iter_mut().zip(src).for_each(|(d, s)| *d = *s);
    Ok(())
}
