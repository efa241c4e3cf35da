// SPDX-License-Identifier: GPL-2.0
//! `Device`: one RDMA device (port, GID, how peers reach its memory) and the RC
//! QPs it creates.

use super::{choose, PathChoice, PathError, Paths, Qp, RemoteAccess};
use crate::ffi;
use crate::uapi::{
    LiteDevCaps, LITE_CAP_ATOMICS, LITE_CAP_CM_CONNECT, LITE_CAP_WRITE_IMM,
    LITE_PATH_HOLDER_ATOMICS, LITE_PATH_SEND_MESSAGES,
};
use core::ffi::c_void;
use core::ptr::NonNull;
use kernel::error::to_result;
use kernel::prelude::*;

/// `IB_PORT_ACTIVE`.
pub(crate) const PORT_ACTIVE: u32 = 4;

/// What `ib_query_port` says of a port.
#[derive(Default)]
pub(crate) struct PortAttr {
    /// `IB_PORT_*`.
    pub(crate) state: u32,
    /// `IB_MTU_*`.
    pub(crate) mtu: u32,
    /// Signalling rate per lane (`IB_SPEED_*`) and lanes (`IB_WIDTH_*`).
    pub(crate) speed: u32,
    pub(crate) width: u32,
}

/// One RDMA device with its PD, global MR and CQs (owned by the C side, which
/// creates them before `lite_rust_dev_added` and frees them after `lite_rust_dev_release`).
pub(crate) struct Device {
    pub(in crate::verbs) raw: NonNull<ffi::lite_dev>,
    name: [u8; 64],
    caps: LiteDevCaps,
}

// SAFETY: the C device object is immutable after creation and the verbs it is passed to
// are thread-safe; it outlives every `Device` (freed only after `lite_rust_dev_release`).
unsafe impl Send for Device {}
// SAFETY: see `Send`; `&Device` only calls thread-safe verbs.
unsafe impl Sync for Device {}

impl Device {
    /// Wraps a device handed to `lite_rust_dev_added`, with the paths it will use
    /// (`messages=`, `atomics=`); EOPNOTSUPP, said in the kernel log, when it cannot
    /// serve those asked for, EINVAL for a parameter value not known.
    ///
    /// # Safety
    /// `raw` must be valid until `lite_rust_dev_release` is called for it.
    pub(crate) unsafe fn new(raw: NonNull<ffi::lite_dev>) -> Result<Self> {
        let mut name = [0u8; 64];
        // SAFETY: `raw` is valid (caller), and the name is a NUL-terminated string owned by
        // the ib_device, which outlives this call.
        let cname = unsafe { core::ffi::CStr::from_ptr(ffi::lite_dev_name(raw.as_ptr()).cast()) };
        let bytes = cname.to_bytes();
        let len = bytes.len().min(name.len() - 1);
        name[..len].copy_from_slice(&bytes[..len]);
        let mut raw_caps = ffi::lite_dev_caps {
            transport: 0,
            write_imm: 0,
            cm_connect: 0,
            max_send_sge: 0,
            max_sge_rd: 0,
            atomic_cap: 0,
            max_qp_rd_atom: 0,
        };
        // SAFETY: `raw` is valid (caller); `raw_caps` is a local the call fills.
        unsafe { ffi::lite_dev_caps(raw.as_ptr(), &mut raw_caps) };
        let flag = |on: u32, bit: u32| if on != 0 { bit } else { 0 };
        let caps = LiteDevCaps {
            transport: raw_caps.transport,
            flags: flag(raw_caps.write_imm, LITE_CAP_WRITE_IMM)
                | flag(raw_caps.atomic_cap, LITE_CAP_ATOMICS)
                | flag(raw_caps.cm_connect, LITE_CAP_CM_CONNECT),
            max_send_sge: raw_caps.max_send_sge,
            max_sge_rd: raw_caps.max_sge_rd,
            atomic_cap: raw_caps.atomic_cap,
            max_qp_rd_atom: raw_caps.max_qp_rd_atom,
        };
        let mut dev = Device { raw, name, caps };
        // SAFETY: reads module parameters.
        let (messages, atomics) =
            unsafe { (ffi::lite_param_messages(), ffi::lite_param_atomics()) };
        let (Some(messages), Some(atomics)) = (
            PathChoice::from_raw(messages),
            PathChoice::from_raw(atomics),
        ) else {
            pr_err!("messages= is auto, imm or send; atomics= is auto, nic or holder\n");
            return Err(EINVAL);
        };
        let paths = match choose(caps.flags, messages, atomics) {
            Ok(paths) => paths,
            Err(why) => {
                let missing = match why {
                    PathError::NoWriteImm => "RDMA WRITE with immediate (messages=imm)",
                    PathError::NoAtomics => "atomics (atomics=nic)",
                };
                pr_warn!("{}: has no {}: not used\n", dev.display_name(), missing);
                return Err(crate::errno::EOPNOTSUPP());
            }
        };
        if paths.send_messages {
            // SAFETY: `raw` is valid (caller) and has no QP yet.
            unsafe { ffi::lite_dev_use_send_messages(raw.as_ptr()) };
            dev.caps.flags |= LITE_PATH_SEND_MESSAGES;
        }
        if paths.holder_atomics {
            dev.caps.flags |= LITE_PATH_HOLDER_ATOMICS;
        }
        Ok(dev)
    }

