//! The sender's RNIC and the fabric: nexosim models exchanging packets.
//!
//! - `Rnic`: one FIFO of work requests per QP; the QPs with data take turns, one
//!   packet each (round robin), onto the port at the RNIC's rate.
//! - `Fabric`: the switch's egress queue toward the holder (lossless and deep, as
//!   with PFC: nothing is dropped, so no bound on it), the link's serialization at
//!   its rate, and the rest of the round trip until the RNIC sees the work
//!   request's acknowledgement. The switch forwards cut-through, as the switches
//!   of Justitia's testbeds do: a packet starts onto an idle egress link as its
//!   first bits arrive, and ends no earlier than its last bit arrived. (Store and
//!   forward would add a packet time to every packet's wait behind another.)

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nexosim::model::{schedulable, BuildContext, Context, Model, ProtoModel};
use nexosim::ports::Output;
use serde::{Deserialize, Serialize};

use crate::record::Recorder;
use crate::scenario::NS_PER_S;

/// A work request the host posts on a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Post {
    pub id: u64,
    pub qp: usize,
    pub bytes: u64,
}

/// A packet on the wire: its work request, its bytes with headers, whether it is
/// the request's last, and when its first and last bits reach the switch.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Packet {
    pub wr: u64,
    pub wire_bytes: u64,
    pub last: bool,
    pub first_bit_ns: u64,
    pub last_bit_ns: u64,
}

/// Nanoseconds `bytes` take at `rate` bytes/s, at least 1 (nexosim schedules
/// only into the future).
pub fn wire_ns(bytes: u64, rate: u64) -> u64 {
    (u128::from(bytes) * u128::from(NS_PER_S)).div_ceil(u128::from(rate.max(1))).max(1) as u64
}

/// The simulation's time in ns since its start.
pub fn now_ns<M: Model>(cx: &Context<M>) -> u64 {
    cx.time().duration_since(nexosim::time::MonotonicTime::EPOCH).as_nanos() as u64
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct Pending {
    id: u64,
    left: u64,
}

#[derive(Serialize, Deserialize)]
pub struct Rnic {
    pub packets: Output<Packet>,
    pub completions: Output<u64>,
    rate: u64,
    mtu: u64,
    header_bytes: u64,
    queues: Vec<VecDeque<Pending>>,
    /// The QP whose turn is next.
    turn: usize,
    busy: bool,
}

#[Model]
impl Rnic {
    pub fn new(qps: usize, rate: u64, mtu: u64, header_bytes: u64) -> Rnic {
        Rnic {
            packets: Output::default(),
            completions: Output::default(),
            rate,
            mtu: mtu.max(1),
            header_bytes,
            queues: vec![VecDeque::new(); qps.max(1)],
            turn: 0,
            busy: false,
        }
    }

    /// The host posts a work request (its doorbell).
    pub async fn post(&mut self, wr: Post, cx: &Context<Self>) {
        let qp = wr.qp.min(self.queues.len() - 1);
        self.queues[qp].push_back(Pending { id: wr.id, left: wr.bytes.max(1) });
        if !self.busy {
            self.send_next(cx).await;
        }
    }

    /// The next QP with data, from the one whose turn it is, sends one packet:
    /// its first bits go to the switch now, and the port is busy until its last.
    async fn send_next(&mut self, cx: &Context<Self>) {
        let qps = self.queues.len();
        let Some(qp) = (0..qps).map(|i| (self.turn + i) % qps).find(|&qp| !self.queues[qp].is_empty()) else {
            self.busy = false;
            return;
        };
        self.turn = (qp + 1) % qps;
        let Some(head) = self.queues[qp].front_mut() else {
            return;
        };
        let payload = head.left.min(self.mtu);
        head.left -= payload;
        let wire_bytes = payload + self.header_bytes;
        let now = now_ns(cx);
        let ns = wire_ns(wire_bytes, self.rate);
        let packet = Packet { wr: head.id, wire_bytes, last: head.left == 0, first_bit_ns: now, last_bit_ns: now + ns };
        if packet.last {
            self.queues[qp].pop_front();
        }
        self.busy = true;
        // Only fails for a time not in the future, which `wire_ns` never gives.
        let _ = cx.schedule_event(Duration::from_nanos(ns), schedulable!(Self::sent), ());
        self.packets.send(packet).await;
    }

    /// A packet's last bit left the port.
    #[nexosim(schedulable)]
    async fn sent(&mut self, _: (), cx: &Context<Self>) {
        self.send_next(cx).await;
    }

    /// The acknowledgement of a work request's last packet: its completion.
    pub async fn acked(&mut self, wr: u64) {
        self.completions.send(wr).await;
    }
}

#[derive(Serialize, Deserialize)]
pub struct Fabric {
    pub acks: Output<u64>,
    rate: u64,
    base_rtt_ns: u64,
    queue: VecDeque<Packet>,
    busy: bool,
}

#[Model(type Env = Arc<Mutex<Recorder>>)]
impl Fabric {
    /// A packet's first bits reached the switch: it queues for the link.
    pub async fn arrive(&mut self, packet: Packet, cx: &Context<Self>, recorder: &mut Arc<Mutex<Recorder>>) {
        self.queue.push_back(packet);
        if !self.busy {
            self.serialize_next(cx, recorder);
        }
    }

    fn serialize_next(&mut self, cx: &Context<Self>, recorder: &Arc<Mutex<Recorder>>) {
        let Some(packet) = self.queue.pop_front() else {
            self.busy = false;
            return;
        };
        self.busy = true;
        let now = now_ns(cx);
        crate::record::lock(recorder).queued(now, now - packet.first_bit_ns, packet.wire_bytes);
        // Cut-through: on the link at its rate, but not before its last bit came in.
        let ends = (now + wire_ns(packet.wire_bytes, self.rate)).max(packet.last_bit_ns);
        let ns = (ends - now).max(1);
        let _ = cx.schedule_event(Duration::from_nanos(ns), schedulable!(Self::departed), packet);
    }

    /// A packet's last bit is on the link toward the holder; the ACK of a work
    /// request's last packet is back at the sender after the rest of the round trip.
    #[nexosim(schedulable)]
    async fn departed(&mut self, packet: Packet, cx: &Context<Self>, recorder: &mut Arc<Mutex<Recorder>>) {
        self.serialize_next(cx, recorder);
        if packet.last {
            let _ =
                cx.schedule_event(Duration::from_nanos(self.base_rtt_ns.max(1)), schedulable!(Self::ack), packet.wr);
        }
    }

    #[nexosim(schedulable)]
    async fn ack(&mut self, wr: u64) {
        self.acks.send(wr).await;
    }
}

/// Builds a `Fabric` with the run's recorder as its environment.
pub struct ProtoFabric {
    pub acks: Output<u64>,
    pub rate: u64,
    pub base_rtt_ns: u64,
    pub recorder: Arc<Mutex<Recorder>>,
}

impl ProtoModel for ProtoFabric {
    type Model = Fabric;

    fn build(self, _: &mut BuildContext<Self>) -> (Fabric, Arc<Mutex<Recorder>>) {
        let fabric = Fabric {
            acks: self.acks,
            rate: self.rate,
            base_rtt_ns: self.base_rtt_ns,
            queue: VecDeque::new(),
            busy: false,
        };
        (fabric, self.recorder)
    }
}
