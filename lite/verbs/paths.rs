// SPDX-License-Identifier: GPL-2.0
//! `Paths`: how a device carries what LITE-RS needs beyond one-sided READs and
//! WRITEs, chosen from its capabilities and the module parameters `messages=` and
//! `atomics=`: the NIC's own opcodes where it has them, their stand-ins where it
//! does not (or where the operator asks for them, to measure what they cost).
//!
//! - Messages and RPC: RDMA WRITE with immediate, or a WRITE followed by a SEND
//!   of the 32-bit value (iWARP has no immediate).
//! - Atomics, and the locks and barriers built on them: the holder's RNIC, or the
//!   holder's kernel serving them as messages. A cluster must agree on the latter
//!   (`net::Network::connect_peer`): a word updated by a NIC and by a CPU at once
//!   is not atomic.
//!
//! Pure: compiled on the host too.

use crate::uapi::{LITE_CAP_ATOMICS, LITE_CAP_WRITE_IMM};

/// A module parameter's choice for one path (`LITE_PATH_*` of helpers.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PathChoice {
    /// The NIC's opcode where the device has it, its stand-in otherwise.
    Auto,
    /// The NIC's opcode only.
    Native,
    /// The stand-in, even where the NIC has the opcode.
    Emulated,
}

impl PathChoice {
    /// From `LITE_PATH_AUTO`, `_NATIVE`, `_EMULATED`; `None` for anything else.
    pub(crate) fn from_raw(raw: i32) -> Option<Self> {
        match raw {
            0 => Some(PathChoice::Auto),
            1 => Some(PathChoice::Native),
            2 => Some(PathChoice::Emulated),
            _ => None,
        }
    }

    fn emulate(self, native: bool) -> Option<bool> {
        match self {
            PathChoice::Auto => Some(!native),
            PathChoice::Native => native.then_some(false),
            PathChoice::Emulated => Some(true),
        }
    }
}

/// The paths one device uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Paths {
    /// Immediates travel as WRITE + SEND.
    pub(crate) send_messages: bool,
    /// Atomics are served by the holder's kernel.
    pub(crate) holder_atomics: bool,
}

/// Why a device cannot serve the paths asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PathError {
    /// `messages=imm` on a device without write-with-immediate.
    NoWriteImm,
    /// `atomics=nic` on a device without atomics.
    NoAtomics,
}

/// The paths of a device with capability bits `flags` (`LITE_CAP_*`).
pub(crate) fn choose(
    flags: u32,
    messages: PathChoice,
    atomics: PathChoice,
) -> Result<Paths, PathError> {
    let send_messages = messages
        .emulate(flags & LITE_CAP_WRITE_IMM != 0)
        .ok_or(PathError::NoWriteImm)?;
    let holder_atomics = atomics
        .emulate(flags & LITE_CAP_ATOMICS != 0)
        .ok_or(PathError::NoAtomics)?;
    Ok(Paths {
        send_messages,
        holder_atomics,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const RXE: u32 = LITE_CAP_WRITE_IMM | LITE_CAP_ATOMICS;
    const SIW: u32 = 0;

    #[test]
    fn auto_takes_the_nics_opcodes_where_it_has_them() {
        let rxe = choose(RXE, PathChoice::Auto, PathChoice::Auto);
        assert_eq!(rxe, Ok(Paths::default()));
        let siw = choose(SIW, PathChoice::Auto, PathChoice::Auto);
        let both = Paths {
            send_messages: true,
            holder_atomics: true,
        };
        assert_eq!(siw, Ok(both));
    }

    #[test]
    fn the_stand_ins_can_be_asked_for_on_any_device() {
        for flags in [RXE, SIW, LITE_CAP_WRITE_IMM, LITE_CAP_ATOMICS] {
            let paths = choose(flags, PathChoice::Emulated, PathChoice::Emulated);
            assert_eq!(
                paths.map(|p| (p.send_messages, p.holder_atomics)),
                Ok((true, true))
            );
        }
    }

    #[test]
    fn native_only_where_the_device_has_it() {
        assert_eq!(
            choose(SIW, PathChoice::Native, PathChoice::Auto),
            Err(PathError::NoWriteImm)
        );
        assert_eq!(
            choose(LITE_CAP_WRITE_IMM, PathChoice::Native, PathChoice::Native),
            Err(PathError::NoAtomics)
        );
        assert_eq!(
            choose(RXE, PathChoice::Native, PathChoice::Native),
            Ok(Paths::default())
        );
    }

    #[test]
    fn only_the_three_parameter_values_are_known() {
        assert_eq!(PathChoice::from_raw(0), Some(PathChoice::Auto));
        assert_eq!(PathChoice::from_raw(2), Some(PathChoice::Emulated));
        assert_eq!(PathChoice::from_raw(-22), None);
        assert_eq!(PathChoice::from_raw(3), None);
    }
}
