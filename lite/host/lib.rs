//! The kernel module's pure-logic files, compiled on the host so that `cargo test`
//! exercises exactly the code the module runs.
#![allow(dead_code)]

#[path = "../net/inflight.rs"]
mod inflight;
#[path = "../net/wire.rs"]
mod wire;
#[path = "../lmr/layout.rs"]
mod layout;
#[path = "../rpc_ring.rs"]
mod rpc_ring;
#[path = "../lockword.rs"]
mod lockword;
#[path = "../pacer.rs"]
mod pacer;
#[path = "../classes.rs"]
mod classes;
#[path = "../net/polling.rs"]
mod polling;
// The ABI, which classes.rs takes its constants from.
#[allow(unreachable_pub, dead_code)]
#[path = "../../uapi/src/abi.rs"]
mod uapi;
