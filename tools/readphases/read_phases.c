// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * lite-read-phases: the phases of the native baseline's RDMA READ, as `ib_read_lat`
 * does it, for `tools/bench.py` to set beside the module's own account of an LT_read.
 *
 * One RC QP per side, connected by hand over a TCP socket (as perftest does without
 * -R: QP number, PSN, GID, address and rkey each way), so RoCE devices only (rxe).
 * The client posts one signaled RDMA READ of SIZE bytes at a time and busy-polls its
 * CQ, as `ib_read_lat` does, and stamps each read three times in user space: before
 * ibv_post_send, after it returned, and when ibv_poll_cq gave the completion. So
 * "post" is the provider's post (for rxe a write() into uverbs that queues its send
 * task), "posted to completion" holds the NICs, the wire, the peer and the poll that
 * noticed, and "whole" is what `ib_read_lat` times.
 *
 *   server: lite-read-phases --server [--port P] [--device NAME] [--gid-index G]
 *   client: lite-read-phases [--size BYTES] [--iters N] [--warmup W] ... SERVER_IPV4
 *
 * The client prints one JSON object: {"size", "iters", "device", "post",
 * "posted_to_completion", "whole"}, each phase {"mean_ns", "median_ns", "p99_ns"}.
 * Exit status: 0 ok, 1 an RDMA, network or memory error, 2 bad usage.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char usage[] =
	"usage: lite-read-phases --server [options]\n"
	"       lite-read-phases [options] SERVER_IPV4\n"
	"  time each phase of RDMA READs as ib_read_lat does them (RoCE devices: rxe)\n"
	"  --server        serve reads on --port until the client is done\n"
	"  --size BYTES    bytes per read, at most 1 MiB (client; default 8)\n"
	"  --iters N       timed reads (client; default 1000)\n"
	"  --warmup N      untimed reads first (client; default 20)\n"
	"  --port P        TCP port to exchange the QPs' addresses on (default 18517)\n"
	"  --device NAME   RDMA device (default: the first one, e.g. rxe0)\n"
	"  --gid-index G   GID index; rxe's RoCE v2 IPv4 GID is 1 (default 1)\n"
	"the client prints {\"size\", \"iters\", \"device\", \"post\", \"posted_to_completion\",\n"
	"\"whole\"} as JSON, each phase {\"mean_ns\", \"median_ns\", \"p99_ns\"}\n";

#define MAX_SIZE (1u << 20)
#define PSN 0x1234

/* What each side tells the other, in network byte order. */
struct endpoint {
	uint32_t qpn;
	uint32_t psn;
	uint32_t rkey;
	uint32_t size;
	uint64_t addr;
	uint8_t gid[16];
};

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf;
	const char *device;
	int gid_index;
	enum ibv_mtu mtu;
};

