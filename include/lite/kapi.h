/* SPDX-License-Identifier: GPL-2.0 */
/*
 * LITE-RS kernel API: LITE's memory regions, RPC, locks and barriers for other
 * kernel modules, as /dev/lite offers them to processes (docs/kernel-api.md).
 *
 * Build against lite.ko's Module.symvers (KBUILD_EXTRA_SYMBOLS); a module that
 * calls these keeps lite.ko loaded. Everything a client holds is released by
 * lite_client_close(), which a module's exit must call for each client it opened.
 * Buffers are kernel memory (kmalloc, vmalloc or the stack), never user pointers.
 * Functions may sleep. Errors are negative errnos, as from the ioctls.
 */
#ifndef _LITE_KAPI_H
#define _LITE_KAPI_H

#include <linux/types.h>

/* Permissions of an LMR handle (LITE_PERM_* of the user ABI). */
#define LITE_KAPI_PERM_READ	1u
#define LITE_KAPI_PERM_WRITE	2u
#define LITE_KAPI_PERM_MASTER	4u

/* Longest LMR name, without its NUL. */
#define LITE_KAPI_NAME_MAX	63

struct lite_client;

/**
 * struct lite_node_info - this node in the cluster
 * @node_id: its id
 * @nr_peers: peers in any state but down
 * @epoch: incarnation of its membership, from the manager at join
 */
struct lite_node_info {
	__u32 node_id;
	__u32 nr_peers;
	__u64 epoch;
};

/**
 * struct lite_rpc_request - a request that lite_rpc_recv() delivered
 * @token: what lite_rpc_reply() answers it with; 0 for a one-way message
 * @node: the calling node
 * @reply_capacity: the most bytes the caller takes in reply
 */
struct lite_rpc_request {
	__u64 token;
	__u32 node;
	__u64 reply_capacity;
};

/**
 * lite_client_open() - a new client: the handles, RPC ids and locks it takes
 *
 * Return: the client, or an ERR_PTR (-ENOMEM).
 */
struct lite_client *lite_client_open(void);

/**
 * lite_client_close() - release everything @client holds, then @client
 * @client: from lite_client_open(); not used again
 *
 * Its locks pass to their next waiters, its handles go, the LMRs it mastered are
 * freed, the RPC ids it served are unregistered and the replies it owed fail.
 */
void lite_client_close(struct lite_client *client);

/**
 * lite_node_info() - this node's id, peers and epoch
 * @info: filled in
 *
 * Return: 0, or -ENOTCONN before the node joined a cluster.
 */
int lite_node_info(struct lite_node_info *info);

/**
 * lite_lmr_malloc() - allocate an LMR of @size bytes, mastered by @client
 * @client: the client
 * @size: bytes
 * @nodes: bit mask of the nodes that hold it (0: this node)
 * @perm: LITE_KAPI_PERM_* any node may map it with
 * @ns: application namespace of @name
 * @name: NUL-terminated, unique in @ns, at most LITE_KAPI_NAME_MAX bytes
 * @lh: the master handle
 *
 * Return: 0 or a negative errno (-EEXIST: the name is taken).
 */
int lite_lmr_malloc(struct lite_client *client, u64 size, u32 nodes, u32 perm, u32 ns,
		    const char *name, u64 *lh);

/**
 * lite_lmr_map() - a handle to the LMR named @name in @ns
 * @client: the client
 * @ns: namespace
 * @name: NUL-terminated name
 * @perm: LITE_KAPI_PERM_* wanted
 * @lh: the handle
 * @size: the LMR's size (may be NULL)
 *
 * Return: 0 or a negative errno (-ENOENT, -EACCES).
 */
int lite_lmr_map(struct lite_client *client, u32 ns, const char *name, u32 perm, u64 *lh,
		 u64 *size);

/**
 * lite_lmr_unmap() - drop handle @lh
 * @client: the client
 * @lh: a handle of @client
 *
 * Return: 0, -EBADF for an unknown handle, -EBUSY while a lock is held through it.
 */
int lite_lmr_unmap(struct lite_client *client, u64 lh);

/**
 * lite_lmr_free() - free the LMR that @client masters through @lh
 * @client: the client
 * @lh: its master handle
 *
 * Every node's handles to it are revoked. Return: 0 or a negative errno.
 */
int lite_lmr_free(struct lite_client *client, u64 lh);

