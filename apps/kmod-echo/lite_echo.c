// SPDX-License-Identifier: GPL-2.0
/*
 * lite_echo: a kernel module that uses LITE-RS through its kernel API
 * (include/lite/kapi.h), as a sample for module authors.
 *
 * On every node it is loaded on, it serves RPC id `rpc_id` as an echo (the reply
 * is the request) from a kernel thread, and masters an LMR named
 * "lite-echo.<node>" whose bytes from ECHO_DATA on follow a known pattern. Loaded
 * with `peer=N`, it first checks node N's instance from the kernel: reads its LMR,
 * writes and reads back a page, takes and releases the lock at the LMR's start,
 * passes a barrier and makes echo calls of a small and a large request. The load
 * fails with the first error, so `insmod` tells whether all of it worked.
 *
 * Unloading releases everything through lite_client_close(): the RPC id, the LMR
 * (peers' handles to it are revoked) and the handles it mapped.
 */
#include <linux/delay.h>
#include <linux/kthread.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <lite/kapi.h>

#define ECHO_LMR_SIZE (64 * 1024)
/* The lock word is at 0 and the barrier's at 8; the pattern starts here. */
#define ECHO_DATA 4096
#define ECHO_MAX (16 * 1024)
#define ECHO_TIMEOUT_MS 10000

static unsigned int rpc_id = 0x6563;
module_param(rpc_id, uint, 0444);
MODULE_PARM_DESC(rpc_id, "RPC id the echo is served on (default 0x6563)");

static int peer = -1;
module_param(peer, int, 0444);
MODULE_PARM_DESC(peer, "node whose lite_echo to check at load (default: none)");

static struct lite_client *client;
static struct task_struct *server;
static u32 me;

static u8 pattern(u32 node, size_t i)
{
	return (u8)(i * 31 + node * 7 + 1);
}

static int serve(void *unused)
{
	struct lite_rpc_request req;
	void *buf = kmalloc(ECHO_MAX, GFP_KERNEL);
	ssize_t len;

	if (!buf)
		return -ENOMEM;
	while (!kthread_should_stop()) {
		/* A short wait, so that kthread_stop() is answered promptly. */
		len = lite_rpc_recv(client, rpc_id, buf, ECHO_MAX, &req, 200);
		/* kthread_stop() interrupts the wait (-EINTR): the loop ends. */
		if (len == -ETIMEDOUT || len == -EINTR)
			continue;
		if (len < 0) {
			pr_warn("lite_echo: receive: %zd\n", len);
			msleep(100);
			continue;
		}
		if (req.token && lite_rpc_reply(client, req.token, buf, len))
			pr_warn("lite_echo: reply to node %u failed\n", req.node);
	}
	kfree(buf);
	return 0;
}

static int check_lmr(u32 node, u8 *page)
{
	char name[LITE_KAPI_NAME_MAX + 1];
	u64 lh, size, off;
	int err;

	snprintf(name, sizeof(name), "lite-echo.%u", node);
	err = lite_lmr_map(client, 0, name, LITE_KAPI_PERM_READ | LITE_KAPI_PERM_WRITE, &lh, &size);
	if (err)
		return err;
	for (off = ECHO_DATA; !err && off < size; off += PAGE_SIZE) {
		size_t i;

		err = lite_lmr_read(client, lh, off, page, PAGE_SIZE);
		for (i = 0; !err && i < PAGE_SIZE; i++)
			if (page[i] != pattern(node, off - ECHO_DATA + i))
				err = -EILSEQ;
	}
	if (!err) {
		memset(page, me, PAGE_SIZE);
		err = lite_lmr_write(client, lh, ECHO_DATA, page, PAGE_SIZE);
	}
	if (!err) {
		memset(page, 0, PAGE_SIZE);
		err = lite_lmr_read(client, lh, ECHO_DATA, page, PAGE_SIZE);
		if (!err && memchr_inv(page, me, PAGE_SIZE))
			err = -EILSEQ;
	}
	if (!err)
		err = lite_lock(client, lh, 0);
	if (!err)
		err = lite_unlock(client, lh, 0);
	if (!err)
		err = lite_barrier(client, lh, 8, 1, ECHO_TIMEOUT_MS);
	/* Kept mapped otherwise: unloading must release it too. */
	if (err)
		lite_lmr_unmap(client, lh);
	return err;
}

static int check_echo(u32 node, size_t len, u8 *in, u8 *out)
{
	ssize_t got;
	size_t i;

	for (i = 0; i < len; i++)
		in[i] = pattern(me, i + len);
	got = lite_rpc_call(client, node, rpc_id, in, len, out, ECHO_MAX, ECHO_TIMEOUT_MS);
	if (got < 0)
		return got;
	return got == len && !memcmp(in, out, len) ? 0 : -EILSEQ;
}

static int check_peer(u32 node)
{
	u8 *in = kmalloc(ECHO_MAX, GFP_KERNEL), *out = kmalloc(ECHO_MAX, GFP_KERNEL);
	int err = in && out ? 0 : -ENOMEM;

	if (!err)
		err = check_lmr(node, in);
	if (!err)
		err = check_echo(node, 64, in, out);
	if (!err)
		err = check_echo(node, ECHO_MAX, in, out);
	kfree(in);
	kfree(out);
	return err;
}

static int __init lite_echo_init(void)
{
	struct lite_node_info info;
	char name[LITE_KAPI_NAME_MAX + 1];
	u8 *data;
	u64 lh;
	size_t i;
	int err = lite_node_info(&info);

	if (err)
		return err;
	me = info.node_id;
	client = lite_client_open();
	if (IS_ERR(client))
		return PTR_ERR(client);
	err = lite_rpc_register(client, rpc_id);
	if (err)
		goto close;
	snprintf(name, sizeof(name), "lite-echo.%u", me);
	err = lite_lmr_malloc(client, ECHO_LMR_SIZE, 0,
			      LITE_KAPI_PERM_READ | LITE_KAPI_PERM_WRITE, 0, name, &lh);
	if (err)
		goto close;
	data = kvmalloc(ECHO_LMR_SIZE - ECHO_DATA, GFP_KERNEL);
	err = data ? 0 : -ENOMEM;
	if (!err) {
		for (i = 0; i < ECHO_LMR_SIZE - ECHO_DATA; i++)
			data[i] = pattern(me, i);
		err = lite_lmr_write(client, lh, ECHO_DATA, data, ECHO_LMR_SIZE - ECHO_DATA);
		kvfree(data);
	}
	if (err)
		goto close;
	server = kthread_run(serve, NULL, "lite_echo");
	if (IS_ERR(server)) {
		err = PTR_ERR(server);
		goto close;
	}
	if (peer >= 0) {
		err = check_peer(peer);
		if (err) {
			pr_err("lite_echo: node %d's echo failed: %d\n", peer, err);
			goto stop;
		}
		pr_info("lite_echo: node %d's LMR, lock, barrier and echo all work\n", peer);
	}
	pr_info("lite_echo: node %u serves RPC id %#x and LMR %s\n", me, rpc_id, name);
	return 0;
stop:
	kthread_stop(server);
close:
	lite_client_close(client);
	return err;
}

static void __exit lite_echo_exit(void)
{
	kthread_stop(server);
	lite_client_close(client);
	pr_info("lite_echo: unloaded\n");
}

module_init(lite_echo_init);
module_exit(lite_echo_exit);
MODULE_DESCRIPTION("LITE-RS kernel API sample: an RPC echo and an LMR");
MODULE_LICENSE("GPL");
