// SPDX-License-Identifier: GPL-2.0
//! Making a call: LT_RPC and LT_send, to a peer through its ring or to a server
//! on this node directly.

use super::client::{end_call, Call, ClientBinding, Output};
use super::file::{FileRpc, LocalCaller, LocalCharge};
use super::phases::CallStamps;
use super::ring::{self, RecordHeader, FLAG_ABANDONED, FLAG_ONEWAY, MAX_MSG, RUN_LEN};
use super::server::Request;
use super::RpcNode;
use super::RpcPeer;
use super::{now_ns, INLINE_MAX, QUEUE_MAX};
use crate::compat::user_slice;
use crate::errno::{ECONNREFUSED, EHOSTDOWN, EMSGSIZE};
use crate::kvec::caller_sized;
use crate::lmr::layout;
use crate::net::wire;
use crate::net::Peer;
use crate::uapi::*;
use crate::verbs::{Device, DmaBuf, RemoteAccess, RemoteKey, UserPages, WriteImm, REMOTE_WRITE};
use core::sync::atomic::Ordering;
use kernel::prelude::*;
use kernel::sync::Arc;

impl RpcNode {
    /// LT_RPC / LT_send: posts a call (or message) to `id` at `node` for a caller
    /// of `class`. A call completes later in `file`'s shared-page slot; a message
    /// returns once it is in the server's ring.
    pub(crate) fn call(&self, file: &Arc<FileRpc>, req: &LiteRpcCall, class: u32) -> Result<u64> {
        let oneway = req.flags == LITE_RPC_ONEWAY;
        if (req.flags != 0 && !oneway) || req.reserved != 0 || req.id == 0 {
            return Err(EINVAL);
        }
        if req.timeout_ms == 0 || req.timeout_ms > LITE_RPC_MAX_TIMEOUT_MS {
            return Err(EINVAL);
        }
        if req.input_len > MAX_MSG || req.output_len > MAX_MSG {
            return Err(EMSGSIZE());
        }
        if oneway && (req.output_len != 0) {
            return Err(EINVAL);
        }
        if !oneway && req.slot >= LITE_SLOTS {
            return Err(EINVAL);
        }
        let input = Input::User {
            addr: usize::try_from(req.input).map_err(|_| EFAULT)?,
            len: req.input_len as usize,
        };
        let output = if oneway || req.output_len == 0 {
            OutputSpec::None
        } else {
            OutputSpec::User {
                addr: usize::try_from(req.output).map_err(|_| EFAULT)?,
                len: req.output_len as usize,
            }
        };
        let sender = Sender {
            file,
            slot: (!oneway).then_some(req.slot as usize),
            class: Some(class),
        };
        self.post_call(req.node, req.id, input, output, sender, req.timeout_ms)
    }

