// SPDX-License-Identifier: GPL-2.0
//! LITE-RS: kernel-level RDMA virtualization in the style of LITE (SOSP'17).
//!
//! One global MR per device (for local access; peers reach only the MRs of what
//! they were given, or LITE's global rkey with `remote_access=global`), K RC QPs per
//! peer shared by every process, one receive CQ, and /dev/lite for user space. The C
//! helpers only wrap static-inline verbs (verbs/verbs.c, dma.c, mr.c) and the
//! misc-device and ib_client registration (helpers.c); everything else is Rust.
//!
//! Layers, each naming only those below it (checked by `lite/host/tests/layers.rs`):
//! `verbs` (the RDMA binding), `qos` (classes and SW-Pri), `net` (peers, mailbox,
//! membership, transfers), the services `lmr`, then `locks` and `rpc`, `node` (the
//! global state, which dispatches peers' requests to the services), `client` (what
//! one user holds of them), and its two front ends, `chardev` (/dev/lite) and `kapi`
//! (other modules). Below them all: `errno`, `ffi`, `uapi`, `compat`, `iobuf`,
//! `kvec`, `uarg`, `workqueue`.

// `pin_init!` of a `Peer`, with its many fields, recurses past the default 128 (as
// Rust Binder's does).
#![recursion_limit = "256"]

use core::ffi::{c_int, c_long, c_uint, c_ulong, c_void};
use core::ptr::NonNull;
use kernel::error::to_result;
use kernel::prelude::*;
use kernel::sync::{Arc, ArcBorrow};
use kernel::types::ForeignOwnable;

mod chardev;
mod client;
mod compat;
mod errno;
mod ffi;
mod iobuf;
mod kapi;
mod kvec;
mod lmr;
mod locks;
mod net;
mod node;
mod qos;
mod rpc;
mod uarg;
mod verbs;
mod workqueue;
// The ABI is shared with user space, which uses items the kernel does not.
#[allow(unreachable_pub, dead_code)]
#[path = "../uapi/src/abi/mod.rs"]
// Formatted with user space, not here.
#[rustfmt::skip]
mod uapi;

use chardev::OpenFile;
use net::Peer;
use node::Lite;
use verbs::Device;

compat::module! {
    type: LiteModule,
    name: "lite",
    authors: ["LITE-RS developers"],
    description: "LITE-RS: kernel-level RDMA virtualization (LITE in Rust)",
    license: "GPL",
}

struct LiteModule {
    // Kept alive until the C glue, which holds a raw pointer to it, is unregistered.
    lite: Arc<Lite>,
}

impl kernel::Module for LiteModule {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        // SAFETY: reads a module parameter.
        let qps_per_peer = unsafe { ffi::lite_param_qps_per_peer() };
        let lite = Lite::new(qps_per_peer)?;
        // SAFETY: `lite` outlives the registration: `drop` unregisters before releasing it.
        to_result(unsafe { ffi::lite_glue_init(&*lite as *const Lite as *mut c_void) })?;
        pr_info!("loaded: {} RC QPs per peer\n", qps_per_peer);
        Ok(LiteModule { lite })
    }
}

impl Drop for LiteModule {
    fn drop(&mut self) {
        // SAFETY: registered in `init`; after this no callback runs and every device was removed.
        unsafe { ffi::lite_glue_exit() };
        self.lite.unwire();
        pr_info!("unloaded\n");
    }
}

/// Called by the C glue when an RDMA device appears.
///
/// # Safety
/// Called only by the C glue (`helpers.c`, `verbs.c`), between `lite_glue_init` and
/// the end of `lite_glue_exit`, with the pointers it was handed for this object
/// (see each `SAFETY` comment below).
#[no_mangle]
pub unsafe extern "C" fn lite_rust_dev_added(
    ctx: *mut c_void,
    raw: *mut ffi::lite_dev,
) -> *mut c_void {
    let Some(raw) = NonNull::new(raw) else {
        return core::ptr::null_mut();
    };
    // SAFETY: the C glue keeps `raw` alive until `lite_rust_dev_release`.
    let dev = match unsafe { Device::new(raw) }.and_then(|dev| Ok(Arc::new(dev, GFP_KERNEL)?)) {
        Ok(dev) => dev,
        Err(_) => return core::ptr::null_mut(),
    };
    // SAFETY: callbacks only run between `lite_glue_init` and `lite_glue_exit`.
    if unsafe { Lite::from_ctx(ctx) }
        .net
        .device_added(dev.clone())
        .is_err()
    {
        return core::ptr::null_mut();
    }
    pr_info!("using RDMA device {}\n", dev.display_name());
    dev.into_foreign() as *mut c_void
}