    /// How the device carries messages and atomics (the `LITE_PATH_*` bits of its
    /// capabilities).
    pub(crate) fn paths(&self) -> Paths {
        Paths {
            send_messages: self.caps.flags & LITE_PATH_SEND_MESSAGES != 0,
            holder_atomics: self.caps.flags & LITE_PATH_HOLDER_ATOMICS != 0,
        }
    }

    /// Whether its QPs connect only through the RDMA CM (iWARP), not by hand.
    pub(crate) fn connects_through_cm(&self) -> bool {
        self.caps.flags & LITE_CAP_CM_CONNECT != 0
    }

    /// What the device can do, as read at attach.
    pub(crate) fn caps(&self) -> &LiteDevCaps {
        &self.caps
    }

    /// NUL-padded device name ("rxe0").
    pub(crate) fn name(&self) -> &[u8; 64] {
        &self.name
    }

    /// The device's name without its padding, to print.
    pub(crate) fn display_name(&self) -> &kernel::str::BStr {
        let len = self
            .name
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.name.len());
        kernel::str::BStr::from_bytes(self.name.get(..len).unwrap_or(&[]))
    }

    /// Bytes of RDMA reads and writes this device completed without error, summed
    /// as their completions ran.
    pub(crate) fn delivered_bytes(&self) -> u64 {
        // SAFETY: `self.raw` is valid for the life of `self`.
        unsafe { ffi::lite_dev_delivered(self.raw.as_ptr()) }
    }

    pub(crate) fn port(&self) -> u32 {
        // SAFETY: `self.raw` is valid for the life of `self` (see `new`).
        unsafe { ffi::lite_dev_port(self.raw.as_ptr()) }
    }

    /// The port's state, active MTU and signalling rate.
    pub(crate) fn query_port(&self) -> Result<PortAttr> {
        let mut a = PortAttr::default();
        // SAFETY: `self.raw` is valid; the out pointers are to fields of a local.
        to_result(unsafe {
            ffi::lite_dev_query_port(
                self.raw.as_ptr(),
                &mut a.state,
                &mut a.mtu,
                &mut a.speed,
                &mut a.width,
            )
        })?;
        Ok(a)
    }

    /// The port's IPv4 address as a v4-mapped GID, and its index in the GID table
    /// (RoCE v2's entry; 0 on iWARP, which has no such table entry).
    pub(crate) fn ip_gid(&self) -> Result<([u8; 16], i32)> {
        let mut gid = [0u8; 16];
        // SAFETY: `self.raw` is valid and `gid` has the 16 bytes the helper writes.
        let index = unsafe { ffi::lite_dev_ip_gid(self.raw.as_ptr(), gid.as_mut_ptr()) };
        to_result(index.min(0))?;
        Ok((gid, index))
    }

    /// How peers reach this device's memory (`remote_access`).
    pub(crate) fn remote_access(&self) -> RemoteAccess {
        // SAFETY: `self.raw` is valid for the life of `self`.
        match unsafe { ffi::lite_dev_remote_chunks(self.raw.as_ptr()) } {
            0 => RemoteAccess::Global,
            _ => RemoteAccess::Chunks,
        }
    }

    /// The global MR's remote key (reaching anything only with `remote_access=global`).
    pub(crate) fn global_rkey(&self) -> u32 {
        // SAFETY: `self.raw` is valid for the life of `self`.
        unsafe { ffi::lite_dev_global_rkey(self.raw.as_ptr()) }
    }

    /// SGEs per RDMA work request: a READ's by the device's `max_sge_rd` (one on
    /// many iWARP NICs), a WRITE's by `max_send_sge`; 1 to `LITE_MAX_SGE`.
    pub(crate) fn max_sge(&self, read: bool) -> usize {
        let device = if read {
            self.caps.max_sge_rd
        } else {
            self.caps.max_send_sge
        };
        (device as usize).clamp(1, ffi::LITE_MAX_SGE as usize)
    }

    /// Creates an RC QP in INIT with `recv_depth` receives posted. Completions call
    /// back with (`peer`, `index`), so `peer` must stay valid until the QP is dropped.
    pub(crate) fn create_qp(&self, peer: *const c_void, index: u32, recv_depth: u32) -> Result<Qp> {
        let mut err = 0;
        // SAFETY: `self.raw` is valid; `peer` is only stored and handed back to our callbacks.
        let raw = unsafe {
            ffi::lite_qp_create(
                self.raw.as_ptr(),
                peer as *mut c_void,
                index,
                recv_depth,
                &mut err,
            )
        };
        match NonNull::new(raw) {
            Some(raw) => Ok(Qp { raw }),
            None => Err(Error::from_errno(err)),
        }
    }
}
