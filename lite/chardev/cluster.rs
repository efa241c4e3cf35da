// SPDX-License-Identifier: GPL-2.0
//! The cluster family of /dev/lite ioctls: identity, membership (for operators)
//! and ping.

use crate::compat::user_slice;
use crate::node::Lite;
use crate::uapi::*;
use crate::uarg::{read_in, require_admin, reserved_zero, write_out};
use core::mem::size_of;
use kernel::prelude::*;

/// Longest wait for one ping reply that a caller may ask for.
const PING_MAX_TIMEOUT_MS: u32 = 60_000;

/// Serves the cluster ioctl `cmd` with its argument at `arg`; ENOTTY for any other.
pub(super) fn ioctl(lite: &Lite, cmd: u32, arg: usize) -> Result {
    match cmd {
        LITE_IOC_INFO => write_out(arg, &lite.net.info()),
        LITE_IOC_DEV_CAPS => write_out(arg, lite.net.device()?.caps()),
        LITE_IOC_JOIN => {
            require_admin()?;
            let join: LiteJoin = read_in(arg)?;
            reserved_zero(&[join.reserved])?;
            lite.net.join(join.node_id, join.epoch)
        }
        LITE_IOC_LEAVE => {
            require_admin()?;
            lite.net.leave(lite);
            Ok(())
        }
        LITE_IOC_PEER_PREPARE => {
            require_admin()?;
            let mut prep: LitePeerPrepare = read_in(arg)?;
            reserved_zero(&[prep.reserved])?;
            let (local, created) = lite.net.prepare_peer(lite, prep.peer_id, prep.peer_epoch)?;
            prep.local = local;
            prep.created = created as u32;
            write_out(arg, &prep)
        }
        LITE_IOC_PEER_CONNECT => {
            require_admin()?;
            let conn: LitePeerConnect = read_in(arg)?;
            reserved_zero(&[conn.reserved])?;
            lite.net
                .connect_peer(conn.peer_id, conn.peer_epoch, &conn.remote)
        }
        LITE_IOC_PEER_DOWN => {
            require_admin()?;
            let down: LitePeerDown = read_in(arg)?;
            reserved_zero(&[down.reserved])?;
            lite.net.peer_down(lite, down.peer_id)
        }
        LITE_IOC_PEERS => {
            let mut list: LitePeerList = read_in(arg)?;
            let peers = lite.net.peers()?;
            let shown = peers.len().min(list.capacity as usize);
            let mut out =
                user_slice(list.entries as usize, shown * size_of::<LitePeerStatus>()).writer();
            for status in &peers[..shown] {
                out.write(status)?;
            }
            list.count = peers.len() as u32;
            write_out(arg, &list)
        }
        LITE_IOC_PING => {
            let ping: LitePing = read_in(arg)?;
            if ping.payload > LITE_PING_MAX_PAYLOAD {
                return Err(EINVAL);
            }
            if ping.count == 0 || ping.count > LITE_PING_MAX_COUNT {
                return Err(EINVAL);
            }
            if ping.timeout_ms == 0 || ping.timeout_ms > PING_MAX_TIMEOUT_MS {
                return Err(EINVAL);
            }
            let out =
                user_slice(ping.rtt_ns as usize, ping.count as usize * size_of::<u64>()).writer();
            lite.net.ping(
                ping.node,
                ping.count,
                ping.timeout_ms,
                ping.payload as usize,
                out,
            )
        }
        _ => Err(ENOTTY),
    }
}