    /// Builds and posts one request; see `rpc_call`.
    pub(crate) fn post_call(
        &self,
        node: u32,
        id: u32,
        input: Input<'_>,
        output: OutputSpec,
        sender: Sender<'_>,
        timeout_ms: u32,
    ) -> Result<u64> {
        let dev = self.net.device()?;
        let started = now_ns();
        let deadline = started + u64::from(timeout_ms) * 1_000_000;
        let me = self.net.me()?;
        if node == me {
            return self.local_call(me, id, input, output, sender, deadline);
        }
        let waiter = sender.slot.map(|slot| (sender.file.clone(), slot));
        let timed = sender.class.map(|class| (class, started));
        let mut stamps = CallStamps {
            entry: started,
            ..Default::default()
        };
        let peer = self.net.peer(node)?;
        let out = match output {
            OutputSpec::None => Output::None,
            OutputSpec::User { addr, len } => Output::User(UserPages::pin(&dev, addr, len, true)?),
            OutputSpec::Kernel(buf) => Output::Kernel(buf),
        };
        stamps.pinned = now_ns();
        let mut runs = KVec::new();
        match &out {
            Output::None => {}
            Output::User(pages) => {
                for run in pages.runs() {
                    runs.push(run, GFP_KERNEL)?;
                }
            }
            Output::Kernel(buf) => runs.push((buf.dma(), buf.size()), GFP_KERNEL)?,
        }
        let out_cap: u64 = runs.iter().map(|r| r.1 as u64).sum();
        let (reply_key, runs) = reply_runs(&dev, &runs, out_cap)?;
        stamps.registered = now_ns();
        let nruns = runs.len() as u32;
        let head_len = ring::HEADER_LEN + runs.len() * RUN_LEN;
        let in_len = input.len();
        let inline = head_len + in_len <= INLINE_MAX || in_len == 0;
        let stage = Arc::new(
            DmaBuf::new(&dev, if inline { head_len + in_len } else { head_len })?,
            GFP_KERNEL,
        )?;
        for (i, &(addr, len, rkey)) in runs.iter().enumerate() {
            stage.write_bytes(
                ring::HEADER_LEN + i * RUN_LEN,
                &ring::encode_run(addr, len, rkey),
            )?;
        }
        // Everything that can fail on the caller's input happens before ring room is
        // reserved: a reserved record must always be posted.
        let payload = if inline {
            input.copy_into(&stage, head_len)?;
            Payload::Staged
        } else {
            input.prepare(&dev)?
        };
        let record = ring::record_len(nruns, in_len as u64);
        let calls = RpcPeer::of(&peer)?;
        let (slot, seq) = calls.claim(deadline, waiter.as_ref().map(|(file, _)| &**file))?;
        if let Some((file, user_slot)) = &waiter {
            if let Err(e) = file.claim(*user_slot, seq, deadline, true) {
                calls.unclaim(slot);
                return Err(e);
            }
        }
        let fail = |e: Error| {
            calls.unclaim(slot);
            if let Some((file, user_slot)) = &waiter {
                file.complete(*user_slot, seq, Err(e));
            }
            e
        };
        let mut out = Some((out, reply_key));
        let (binding, at, call) = loop {
            let binding = calls.binding(&peer, id).map_err(fail)?;
            // Allocated before ring room is reserved: a reserved record must be posted.
            let call = match &waiter {
                Some((file, user_slot)) => {
                    let (output, reply_key) = out.take().unwrap_or((Output::None, None));
                    let call = Call {
                        seq,
                        waiter: file.clone(),
                        user_slot: *user_slot,
                        binding: binding.clone(),
                        reply_key,
                        output,
                        _stage: stage.clone(),
                        timed,
                        stamps,
                    };
                    Some(KBox::new(call, GFP_KERNEL).map_err(|e| fail(e.into()))?)
                }
                None => None,
            };
            match binding.reserve(&peer, record, deadline) {
                Ok(at) => break (binding, at, call),
                Err(e) if e == EAGAIN => {
                    out = call.map(|c| {
                        let c = KBox::into_inner(c);
                        (c.output, c.reply_key)
                    });
                    continue;
                }
                Err(e) => return Err(fail(e)),
            }
        };
        let header = RecordHeader {
            flags: if call.is_none() { FLAG_ONEWAY } else { 0 },
            slot: slot as u32,
            start: at.start,
            pad: at.pad,
            nruns,
            reserved: 0,
            len: in_len as u64,
            seq,
            out_cap,
        };
        let _ = stage.write_bytes(0, &header.encode());
        let offset = ring::ring_offset(at.start, binding.state.lock().ring.size());
        let record = Record {
            binding: &binding,
            stage: &stage,
            payload: &payload,
            offset,
            header: &header,
        };
        let qp = peer.message_qp(sender.class, slot);
        let Some(mut call) = call else {
            let posted = self.post_record(&peer, &record, qp, true);
            binding.put_user();
            calls.unclaim(slot);
            return posted.map(|()| seq);
        };
        call.stamps.ready = now_ns();
        // Active before the immediate goes out: the reply may come at once.
        if let Err(call) = calls.activate(slot, call) {
            end_call(call, Err(EHOSTDOWN()));
            return Ok(seq);
        }
        if let Err(e) = self.post_record(&peer, &record, qp, false) {
            if let Some(call) = calls.take(slot, Some(seq)) {
                end_call(call, Err(e));
            }
        }
        Ok(seq)
    }

