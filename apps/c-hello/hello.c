/* lite-hello: proves the liblite C ABI by linking it from plain C.
 * Prints this node's id and pings every connected peer once. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "liblite.h"

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
	printf("crossings: %" PRIu64 "\n", lite_crossings(lite));
	lite_close(lite);
	return failed;
}
