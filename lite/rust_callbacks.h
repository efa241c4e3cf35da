/* SPDX-License-Identifier: GPL-2.0 */
/* Functions implemented in Rust (lite_main.rs, kapi.rs) and called by helpers.c and kapi.c. */
#ifndef LITE_RUST_CALLBACKS_H
#define LITE_RUST_CALLBACKS_H

struct lite_dev;

/* The module's Rust context, lite_glue_init's argument: every callback's `ctx`. */
extern void *lite_ctx;

/* A device appeared: returns the Rust device object, or NULL to ignore the device. */
void *lite_rust_dev_added(void *ctx, struct lite_dev *dev);
/* A device is going away: tear down every QP on it (completions may still run). */
void lite_rust_dev_removing(void *ctx, void *rust_dev);
/* The device's CQs are gone: no more callbacks reference `rust_dev`. */
void lite_rust_dev_release(void *ctx, void *rust_dev);

/* A write-with-immediate arrived on QP `index` of the peer `rust_peer`. */
void lite_rust_recv(void *ctx, void *rust_peer, unsigned int index, unsigned int imm);
/* A send on the QP failed with an ib_wc_status other than flush. */
void lite_rust_send_error(void *ctx, void *rust_peer, unsigned int index, int status);
/* The QP went to error with no send of ours failing and without the module moving
 * it: the peer made a request its keys or the protocol do not allow (workqueue). */
void lite_rust_peer_violation(void *ctx, void *rust_peer, unsigned int index);

/* On QP `index` of the peer, connected through the RDMA CM, the peer's hello came
 * (0), or the connection failed or ended (-errno). CM handler or CQ workqueue. */
void lite_rust_qp_connected(void *ctx, void *rust_peer, unsigned int index, int status);

int lite_rust_open(void *ctx, void **file_priv);
void lite_rust_release(void *ctx, void *file_priv);
long lite_rust_ioctl(void *ctx, void *file_priv, unsigned int cmd, unsigned long arg);
void *lite_rust_shared_page(void *file_priv);

/* The kernel API (kapi.rs, include/lite/kapi.h): `client` is a struct lite_client. */
int lite_rust_kapi_open(void **client);
void lite_rust_kapi_close(void *ctx, void *client);
int lite_rust_kapi_node_info(void *ctx, unsigned int *node_id, unsigned int *nr_peers,
			     unsigned long long *epoch);
int lite_rust_kapi_malloc(void *ctx, void *client, unsigned long long size, unsigned int nodes,
			  unsigned int perm, unsigned int ns, const char *name,
			  unsigned long long *lh);
int lite_rust_kapi_map(void *ctx, void *client, unsigned int ns, const char *name,
		       unsigned int perm, unsigned long long *lh, unsigned long long *size);
int lite_rust_kapi_release(void *ctx, void *client, unsigned long long lh, int free);
int lite_rust_kapi_rw(void *ctx, void *client, unsigned long long lh, unsigned long long offset,
		      void *buf, unsigned long len, int write);
int lite_rust_kapi_lock(void *ctx, void *client, unsigned long long lh,
			unsigned long long offset, int acquire);
int lite_rust_kapi_barrier(void *ctx, void *client, unsigned long long lh,
			   unsigned long long offset, unsigned int participants,
			   unsigned int timeout_ms);
int lite_rust_kapi_rpc_register(void *ctx, void *client, unsigned int id, int reg);
long lite_rust_kapi_rpc_call(void *ctx, void *client, unsigned int node, unsigned int id,
			     const void *in, unsigned long in_len, void *out,
			     unsigned long out_cap, unsigned int timeout_ms);
long lite_rust_kapi_rpc_recv(void *ctx, void *client, unsigned int id, void *buf,
			     unsigned long len, unsigned int timeout_ms, unsigned long long *token,
			     unsigned int *node, unsigned long long *capacity);
int lite_rust_kapi_rpc_reply(void *ctx, void *client, unsigned long long token,
			     const void *buf, unsigned long len);

#endif