/// Called by the C glue before it frees a device's CQs.
///
/// # Safety
/// Called only by the C glue (`helpers.c`, `verbs.c`), between `lite_glue_init` and
/// the end of `lite_glue_exit`, with the pointers it was handed for this object
/// (see each `SAFETY` comment below).
#[no_mangle]
pub unsafe extern "C" fn lite_rust_dev_removing(ctx: *mut c_void, rust_dev: *mut c_void) {
    // SAFETY: `rust_dev` came from `into_foreign` in `lite_rust_dev_added` and is not yet released.
    let dev = unsafe { <Arc<Device> as ForeignOwnable>::borrow(rust_dev) };
    // SAFETY: see `Lite::from_ctx`.
    unsafe { Lite::from_ctx(ctx) }.device_removing(&dev.into());
}

/// Called by the C glue once no callback can refer to the device any more.
///
/// # Safety
/// Called only by the C glue (`helpers.c`, `verbs.c`), between `lite_glue_init` and
/// the end of `lite_glue_exit`, with the pointers it was handed for this object
/// (see each `SAFETY` comment below).
#[no_mangle]
pub unsafe extern "C" fn lite_rust_dev_release(_ctx: *mut c_void, rust_dev: *mut c_void) {
    // SAFETY: `rust_dev` came from `into_foreign`; this is its one release.
    drop(unsafe { <Arc<Device> as ForeignOwnable>::from_foreign(rust_dev) });
}

/// A write-with-immediate arrived (CQ workqueue context).
///
/// # Safety
/// Called only by the C glue (`helpers.c`, `verbs.c`), between `lite_glue_init` and
/// the end of `lite_glue_exit`, with the pointers it was handed for this object
/// (see each `SAFETY` comment below).
#[no_mangle]
pub unsafe extern "C" fn lite_rust_recv(
    ctx: *mut c_void,
    rust_peer: *mut c_void,
    index: c_uint,
    imm: c_uint,
) {
    // SAFETY: QP completions run only while the QP exists, and the peer, created as an
    // `Arc`, outlives its QPs.
    let peer = unsafe { ArcBorrow::from_raw(rust_peer as *const Peer) };
    // SAFETY: `ctx` is the `Arc<Lite>` of the module, alive until `lite_glue_exit` (see `Lite::from_ctx`).
    let lite = unsafe { ArcBorrow::from_raw(ctx as *const Lite) };
    Lite::on_recv(lite, peer, index, imm);
}

/// On a QP connected through the RDMA CM the other side's hello came (`status` 0),
/// or the connection failed or ended (CM handler or CQ workqueue context).
///
/// # Safety
/// Called only by the C glue (`cm.c`), between `lite_glue_init` and the end of
/// `lite_glue_exit`, with the pointers it was handed for this object (see each
/// `SAFETY` comment below).
#[no_mangle]
pub unsafe extern "C" fn lite_rust_qp_connected(
    _ctx: *mut c_void,
    rust_peer: *mut c_void,
    index: c_uint,
    status: c_int,
) {
    // CM events and completions come only while the QP exists: its teardown destroys
    // the CM id first, waiting for a running handler.
    // SAFETY: so `rust_peer` is the QP's peer, created as an `Arc`, which outlives its QPs.
    let peer = unsafe { &*(rust_peer as *const Peer) };
    peer.on_cm_event(index, status);
}

