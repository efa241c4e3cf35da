// SPDX-License-Identifier: GPL-2.0
//! A server process's side: registering an id, receiving its requests, and
//! replying to them.

use super::client::Output;
use super::file::{FileRpc, LocalCaller, Owed};
use super::ring::{self, RecordHeader, FLAG_ONEWAY, MAX_MSG, RUN_LEN};
use super::server::{
    answer, answer_inline, post_answer, Queue, Received, Request, Server, ServerBinding,
};
use super::RpcNode;
use super::{jiffies_until, now_ns, status_of, wait_result, IDS_PER_FILE, IDS_PER_NODE};
use crate::compat::user_slice;
use crate::errno::{ECONNRESET, EMSGSIZE, EOVERFLOW, ETIMEDOUT};
use crate::iobuf::{copy_exact, Sink, Source};
use crate::kvec::Fifo;
use crate::net::wire::{self, MsgKind, RpcUnbind};
use crate::uapi::*;
use crate::verbs::{DmaBuf, UserPages};
use core::sync::atomic::Ordering;
use kernel::prelude::*;
use kernel::rbtree::{RBTreeNode, RBTreeNodeReservation};
use kernel::sync::{new_condvar, new_spinlock, Arc};

impl RpcNode {
    /// LT_regRPC: `file` serves `id` on this node.
    pub(crate) fn register(&self, file: &FileRpc, id: u32) -> Result {
        if id == 0 {
            return Err(EINVAL);
        }
        let server = Arc::pin_init(
            pin_init!(Server {
                id,
                owner: file as *const FileRpc as usize,
                queue <- new_spinlock!(Queue { requests: Fifo::new(), closed: false }, "lite:rpc.queue"),
                arrived <- new_condvar!("lite:rpc.arrived"),
            }),
            GFP_KERNEL,
        )?;
        let node = RBTreeNode::new(id, server, GFP_KERNEL)?;
        let mut ids = file.ids.lock();
        if ids.len() >= IDS_PER_FILE {
            return Err(ENOSPC);
        }
        ids.reserve(1, GFP_KERNEL)?;
        {
            let mut servers = self.servers.lock();
            if servers.get(&id).is_some() {
                return Err(EEXIST);
            }
            if servers.iter().count() >= IDS_PER_NODE {
                return Err(ENOSPC);
            }
            servers.insert(node);
        }
        ids.push(id, GFP_KERNEL)?;
        Ok(())
    }

    /// Stops serving `id`: queued requests fail with ECONNRESET, the clients
    /// bound to it are told to stop writing, then their rings are freed.
    pub(crate) fn unregister(&self, file: &FileRpc, id: u32) -> Result {
        {
            let mut ids = file.ids.lock();
            let i = ids.iter().position(|&x| x == id).ok_or(ENOENT)?;
            crate::kvec::swap_remove(&mut ids, i);
        }
        let server = {
            let mut servers = self.servers.lock();
            match servers.get(&id) {
                Some(s) if s.owner == file as *const FileRpc as usize => servers.remove(&id),
                _ => None,
            }
        };
        let Some(server) = server else { return Ok(()) };
        let requests = {
            let mut q = server.queue.lock();
            q.closed = true;
            q.requests.drain()
        };
        server.arrived.notify_all();
        for req in requests.into_iter().flatten() {
            req.refuse(ECONNRESET());
        }
        // Replies this file owes for the id.
        let owed = {
            let mut owed = file.owed.lock();
            let mut tokens = KVec::new();
            for (token, o) in owed.iter() {
                if o.id() == id {
                    tokens.push(*token, GFP_KERNEL)?;
                }
            }
            let mut taken = KVec::new();
            for token in tokens.iter() {
                if let Some(o) = owed.remove(token) {
                    taken.push(o, GFP_KERNEL)?;
                }
            }
            taken
        };
        for o in owed.into_iter() {
            o.fail(ECONNRESET());
        }
        // Calls still arriving find no server and are refused through the binding,
        // which stays in the table until its client stopped writing to it.
        let bindings = {
            let table = self.bindings.lock();
            let mut out = KVec::new();
            for b in table.iter().flatten().filter(|b| b.id == id) {
                out.push(b.clone(), GFP_ATOMIC)?;
            }
            out
        };
        for b in bindings.iter() {
            let msg = RpcUnbind {
                binding: b.index as u32,
                id,
            };
            // A client that does not confirm is fenced off before the ring goes.
            let _ = b.peer.confirm(MsgKind::RpcUnbind, &msg);
            drop(self.take_bindings(|x| core::ptr::eq(x, &**b)));
        }
        Ok(())
    }

