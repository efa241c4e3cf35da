/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The C objects behind helpers.h's verbs: an RDMA device as the module set it up
 * (helpers.c's ib_client) and an RC QP (verbs.c). Only the C helpers see inside.
 */
#ifndef LITE_VERBS_H
#define LITE_VERBS_H

#include <linux/completion.h>
#include <linux/list.h>
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
	/* Where the CM connects reg_qp on devices that connect only through it (cm.c). */
	struct lite_qp *reg_partner;
	struct ib_cq *send_cq;
	/* Reaps send_cq unless a waiter polls it (send_cq.c). */
	struct work_struct send_cq_work;
	/* Waiters polling send_cq, and whether its event found one and left it unarmed. */
	atomic_t send_pollers;
	atomic_t send_cq_unarmed;
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
 * What the active side of an RDMA CM connection sends as private data (cm.c), and
 * what a passive QP waits for: which node and incarnation connects which of its
 * QPs to which node and incarnation. 32 bytes, within the IB CM's 56.
 */
struct lite_cm_key {
	__be32 magic;
	__be32 from_node;
	__be64 from_epoch;
	__be32 to_node;
	__be32 index;
	__be64 to_epoch;
} __packed;

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
	/*
	 * Sends under send_cqe (of no op) posted and not yet handled. A polling waiter
	 * (lite_op_wait_polling) may hold one's completion after the CQ's work item
	 * handled the drain's, or the other way round: the QP is freed once none is.
	 */
	atomic_t sends;
	void *rust_peer;
	unsigned int index;
	/*
	 * Set before the module itself moves the QP to error (nothing to report then).
	 * Before a drain it is set under recv_lock, which a reposted receive is taken
	 * under too: none lands behind the drain's own, to complete after the QP went.
	 */
	bool closing;
	spinlock_t recv_lock;
	/* A send of ours failed: the error state that follows is not the peer's doing. */
	bool send_failed;
	/* The QP went to error behind our back; reported once, after a grace period
	 * in which a send error of ours may still explain it. */
	atomic_t went_wrong;
	struct delayed_work wrong_work;
	/*
	 * Through the RDMA CM (cm.c): the connection's id once there is one; while
	 * passive and unclaimed, on cm.c's list under `cm_key`. The QP is up once
	 * the other side's hello arrived (cm_wait_hello cleared); cm_done completes
	 * then or at a failure, with cm_status.
	 */
	struct rdma_cm_id *cm_id;
	struct list_head cm_expected;
	struct lite_cm_key cm_key;
	bool cm_active;
	bool cm_wait_hello;
	bool cm_reported;
	int cm_status;
	struct completion cm_done;
	/* The active side's hello again, until the answer comes (cm.c). */
	struct delayed_work cm_hello_work;
	unsigned int cm_hello_tries;
};

/* send_cq.c: the send CQ of `dev`, and the waiters that poll it meanwhile. */
int lite_send_cq_init(void);
void lite_send_cq_exit(void);
int lite_send_cq_create(struct lite_dev *dev, int entries);
void lite_send_cq_destroy(struct lite_dev *dev);
/* Takes up to `entries` completions into `wc` and runs their handlers; how many, or an errno. */
int lite_send_cq_poll(struct lite_dev *dev, struct ib_wc *wc, int entries);
void lite_send_cq_poll_begin(struct lite_dev *dev);
void lite_send_cq_poll_end(struct lite_dev *dev);

/* Deletes the device's registration QP (mr.c); before its CQs go. */
void lite_mr_dev_cleanup(struct lite_dev *dev);

/* verbs.c, for cm.c: posts `wr` (one, signaled) under the QP's send_cqe, counted in `sends`. */
int lite_qp_post_send(struct lite_qp *qp, struct ib_send_wr *wr);

/* cm.c, for verbs.c: a QP's CM state, and a receive that is the other side's hello. */
void lite_cm_init_qp(struct lite_qp *qp);
bool lite_cm_take_hello(struct lite_qp *qp, u32 value);
/* cm.c: connects `qp` to `partner` on the same device (mr.c's registration QP). */
int lite_cm_connect_pair(struct lite_qp *qp, struct lite_qp *partner);
void lite_cm_exit(void);

/* The Rust side's context (helpers.c), handed back to every callback. */
extern void *lite_ctx;

#endif