/// A send failed with a status other than flush (CQ workqueue context).
///
/// # Safety
/// Called only by the C glue (`helpers.c`, `verbs.c`), between `lite_glue_init` and
/// the end of `lite_glue_exit`, with the pointers it was handed for this object
/// (see each `SAFETY` comment below).
#[no_mangle]
pub unsafe extern "C" fn lite_rust_send_error(
    ctx: *mut c_void,
    rust_peer: *mut c_void,
    _index: c_uint,
    status: c_int,
) {
    // SAFETY: as in `lite_rust_recv`.
    let peer = unsafe { &*(rust_peer as *const Peer) };
    // SAFETY: see `Lite::from_ctx`.
    unsafe { Lite::from_ctx(ctx) }
        .net
        .on_send_error(peer, status);
}

/// A QP to the peer went to error behind the module's back (module workqueue).
///
/// # Safety
/// Called only by the C glue (`helpers.c`, `verbs.c`), between `lite_glue_init` and
/// the end of `lite_glue_exit`, with the pointers it was handed for this object
/// (see each `SAFETY` comment below).
#[no_mangle]
pub unsafe extern "C" fn lite_rust_peer_violation(
    ctx: *mut c_void,
    rust_peer: *mut c_void,
    _index: c_uint,
) {
    // SAFETY: as in `lite_rust_recv`: the C side cancels this work before the QP goes.
    let peer = unsafe { &*(rust_peer as *const Peer) };
    // SAFETY: see `Lite::from_ctx`.
    unsafe { Lite::from_ctx(ctx) }.net.on_peer_violation(peer);
}

/// open(2) of /dev/lite.
///
/// # Safety
/// Called only by the C glue (`helpers.c`, `verbs.c`), between `lite_glue_init` and
/// the end of `lite_glue_exit`, with the pointers it was handed for this object
/// (see each `SAFETY` comment below).
#[no_mangle]
pub unsafe extern "C" fn lite_rust_open(_ctx: *mut c_void, file_priv: *mut *mut c_void) -> c_int {
    match OpenFile::new() {
        Ok(file) => {
            // SAFETY: `file_priv` points to the C glue's local.
            unsafe { *file_priv = file.into_foreign() as *mut c_void };
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// Last close of an open file of /dev/lite.
///
/// # Safety
/// Called only by the C glue (`helpers.c`, `verbs.c`), between `lite_glue_init` and
/// the end of `lite_glue_exit`, with the pointers it was handed for this object
/// (see each `SAFETY` comment below).
#[no_mangle]
pub unsafe extern "C" fn lite_rust_release(ctx: *mut c_void, file_priv: *mut c_void) {
    // SAFETY: set by `lite_rust_open`; release is the last use of it.
    let file = unsafe { <KBox<OpenFile> as ForeignOwnable>::from_foreign(file_priv) };
    // SAFETY: see `Lite::from_ctx`.
    file.release(unsafe { Lite::from_ctx(ctx) });
}

/// ioctl(2) on /dev/lite.
///
/// # Safety
/// Called only by the C glue (`helpers.c`, `verbs.c`), between `lite_glue_init` and
/// the end of `lite_glue_exit`, with the pointers it was handed for this object
/// (see each `SAFETY` comment below).
#[no_mangle]
pub unsafe extern "C" fn lite_rust_ioctl(
    ctx: *mut c_void,
    file_priv: *mut c_void,
    cmd: c_uint,
    arg: c_ulong,
) -> c_long {
    // SAFETY: set by `lite_rust_open`, valid until release, which cannot run during an ioctl.
    let file = unsafe { <KBox<OpenFile> as ForeignOwnable>::borrow(file_priv) };
    // SAFETY: see `Lite::from_ctx`.
    match file.ioctl(unsafe { Lite::from_ctx(ctx) }, cmd, arg as usize) {
        Ok(v) => v as c_long,
        Err(e) => e.to_errno() as c_long,
    }
}

/// The page that mmap(2) maps for this open file.
///
/// # Safety
/// Called only by the C glue (`helpers.c`, `verbs.c`), between `lite_glue_init` and
/// the end of `lite_glue_exit`, with the pointers it was handed for this object
/// (see each `SAFETY` comment below).
#[no_mangle]
pub unsafe extern "C" fn lite_rust_shared_page(file_priv: *mut c_void) -> *mut c_void {
    // SAFETY: as in `lite_rust_ioctl`.
    unsafe { <KBox<OpenFile> as ForeignOwnable>::borrow(file_priv) }.shared_page()
}
