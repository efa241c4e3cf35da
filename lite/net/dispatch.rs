// SPDX-License-Identifier: GPL-2.0
//! What net needs from the services above it, which it does not import: node
//! implements `Dispatch` and hands it to every entry into net that needs it.

use core::any::Any;
use kernel::prelude::*;
use kernel::sync::Arc;

use super::wire::MsgKind;
use super::Peer;

/// The services, as net sees them.
pub(crate) trait Dispatch: Send + Sync {
    /// Serves request `kind` of `peer` (module workqueue); returns the answer's body.
    fn serve(&self, peer: &Arc<Peer>, kind: MsgKind, body: &[u8]) -> Result<KVec<u8>>;
    /// What the services keep per peer, for a new peer.
    fn peer_services(&self) -> Result<Arc<dyn PeerServices>>;
    /// Node `node` is gone (declared down or back as a new incarnation): what the
    /// services kept of it goes.
    fn node_gone(&self, node: u32);
    /// This node left: what the services kept of every node goes.
    fn all_gone(&self);
    /// The device went: as `all_gone`, and memory kept ready on it goes too.
    fn device_gone(&self);
}

/// What a service keeps per peer (our RPC calls to it); the peer holds it without
/// knowing its type and tells it when the peer fails.
pub(crate) trait PeerServices: Send + Sync {
    /// The peer failed or was shut down: every waiter on it is told.
    fn peer_failed(&self);
    /// The service's own type, for the service to find its state again.
    fn as_any(&self) -> &dyn Any;
}
