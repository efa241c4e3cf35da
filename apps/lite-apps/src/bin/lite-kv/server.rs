//! The server: the owner of a shard, which applies PUTs and DELETEs to its table and
//! writes every changed slot through to the LMR that clients read.

use crate::slots::{
    decode_slot, encode_slot, parse_request, place, Slot, BUCKET, MAX_KEY, MAX_VALUE, OP_DELETE, OP_PUT, PROBES, SLOT,
    SLOTS, STATUS_BAD, STATUS_FULL, STATUS_MISSING, STATUS_OK,
};
use crate::{KV_RPC_ID, TIMEOUT};
use lite::{Error, Lite, Lmr, MallocOptions, Perm};
use std::io::BufRead;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// The shard's buckets as the server knows them; every change is written through to
/// the LMR that clients read.
struct Table {
    slots: Vec<[u8; SLOT]>,
    versions: Vec<u32>,
}

pub(crate) fn serve(lite: &Lite, buckets: u64, threads: u32) -> Result<(), String> {
    let me = lite.node_id().map_err(|e| e.to_string())?;
    let size = buckets.checked_mul(BUCKET as u64).filter(|&s| s > 0).ok_or("bad bucket count")?;
    let opts = MallocOptions { holders: vec![me], perm: Perm::READ, namespace: 0 };
    let shard = lite.malloc(size, &format!("kv.{me}"), &opts).map_err(|e| format!("allocate kv.{me}: {e}"))?;
    shard.memset(0, size, 0).map_err(|e| format!("clear kv.{me}: {e}"))?;
    let slots = (buckets as usize) * SLOTS;
    let table = Mutex::new(Table { slots: vec![[0u8; SLOT]; slots], versions: vec![0; slots] });
    lite.register_rpc(KV_RPC_ID).map_err(|e| format!("serve RPC {KV_RPC_ID}: {e}"))?;
    let (served, stopping) = (AtomicU64::new(0), AtomicBool::new(false));
    println!("ready: shard kv.{me}, {buckets} buckets of {SLOTS} slots");
    std::thread::scope(|s| -> Result<(), String> {
        let workers: Vec<_> = (0..threads.max(1))
            .map(|_| s.spawn(|| serve_requests(lite, &shard, buckets, &table, &served, &stopping)))
            .collect();
        // The shard lives as long as stdin is open.
        for _ in std::io::stdin().lock().lines() {}
        stopping.store(true, Ordering::Relaxed);
        // Wakes the workers: their receives fail from now on.
        let _ = lite.unregister_rpc(KV_RPC_ID);
        for w in workers {
            w.join().map_err(|_| "a server thread panicked".to_string())??;
        }
        Ok(())
    })?;
    println!("served {} requests", served.load(Ordering::Relaxed));
    Ok(())
}

fn serve_requests(
    lite: &Lite,
    shard: &Lmr<'_>,
    buckets: u64,
    table: &Mutex<Table>,
    served: &AtomicU64,
    stopping: &AtomicBool,
) -> Result<(), String> {
    let mut buf = vec![0u8; 3 + MAX_KEY + MAX_VALUE];
    let mut pending: Option<(lite::ReplyToken, u8)> = None;
    loop {
        let got = match pending.take() {
            Some((token, status)) => lite.reply_and_recv(token, &[status], KV_RPC_ID, &mut buf, TIMEOUT),
            None => lite.recv_rpc(KV_RPC_ID, &mut buf, TIMEOUT),
        };
        let incoming = match got {
            Ok(i) => i,
            Err(Error::Timeout) => continue,
            // The caller went away before its reply: serving goes on.
            Err(Error::NodeDown(_)) => continue,
            Err(Error::BufferTooSmall { .. }) => {
                let mut big = vec![0u8; lite::uapi::LITE_RPC_MAX_MSG as usize];
                if let Ok(i) = lite.recv_rpc(KV_RPC_ID, &mut big, TIMEOUT) {
                    pending = i.reply.map(|t| (t, STATUS_BAD));
                }
                continue;
            }
            Err(_) if stopping.load(Ordering::Relaxed) => return Ok(()),
            Err(e) => return Err(format!("receive: {e}")),
        };
        served.fetch_add(1, Ordering::Relaxed);
        let status = match parse_request(&buf[..incoming.len]) {
            Some((op, key, value)) => update(shard, buckets, table, op, key, value)?,
            None => STATUS_BAD,
        };
        pending = incoming.reply.map(|t| (t, status));
    }
}

