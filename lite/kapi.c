// SPDX-License-Identifier: GPL-2.0
/*
 * The kernel API's exported symbols (include/lite/kapi.h): each passes its call
 * to the Rust side (lite/kapi.rs) with the module's context. Rust modules cannot
 * export symbols, so this file does, and nothing more.
 */
#include <linux/err.h>
#include <linux/export.h>
#include <lite/kapi.h>
#include "helpers.h"
#include "rust_callbacks.h"

struct lite_client *lite_client_open(void)
{
	void *client;
	int err = lite_rust_kapi_open(&client);

	return err ? ERR_PTR(err) : client;
}
EXPORT_SYMBOL_GPL(lite_client_open);

void lite_client_close(struct lite_client *client)
{
	lite_rust_kapi_close(lite_ctx, client);
}
EXPORT_SYMBOL_GPL(lite_client_close);

int lite_node_info(struct lite_node_info *info)
{
	return lite_rust_kapi_node_info(lite_ctx, &info->node_id, &info->nr_peers, &info->epoch);
}
EXPORT_SYMBOL_GPL(lite_node_info);

int lite_lmr_malloc(struct lite_client *client, u64 size, u32 nodes, u32 perm, u32 ns,
		    const char *name, u64 *lh)
{
	return lite_rust_kapi_malloc(lite_ctx, client, size, nodes, perm, ns, name, lh);
}
EXPORT_SYMBOL_GPL(lite_lmr_malloc);

int lite_lmr_map(struct lite_client *client, u32 ns, const char *name, u32 perm, u64 *lh,
		 u64 *size)
{
	return lite_rust_kapi_map(lite_ctx, client, ns, name, perm, lh, size);
}
EXPORT_SYMBOL_GPL(lite_lmr_map);

int lite_lmr_unmap(struct lite_client *client, u64 lh)
{
	return lite_rust_kapi_release(lite_ctx, client, lh, 0);
}
EXPORT_SYMBOL_GPL(lite_lmr_unmap);

int lite_lmr_free(struct lite_client *client, u64 lh)
{
	return lite_rust_kapi_release(lite_ctx, client, lh, 1);
}
EXPORT_SYMBOL_GPL(lite_lmr_free);

int lite_lmr_read(struct lite_client *client, u64 lh, u64 offset, void *buf, size_t len)
{
	return lite_rust_kapi_rw(lite_ctx, client, lh, offset, buf, len, 0);
}
EXPORT_SYMBOL_GPL(lite_lmr_read);

int lite_lmr_write(struct lite_client *client, u64 lh, u64 offset, const void *buf, size_t len)
{
	/* Only read when writing: the Rust side takes one pointer type for both. */
	return lite_rust_kapi_rw(lite_ctx, client, lh, offset, (void *)buf, len, 1);
}
EXPORT_SYMBOL_GPL(lite_lmr_write);

int lite_lock(struct lite_client *client, u64 lh, u64 offset)
{
	return lite_rust_kapi_lock(lite_ctx, client, lh, offset, 1);
}
EXPORT_SYMBOL_GPL(lite_lock);

int lite_unlock(struct lite_client *client, u64 lh, u64 offset)
{
	return lite_rust_kapi_lock(lite_ctx, client, lh, offset, 0);
}
EXPORT_SYMBOL_GPL(lite_unlock);

int lite_barrier(struct lite_client *client, u64 lh, u64 offset, u32 participants,
		 u32 timeout_ms)
{
	return lite_rust_kapi_barrier(lite_ctx, client, lh, offset, participants, timeout_ms);
}
EXPORT_SYMBOL_GPL(lite_barrier);

int lite_rpc_register(struct lite_client *client, u32 id)
{
	return lite_rust_kapi_rpc_register(lite_ctx, client, id, 1);
}
EXPORT_SYMBOL_GPL(lite_rpc_register);

int lite_rpc_unregister(struct lite_client *client, u32 id)
{
	return lite_rust_kapi_rpc_register(lite_ctx, client, id, 0);
}
EXPORT_SYMBOL_GPL(lite_rpc_unregister);

ssize_t lite_rpc_call(struct lite_client *client, u32 node, u32 id, const void *in,
		      size_t in_len, void *out, size_t out_cap, u32 timeout_ms)
{
	return lite_rust_kapi_rpc_call(lite_ctx, client, node, id, in, in_len, out, out_cap,
				       timeout_ms);
}
EXPORT_SYMBOL_GPL(lite_rpc_call);

ssize_t lite_rpc_recv(struct lite_client *client, u32 id, void *buf, size_t len,
		      struct lite_rpc_request *req, u32 timeout_ms)
{
	return lite_rust_kapi_rpc_recv(lite_ctx, client, id, buf, len, timeout_ms, &req->token,
				       &req->node, &req->reply_capacity);
}
EXPORT_SYMBOL_GPL(lite_rpc_recv);

int lite_rpc_reply(struct lite_client *client, u64 token, const void *buf, size_t len)
{
	return lite_rust_kapi_rpc_reply(lite_ctx, client, token, buf, len);
}
EXPORT_SYMBOL_GPL(lite_rpc_reply);
