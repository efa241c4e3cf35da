//! RPC and messages: LT_RPC, LT_send, LT_recvRPC, LT_replyRPC, multicast RPC.
//!
//! A call is one `LITE_IOC_RPC_CALL` ioctl that returns at once; the kernel writes
//! the result into a slot of the shared page. The library spins on the slot for a
//! short while (`LITE_SPIN_US`, default 20 µs), then sleeps in `LITE_IOC_WAIT`:
//! one crossing when the reply is quick, two otherwise.

use crate::{Error, Lite, Result};
use lite_uapi::*;
use nix::errno::Errno;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A request or message received by a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Incoming {
    /// Payload bytes, at the start of the receive buffer.
    pub len: usize,
    /// The caller's node.
    pub node: u32,
    /// How to answer it; `None` for a one-way message.
    pub reply: Option<ReplyToken>,
    /// The most reply bytes the caller takes.
    pub reply_capacity: usize,
}

/// Answers one received request (once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyToken(pub(crate) u64);

/// This node's RPC bookkeeping (see `Lite::rpc_stat`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RpcStat {
    pub servers: u32,
    pub rings: u32,
    pub ring_bytes: u64,
    pub bindings: u32,
    pub calls: u32,
    pub requests: u32,
    /// Where answered calls to other nodes spent their time: user-space callers'
    /// (`[0]`) and the kernel's own (`[1]`, `Lite::kernel_rpc_bench`).
    pub call_phases: [CallPhases; 2],
}

/// Time answered calls spent in each phase in the kernel, summed: the difference
/// of two snapshots gives the means between them. What a caller measures beyond
/// their sum is its kernel crossings and its own wait on its slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallPhases {
    pub calls: u64,
    /// Until the output buffer was pinned and mapped.
    pub pin: Duration,
    /// Until the server had a key to it (replies too large for the completion record).
    pub register: Duration,
    /// Until the request was ready to post: staging, a call slot, ring room.
    pub stage: Duration,
    /// Until the reply's completion record was handled: the post, the NICs, the
    /// network, the server.
    pub round_trip: Duration,
    /// Until the result was in the caller's slot.
    pub publish: Duration,
    /// After that, until the completion handler was done with the call: waking
    /// the caller, revoking its key, unpinning (the handler's time, beside the
    /// caller's wake-up).
    pub release: Duration,
    /// Callers that were asleep in the kernel when their result came.
    pub woken: u64,
    /// From the result in the slot until those ran again.
    pub wakeup: Duration,
}

fn spin_budget() -> Duration {
    static SPIN: OnceLock<Duration> = OnceLock::new();
    *SPIN.get_or_init(|| {
        let us = std::env::var("LITE_SPIN_US").ok().and_then(|v| v.parse().ok()).unwrap_or(20u64);
        Duration::from_micros(us)
    })
}

fn timeout_ms(timeout: Duration) -> u32 {
    u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX).clamp(1, LITE_RPC_MAX_TIMEOUT_MS)
}

fn check_size(len: usize) -> Result<()> {
    if len as u64 > LITE_RPC_MAX_MSG {
        Err(Error::MessageTooLarge { size: len as u64 })
    } else {
        Ok(())
    }
}

/// A posted call: wait for it with `Lite::finish`.
struct Pending {
    slot: u32,
    seq: u64,
    node: u32,
    id: u32,
    capacity: usize,
}

impl Lite {
    fn slot_field<T>(&self, slot: u32, field: impl FnOnce(*mut LiteSlot) -> *mut T) -> *mut T {
        // SAFETY: `slot < LITE_SLOTS` (callers), inside the mapped page.
        field(unsafe { std::ptr::addr_of_mut!((*self.shared.as_ptr()).slots[slot as usize]) })
    }

    fn slot_state(&self, slot: u32) -> u32 {
        // SAFETY: an aligned u32 of the mapped page, which the kernel writes atomically.
        unsafe { AtomicU32::from_ptr(self.slot_field(slot, |s| std::ptr::addr_of_mut!((*s).state))) }
            .load(Ordering::Acquire)
    }

    fn slot_result(&self, slot: u32) -> (u32, u64, u64) {
        // SAFETY: as in `slot_state`; read after the state's Acquire load.
        unsafe {
            (
                AtomicU32::from_ptr(self.slot_field(slot, |s| std::ptr::addr_of_mut!((*s).error)))
                    .load(Ordering::Relaxed),
                AtomicU64::from_ptr(self.slot_field(slot, |s| std::ptr::addr_of_mut!((*s).len)))
                    .load(Ordering::Relaxed),
                AtomicU64::from_ptr(self.slot_field(slot, |s| std::ptr::addr_of_mut!((*s).seq)))
                    .load(Ordering::Relaxed),
            )
        }
    }

    /// Takes a free shared-page slot (waits briefly when all are in use).
    fn take_slot(&self) -> u32 {
        loop {
            let used = self.slots.load(Ordering::Acquire);
            let free = (!used).trailing_zeros();
            if free < LITE_SLOTS {
                if self.slots.compare_exchange(used, used | 1 << free, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    return free;
                }
            } else {
                std::thread::yield_now();
            }
        }
    }

