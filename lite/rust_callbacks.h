/* SPDX-License-Identifier: GPL-2.0 */
/* Functions implemented in Rust (lite_main.rs and friends) and called by helpers.c. */
#ifndef LITE_RUST_CALLBACKS_H
#define LITE_RUST_CALLBACKS_H

struct lite_dev;

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

int lite_rust_open(void *ctx, void **file_priv);
void lite_rust_release(void *ctx, void *file_priv);
long lite_rust_ioctl(void *ctx, void *file_priv, unsigned int cmd, unsigned long arg);
void *lite_rust_shared_page(void *file_priv);

#endif