    /// Last close of a file: everything it serves goes.
    pub(crate) fn release(&self, file: &FileRpc) {
        loop {
            let id = file.ids.lock().first().copied();
            let Some(id) = id else { break };
            let _ = self.unregister(file, id);
        }
        let mut owed = core::mem::take(&mut *file.owed.lock());
        loop {
            let next = owed.keys().next().copied();
            let Some(o) = next.and_then(|token| owed.remove(&token)) else {
                break;
            };
            o.fail(ECONNRESET());
        }
    }

    /// LT_recvRPC: the next request or message for `id`, payload copied to `into`.
    /// A request larger than `into` stays queued; `Ok(_, false)` tells its size then.
    pub(crate) fn recv(
        &self,
        file: &FileRpc,
        id: u32,
        mut into: Sink<'_>,
        timeout_ms: u32,
    ) -> Result<(Received, bool)> {
        let buf_len = into.len() as u64;
        let server = self
            .server(id)
            .filter(|s| s.owner == file as *const FileRpc as usize)
            .ok_or(ENOENT)?;
        let deadline = now_ns() + u64::from(timeout_ms) * 1_000_000;
        loop {
            let req = {
                let mut q = server.queue.lock();
                loop {
                    if let Some(front) = q.requests.front() {
                        if front.len() > buf_len {
                            let r = Received {
                                len: front.len(),
                                token: 0,
                                node: front.node(),
                                flags: 0,
                                capacity: 0,
                            };
                            return Ok((r, false));
                        }
                        break q.requests.pop().ok_or(EINVAL)?;
                    }
                    if q.closed {
                        return Err(ECONNRESET());
                    }
                    let left = jiffies_until(deadline).ok_or_else(ETIMEDOUT)?;
                    wait_result(server.arrived.wait_interruptible_timeout(&mut q, left))?;
                }
            };
            match self.deliver(file, req, &mut into) {
                Ok(Some(received)) => return Ok((received, true)),
                // A malformed record was answered with an error; take the next one.
                Ok(None) => continue,
                Err((e, req)) => {
                    let _ = server.queue.lock().requests.push_front(req);
                    return Err(e);
                }
            }
        }
    }