static void die(const char *what, int err)
{
	fprintf(stderr, "lite-read-phases: %s: %s\n", what, err ? strerror(err) : "failed");
	exit(1);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A whole number in [min, max] with an optional K or M suffix; -1 if malformed. */
static long parse_count(const char *s, long min, long max)
{
	char *end;
	long n;
	int shift = 0;

	errno = 0;
	n = strtol(s, &end, 10);
	if (errno || end == s || n < 0)
		return -1;
	if (*end == 'K' || *end == 'k')
		shift = 10;
	else if (*end == 'M' || *end == 'm')
		shift = 20;
	if (shift)
		end++;
	if (*end || n > max >> shift || n << shift < min)
		return -1;
	return n << shift;
}

static void open_side(struct side *s, size_t size)
{
	int count = 0;
	struct ibv_device **list = ibv_get_device_list(&count);
	struct ibv_device *dev = NULL;
	struct ibv_port_attr port;

	if (!list)
		die("ibv_get_device_list (is rdma_rxe loaded and rxe0 created?)", errno);
	for (int i = 0; i < count && !dev; i++)
		if (!s->device || !strcmp(ibv_get_device_name(list[i]), s->device))
			dev = list[i];
	if (!dev) {
		fprintf(stderr, "lite-read-phases: %s\n", s->device ? "no RDMA device of that name (see ibv_devices)"
								: "no RDMA device (is rdma_rxe loaded?)");
		exit(1);
	}
	s->device = strdup(ibv_get_device_name(dev));
	s->ctx = ibv_open_device(dev);
	ibv_free_device_list(list);
	if (!s->ctx || !s->device)
		die("ibv_open_device", errno);
	if (ibv_query_port(s->ctx, 1, &port))
		die("ibv_query_port", errno);
	if (port.link_layer != IBV_LINK_LAYER_ETHERNET) {
		fprintf(stderr, "lite-read-phases: %s is not a RoCE device: connecting by GID needs one\n",
			s->device);
		exit(1);
	}
	s->mtu = port.active_mtu;
	s->pd = ibv_alloc_pd(s->ctx);
	if (!s->pd)
		die("ibv_alloc_pd", errno);
	s->cq = ibv_create_cq(s->ctx, 16, NULL, NULL, 0);
	if (!s->cq)
		die("ibv_create_cq", errno);
	s->buf = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);
	if (!s->buf)
		die("allocating the buffer", ENOMEM);
	memset(s->buf, 0x5a, size);
	s->mr = ibv_reg_mr(s->pd, s->buf, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!s->mr)
		die("ibv_reg_mr", errno);

	struct ibv_qp_init_attr init = {
		.send_cq = s->cq,
		.recv_cq = s->cq,
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	s->qp = ibv_create_qp(s->pd, &init);
	if (!s->qp)
		die("ibv_create_qp", errno);
}

static struct endpoint local_endpoint(struct side *s, size_t size)
{
	struct endpoint e = {
		.qpn = htonl(s->qp->qp_num),
		.psn = htonl(PSN),
		.rkey = htonl(s->mr->rkey),
		.size = htonl((uint32_t)size),
		.addr = htobe64((uint64_t)(uintptr_t)s->buf),
	};
	union ibv_gid gid;

	if (ibv_query_gid(s->ctx, 1, s->gid_index, &gid))
		die("ibv_query_gid (no GID at --gid-index?)", errno);
	memcpy(e.gid, gid.raw, sizeof(e.gid));
	return e;
}

/* INIT, then RTR towards the peer, then RTS. */
static void connect_qp(struct side *s, const struct endpoint *peer)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_READ,
	};

	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("ibv_modify_qp to INIT", errno);

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = s->mtu;
	a.dest_qp_num = ntohl(peer->qpn);
	a.rq_psn = ntohl(peer->psn);
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.grh.sgid_index = (uint8_t)s->gid_index;
	memcpy(a.ah_attr.grh.dgid.raw, peer->gid, sizeof(peer->gid));
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("ibv_modify_qp to RTR", errno);

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = PSN;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			  IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("ibv_modify_qp to RTS", errno);
}

static void send_all(int fd, const void *p, size_t n)
{
	for (size_t done = 0; done < n;) {
		ssize_t k = write(fd, (const char *)p + done, n - done);

		if (k <= 0)
			die("sending the QP's address", k ? errno : EPIPE);
		done += (size_t)k;
	}
}

static void recv_all(int fd, void *p, size_t n)
{
	for (size_t done = 0; done < n;) {
		ssize_t k = read(fd, (char *)p + done, n - done);

		if (k <= 0)
			die("receiving the peer's QP address", k ? errno : ECONNRESET);
		done += (size_t)k;
	}
}

static int serve(struct side *s, int port)
{
	struct sockaddr_in at = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int one = 1, lfd = socket(AF_INET, SOCK_STREAM, 0);

	if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)))
		die("socket", errno);
	if (bind(lfd, (struct sockaddr *)&at, sizeof(at)) || listen(lfd, 1))
		die("listening on --port", errno);
	int fd = accept(lfd, NULL, NULL);

	if (fd < 0)
		die("accept", errno);
	struct endpoint peer, me = local_endpoint(s, MAX_SIZE);

	recv_all(fd, &peer, sizeof(peer));
	connect_qp(s, &peer);
	send_all(fd, &me, sizeof(me));
	/* The client closes the socket when its reads are done. */
	char c;

	while (read(fd, &c, 1) > 0)
		;
	close(fd);
	close(lfd);
	return 0;
}