    /// A call to a server on this node: queued directly, answered by a copy into
    /// the caller's pinned output buffer.
    fn local_call(
        &self,
        me: u32,
        id: u32,
        input: Input<'_>,
        output: OutputSpec,
        sender: Sender<'_>,
        deadline: u64,
    ) -> Result<u64> {
        let server = self.server(id).ok_or_else(ECONNREFUSED)?;
        let charge = LocalCharge::new(sender.file, input.len())?;
        let mut payload = KVec::from_elem(0u8, input.len(), caller_sized())?;
        match input {
            Input::User { addr, len } => user_slice(addr, len).reader().read_slice(&mut payload)?,
            Input::Kernel(bytes) => payload.copy_from_slice(bytes),
        }
        let dev = self.net.device()?;
        let seq = self.next_token.fetch_add(1, Ordering::Relaxed);
        let caller = match sender.slot {
            None => None,
            Some(user_slot) => {
                let waiter = sender.file.clone();
                let (output, capacity) = match output {
                    OutputSpec::None => (Output::None, 0),
                    OutputSpec::User { addr, len } => (
                        Output::User(UserPages::pin(&dev, addr, len, true)?),
                        len as u64,
                    ),
                    OutputSpec::Kernel(buf) => {
                        let size = buf.size() as u64;
                        (Output::Kernel(buf), size)
                    }
                };
                waiter.claim(user_slot, seq, deadline, false)?;
                Some(LocalCaller {
                    id,
                    waiter,
                    user_slot,
                    seq,
                    output,
                    capacity,
                })
            }
        };
        let request = Request::Local {
            node: me,
            payload,
            caller,
            charge,
        };
        let queued = {
            let mut q = server.queue.lock();
            if q.closed {
                Err((ECONNREFUSED(), request))
            } else if q.requests.len() >= QUEUE_MAX {
                Err((EAGAIN, request))
            } else {
                q.requests
                    .push(request, GFP_ATOMIC)
                    .map_err(|request| (ENOMEM, request))
            }
        };
        match queued {
            Ok(()) => {
                server.arrived.notify_all();
                Ok(seq)
            }
            Err((e, request)) => {
                request.refuse(e);
                Err(e)
            }
        }
    }

    /// Writes a reserved record at its ring offset: the payload (zero-copy) first,
    /// then the staged part, whose first piece carries the immediate that
    /// announces the record, on QP `qp`. `sync`: wait until the immediate's write
    /// landed.
    ///
    /// The room is reserved, so the record is announced whatever happens to its
    /// payload: when that cannot be written (the caller was killed while its
    /// transfer waited for its turn), the header alone goes, marked abandoned,
    /// and the server takes the room back. Rebinding instead would start the
    /// client at the server's head, over records still in the ring.
    fn post_record(&self, peer: &Peer, record: &Record<'_>, qp: usize, sync: bool) -> Result {
        let written = self.post_record_body(peer, record);
        let announced = match written {
            Ok(()) => self.announce_record(peer, record, qp, sync),
            Err(_) => {
                let header = RecordHeader {
                    flags: record.header.flags | FLAG_ABANDONED,
                    ..*record.header
                };
                record
                    .stage
                    .write_bytes(0, &header.encode())
                    .and_then(|()| self.announce_record(peer, record, qp, sync))
            }
        };
        if announced.is_err() {
            // The peer failed (only that stops the announcement): its bindings die
            // with it, and this one is not used again.
            record.binding.kill();
        }
        written.and(announced)
    }

    /// The record's payload and the staged pieces after the first.
    fn post_record_body(&self, peer: &Peer, record: &Record<'_>) -> Result {
        let &Record {
            binding,
            stage,
            payload,
            offset,
            header,
        } = record;
        let at = offset + header.payload_offset();
        let len = header.len as usize;
        let mut ring = KVec::new();
        for piece in layout::pieces(&binding.extents, at, len as u64) {
            ring.push((piece.addr, piece.len as u32, piece.rkey), GFP_KERNEL)?;
        }
        match payload {
            Payload::Staged => {}
            Payload::Pages(pages) => {
                let mut local = KVec::new();
                for run in pages.runs() {
                    local.push(run, GFP_KERNEL)?;
                }
                peer.write_pieces(ring::zip_runs(&local, &ring, len))?;
            }
            Payload::Buf(buf) => {
                let local = [(buf.dma(), len)];
                peer.write_pieces(ring::zip_runs(&local, &ring, len))?;
            }
        }
        for piece in layout::pieces(&binding.extents, offset, stage.size() as u64) {
            if piece.pos != 0 {
                peer.rdma_write_kernel(
                    stage,
                    piece.pos as usize,
                    piece.len as usize,
                    piece.addr,
                    piece.rkey,
                )?;
            }
        }
        Ok(())
    }

