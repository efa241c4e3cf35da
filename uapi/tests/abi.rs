//! The ABI's checked facts: ioctl encodings and struct layouts (the C header is
//! checked in liblite/tests/c_headers.rs).

use lite_uapi::*;
use std::mem::{align_of, size_of};

const IOC_NONE: u32 = 0;
const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;

/// Linux's `_IOC(dir, type, nr, size)` on x86_64.
fn ioc(dir: u32, nr: u32, size: usize) -> u32 {
    assert!(size < (1 << 14), "ioctl argument too large for _IOC");
    (dir << 30) | ((size as u32) << 16) | (LITE_IOC_MAGIC << 8) | nr
}

#[test]
fn ioctl_numbers_match_their_ioc_encoding() {
    assert_eq!(LITE_IOC_INFO, ioc(IOC_READ, 1, size_of::<LiteInfo>()));
    assert_eq!(LITE_IOC_DEV_CAPS, ioc(IOC_READ, 42, size_of::<LiteDevCaps>()));
    assert_eq!(LITE_IOC_JOIN, ioc(IOC_WRITE, 2, size_of::<LiteJoin>()));
    assert_eq!(LITE_IOC_LEAVE, ioc(IOC_NONE, 3, 0));
    assert_eq!(LITE_IOC_PEER_PREPARE, ioc(IOC_READ | IOC_WRITE, 4, size_of::<LitePeerPrepare>()));
    assert_eq!(LITE_IOC_PEER_CONNECT, ioc(IOC_WRITE, 5, size_of::<LitePeerConnect>()));
    assert_eq!(LITE_IOC_PEER_DOWN, ioc(IOC_WRITE, 6, size_of::<LitePeerDown>()));
    assert_eq!(LITE_IOC_PEERS, ioc(IOC_READ | IOC_WRITE, 7, size_of::<LitePeerList>()));
    assert_eq!(LITE_IOC_PING, ioc(IOC_READ | IOC_WRITE, 8, size_of::<LitePing>()));
    assert_eq!(LITE_IOC_MALLOC, ioc(IOC_READ | IOC_WRITE, 9, size_of::<LiteMalloc>()));
    assert_eq!(LITE_IOC_MAP, ioc(IOC_READ | IOC_WRITE, 10, size_of::<LiteMap>()));
    assert_eq!(LITE_IOC_UNMAP, ioc(IOC_WRITE, 11, size_of::<LiteHandle>()));
    assert_eq!(LITE_IOC_FREE, ioc(IOC_WRITE, 12, size_of::<LiteHandle>()));
    assert_eq!(LITE_IOC_GRANT, ioc(IOC_WRITE, 13, size_of::<LiteGrant>()));
    assert_eq!(LITE_IOC_READ, ioc(IOC_WRITE, 14, size_of::<LiteRw>()));
    assert_eq!(LITE_IOC_WRITE, ioc(IOC_WRITE, 15, size_of::<LiteRw>()));
    assert_eq!(LITE_IOC_MEMSET, ioc(IOC_WRITE, 16, size_of::<LiteMemset>()));
    assert_eq!(LITE_IOC_MEMCPY, ioc(IOC_WRITE, 17, size_of::<LiteMemcpy>()));
    assert_eq!(LITE_IOC_LMR_STAT, ioc(IOC_READ | IOC_WRITE, 18, size_of::<LiteLmrStat>()));
    assert_eq!(LITE_IOC_REACH, ioc(IOC_READ | IOC_WRITE, 41, size_of::<LiteReach>()));
    assert_eq!(LITE_IOC_MEM_STAT, ioc(IOC_READ, 19, size_of::<LiteMemStat>()));
    assert_eq!(LITE_IOC_QOS_GET, ioc(IOC_READ, 33, size_of::<LiteQos>()));
    assert_eq!(LITE_IOC_QOS_SET, ioc(IOC_WRITE, 34, size_of::<LiteQos>()));
    assert_eq!(LITE_IOC_CLASS_RULE_ADD, ioc(IOC_WRITE, 35, size_of::<LiteClassRule>()));
    assert_eq!(LITE_IOC_CLASS_RULE_DEL, ioc(IOC_WRITE, 36, size_of::<LiteClassRule>()));
    assert_eq!(LITE_IOC_CLASS_RULES, ioc(IOC_READ | IOC_WRITE, 37, size_of::<LiteClassRules>()));
    assert_eq!(LITE_IOC_CLASS_SELF, ioc(IOC_READ | IOC_WRITE, 38, size_of::<LiteClassSelf>()));
    assert_eq!(LITE_IOC_QOS_STAT, ioc(IOC_READ, 39, size_of::<LiteQosStat>()));
    assert_eq!(LITE_IOC_RESERVE, ioc(IOC_WRITE, 40, size_of::<LiteReserve>()));
    assert_eq!(LITE_IOC_REGISTER, ioc(IOC_READ | IOC_WRITE, 20, size_of::<LiteRegister>()));
    assert_eq!(LITE_IOC_RPC_REGISTER, ioc(IOC_WRITE, 21, size_of::<LiteRpcId>()));
    assert_eq!(LITE_IOC_RPC_UNREGISTER, ioc(IOC_WRITE, 22, size_of::<LiteRpcId>()));
    assert_eq!(LITE_IOC_RPC_CALL, ioc(IOC_READ | IOC_WRITE, 23, size_of::<LiteRpcCall>()));
    assert_eq!(LITE_IOC_WAIT, ioc(IOC_WRITE, 24, size_of::<LiteWait>()));
    assert_eq!(LITE_IOC_RPC_RECV, ioc(IOC_READ | IOC_WRITE, 25, size_of::<LiteRpcRecv>()));
    assert_eq!(LITE_IOC_RPC_REPLY, ioc(IOC_WRITE, 26, size_of::<LiteRpcReply>()));
    assert_eq!(LITE_IOC_RPC_REPLY_RECV, ioc(IOC_READ | IOC_WRITE, 27, size_of::<LiteRpcReplyRecv>()));
    assert_eq!(LITE_IOC_RPC_BENCH, ioc(IOC_READ | IOC_WRITE, 28, size_of::<LiteRpcBench>()));
    assert_eq!(LITE_IOC_RPC_STAT, ioc(IOC_READ, 29, size_of::<LiteRpcStat>()));
    assert_eq!(LITE_IOC_ATOMIC, ioc(IOC_READ | IOC_WRITE, 30, size_of::<LiteAtomic>()));
    assert_eq!(LITE_IOC_LOCK, ioc(IOC_WRITE, 31, size_of::<LiteLock>()));
    assert_eq!(LITE_IOC_BARRIER, ioc(IOC_WRITE, 32, size_of::<LiteBarrier>()));
}

