//! The kernel module's pure-logic files, compiled on the host so that `cargo test`
//! exercises exactly the code the module runs.
#![allow(dead_code)]

#[path = "../qos/classes.rs"]
mod classes;
#[path = "../net/deadline.rs"]
mod deadline;
#[path = "../verbs/free_slots.rs"]
mod free_slots;
#[path = "../net/gather.rs"]
mod gather;
#[path = "../net/inflight.rs"]
mod inflight;
#[path = "../lmr/layout.rs"]
mod layout;
#[path = "../locks/lockword.rs"]
mod lockword;
#[path = "../lmr/read_phases.rs"]
mod read_phases;
// A folder re-exports what the module uses from it, which the host does not build.
#[allow(unused_imports)]
#[path = "../qos/pacer/mod.rs"]
mod pacer;
// The benches' way in: the files above keep their items to the crate.
pub mod per_op;
// The simulator's way in: SW-Pri's node state and admission over the pacer files.
#[path = "../verbs/paths.rs"]
mod paths;
#[path = "../net/polling.rs"]
mod polling;
pub mod sw_pri;
// rpc/ring reaches wire's constants as `crate::net::wire`, as in the module.
#[path = "../net"]
mod net {
    // As for pacer: the re-exports serve the module's users.
    #[allow(unused_imports)]
    pub(crate) mod wire;
}
// The RPC rings' pure part and the calls' phase sums, at their paths in the module.
#[path = "../rpc"]
mod rpc {
    // As for pacer: the re-exports serve the module's users.
    pub(crate) mod phases;
    #[allow(unused_imports)]
    pub(crate) mod ring;
}
// The ABI, which classes.rs takes its constants from (so the re-exports of the
// other services' files go unused here).
#[allow(unreachable_pub, dead_code, unused_imports)]
#[path = "../../uapi/src/abi/mod.rs"]
// Formatted with user space, not here.
#[rustfmt::skip]
mod uapi;
