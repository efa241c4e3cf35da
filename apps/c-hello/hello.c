/* lite-hello: proves the liblite C ABI by linking it from plain C.
 * Prints this node's id, pings every connected peer once, round-trips data
 * through a 64 KB LITE memory region on this node, and calls an RPC server
 * thread of its own through the kernel. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "liblite.h"

#define LMR_SIZE (64 * 1024)

/* Writes a pattern into a fresh LMR, reads it back, memsets part of it and checks
 * again, then counts with the atomics on one of its words. Returns 0, or prints
 * what failed and returns -1. */
static int lmr_round_trip(lite_t *lite, uint32_t self)
{
	static unsigned char want[LMR_SIZE], got[LMR_SIZE];
	const uint64_t set_off = 4096 + 123, set_len = 20000;
	const char *step = "write", *bad = NULL;
	char name[64];
	uint64_t lh, old = 0, word;
	int err, free_err, i;

	snprintf(name, sizeof(name), "hello-%" PRIu32 "-%ld", self, (long)getpid());
	err = lite_malloc(lite, LMR_SIZE, 0, LITE_PERM_READ | LITE_PERM_WRITE, 0, name, &lh);
	if (err) {
		printf("lmr: malloc %s: %s\n", name, lite_strerror(err));
		return -1;
	}
	for (i = 0; i < LMR_SIZE; i++)
		want[i] = (unsigned char)(i * 7 + i / 256);
	err = lite_write(lite, lh, 0, want, LMR_SIZE);
	if (!err) {
		step = "read";
		err = lite_read(lite, lh, 0, got, LMR_SIZE);
	}
	if (!err && memcmp(got, want, LMR_SIZE))
		bad = "data read back differs from what was written";
	if (!err && !bad) {
		step = "memset";
		err = lite_memset(lite, lh, set_off, set_len, 0xa5);
	}
	if (!err && !bad) {
		step = "read after memset";
		memset(want + set_off, 0xa5, set_len);
		err = lite_read(lite, lh, 0, got, LMR_SIZE);
	}
	if (!err && !bad && memcmp(got, want, LMR_SIZE))
		bad = "data after memset differs from the expected";
	/* The word at 8 holds pattern bytes: add 5, then swap it for 1 only if it grew by 5. */
	memcpy(&word, want + 8, sizeof(word));
	if (!err && !bad) {
		step = "fetch-add";
		err = lite_fetch_add(lite, lh, 8, 5, &old);
		if (!err && old != word)
			bad = "fetch-add returned another old value than the word held";
	}
	if (!err && !bad) {
		step = "compare-and-swap";
		err = lite_compare_swap(lite, lh, 8, word + 5, 1, &old);
		if (!err && old != word + 5)
			bad = "compare-and-swap did not see the added value";
	}
	if (!err && !bad) {
		step = "misaligned fetch-add";
		if (lite_fetch_add(lite, lh, 12, 1, &old) != -EINVAL)
			bad = "fetch-add at offset 12 was not refused with -EINVAL";
	}
	if (err)
		printf("lmr: %s: %s\n", step, lite_strerror(err));
	else if (bad)
		printf("lmr: %s\n", bad);
	free_err = lite_free(lite, lh);
	if (free_err)
		printf("lmr: free: %s\n", lite_strerror(free_err));
	return err || bad || free_err ? -1 : 0;
}

#define RPC_ID 4242

struct server {
	lite_t *lite;
	int err;
};

/* Answers one request: its bytes reversed. */
static void *serve_one(void *arg)
{
	struct server *srv = arg;
	unsigned char req[256], rep[256];
	lite_incoming_t in;
	uint64_t i;

	srv->err = lite_recv_rpc(srv->lite, RPC_ID, req, sizeof(req), 30000, &in);
	if (srv->err)
		return NULL;
	for (i = 0; i < in.len; i++)
		rep[i] = req[in.len - 1 - i];
	srv->err = lite_reply_rpc(srv->lite, in.token, rep, in.len);
	return NULL;
}

/* A one-way message and a call to RPC_ID served by a thread of this process. */
static int rpc_round_trip(lite_t *lite, uint32_t self)
{
	static const char msg[] = "hello, kernel";
	struct server srv = { .lite = lite };
	unsigned char got[256];
	lite_incoming_t in;
	uint64_t len = 0;
	pthread_t thread;
	int err;

	err = lite_register_rpc(lite, RPC_ID);
	if (!err)
		err = lite_send(lite, self, RPC_ID, msg, sizeof(msg), 10000);
	if (!err)
		err = lite_recv_rpc(lite, RPC_ID, got, sizeof(got), 10000, &in);
	if (!err && (in.len != sizeof(msg) || in.token != 0 || memcmp(got, msg, sizeof(msg)))) {
		printf("rpc: the message arrived changed\n");
		return -1;
	}
	if (!err && pthread_create(&thread, NULL, serve_one, &srv) == 0) {
		err = lite_rpc(lite, self, RPC_ID, msg, sizeof(msg), got, sizeof(got), &len, 30000);
		pthread_join(thread, NULL);
		if (!err)
			err = srv.err;
		if (!err && (len != sizeof(msg) || got[0] != msg[sizeof(msg) - 1])) {
			printf("rpc: wrong reply\n");
			return -1;
		}
	}
	if (err) {
		printf("rpc: %s\n", lite_strerror(err));
		return -1;
	}
	return lite_unregister_rpc(lite, RPC_ID);
}

int main(void)
{
	lite_node_t nodes[16];
	uint32_t self;
	int err = 0, n, i, failed = 0;
	lite_t *lite = lite_open(&err);

	if (!lite) {
		fprintf(stderr, "lite-hello: %s\n", lite_strerror(err));
		return 1;
	}
	err = lite_node_id(lite, &self);
	if (err) {
		fprintf(stderr, "lite-hello: %s\n", lite_strerror(err));
		lite_close(lite);
		return 1;
	}
	n = lite_nodes(lite, nodes, 16);
	printf("node %" PRIu32 ": %d peer(s)\n", self, n < 0 ? 0 : n);
	for (i = 0; i < n && i < 16; i++) {
		uint64_t rtt;

		if (nodes[i].state != 2)
			continue;
		err = lite_ping(lite, nodes[i].id, 1, 64, 10000, &rtt);
		if (err) {
			printf("ping node %" PRIu32 ": %s\n", nodes[i].id, lite_strerror(err));
			failed = 1;
		} else {
			printf("ping node %" PRIu32 ": %" PRIu64 " us\n", nodes[i].id, rtt / 1000);
		}
	}
	if (lmr_round_trip(lite, self))
		failed = 1;
	else
		printf("lmr: ok\n");
	if (rpc_round_trip(lite, self))
		failed = 1;
	else
		printf("rpc: ok\n");
	printf("crossings: %" PRIu64 "\n", lite_crossings(lite));
	lite_close(lite);
	return failed;
}