    fn put_slot(&self, slot: u32) {
        self.slots.fetch_and(!(1u64 << slot), Ordering::AcqRel);
    }

    fn post(&self, node: u32, id: u32, input: &[u8], output: &mut [u8], timeout: Duration) -> Result<Pending> {
        check_size(input.len())?;
        check_size(output.len())?;
        let slot = self.take_slot();
        let mut arg = LiteRpcCall {
            node,
            id,
            input: input.as_ptr() as u64,
            input_len: input.len() as u64,
            output: output.as_mut_ptr() as u64,
            output_len: output.len() as u64,
            timeout_ms: timeout_ms(timeout),
            slot,
            ..Default::default()
        };
        match self.sys_ioctl(LITE_IOC_RPC_CALL, &mut arg) {
            Ok(()) => Ok(Pending { slot, seq: arg.seq, node, id, capacity: output.len() }),
            Err(errno) => {
                self.put_slot(slot);
                Err(Error::from_rpc("RPC", Some(node), id, errno, input.len() as u64, output.len() as u64))
            }
        }
    }

    /// Waits for a posted call: spins on its slot, then sleeps in the kernel.
    fn finish(&self, call: Pending) -> Result<usize> {
        let spin_until = Instant::now() + spin_budget();
        while self.slot_state(call.slot) != LITE_SLOT_DONE && Instant::now() < spin_until {
            std::hint::spin_loop();
        }
        let mut waited = Ok(());
        while self.slot_state(call.slot) != LITE_SLOT_DONE {
            let mut arg = LiteWait { slot: call.slot, reserved: 0 };
            match self.sys_ioctl(LITE_IOC_WAIT, &mut arg) {
                Ok(()) => {}
                Err(Errno::EINTR) => continue,
                Err(errno) => {
                    waited = Err(errno);
                    break;
                }
            }
        }
        let (status, len, seq) = self.slot_result(call.slot);
        self.put_slot(call.slot);
        if let Err(errno) = waited {
            return Err(Error::from_rpc("RPC wait", Some(call.node), call.id, errno, 0, 0));
        }
        if seq != call.seq {
            return Err(Error::Sys { op: "RPC", errno: Errno::EIO });
        }
        match status {
            0 => Ok(len as usize),
            errno => Err(Error::from_rpc(
                "RPC",
                Some(call.node),
                call.id,
                Errno::from_raw(errno as i32),
                len,
                call.capacity as u64,
            )),
        }
    }

    /// LT_RPC: sends `input` to the server of `id` at `node` and waits for its reply,
    /// written straight into `output`. Returns the reply's length.
    pub fn rpc(&self, node: u32, id: u32, input: &[u8], output: &mut [u8], timeout: Duration) -> Result<usize> {
        let call = self.post(node, id, input, output, timeout)?;
        self.finish(call)
    }

    /// Multicast RPC: the same request to every node of `nodes` at once; each
    /// node's reply lands in its `outputs` buffer. Returns each node's outcome.
    pub fn multicast_rpc(
        &self,
        nodes: &[u32],
        id: u32,
        input: &[u8],
        outputs: &mut [Vec<u8>],
        timeout: Duration,
    ) -> Vec<Result<usize>> {
        let mut posted = Vec::with_capacity(nodes.len());
        for (&node, output) in nodes.iter().zip(outputs.iter_mut()) {
            posted.push(self.post(node, id, input, output, timeout));
        }
        posted.into_iter().map(|p| p.and_then(|call| self.finish(call))).collect()
    }

    /// LT_send: a one-way message to the server of `id` at `node`; returns once it
    /// is in the server's ring (the server takes it with `recv_rpc`).
    pub fn send(&self, node: u32, id: u32, message: &[u8], timeout: Duration) -> Result<()> {
        check_size(message.len())?;
        let mut arg = LiteRpcCall {
            node,
            id,
            input: message.as_ptr() as u64,
            input_len: message.len() as u64,
            timeout_ms: timeout_ms(timeout),
            flags: LITE_RPC_ONEWAY,
            ..Default::default()
        };
        self.sys_ioctl(LITE_IOC_RPC_CALL, &mut arg)
            .map_err(|errno| Error::from_rpc("send", Some(node), id, errno, message.len() as u64, 0))
    }

    /// LT_regRPC: this process serves `id` on this node until it unregisters or exits.
    pub fn register_rpc(&self, id: u32) -> Result<()> {
        let mut arg = LiteRpcId { id, reserved: 0 };
        self.sys_ioctl(LITE_IOC_RPC_REGISTER, &mut arg).map_err(|e| Error::from_rpc("register RPC", None, id, e, 0, 0))
    }

