/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The C objects behind helpers.h's verbs: an RDMA device as the module set it up
 * (helpers.c's ib_client) and an RC QP (verbs.c). Only the C helpers see inside.
 */
#ifndef LITE_VERBS_H
#define LITE_VERBS_H

#include <linux/mutex.h>
#include <linux/wait.h>
#include <linux/workqueue.h>
#include <rdma/ib_verbs.h>

struct lite_dev {
	struct ib_device *ibdev;
	u32 port;
	struct ib_pd *pd;
	struct ib_mr *global_mr;
	/* remote_access=chunks: peers reach only MRs of lite_mr_register() (mr.c). */
	int remote_chunks;
	/* Immediates go as WRITE + SEND (lite_dev_use_send_messages). */
	bool send_messages;
	/* The QP registrations are posted on (mr.c), made on first use under reg_lock. */
	struct mutex reg_lock;
	struct lite_qp *reg_qp;
	struct ib_cq *send_cq;
	struct ib_cq *recv_cq;
	void *rust;
	/* Paced work requests in flight from this port, and the tasks waiting for room. */
	atomic_t paced;
	wait_queue_head_t paced_room;
	/*
	 * Under paced_lock: places held over time (ns, the integral of `paced` up to
	 * paced_since_ns) and places given back; their ratio is a place's mean hold.
	 */
	spinlock_t paced_lock;
	u64 paced_since_ns;
	u64 paced_held_ns;
	u64 paced_wrs;
	/* Time tasks waited for a place, summed. */
	atomic64_t paced_wait_ns;
	/* Bytes of RDMA READs and WRITEs completed without error, summed. */
	atomic64_t delivered;
	/* Bytes of unpaced bulk RDMA READs and WRITEs in flight. */
	atomic64_t unpaced_bytes;
	/* When one of them was last posted or completed (ktime ns). */
	atomic64_t unpaced_moved_ns;
};

/*
 * One posted receive: where a SEND's 32-bit value lands (a write-with-immediate
 * leaves it untouched and brings its value in the completion).
 */
struct lite_recv {
	struct ib_cqe cqe;
	struct lite_qp *qp;
	unsigned int index;
};

struct lite_qp {
	struct lite_dev *dev;
	struct ib_qp *qp;
	/* recv_depth receives, and the values SENDs deliver into, DMA-mapped at recv_dma. */
	struct lite_recv *recvs;
	__be32 *recv_values;
	u64 recv_dma;
	unsigned int recv_depth;
	struct ib_cqe send_cqe;
	void *rust_peer;
	unsigned int index;
	/* Set before the module itself moves the QP to error (nothing to report then). */
	bool closing;
	/* A send of ours failed: the error state that follows is not the peer's doing. */
	bool send_failed;
	/* The QP went to error behind our back; reported once, after a grace period
	 * in which a send error of ours may still explain it. */
	atomic_t went_wrong;
	struct delayed_work wrong_work;
};

/* Deletes the device's registration QP (mr.c); before its CQs go. */
void lite_mr_dev_cleanup(struct lite_dev *dev);

/* The Rust side's context (helpers.c), handed back to every callback. */
extern void *lite_ctx;

#endif