static int by_value(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* Sorts `v` and prints its mean, median and 99th percentile as a JSON object. */
static void print_phase(const char *name, uint64_t *v, long n, const char *sep)
{
	double sum = 0;

	for (long i = 0; i < n; i++)
		sum += (double)v[i];
	qsort(v, (size_t)n, sizeof(*v), by_value);
	printf("\"%s\": {\"mean_ns\": %.0f, \"median_ns\": %llu, \"p99_ns\": %llu}%s", name, sum / (double)n,
	       (unsigned long long)v[n / 2], (unsigned long long)v[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1],
	       sep);
}

static int read_from(struct side *s, const char *server, int port, size_t size, long iters, long warmup)
{
	struct sockaddr_in at = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (inet_pton(AF_INET, server, &at.sin_addr) != 1) {
		fprintf(stderr, "lite-read-phases: %s: expected the server's IPv4 address\n", server);
		return 2;
	}
	if (fd < 0 || connect(fd, (struct sockaddr *)&at, sizeof(at)))
		die("connecting to the server (is lite-read-phases --server running there?)", errno);
	struct endpoint peer, me = local_endpoint(s, size);

	send_all(fd, &me, sizeof(me));
	recv_all(fd, &peer, sizeof(peer));
	connect_qp(s, &peer);

	uint64_t *post = calloc((size_t)iters, sizeof(uint64_t));
	uint64_t *wire = calloc((size_t)iters, sizeof(uint64_t));
	uint64_t *whole = calloc((size_t)iters, sizeof(uint64_t));

	if (!post || !wire || !whole)
		die("allocating the samples", ENOMEM);
	struct ibv_sge sge = { .addr = (uintptr_t)s->buf, .length = (uint32_t)size, .lkey = s->mr->lkey };
	struct ibv_send_wr wr = {
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_READ,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = be64toh(peer.addr), .rkey = ntohl(peer.rkey) },
	}, *bad;

	for (long i = -warmup; i < iters; i++) {
		struct ibv_wc wc;
		int got;
		uint64_t t0 = now_ns();
		int err = ibv_post_send(s->qp, &wr, &bad);
		uint64_t t1 = now_ns();

		if (err)
			die("ibv_post_send", err);
		while (!(got = ibv_poll_cq(s->cq, 1, &wc)))
			;
		uint64_t t2 = now_ns();

		if (got < 0)
			die("ibv_poll_cq", EIO);
		if (wc.status != IBV_WC_SUCCESS) {
			fprintf(stderr, "lite-read-phases: the read completed with %s\n", ibv_wc_status_str(wc.status));
			return 1;
		}
		if (i >= 0) {
			post[i] = t1 - t0;
			wire[i] = t2 - t1;
			whole[i] = t2 - t0;
		}
	}
	close(fd);
	printf("{\"size\": %zu, \"iters\": %ld, \"device\": \"%s\", ", size, iters, s->device);
	print_phase("post", post, iters, ", ");
	print_phase("posted_to_completion", wire, iters, ", ");
	print_phase("whole", whole, iters, "}\n");
	fflush(stdout);
	free(post);
	free(wire);
	free(whole);
	return 0;
}

int main(int argc, char **argv)
{
	struct side s = { 0 };
	const char *server = NULL;
	long size = 8, iters = 1000, warmup = 20, port = 18517, gid = 1;
	int serving = 0;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		long *into = NULL, min = 0, max = 0;

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(usage, stdout);
			return 0;
		} else if (!strcmp(a, "--server")) {
			serving = 1;
			continue;
		} else if (!strcmp(a, "--device") && v) {
			s.device = argv[++i];
			continue;
		} else if (!strcmp(a, "--size")) {
			into = &size, min = 1, max = MAX_SIZE;
		} else if (!strcmp(a, "--iters")) {
			into = &iters, min = 1, max = 100000000;
		} else if (!strcmp(a, "--warmup")) {
			into = &warmup, min = 0, max = 100000000;
		} else if (!strcmp(a, "--port")) {
			into = &port, min = 1, max = 65535;
		} else if (!strcmp(a, "--gid-index")) {
			into = &gid, min = 0, max = 255;
		} else if (a[0] != '-' && !server) {
			server = a;
			continue;
		} else {
			fprintf(stderr, "lite-read-phases: unexpected argument %s\n%s", a, usage);
			return 2;
		}
		*into = v ? parse_count(v, min, max) : -1;
		if (*into < 0) {
			fprintf(stderr, "lite-read-phases: %s: expected a whole number in %ld-%ld\n", a, min, max);
			return 2;
		}
		i++;
	}
	if (serving == !!server) {
		fprintf(stderr, "lite-read-phases: give either --server or the server's address\n%s", usage);
		return 2;
	}
	s.gid_index = (int)gid;
	open_side(&s, serving ? MAX_SIZE : (size_t)size);
	return serving ? serve(&s, (int)port) : read_from(&s, server, (int)port, (size_t)size, iters, warmup);
}