    /// Stops serving `id`: waiting callers fail with `ServerGone`.
    pub fn unregister_rpc(&self, id: u32) -> Result<()> {
        let mut arg = LiteRpcId { id, reserved: 0 };
        self.sys_ioctl(LITE_IOC_RPC_UNREGISTER, &mut arg)
            .map_err(|e| Error::from_rpc("unregister RPC", None, id, e, 0, 0))
    }

    fn recv_result(
        &self,
        id: u32,
        arg: &LiteRpcRecv,
        rc: std::result::Result<(), Errno>,
        buf_len: usize,
    ) -> Result<Incoming> {
        rc.map_err(|errno| Error::from_rpc("receive RPC", None, id, errno, arg.len, buf_len as u64))?;
        Ok(Incoming {
            len: arg.len as usize,
            node: arg.node,
            reply: (arg.flags & LITE_RPC_ONEWAY == 0).then_some(ReplyToken(arg.token)),
            reply_capacity: arg.reply_capacity as usize,
        })
    }

    /// LT_recvRPC: the next request or message for `id`, payload into `buf`. A
    /// request larger than `buf` stays queued and fails with `BufferTooSmall`.
    pub fn recv_rpc(&self, id: u32, buf: &mut [u8], timeout: Duration) -> Result<Incoming> {
        let mut arg = LiteRpcRecv {
            id,
            timeout_ms: timeout_ms(timeout),
            buf: buf.as_mut_ptr() as u64,
            buf_len: buf.len() as u64,
            ..Default::default()
        };
        let rc = self.sys_ioctl(LITE_IOC_RPC_RECV, &mut arg);
        self.recv_result(id, &arg, rc, buf.len())
    }

    /// LT_replyRPC: answers a request with `reply`, written into the caller's buffer.
    pub fn reply_rpc(&self, token: ReplyToken, reply: &[u8]) -> Result<()> {
        check_size(reply.len())?;
        let mut arg = LiteRpcReply { token: token.0, buf: reply.as_ptr() as u64, len: reply.len() as u64 };
        self.sys_ioctl(LITE_IOC_RPC_REPLY, &mut arg)
            .map_err(|e| Error::from_rpc("reply RPC", None, 0, e, reply.len() as u64, 0))
    }

    /// Reply, then receive the next request for `id`, in one crossing.
    pub fn reply_and_recv(
        &self,
        token: ReplyToken,
        reply: &[u8],
        id: u32,
        buf: &mut [u8],
        timeout: Duration,
    ) -> Result<Incoming> {
        check_size(reply.len())?;
        let mut arg = LiteRpcReplyRecv {
            reply: LiteRpcReply { token: token.0, buf: reply.as_ptr() as u64, len: reply.len() as u64 },
            recv: LiteRpcRecv {
                id,
                timeout_ms: timeout_ms(timeout),
                buf: buf.as_mut_ptr() as u64,
                buf_len: buf.len() as u64,
                ..Default::default()
            },
        };
        let rc = self.sys_ioctl(LITE_IOC_RPC_REPLY_RECV, &mut arg);
        self.recv_result(id, &arg.recv, rc, buf.len())
    }

    /// This node's RPC bookkeeping: servers, rings, bindings, calls, requests.
    pub fn rpc_stat(&self) -> Result<RpcStat> {
        let mut s = LiteRpcStat::default();
        self.ioctl("RPC status", None, LITE_IOC_RPC_STAT, &mut s)?;
        Ok(RpcStat {
            servers: s.servers,
            rings: s.rings,
            ring_bytes: s.ring_bytes,
            bindings: s.bindings,
            calls: s.calls,
            requests: s.requests,
            call_phases: s.call_phases.map(|p| CallPhases {
                calls: p.calls,
                pin: Duration::from_nanos(p.pin_ns),
                register: Duration::from_nanos(p.register_ns),
                stage: Duration::from_nanos(p.stage_ns),
                round_trip: Duration::from_nanos(p.round_trip_ns),
                publish: Duration::from_nanos(p.publish_ns),
                release: Duration::from_nanos(p.release_ns),
                woken: p.woken,
                wakeup: Duration::from_nanos(p.wakeup_ns),
            }),
        })
    }

    /// `count` RPCs issued by the kernel itself (the in-kernel caller), each one's time.
    pub fn kernel_rpc_bench(
        &self,
        node: u32,
        id: u32,
        count: u32,
        request: usize,
        reply: usize,
        timeout: Duration,
    ) -> Result<Vec<Duration>> {
        let mut times = vec![0u64; count as usize];
        let mut arg = LiteRpcBench {
            node,
            id,
            count,
            timeout_ms: timeout_ms(timeout),
            request_len: request as u64,
            reply_capacity: reply as u64,
            rtt_ns: times.as_mut_ptr() as u64,
            reply_len: 0,
        };
        self.sys_ioctl(LITE_IOC_RPC_BENCH, &mut arg)
            .map_err(|e| Error::from_rpc("kernel RPC", Some(node), id, e, request as u64, reply as u64))?;
        Ok(times.into_iter().map(Duration::from_nanos).collect())
    }
}