    /// Writes the record's first staged piece (its header first) with the
    /// immediate that announces the record.
    fn announce_record(&self, peer: &Peer, record: &Record<'_>, qp: usize, sync: bool) -> Result {
        let &Record {
            binding,
            stage,
            offset,
            ..
        } = record;
        let first = layout::pieces(&binding.extents, offset, stage.size() as u64)
            .next()
            .ok_or(EINVAL)?;
        let imm = wire::encode_ring_imm(binding.index as usize, offset).ok_or(EINVAL)?;
        let data = WriteImm {
            src: stage,
            offset: 0,
            len: first.len as usize,
            remote_addr: first.addr,
        };
        peer.post_write_imm(qp, wire::ImmKind::RpcRequest, imm, &data, first.rkey, sync)
    }
}

/// Runs as a record names them: (address, length, rkey).
type NamedRuns = KVec<(u64, u32, u32)>;

/// The output runs a record names, with the key they are reached with: a reply
/// larger than what rides in the completion record is written into them by the
/// server, under a key of their own (`RemoteKey`, revoked when the call ends).
/// With `remote_access=chunks` that key's MR makes them one range, so the record
/// names one run; with `global` each DMA run is named as it is.
fn reply_runs(
    dev: &Arc<Device>,
    runs: &[(u64, usize)],
    out_cap: u64,
) -> Result<(Option<RemoteKey>, NamedRuns)> {
    let mut named = KVec::new();
    if out_cap <= wire::REPLY_INLINE_MAX as u64 {
        for &(addr, len) in runs {
            named.push((addr, len as u32, 0), GFP_KERNEL)?;
        }
        return Ok((None, named));
    }
    let key = RemoteKey::register(dev, runs, REMOTE_WRITE)?;
    match (dev.remote_access(), runs.first()) {
        (RemoteAccess::Chunks, Some(&(iova, _))) => {
            named.push((iova, out_cap as u32, key.rkey()), GFP_KERNEL)?
        }
        _ => {
            for &(addr, len) in runs {
                named.push((addr, len as u32, key.rkey()), GFP_KERNEL)?;
            }
        }
    }
    Ok((Some(key), named))
}

/// A record with room reserved in `binding`'s ring at `offset`: its header and
/// output runs (and a small payload) staged in `stage`, a larger payload in
/// `payload`.
struct Record<'a> {
    binding: &'a ClientBinding,
    stage: &'a DmaBuf,
    payload: &'a Payload,
    offset: u64,
    header: &'a RecordHeader,
}

/// Who makes a call: the caller's open file, and the shared-page slot the call
/// completes in (`None`: a one-way message).
pub(crate) struct Sender<'a> {
    pub(crate) file: &'a Arc<FileRpc>,
    pub(crate) slot: Option<usize>,
    /// A user's call: its class, whose latency statistics get its round trip
    /// (`None`: the kernel's own).
    pub(crate) class: Option<u32>,
}

/// A request's input.
pub(crate) enum Input<'a> {
    User { addr: usize, len: usize },
    Kernel(&'a [u8]),
}

/// A request's output buffer, before it is pinned.
pub(crate) enum OutputSpec {
    None,
    User { addr: usize, len: usize },
    Kernel(Arc<DmaBuf>),
}

/// Where a large payload is written from.
enum Payload {
    Staged,
    Pages(UserPages),
    Buf(DmaBuf),
}

impl Input<'_> {
    fn len(&self) -> usize {
        match self {
            Input::User { len, .. } => *len,
            Input::Kernel(bytes) => bytes.len(),
        }
    }

    fn copy_into(&self, stage: &DmaBuf, at: usize) -> Result {
        match self {
            Input::User { addr, len } => {
                stage.copy_from_user(at, &mut user_slice(*addr, *len).reader(), *len)
            }
            Input::Kernel(bytes) => stage.write_bytes(at, bytes),
        }
    }

    fn prepare(&self, dev: &Arc<crate::verbs::Device>) -> Result<Payload> {
        match self {
            Input::User { addr, len } => {
                Ok(Payload::Pages(UserPages::pin(dev, *addr, *len, false)?))
            }
            Input::Kernel(bytes) => {
                let buf = DmaBuf::new(dev, bytes.len())?;
                buf.write_bytes(0, bytes)?;
                Ok(Payload::Buf(buf))
            }
        }
    }
}