    /// Hands a dequeued request to the server: payload to `into`, what the
    /// reply needs kept under a new token, ring room consumed. `Ok(None)`: the
    /// request was malformed and its caller told so. On `Err` the request is
    /// handed back untouched.
    // The request goes back to its queue on failure, whole: boxing it would
    // allocate on the path that has to put it back.
    #[allow(clippy::result_large_err)]
    fn deliver(
        &self,
        file: &FileRpc,
        req: Request,
        into: &mut Sink<'_>,
    ) -> core::result::Result<Option<Received>, (Error, Request)> {
        let len = req.len() as usize;
        if let Sink::User { addr, .. } = into {
            if addr.checked_add(len).is_none() {
                return Err((EFAULT, req));
            }
        }
        // Taken before the request is consumed: remembering it cannot fail later.
        let reservation = match RBTreeNodeReservation::new(GFP_KERNEL) {
            Ok(r) => r,
            Err(e) => return Err((e, req)),
        };
        let node = req.node();
        let owed = match req {
            Request::Remote {
                peer,
                binding,
                header,
            } => {
                let offset = ring::ring_offset(header.start, binding.size());
                if len > 0 {
                    let at = offset + header.payload_offset();
                    let copied = match into {
                        Sink::User { addr, .. } => binding.copy_to_user(at, *addr, len),
                        Sink::Kernel(out) => out
                            .get_mut(..len)
                            .ok_or(EINVAL)
                            .and_then(|out| binding.read(at, out)),
                    };
                    if let Err(e) = copied {
                        return Err((
                            e,
                            Request::Remote {
                                peer,
                                binding,
                                header,
                            },
                        ));
                    }
                }
                let owed = if header.flags & FLAG_ONEWAY != 0 {
                    None
                } else {
                    match self.read_runs(&binding, offset, &header) {
                        Ok(runs) => Some(Owed::Remote {
                            peer,
                            binding: binding.clone(),
                            slot: header.slot,
                            seq: header.seq,
                            runs,
                            capacity: header.out_cap,
                        }),
                        Err(_) => {
                            let _ = answer(&peer, &binding, header.slot, header.seq, Err(EIO));
                            binding.consume(&header);
                            return Ok(None);
                        }
                    }
                };
                binding.consume(&header);
                owed
            }
            Request::Local {
                node,
                payload,
                caller,
                charge,
            } => {
                let copied = match into {
                    Sink::User { addr, .. } => {
                        user_slice(*addr, len).writer().write_slice(&payload)
                    }
                    Sink::Kernel(out) => out
                        .get_mut(..len)
                        .ok_or(EINVAL)
                        .and_then(|out| copy_exact(out, &payload)),
                };
                if let Err(e) = copied {
                    return Err((
                        e,
                        Request::Local {
                            node,
                            payload,
                            caller,
                            charge,
                        },
                    ));
                }
                caller.map(Owed::Local)
            }
        };
        let (mut token, mut flags, mut capacity) = (0, LITE_RPC_ONEWAY, 0);
        if let Some(owed) = owed {
            token = self.next_token.fetch_add(1, Ordering::Relaxed);
            flags = 0;
            capacity = match &owed {
                Owed::Remote { capacity, .. } => *capacity,
                Owed::Local(caller) => caller.capacity,
            };
            file.owed.lock().insert(reservation.into_node(token, owed));
        }
        Ok(Some(Received {
            len: len as u64,
            token,
            node,
            flags,
            capacity,
        }))
    }

    fn read_runs(
        &self,
        binding: &ServerBinding,
        offset: u64,
        h: &RecordHeader,
    ) -> Result<KVec<(u64, u32, u32)>> {
        let bytes = h.nruns as usize * RUN_LEN;
        let mut raw = KVec::from_elem(0u8, bytes, GFP_KERNEL)?;
        binding.read(offset + ring::HEADER_LEN as u64, &mut raw)?;
        let mut runs = KVec::with_capacity(h.nruns as usize, GFP_KERNEL)?;
        let mut total = 0u64;
        for raw_run in raw.chunks_exact(RUN_LEN) {
            let raw_run: &[u8; RUN_LEN] = raw_run.try_into().map_err(|_| EIO)?;
            let run = ring::decode_run(raw_run).ok_or(EIO)?;
            total += u64::from(run.1);
            runs.push(run, GFP_KERNEL)?;
        }
        if total != h.out_cap {
            return Err(EIO);
        }
        Ok(runs)
    }