/**
 * lite_lmr_read() - copy @len bytes at @offset of the LMR behind @lh to @buf
 * @client: the client
 * @lh: a handle with read permission
 * @offset: byte offset in the LMR
 * @buf: kernel memory for @len bytes
 * @len: bytes
 *
 * Return: 0, or a negative errno (-ERANGE past the LMR's end, -EIDRM once freed).
 */
int lite_lmr_read(struct lite_client *client, u64 lh, u64 offset, void *buf, size_t len);

/**
 * lite_lmr_write() - copy @len bytes at @buf to @offset of the LMR behind @lh
 * @client: the client
 * @lh: a handle with write permission
 * @offset: byte offset in the LMR
 * @buf: kernel memory of @len bytes
 * @len: bytes
 *
 * Return: 0 or a negative errno, as lite_lmr_read().
 */
int lite_lmr_write(struct lite_client *client, u64 lh, u64 offset, const void *buf, size_t len);

/**
 * lite_lock() - take the lock whose word is at @offset of the LMR behind @lh
 * @client: the client
 * @lh: a handle with read and write permission
 * @offset: 8-byte aligned
 *
 * Locks are granted in arrival order and held by the calling thread.
 * Return: 0, or a negative errno (-EOWNERDEAD: the last holder's node died).
 */
int lite_lock(struct lite_client *client, u64 lh, u64 offset);

/**
 * lite_unlock() - release a lock the calling thread holds
 * @client: the client
 * @lh: the handle it was taken through
 * @offset: its word
 *
 * Return: 0, or -EPERM when the thread does not hold it.
 */
int lite_unlock(struct lite_client *client, u64 lh, u64 offset);

/**
 * lite_barrier() - wait until @participants callers reached the barrier at @offset
 * @client: the client
 * @lh: a handle with read and write permission
 * @offset: 8-byte aligned word of the barrier
 * @participants: callers per round
 * @timeout_ms: longest wait
 *
 * Return: 0, or a negative errno (-ETIMEDOUT).
 */
int lite_barrier(struct lite_client *client, u64 lh, u64 offset, u32 participants,
		 u32 timeout_ms);

/**
 * lite_rpc_register() - serve RPC id @id on this node
 * @client: the client that receives its requests
 * @id: non-zero id, unique on this node
 *
 * Return: 0, or a negative errno (-EEXIST).
 */
int lite_rpc_register(struct lite_client *client, u32 id);

/**
 * lite_rpc_unregister() - stop serving @id; queued requests fail
 * @client: the client that registered it
 * @id: the id
 *
 * Return: 0 or -ENOENT.
 */
int lite_rpc_unregister(struct lite_client *client, u32 id);

/**
 * lite_rpc_call() - call @id at @node and wait for the reply
 * @client: the client; its calls go one at a time
 * @node: the serving node (this node too)
 * @id: the RPC id
 * @in: the request, @in_len bytes
 * @in_len: at most the message limit (-EMSGSIZE)
 * @out: the reply's buffer, @out_cap bytes
 * @out_cap: bytes the reply may take
 * @timeout_ms: longest wait
 *
 * Return: the reply's length, or a negative errno (-ETIMEDOUT, -ENOENT when
 * nothing serves @id, -EOVERFLOW when the reply was larger than @out_cap).
 */
ssize_t lite_rpc_call(struct lite_client *client, u32 node, u32 id, const void *in,
		      size_t in_len, void *out, size_t out_cap, u32 timeout_ms);

/**
 * lite_rpc_recv() - the next request for @id
 * @client: the client that registered @id
 * @id: the RPC id
 * @buf: kernel memory for @len bytes, for the request
 * @len: bytes
 * @req: who asked, and the token to reply with
 * @timeout_ms: longest wait
 *
 * Return: the request's length; -EOVERFLOW leaves a request longer than @len
 * queued; -ETIMEDOUT.
 */
ssize_t lite_rpc_recv(struct lite_client *client, u32 id, void *buf, size_t len,
		      struct lite_rpc_request *req, u32 timeout_ms);

/**
 * lite_rpc_reply() - answer the request behind @token
 * @client: the client that received it
 * @token: from lite_rpc_recv()
 * @buf: the reply, @len bytes
 * @len: bytes; past the caller's capacity the call fails with -EOVERFLOW
 *
 * Return: 0, or a negative errno (-EBADF: no such request owed).
 */
int lite_rpc_reply(struct lite_client *client, u64 token, const void *buf, size_t len);

#endif /* _LITE_KAPI_H */
