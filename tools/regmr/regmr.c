// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * lite-regmr: the native baseline of `tools/bench.py` for LT_malloc + LT_map.
 *
 * Opens the first RDMA device (or --device NAME), allocates a protection domain,
 * maps SIZE bytes of fresh anonymous memory (not touched: its pages do not exist
 * yet) and times ibv_reg_mr(LOCAL_WRITE | REMOTE_READ | REMOTE_WRITE) on it, then
 * ibv_dereg_mr. Registration pins every page and so faults it in first: that is
 * the cost an application pays to make memory remotely accessible with plain
 * verbs, and what LITE's LT_malloc (memory the kernel already owns and registered
 * once) avoids. --touch faults the pages in before the timer starts, to separate
 * page allocation from pinning and translation.
 *
 * Prints one JSON object: {"size", "device", "touched", "reg_ns", "dereg_ns"}.
 * Exit status: 0 ok, 1 an RDMA or memory error, 2 bad usage.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static const char usage[] =
	"usage: lite-regmr [--size BYTES] [--device NAME] [--touch]\n"
	"  time ibv_reg_mr (and ibv_dereg_mr) of SIZE bytes of fresh anonymous memory\n"
	"  --size BYTES   bytes to register, K/M/G suffixes are powers of 1024 (default 1G)\n"
	"  --device NAME  RDMA device (default: the first one, e.g. rxe0)\n"
	"  --touch        fault the pages in before timing (default: registration faults them in)\n"
	"prints {\"size\", \"device\", \"touched\", \"reg_ns\", \"dereg_ns\"} as JSON\n";

static void die(const char *what, int err)
{
	fprintf(stderr, "lite-regmr: %s: %s\n", what, err ? strerror(err) : "failed");
	exit(1);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Bytes with an optional K, M, G or T suffix; 0 on a malformed value. */
static uint64_t parse_size(const char *s)
{
	char *end;
	unsigned long long n;
	int shift = 0;

	errno = 0;
	n = strtoull(s, &end, 10);
	if (errno || end == s || *s == '-')
		return 0;
	switch (*end) {
	case 'K': case 'k': shift = 10; end++; break;
	case 'M': case 'm': shift = 20; end++; break;
	case 'G': case 'g': shift = 30; end++; break;
	case 'T': case 't': shift = 40; end++; break;
	}
	if (*end || n > (UINT64_MAX >> shift))
		return 0;
	return (uint64_t)n << shift;
}

int main(int argc, char **argv)
{
	uint64_t size = 1ull << 30;
	const char *want = NULL;
	int touch = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(usage, stdout);
			return 0;
		} else if (!strcmp(argv[i], "--size") && i + 1 < argc) {
			size = parse_size(argv[++i]);
			if (!size) {
				fprintf(stderr, "lite-regmr: --size %s: expected bytes (at least 1), "
					"optionally with a K, M, G or T suffix\n", argv[i]);
				return 2;
			}
		} else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
			want = argv[++i];
		} else if (!strcmp(argv[i], "--touch")) {
			touch = 1;
		} else {
			fprintf(stderr, "lite-regmr: unexpected argument %s\n%s", argv[i], usage);
			return 2;
		}
	}

	int count = 0;
	struct ibv_device **list = ibv_get_device_list(&count);
	if (!list) {
		fprintf(stderr, "lite-regmr: ibv_get_device_list: %s (no RDMA devices: is rdma_rxe loaded "
			"and rxe0 created?)\n", strerror(errno));
		return 1;
	}
	struct ibv_device *dev = NULL;
	for (int i = 0; i < count && !dev; i++)
		if (!want || !strcmp(ibv_get_device_name(list[i]), want))
			dev = list[i];
	if (!dev) {
		fprintf(stderr, "lite-regmr: %s\n", want ? "no RDMA device of that name (see ibv_devices)"
						    : "no RDMA device (is rdma_rxe loaded and rxe0 created?)");
		return 1;
	}
	const char *name = ibv_get_device_name(dev);
	struct ibv_context *ctx = ibv_open_device(dev);
	if (!ctx)
		die("ibv_open_device", errno);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd)
		die("ibv_alloc_pd", errno);

	void *buf = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED)
		die("mmap of the buffer", errno);
	if (touch)
		for (uint64_t off = 0; off < size; off += 4096)
			((volatile char *)buf)[off] = 1;

	uint64_t t0 = now_ns();
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, size,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
	uint64_t t1 = now_ns();
	if (!mr) {
		int err = errno;
		fprintf(stderr, "lite-regmr: ibv_reg_mr of %llu bytes: %s%s\n", (unsigned long long)size,
			strerror(err), err == ENOMEM || err == EPERM ?
			" (not enough memory, or RLIMIT_MEMLOCK too low: run as root or raise ulimit -l)" : "");
		return 1;
	}
	uint64_t t2 = now_ns();
	int rc = ibv_dereg_mr(mr);
	uint64_t t3 = now_ns();
	if (rc)
		die("ibv_dereg_mr", rc);

	printf("{\"size\": %llu, \"device\": \"%s\", \"touched\": %s, \"reg_ns\": %llu, \"dereg_ns\": %llu}\n",
	       (unsigned long long)size, name, touch ? "true" : "false",
	       (unsigned long long)(t1 - t0), (unsigned long long)(t3 - t2));
	fflush(stdout);
	munmap(buf, size);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