/// The slots of `key`'s chain of buckets: where it is, and the first free slot.
fn chain(slots: &[[u8; SLOT]], buckets: u64, key: &[u8]) -> (Option<usize>, Option<usize>) {
    let (_, bucket) = place(key, 1, buckets);
    let mut free = None;
    for probe in 0..PROBES.min(buckets) {
        let first = ((bucket + probe) % buckets) as usize * SLOTS;
        let mut ends = false;
        for (i, slot) in slots.iter().enumerate().skip(first).take(SLOTS) {
            match decode_slot(slot) {
                Slot::Full { key: k, .. } if k == key => return (Some(i), free),
                Slot::Full { .. } | Slot::Torn => {}
                Slot::Deleted => free = free.or(Some(i)),
                Slot::Empty => {
                    free = free.or(Some(i));
                    ends = true;
                }
            }
        }
        if ends {
            break;
        }
    }
    (None, free)
}

/// Applies a PUT or DELETE and writes the changed slot through.
fn update(shard: &Lmr<'_>, buckets: u64, table: &Mutex<Table>, op: u8, key: &[u8], value: &[u8]) -> Result<u8, String> {
    let mut t = table.lock().unwrap_or_else(|e| e.into_inner());
    let i = match (op, chain(&t.slots, buckets, key)) {
        (OP_PUT, (Some(i), _) | (None, Some(i))) => i,
        (OP_PUT, (None, None)) => return Ok(STATUS_FULL),
        (OP_DELETE, (Some(i), _)) => i,
        (OP_DELETE, (None, _)) => return Ok(STATUS_MISSING),
        _ => return Ok(STATUS_BAD),
    };
    t.versions[i] = t.versions[i].wrapping_add(1);
    t.slots[i] =
        if op == OP_PUT { encode_slot(key, value, t.versions[i]) } else { encode_slot(&[], &[], t.versions[i]) };
    shard.write((i * SLOT) as u64, &t.slots[i]).map_err(|e| format!("write slot {i}: {e}"))?;
    Ok(STATUS_OK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::key_name;
    #[test]
    fn chains_spill_into_later_buckets_and_survive_deletes() {
        let buckets = 2;
        let mut slots = vec![[0u8; SLOT]; buckets as usize * SLOTS];
        let keys: Vec<Vec<u8>> = (0..8).map(|i| key_name("c", i)).collect();
        for k in &keys {
            let (at, free) = chain(&slots, buckets, k);
            assert_eq!(at, None);
            let i = free.unwrap_or(usize::MAX);
            slots[i] = encode_slot(k, k, 1);
        }
        // Full: no room for a ninth key, and every key is found.
        assert_eq!(chain(&slots, buckets, b"ninth"), (None, None));
        for k in &keys {
            assert!(chain(&slots, buckets, k).0.is_some());
        }
        // Deleting keeps later keys reachable and frees the slot for reuse.
        let (gone, _) = chain(&slots, buckets, &keys[0]);
        let gone = gone.unwrap_or(usize::MAX);
        slots[gone] = encode_slot(&[], &[], 2);
        assert_eq!(decode_slot(&slots[gone]), Slot::Deleted);
        for k in &keys[1..] {
            assert!(chain(&slots, buckets, k).0.is_some());
        }
        assert_eq!(chain(&slots, buckets, b"ninth"), (None, Some(gone)));
    }
}
