//! The client: `Store` maps every shard and reads a key's bucket one-sided; PUT and
//! DELETE go by RPC to the shard's server.

use crate::slots::{
    find, place, request, Lookup, BUCKET, MAX_KEY, OP_DELETE, OP_PUT, PROBES, STATUS_FULL, STATUS_MISSING, STATUS_OK,
};
use crate::{KV_RPC_ID, TIMEOUT};
use lite::{Error, Lite, Lmr, Perm};
use std::sync::atomic::{AtomicU64, Ordering};

/// A GET that keeps finding a torn slot gives up after this many reads.
const GET_RETRIES: u32 = 1000;

pub(crate) struct Store<'a> {
    lite: &'a Lite,
    servers: Vec<u32>,
    shards: Vec<Lmr<'a>>,
    buckets: u64,
    pub(crate) torn_reads: AtomicU64,
}

impl<'a> Store<'a> {
    pub(crate) fn open(lite: &'a Lite, servers: &[u32]) -> Result<Self, String> {
        if servers.is_empty() {
            return Err("name the nodes that run `lite-kv serve` with --servers (e.g. --servers 1,2)".into());
        }
        let mut shards = Vec::new();
        for &node in servers {
            let lmr = lite.map(&format!("kv.{node}"), Perm::READ, 0).map_err(|e| match e {
                Error::NoSuchName(_) => format!("no shard kv.{node}: is `lite-kv serve` running on node {node}?"),
                e => format!("map kv.{node}: {e}"),
            })?;
            shards.push(lmr);
        }
        let buckets = shards[0].size() / BUCKET as u64;
        if shards.iter().any(|s| s.size() != buckets * BUCKET as u64) {
            return Err("the shards have different sizes: start every server with the same --buckets".into());
        }
        Ok(Store { lite, servers: servers.to_vec(), shards, buckets, torn_reads: AtomicU64::new(0) })
    }

    /// One LT_read of the key's bucket, usually; again if it caught a slot
    /// mid-update, and of the next bucket while the chain goes on.
    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        if key.is_empty() || key.len() > MAX_KEY {
            return Err(format!("keys are 1 to {MAX_KEY} bytes, not {}", key.len()));
        }
        let (shard, first) = place(key, self.shards.len(), self.buckets);
        let mut buf = [0u8; BUCKET];
        let (mut probe, mut torn) = (0, 0);
        while probe < PROBES.min(self.buckets) {
            let bucket = (first + probe) % self.buckets;
            self.shards[shard].read(bucket * BUCKET as u64, &mut buf).map_err(|e| format!("get: {e}"))?;
            match find(&buf, key) {
                Lookup::Found(v) => return Ok(Some(v)),
                Lookup::Absent => return Ok(None),
                Lookup::Next => probe += 1,
                Lookup::Torn => {
                    self.torn_reads.fetch_add(1, Ordering::Relaxed);
                    torn += 1;
                    if torn > GET_RETRIES {
                        return Err(format!(
                            "get: bucket {bucket} of shard {shard} stayed torn for {GET_RETRIES} reads"
                        ));
                    }
                }
            }
        }
        Ok(None)
    }

    fn call(&self, op: u8, key: &[u8], value: &[u8]) -> Result<u8, String> {
        let req = request(op, key, value)?;
        let (shard, _) = place(key, self.shards.len(), self.buckets);
        let mut status = [0u8; 1];
        let n = self.lite.rpc(self.servers[shard], KV_RPC_ID, &req, &mut status, TIMEOUT).map_err(|e| e.to_string())?;
        if n != 1 {
            return Err(format!("node {}: a reply of {n} bytes is not a lite-kv status", self.servers[shard]));
        }
        Ok(status[0])
    }

    pub(crate) fn put(&self, key: &[u8], value: &[u8]) -> Result<(), String> {
        match self.call(OP_PUT, key, value)? {
            STATUS_OK => Ok(()),
            STATUS_FULL => Err(format!(
                "put: the bucket of {:?} is full (serve with more --buckets)",
                String::from_utf8_lossy(key)
            )),
            s => Err(format!("put: the server refused the request (status {s})")),
        }
    }

    pub(crate) fn delete(&self, key: &[u8]) -> Result<(), String> {
        match self.call(OP_DELETE, key, &[])? {
            STATUS_OK => Ok(()),
            STATUS_MISSING => Err(format!("{}: no such key", String::from_utf8_lossy(key))),
            s => Err(format!("delete: the server refused the request (status {s})")),
        }
    }
}