    /// LT_replyRPC: writes `from` into the caller's output buffer, then completes
    /// its call. A reply larger than that buffer completes the call with EOVERFLOW
    /// and the reply's size.
    pub(crate) fn reply(&self, file: &FileRpc, token: u64, from: Source<'_>) -> Result {
        let len = from.len() as u64;
        if len > MAX_MSG {
            return Err(EMSGSIZE());
        }
        let owed = file.owed.lock().remove(&token).ok_or(EBADF)?;
        let capacity = match owed {
            Owed::Local(caller) => return self.reply_local(file, token, caller, from),
            Owed::Remote { capacity, .. } => capacity,
        };
        // The server's buffer is read or pinned while the reply is still owed.
        let reply = if len > capacity {
            Ok(Reply::Overflow)
        } else if len as usize <= wire::REPLY_INLINE_MAX {
            KVec::from_elem(0u8, len as usize, GFP_KERNEL)
                .map_err(Error::from)
                .and_then(|mut bytes| {
                    match from {
                        Source::User { addr, .. } => user_slice(addr, bytes.len())
                            .reader()
                            .read_slice(&mut bytes),
                        Source::Kernel(data) => copy_exact(&mut bytes, data),
                    }
                    .map(|()| Reply::Inline(bytes))
                })
        } else {
            match self.net.device() {
                Ok(dev) => match from {
                    Source::User { addr, .. } => {
                        UserPages::pin(&dev, addr, len as usize, false).map(Reply::Pages)
                    }
                    Source::Kernel(data) => DmaBuf::new(&dev, data.len())
                        .and_then(|staged| staged.write_bytes(0, data).map(|()| staged))
                        .map(Reply::Staged),
                },
                Err(e) => {
                    owed.fail(e);
                    return Err(e);
                }
            }
        };
        let reply = match reply {
            Ok(reply) => reply,
            Err(e) => {
                // The server may retry with a valid buffer.
                owe_again(file, token, owed);
                return Err(e);
            }
        };
        let Owed::Remote {
            peer,
            binding,
            slot,
            seq,
            runs,
            ..
        } = owed
        else {
            return Err(EINVAL);
        };
        let qp = peer.message_qp(None, slot as usize);
        let mut local = KVec::new();
        let gathered = match &reply {
            Reply::Overflow => {
                let overflow = status_of(EOVERFLOW());
                return post_answer(&peer, &binding, slot, qp, seq, overflow, len, &[]);
            }
            Reply::Inline(bytes) => return answer_inline(&peer, &binding, slot, qp, seq, bytes),
            Reply::Pages(pages) => pages
                .runs()
                .try_for_each(|run| local.push(run, GFP_KERNEL))
                .map_err(Error::from),
            Reply::Staged(staged) => staged
                .range(0, len as usize)
                .and_then(|(dma, n)| Ok(local.push((dma, n as usize), GFP_KERNEL)?)),
        };
        let written =
            gathered.and_then(|()| peer.write_pieces(ring::zip_runs(&local, &runs, len as usize)));
        if let Err(e) = written {
            // The caller must not wait for a reply that will not come.
            let _ = answer(&peer, &binding, slot, seq, Err(e));
            return Err(e);
        }
        answer(&peer, &binding, slot, seq, Ok(len))
    }

    /// A request was received but its token could not be told to the server
    /// process: its caller fails with `err` now instead of at its deadline.
    pub(crate) fn abandon(&self, file: &FileRpc, token: u64, err: Error) {
        let owed = file.owed.lock().remove(&token);
        if let Some(owed) = owed {
            owed.fail(err);
        }
    }

    /// A reply to a caller on this node: copied into its pinned output buffer.
    fn reply_local(
        &self,
        file: &FileRpc,
        token: u64,
        mut caller: LocalCaller,
        from: Source<'_>,
    ) -> Result {
        let len = from.len() as u64;
        if len > caller.capacity {
            caller
                .waiter
                .complete_overflow(caller.user_slot, caller.seq, len);
            return Ok(());
        }
        let copied = match (&mut caller.output, from) {
            (Output::None, _) => Ok(()),
            (Output::User(pages), Source::User { addr, len }) => {
                pages.copy_from_user(&mut user_slice(addr, len).reader(), len)
            }
            (Output::Kernel(out), Source::User { addr, len }) => {
                out.copy_from_user(0, &mut user_slice(addr, len).reader(), len)
            }
            (Output::User(pages), Source::Kernel(data)) => pages.fill(data),
            (Output::Kernel(out), Source::Kernel(data)) => out.write_bytes(0, data),
        };
        match copied {
            Ok(()) => {
                caller.complete(Ok(len));
                Ok(())
            }
            Err(e) => {
                owe_again(file, token, Owed::Local(caller));
                Err(e)
            }
        }
    }
}

/// Keeps a reply owed under `token` after a failure the server may retry past.
fn owe_again(file: &FileRpc, token: u64, owed: Owed) {
    if let Ok(node) = RBTreeNode::new(token, owed, GFP_KERNEL) {
        file.owed.lock().insert(node);
    }
}

/// What a server's reply to a remote call becomes.
enum Reply {
    /// Larger than the caller's buffer: the call fails with EOVERFLOW and its size.
    Overflow,
    /// Small enough to ride in the completion record: a copy of it.
    Inline(KVec<u8>),
    /// Written from the server's pinned buffer first.
    Pages(UserPages),
    /// Written from a copy of a kernel server's reply first.
    Staged(DmaBuf),
}