/// Sum of field sizes == struct size means the compiler inserted no padding, which
/// the kernel relies on when it copies these structs to user space byte for byte.
#[test]
fn structs_have_no_implicit_padding() {
    assert_eq!(size_of::<LiteInfo>(), 4 + 4 + 8 + 64 + 4 + 4 + 16 + 4 + 4 + 4 + 4);
    assert_eq!(size_of::<LiteDevCaps>(), 6 * 4);
    assert_eq!(size_of::<LiteJoin>(), 4 + 4 + 8);
    assert_eq!(size_of::<LiteConnInfo>(), 16 + 4 + 4 + 32 + 32 + 8 + 4 + 4 + 4 + 4);
    assert_eq!(size_of::<LitePeerPrepare>(), 4 + 4 + 8 + size_of::<LiteConnInfo>() + 4 + 4);
    assert_eq!(size_of::<LitePeerConnect>(), 4 + 4 + 8 + size_of::<LiteConnInfo>());
    assert_eq!(size_of::<LitePeerDown>(), 8);
    assert_eq!(size_of::<LitePeerStatus>(), 4 + 4 + 8 + 4 + 4 + 32 * 3 + 16 + 8);
    assert_eq!(size_of::<LiteReach>(), 4 + 4 + 8 + 4 + 4 + 8 + 4 + 4 + LITE_REACH_DATA);
    assert_eq!(size_of::<LitePeerList>(), 8 + 4 + 4);
    assert_eq!(size_of::<LitePing>(), 4 * 4 + 8);
    assert_eq!(size_of::<LiteSlot>(), 64);
    assert_eq!(size_of::<LiteSharedPage>(), 4096, "exactly the one page mmap maps");
    assert_eq!(LiteSharedPage::default().slots.len(), LITE_SLOTS as usize);
    assert_eq!(size_of::<LiteRpcId>(), 8);
    assert_eq!(size_of::<LiteRpcCall>(), 4 + 4 + 4 * 8 + 4 * 4 + 8);
    assert_eq!(size_of::<LiteWait>(), 8);
    assert_eq!(size_of::<LiteRpcRecv>(), 4 + 4 + 4 * 8 + 4 + 4 + 8);
    assert_eq!(size_of::<LiteRpcReply>(), 3 * 8);
    assert_eq!(size_of::<LiteRpcReplyRecv>(), size_of::<LiteRpcReply>() + size_of::<LiteRpcRecv>());
    assert_eq!(size_of::<LiteRpcBench>(), 4 * 4 + 4 * 8);
    assert_eq!(size_of::<LiteCallPhases>(), 9 * 8);
    assert_eq!(size_of::<LiteRpcStat>(), 4 + 4 + 8 + 4 * 4 + 2 * size_of::<LiteCallPhases>());
    assert_eq!(size_of::<LiteAtomic>(), 8 + 8 + 4 + 4 + 8 * 3);
    assert_eq!(size_of::<LiteLock>(), 8 + 8 + 4 + 4);
    assert_eq!(size_of::<LiteBarrier>(), 8 + 8 + 4 + 4);
    assert_eq!(size_of::<LiteMalloc>(), 8 + 4 * 4 + 64 + 8);
    assert_eq!(size_of::<LiteMap>(), 4 + 4 + 64 + 8 + 8);
    assert_eq!(size_of::<LiteHandle>(), 8);
    assert_eq!(size_of::<LiteGrant>(), 8 + 4 + 4);
    assert_eq!(size_of::<LiteRw>(), 4 * 8);
    assert_eq!(size_of::<LiteMemset>(), 3 * 8 + 4 + 4);
    assert_eq!(size_of::<LiteMemcpy>(), 5 * 8);
    assert_eq!(size_of::<LiteLmrStat>(), 8 + 8 + 4 * 4);
    assert_eq!(size_of::<LiteMemStat>(), 4 + 4 + 8 + 8 + 4 + 4 + 3 * 8 + size_of::<LiteReadPhases>());
    assert_eq!(size_of::<LiteReadPhases>(), 8 * 8);
    assert_eq!(size_of::<LiteReserve>(), 8);
    assert_eq!(size_of::<LiteQos>(), 4 + 4 + 8 + 3 * 4 + 4 + 8 + 4 + 4);
    assert_eq!(size_of::<LiteClassRule>(), 4 + 4 + 8);
    assert_eq!(size_of::<LiteClassStat>(), 4 * 8 + 4 + 4 + 2 * 8);
    assert_eq!(size_of::<LitePhases>(), 4 * 8);
    assert_eq!(size_of::<LitePacing>(), 6 * 8);
    assert_eq!(
        size_of::<LiteQosStat>(),
        4 + 4 + 12 * 8 + 3 * size_of::<LiteClassStat>() + 2 * size_of::<LitePhases>() + 4 + 4 + size_of::<LitePacing>()
    );
    assert_eq!(size_of::<LiteRegister>(), 8 + 8 + 4 + 4 + 64 + 8);
    assert_eq!(align_of::<LitePeerStatus>(), 8);
}

#[test]
fn limits_fit_the_fixed_arrays() {
    assert_eq!(LiteConnInfo::default().qpn.len(), LITE_MAX_QPS_PER_PEER as usize);
    assert_eq!(LitePeerStatus::default().qp_state.len(), LITE_MAX_QPS_PER_PEER as usize);
    assert_eq!(LiteInfo::default().node_id, LITE_NODE_NONE);
}
