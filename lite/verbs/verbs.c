// SPDX-License-Identifier: GPL-2.0
/*
 * The verbs objects of the LITE-RS module (see helpers.h): device queries, RC QPs
 * and their connection, posting, one-sided operations' completions and waits, the
 * device's places for paced work requests (memory the device reaches: dma.c).
 * No policy lives here.
 */
#include <linux/inetdevice.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/wait.h>
#include <linux/wait_bit.h>
#include <net/ipv6.h>
#include <rdma/ib_addr.h>
#include <rdma/ib_cache.h>
#include <rdma/ib_verbs.h>

#include "helpers.h"
#include "rust_callbacks.h"
#include "verbs.h"

/* Kernel messages and RPCs take a bounded share (net/peer.rs); the rest is for one-sided operations. */
#define LITE_SEND_DEPTH 512

const char *lite_dev_name(const struct lite_dev *dev)
{
	return dev_name(&dev->ibdev->dev);
}

unsigned int lite_dev_port(const struct lite_dev *dev)
{
	return dev->port;
}

int lite_dev_query_port(struct lite_dev *dev, unsigned int *state, unsigned int *mtu,
			unsigned int *speed, unsigned int *width)
{
	struct ib_port_attr attr;
	int err = ib_query_port(dev->ibdev, dev->port, &attr);

	if (err)
		return err;
	*state = attr.state;
	*mtu = attr.active_mtu;
	*speed = attr.active_speed;
	*width = attr.active_width;
	return 0;
}

/* The first IPv4 address of the netdev an iWARP port runs over, v4-mapped. */
static int lite_dev_iwarp_gid(struct lite_dev *dev, unsigned char gid[16])
{
	struct net_device *ndev = ib_device_get_netdev(dev->ibdev, dev->port);
	const struct in_ifaddr *ifa;
	struct in_device *in_dev;
	int err = -EADDRNOTAVAIL;

	if (!ndev)
		return -ENODEV;
	rcu_read_lock();
	in_dev = __in_dev_get_rcu(ndev);
	ifa = in_dev ? rcu_dereference(in_dev->ifa_list) : NULL;
	if (ifa) {
		ipv6_addr_set_v4mapped(ifa->ifa_local, (struct in6_addr *)gid);
		err = 0;
	}
	rcu_read_unlock();
	dev_put(ndev);
	return err;
}

int lite_dev_ip_gid(struct lite_dev *dev, unsigned char gid[16])
{
	struct ib_port_attr port;
	int i, err;

	if (rdma_protocol_iwarp(dev->ibdev, dev->port))
		return lite_dev_iwarp_gid(dev, gid);
	err = ib_query_port(dev->ibdev, dev->port, &port);
	if (err)
		return err;
	for (i = 0; i < port.gid_tbl_len; i++) {
		const struct ib_gid_attr *attr = rdma_get_gid_attr(dev->ibdev, dev->port, i);
		bool match;

		if (IS_ERR(attr))
			continue;
		match = attr->gid_type == IB_GID_TYPE_ROCE_UDP_ENCAP &&
			ipv6_addr_v4mapped((const struct in6_addr *)attr->gid.raw);
		if (match)
			memcpy(gid, attr->gid.raw, 16);
		rdma_put_gid_attr(attr);
		if (match)
			return i;
	}
	return -EADDRNOTAVAIL;
}

/*
 * Posts receive `i` again: a write-with-immediate or a SEND consumes one per message.
 * Its buffer takes a SEND's 32-bit value; a write-with-immediate leaves it unused.
 */
static int lite_qp_post_recv(struct lite_qp *qp, unsigned int i)
{
	struct ib_sge sge = {
		.addr = qp->recv_dma + i * sizeof(__be32),
		.length = sizeof(__be32),
		.lkey = qp->dev->global_mr->lkey,
	};
	struct ib_recv_wr wr = { .wr_cqe = &qp->recvs[i].cqe, .sg_list = &sge, .num_sge = 1 };

	ib_dma_sync_single_for_device(qp->dev->ibdev, sge.addr, sge.length, DMA_FROM_DEVICE);
	return ib_post_recv(qp->qp, &wr, NULL);
}

static void lite_wrong_work(struct work_struct *work)
{
	struct lite_qp *qp = container_of(to_delayed_work(work), struct lite_qp, wrong_work);

	/* An RDMA CM connection that ended meanwhile explains it too (iWARP: TCP's end). */
	if (!READ_ONCE(qp->closing) && !READ_ONCE(qp->send_failed) && !READ_ONCE(qp->cm_reported))
		lite_rust_peer_violation(lite_ctx, qp->rust_peer, qp->index);
}

/*
 * The QP went to error while the module did not move it there. Neither rxe nor
 * every NIC says why, but only three things do that: a send of ours that failed
 * (reported as such, maybe a little later by the send CQ's handler), the end of
 * its RDMA CM connection (iWARP; reported by cm.c), or a request from the peer
 * that the responder refused (a key, address or access its MRs do not allow, or
 * a malformed one). After a grace period for the first two (a quarter second:
 * their handlers run well within it), the third is reported.
 */
static void lite_qp_went_wrong(struct lite_qp *qp)
{
	if (!qp->rust_peer || READ_ONCE(qp->closing) || atomic_xchg(&qp->went_wrong, 1))
		return;
	queue_delayed_work(lite_workqueue(), &qp->wrong_work, HZ / 4);
}

static void lite_qp_event(struct ib_event *event, void *context)
{
	if (event->event == IB_EVENT_QP_ACCESS_ERR || event->event == IB_EVENT_QP_REQ_ERR)
		lite_qp_went_wrong(context);
}

static void lite_recv_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct lite_recv *recv = container_of(wc->wr_cqe, struct lite_recv, cqe);
	struct lite_qp *qp = recv->qp;
	u64 dma = qp->recv_dma + recv->index * sizeof(__be32);
	bool valid = true;
	u32 value = 0;

	/* Flushes happen while the QP is drained and may outlive it: touch nothing then. */
	if (wc->status != IB_WC_SUCCESS) {
		if (!READ_ONCE(qp->closing))
			lite_qp_went_wrong(qp);
		return;
	}
	if (wc->opcode == IB_WC_RECV_RDMA_WITH_IMM && (wc->wc_flags & IB_WC_WITH_IMM)) {
		value = be32_to_cpu(wc->ex.imm_data);
	} else if (wc->opcode == IB_WC_RECV && wc->byte_len == sizeof(__be32)) {
		ib_dma_sync_single_for_cpu(qp->dev->ibdev, dma, sizeof(__be32), DMA_FROM_DEVICE);
		value = be32_to_cpu(READ_ONCE(qp->recv_values[recv->index]));
	} else {
		/* Not a LITE-RS message: ignored, as an unknown immediate is. */
		valid = false;
	}
	/* The value is read: the buffer may take the next one, unless a drain began. */
	spin_lock(&qp->recv_lock);
	if (!qp->closing)
		lite_qp_post_recv(qp, recv->index);
	spin_unlock(&qp->recv_lock);
	if (valid && READ_ONCE(qp->cm_wait_hello) && lite_cm_take_hello(qp, value))
		return;
	if (valid)
		lite_rust_recv(lite_ctx, qp->rust_peer, qp->index, value);
}

/* `n` sends under send_cqe will not complete (again): the last lets a destroyer go on. */
static void lite_qp_sends_ended(struct lite_qp *qp, int n)
{
	/* Fully ordered; wake_up_var() touches only a hashed queue, not the QP. */
	if (atomic_sub_and_test(n, &qp->sends))
		wake_up_var(&qp->sends);
}

/*
 * After the drain, which flushed every send: the other consumer of the send CQ
 * may still hold one's completion. No bound, as for an op's flush (net/peer.rs
 * fail_op): a completion still to come may name the QP.
 */
static void lite_qp_wait_sends(struct lite_qp *qp)
{
	if (wait_var_event_timeout(&qp->sends, !atomic_read(&qp->sends), 10 * HZ))
		return;
	pr_warn("lite: QP %u: %d send(s) not handled 10 s after its drain; still waiting\n",
		qp->qp->qp_num, atomic_read(&qp->sends));
	wait_var_event(&qp->sends, !atomic_read(&qp->sends));
}

static void lite_send_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct lite_qp *qp = container_of(wc->wr_cqe, struct lite_qp, send_cqe);

	if (wc->status != IB_WC_SUCCESS && wc->status != IB_WC_WR_FLUSH_ERR) {
		WRITE_ONCE(qp->send_failed, true);
		if (qp->rust_peer)
			lite_rust_send_error(lite_ctx, qp->rust_peer, qp->index, wc->status);
	}
	/* The last touch of the QP: it may be freed right after. */
	lite_qp_sends_ended(qp, 1);
}

static int lite_qp_alloc_recvs(struct lite_qp *qp, unsigned int depth)
{
	struct ib_device *ibdev = qp->dev->ibdev;
	unsigned int i;

	qp->recvs = kcalloc(depth, sizeof(*qp->recvs), GFP_KERNEL);
	qp->recv_values = kcalloc(depth, sizeof(*qp->recv_values), GFP_KERNEL);
	if (!qp->recvs || !qp->recv_values)
		goto nomem;
	qp->recv_dma = ib_dma_map_single(ibdev, qp->recv_values, depth * sizeof(__be32),
					 DMA_FROM_DEVICE);
	if (ib_dma_mapping_error(ibdev, qp->recv_dma))
		goto nomem;
	qp->recv_depth = depth;
	for (i = 0; i < depth; i++) {
		qp->recvs[i].cqe.done = lite_recv_done;
		qp->recvs[i].qp = qp;
		qp->recvs[i].index = i;
	}
	return 0;
nomem:
	kfree(qp->recvs);
	kfree(qp->recv_values);
	return -ENOMEM;
}

/* After the QP is gone: no receive is posted any more. */
static void lite_qp_free_recvs(struct lite_qp *qp)
{
	ib_dma_unmap_single(qp->dev->ibdev, qp->recv_dma, qp->recv_depth * sizeof(__be32),
			    DMA_FROM_DEVICE);
	kfree(qp->recvs);
	kfree(qp->recv_values);
}

struct lite_qp *lite_qp_create(struct lite_dev *dev, void *rust_peer, unsigned int index,
			       unsigned int recv_depth, int *err)
{
	struct ib_qp_init_attr init = {
		.send_cq = dev->send_cq,
		.recv_cq = dev->recv_cq,
		.cap = {
			/*
			 * One more of each than is ever posted: ib_drain_qp() posts a
			 * last WR on both queues, and a full one fails the drain. The
			 * registration QP, one receive deep, did on Debian's 7.2 kernel
			 * (rxe rounds 1 + 1 slots to 2: room for exactly one).
			 */
			.max_send_wr = LITE_SEND_DEPTH * (dev->send_messages ? 2 : 1) + 1,
			.max_recv_wr = recv_depth + 1,
			.max_send_sge = min(dev->ibdev->attrs.max_send_sge, 16),
			.max_recv_sge = 1,
			.max_inline_data = dev->send_messages ? sizeof(__be32) : 0,
		},
		.sq_sig_type = IB_SIGNAL_REQ_WR,
		.qp_type = IB_QPT_RC,
		.port_num = dev->port,
	};
	struct ib_qp_attr attr = {
		.qp_state = IB_QPS_INIT,
		.pkey_index = 0,
		.port_num = dev->port,
		.qp_access_flags = IB_ACCESS_REMOTE_READ | IB_ACCESS_REMOTE_WRITE |
				   IB_ACCESS_REMOTE_ATOMIC,
	};
	struct lite_qp *qp = kzalloc(sizeof(*qp), GFP_KERNEL);
	unsigned int i;

	if (!qp) {
		*err = -ENOMEM;
		return NULL;
	}
	qp->dev = dev;
	qp->rust_peer = rust_peer;
	qp->index = index;
	qp->send_cqe.done = lite_send_done;
	INIT_DELAYED_WORK(&qp->wrong_work, lite_wrong_work);
	spin_lock_init(&qp->recv_lock);
	lite_cm_init_qp(qp);
	*err = lite_qp_alloc_recvs(qp, recv_depth);
	if (*err) {
		kfree(qp);
		return NULL;
	}
	init.qp_context = qp;
	init.event_handler = lite_qp_event;
	qp->qp = ib_create_qp(dev->pd, &init);
	if (IS_ERR(qp->qp)) {
		*err = PTR_ERR(qp->qp);
		lite_qp_free_recvs(qp);
		kfree(qp);
		return NULL;
	}
	*err = ib_modify_qp(qp->qp, &attr,
			    IB_QP_STATE | IB_QP_PKEY_INDEX | IB_QP_PORT | IB_QP_ACCESS_FLAGS);
	for (i = 0; !*err && i < recv_depth; i++)
		*err = lite_qp_post_recv(qp, i);
	if (*err) {
		lite_qp_destroy(qp);
		return NULL;
	}
	return qp;
}

unsigned int lite_qp_num(const struct lite_qp *qp)
{
	return qp->qp->qp_num;
}

struct lite_resolution {
	struct completion done;
	int status;
};

static void lite_resolved(int status, struct sockaddr *src, struct rdma_dev_addr *addr, void *context)
{
	struct lite_resolution *res = context;

	res->status = status;
	complete(&res->done);
}

/*
 * The MAC that frames to `dgid` go to. Only user verbs get it resolved by
 * ib_modify_qp(); kernel callers must supply it: a RoCE NIC puts it on the
 * wire, and rxe loops a packet back to itself only when it is its own MAC.
 * Same steps as rdma_addr_find_l2_eth_by_grh(), which ib_core keeps private.
 */
static int lite_resolve_dmac(struct lite_dev *dev, int sgid_index, const union ib_gid *dgid,
			     u8 dmac[ETH_ALEN])
{
	const struct ib_gid_attr *sgid_attr = rdma_get_gid_attr(dev->ibdev, dev->port, sgid_index);
	union {
		struct sockaddr_in in4;
		struct sockaddr_in6 in6;
	} src, dst;
	struct rdma_dev_addr addr = {};
	struct lite_resolution res;
	int err;

	if (IS_ERR(sgid_attr))
		return PTR_ERR(sgid_attr);
	rdma_gid2ip((struct sockaddr *)&src, &sgid_attr->gid);
	rdma_gid2ip((struct sockaddr *)&dst, dgid);
	addr.net = &init_net;
	addr.sgid_attr = sgid_attr;
	init_completion(&res.done);
	err = rdma_resolve_ip((struct sockaddr *)&src, (struct sockaddr *)&dst, &addr, 1000,
			      lite_resolved, true, &res);
	if (!err) {
		wait_for_completion(&res.done);
		err = res.status;
	}
	if (!err)
		memcpy(dmac, addr.dst_dev_addr, ETH_ALEN);
	rdma_put_gid_attr(sgid_attr);
	return err;
}

int lite_qp_connect(struct lite_qp *qp, const unsigned char remote_gid[16], int sgid_index,
		    unsigned int remote_qpn, unsigned int remote_psn, unsigned int local_psn,
		    unsigned int mtu)
{
	struct ib_device_attr *dattr = &qp->dev->ibdev->attrs;
	struct ib_qp_attr attr = {};
	union ib_gid dgid;
	int err;

	memcpy(dgid.raw, remote_gid, 16);
	attr.qp_state = IB_QPS_RTR;
	attr.path_mtu = mtu;
	attr.dest_qp_num = remote_qpn;
	attr.rq_psn = remote_psn;
	attr.max_dest_rd_atomic = min(dattr->max_qp_rd_atom, 16);
	attr.min_rnr_timer = 12;
	attr.ah_attr.type = rdma_ah_find_type(qp->dev->ibdev, qp->dev->port);
	rdma_ah_set_port_num(&attr.ah_attr, qp->dev->port);
	rdma_ah_set_grh(&attr.ah_attr, &dgid, 0, sgid_index, 64, 0);
	err = lite_resolve_dmac(qp->dev, sgid_index, &dgid, attr.ah_attr.roce.dmac);
	if (err)
		return err;
	err = ib_modify_qp(qp->qp, &attr,
			   IB_QP_STATE | IB_QP_AV | IB_QP_PATH_MTU | IB_QP_DEST_QPN |
			   IB_QP_RQ_PSN | IB_QP_MAX_DEST_RD_ATOMIC | IB_QP_MIN_RNR_TIMER);
	if (err)
		return err;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IB_QPS_RTS;
	attr.sq_psn = local_psn;
	/*
	 * 4.096 us * 2^19 = 2.1 s per try: emulated guests stall for over a second
	 * (the debug kernel's clocksource watchdog reports 1.0-1.4 s), and a
	 * retransmission that was not needed is where rxe answers multi-packet
	 * messages with an invalid-request NAK, which fails the peer. 6 retries:
	 * rxe takes 7 as "without limit", and a link that stays dead must fail the
	 * operations on it within a bound, 7 tries of 2.1 s, about 15 s without an
	 * acknowledgement (the agent then reports the link to the manager, which
	 * makes the two nodes reconnect).
	 */
	attr.timeout = 19;
	attr.retry_cnt = 6;
	attr.rnr_retry = 7;
	attr.max_rd_atomic = min(dattr->max_qp_init_rd_atom, 16);
	return ib_modify_qp(qp->qp, &attr,
			    IB_QP_STATE | IB_QP_TIMEOUT | IB_QP_RETRY_CNT | IB_QP_RNR_RETRY |
			    IB_QP_SQ_PSN | IB_QP_MAX_QP_RD_ATOMIC);
}

int lite_qp_state(struct lite_qp *qp)
{
	struct ib_qp_attr attr;
	struct ib_qp_init_attr init;
	int err = ib_query_qp(qp->qp, &attr, IB_QP_STATE, &init);

	return err ? err : attr.qp_state;
}

/* Moves the QP to the error state: it neither sends nor accepts anything more. */
int lite_qp_to_error(struct lite_qp *qp)
{
	struct ib_qp_attr attr = { .qp_state = IB_QPS_ERR };

	WRITE_ONCE(qp->closing, true);
	return ib_modify_qp(qp->qp, &attr, IB_QP_STATE);
}

/* Ends the QP's receives: a completion handled from now on posts no other. */
static void lite_qp_close_receives(struct lite_qp *qp)
{
	spin_lock(&qp->recv_lock);
	WRITE_ONCE(qp->closing, true);
	spin_unlock(&qp->recv_lock);
}

/*
 * Moves the QP to error and waits until both its queues flushed: the responder
 * finished any packet it had taken in, so nothing from the peer lands after this.
 */
void lite_qp_drain(struct lite_qp *qp)
{
	lite_qp_close_receives(qp);
	ib_drain_qp(qp->qp);
}

void lite_qp_destroy(struct lite_qp *qp)
{
	lite_qp_close_receives(qp);
	/* Before the drain: the CM holds the QP while its connection lives. */
	lite_qp_cm_end(qp);
	ib_drain_qp(qp->qp);
	lite_qp_wait_sends(qp);
	ib_destroy_qp(qp->qp);
	cancel_delayed_work_sync(&qp->wrong_work);
	lite_qp_free_recvs(qp);
	kfree(qp);
}

/* At least a jiffy, so that a timeout of 0 still looks once, and short of forever. */
static long lite_timeout_jiffies(u64 timeout_ns)
{
	return min_t(u64, nsecs_to_jiffies64(timeout_ns), MAX_SCHEDULE_TIMEOUT - 1) + 1;
}

/* Adds the places held since the last change to their integral; under paced_lock. */
static void lite_paced_account(struct lite_dev *dev, u64 now)
{
	dev->paced_held_ns += (u64)atomic_read(&dev->paced) * (now - dev->paced_since_ns);
	dev->paced_since_ns = now;
}

/*
 * How long unpaced bulk bytes may stay in flight with none of them posted or
 * completed before paced WRs stop waiting for them: a dead peer's drain only when
 * its WRs are flushed, seconds later, which must not hold the paced transfers to
 * the other peers. A live link completes one of them at least every few tens of
 * ms (the unpaced window is 60 ms of the link).
 */
#define LITE_UNPACED_STALL_NS (500 * NSEC_PER_MSEC)

/*
 * How much longer paced WRs wait at `now` for `dev`'s unpaced bulk bytes in flight
 * (ns): 0 once none is, or none moved for LITE_UNPACED_STALL_NS.
 */
static u64 lite_unpaced_hold_ns(struct lite_dev *dev, u64 now)
{
	u64 stalls_at = (u64)atomic64_read(&dev->unpaced_moved_ns) + LITE_UNPACED_STALL_NS;

	return atomic64_read(&dev->unpaced_bytes) > 0 && now < stalls_at ? stalls_at - now : 0;
}

/*
 * Takes a place among `dev`'s paced WRs in flight if fewer than `most` are, and no
 * unpaced bulk bytes hold them at `now`.
 */
static bool lite_paced_try(struct lite_dev *dev, int most, u64 now)
{
	unsigned long flags;
	bool taken = false;

	spin_lock_irqsave(&dev->paced_lock, flags);
	/*
	 * Unpaced bulk bytes still in flight are a queue at the bottleneck, left from
	 * before pacing began: paced WRs wait until it drained, at the link's whole
	 * rate rather than at what SafeUtil leaves of it.
	 */
	if (atomic_read(&dev->paced) < most && !lite_unpaced_hold_ns(dev, now)) {
		lite_paced_account(dev, now);
		atomic_inc(&dev->paced);
		taken = true;
	}
	spin_unlock_irqrestore(&dev->paced_lock, flags);
	return taken;
}

int lite_paced_enter(struct lite_dev *dev, unsigned int limit, unsigned long long timeout_ns)
{
	int most = min(limit, (unsigned int)INT_MAX);
	long left = lite_timeout_jiffies(timeout_ns), nap;
	u64 now, start = 0, hold;
	DEFINE_WAIT(wait);
	int err = 0;

	/* Exclusive: each place given back wakes one waiter, not all of them. */
	for (;;) {
		prepare_to_wait_exclusive(&dev->paced_room, &wait, TASK_KILLABLE);
		now = ktime_get_ns();
		if (lite_paced_try(dev, most, now))
			break;
		if (fatal_signal_pending(current)) {
			err = -EINTR;
			break;
		}
		if (!left) {
			err = -ETIMEDOUT;
			break;
		}
		if (!start)
			start = now;
		/* Nothing signals unpaced bytes stalling: wake up for it. */
		hold = lite_unpaced_hold_ns(dev, now);
		nap = hold ? min(left, lite_timeout_jiffies(hold)) : left;
		left -= nap - schedule_timeout(nap);
	}
	finish_wait(&dev->paced_room, &wait);
	if (start)
		atomic64_add(ktime_get_ns() - start, &dev->paced_wait_ns);
	/* A wake-up this task took and did not use, or room left over, is the next one's. */
	if (err || atomic_read(&dev->paced) < most)
		wake_up(&dev->paced_room);
	return err;
}

void lite_paced_leave(struct lite_dev *dev)
{
	unsigned long flags;

	spin_lock_irqsave(&dev->paced_lock, flags);
	lite_paced_account(dev, ktime_get_ns());
	atomic_dec(&dev->paced);
	dev->paced_wrs++;
	spin_unlock_irqrestore(&dev->paced_lock, flags);
	wake_up(&dev->paced_room);
}

unsigned int lite_paced_inflight(const struct lite_dev *dev)
{
	return atomic_read(&dev->paced);
}

unsigned long long lite_unpaced_hold(struct lite_dev *dev)
{
	return lite_unpaced_hold_ns(dev, ktime_get_ns());
}

void lite_paced_stat(struct lite_dev *dev, struct lite_paced_stat *stat)
{
	unsigned long flags;

	spin_lock_irqsave(&dev->paced_lock, flags);
	lite_paced_account(dev, ktime_get_ns());
	stat->held_ns = dev->paced_held_ns;
	stat->wrs = dev->paced_wrs;
	spin_unlock_irqrestore(&dev->paced_lock, flags);
	stat->wait_ns = atomic64_read(&dev->paced_wait_ns);
}

/* Completions taken from the CQ per poll while a waiter busy-polls. */
#define LITE_POLL_BATCH 4

/*
 * Completion handlers change `pending` and wake the waiter under `lock`, and the
 * waiter looks at it under `lock` too: once the waiter saw the last completion,
 * no handler touches the op any more, so the waiter may free it (a handler that
 * woke the waiter after dropping its count could run on freed memory).
 */
struct lite_op {
	struct ib_cqe cqe;
	/* Completes a WR that holds a place among its device's paced ones. */
	struct ib_cqe paced_cqe;
	spinlock_t lock;
	/* Posted WRs not yet completed. */
	unsigned int pending;
	/* The first failed WR's IB_WC_* status. */
	int status;
	/* When the last completion ran (ktime ns; 0: none yet). */
	u64 done_ns;
	/* When a WR was last posted or completed (jiffies: a load, on every WR). */
	unsigned long progressed;
	wait_queue_head_t progress;
	/* Complete an RDMA READ or WRITE exempt from pacing, and an unpaced bulk one. */
	struct ib_cqe rdma_cqe;
	struct ib_cqe unpaced_cqe;
	/*
	 * Bytes of each RDMA READ or WRITE in flight, oldest at rdma_done: one QP
	 * completes them in the order posted. Completed ones count in their
	 * device's `delivered`, and unpaced bulk ones leave its `unpaced_bytes`.
	 */
	u32 rdma_bytes[LITE_OP_MAX_RDMA];
	unsigned int rdma_posted;
	unsigned int rdma_done;
	/* Their QP's device, whose places paced ones hold. */
	struct lite_dev *rdma_dev;
	/* When the last RDMA READ or WRITE went to the provider, and came back posted (ktime ns). */
	u64 post_ns;
	u64 posted_ns;
	/* A waiter slept on the op (it was not done when a wait began). */
	bool slept;
};

/* A WR of `op` is about to be posted (1) or failed to post (-1). */
static void lite_op_count(struct lite_op *op, int posted)
{
	unsigned long flags;

	spin_lock_irqsave(&op->lock, flags);
	op->pending += posted;
	if (posted > 0)
		WRITE_ONCE(op->progressed, jiffies);
	if (posted < 0)
		wake_up(&op->progress);
	spin_unlock_irqrestore(&op->lock, flags);
}

/*
 * `n` sends of `op`, or without one of the QP (under its send_cqe), are about to
 * be posted (n > 0) or failed to post (n < 0).
 */
static void lite_sends_count(struct lite_qp *qp, struct lite_op *op, int n)
{
	if (op)
		lite_op_count(op, n);
	else if (n > 0)
		atomic_add(n, &qp->sends);
	else
		lite_qp_sends_ended(qp, -n);
}

int lite_qp_post_send(struct lite_qp *qp, struct ib_send_wr *wr)
{
	int err;

	wr->wr_cqe = &qp->send_cqe;
	lite_sends_count(qp, NULL, 1);
	err = ib_post_send(qp->qp, wr, NULL);
	if (err)
		lite_sends_count(qp, NULL, -1);
	return err;
}

void lite_dev_use_send_messages(struct lite_dev *dev)
{
	dev->send_messages = true;
}

/*
 * What a write-with-immediate carries, as an RDMA WRITE of the data (if any) and
 * a SEND of the value: both signaled, so that either one's failure completes
 * where the op waits. The SEND's arrival follows the WRITE's data on one QP.
 */
static int lite_qp_post_write_send(struct lite_qp *qp, struct lite_op *op, struct ib_rdma_wr *write)
{
	__be32 value = write->wr.ex.imm_data;
	struct ib_sge inline_sge = { .addr = (uintptr_t)&value, .length = sizeof(value) };
	struct ib_send_wr send = {
		.wr_cqe = write->wr.wr_cqe,
		.opcode = IB_WR_SEND,
		.send_flags = IB_SEND_SIGNALED | IB_SEND_INLINE,
		.sg_list = &inline_sge,
		.num_sge = 1,
	};
	const struct ib_send_wr *first = &send, *bad = NULL;
	int posted = 1, err;

	if (write->wr.num_sge) {
		write->wr.opcode = IB_WR_RDMA_WRITE;
		write->wr.ex.imm_data = 0;
		write->wr.next = &send;
		first = &write->wr;
		posted = 2;
	}
	lite_sends_count(qp, op, posted);
	err = ib_post_send(qp->qp, first, &bad);
	if (err)
		/* What was posted before `bad` runs and completes. */
		lite_sends_count(qp, op, bad == &send && first != &send ? -1 : -posted);
	return err;
}

int lite_qp_post_write_imm(struct lite_qp *qp, struct lite_op *op, unsigned long long local_dma,
			   unsigned int len, unsigned long long remote_addr, unsigned int rkey,
			   unsigned int imm)
{
	struct ib_sge sge = {
		.addr = local_dma,
		.length = len,
		.lkey = qp->dev->global_mr->lkey,
	};
	struct ib_rdma_wr wr = {
		.wr = {
			.wr_cqe = op ? &op->cqe : &qp->send_cqe,
			.opcode = IB_WR_RDMA_WRITE_WITH_IMM,
			.send_flags = IB_SEND_SIGNALED,
			.ex.imm_data = cpu_to_be32(imm),
			.sg_list = len ? &sge : NULL,
			.num_sge = len ? 1 : 0,
		},
		.remote_addr = remote_addr,
		.rkey = rkey,
	};
	int err;

	if (qp->dev->send_messages)
		return lite_qp_post_write_send(qp, op, &wr);
	lite_sends_count(qp, op, 1);
	err = ib_post_send(qp->qp, &wr.wr, NULL);
	if (err)
		lite_sends_count(qp, op, -1);
	return err;
}

unsigned int lite_dev_global_rkey(const struct lite_dev *dev)
{
	return dev->global_mr->rkey;
}

void lite_dev_caps(const struct lite_dev *dev, struct lite_dev_caps *caps)
{
	const struct ib_device_attr *attrs = &dev->ibdev->attrs;
	bool iwarp = rdma_protocol_iwarp(dev->ibdev, dev->port);

	/* The ABI's LITE_TRANSPORT_IB, _ROCE, _IWARP. */
	caps->transport = iwarp ? 3 : rdma_protocol_roce(dev->ibdev, dev->port) ? 2 : 1;
	caps->write_imm = !iwarp;
	caps->cm_connect = iwarp;
	caps->max_send_sge = attrs->max_send_sge;
	caps->max_sge_rd = attrs->max_sge_rd;
	caps->atomic_cap = attrs->atomic_cap;
	caps->max_qp_rd_atom = attrs->max_qp_rd_atom;
}

/*
 * A WR of `op` completed; `rdma`: an RDMA READ or WRITE, whose bytes were delivered;
 * `unpaced`: bulk posted LITE_PACING_UNPACED.
 */
static void lite_op_complete(struct lite_op *op, const struct ib_wc *wc, bool rdma,
			     bool unpaced)
{
	struct lite_dev *dev = op->rdma_dev;
	unsigned long flags;
	u32 bytes;

	spin_lock_irqsave(&op->lock, flags);
	if (rdma) {
		bytes = op->rdma_bytes[op->rdma_done++ % LITE_OP_MAX_RDMA];
		if (wc->status == IB_WC_SUCCESS)
			atomic64_add(bytes, &dev->delivered);
		/* Before the op's count drops: its waiter may free it right after. */
		if (unpaced) {
			atomic64_set(&dev->unpaced_moved_ns, ktime_get_ns());
			if (atomic64_sub_return(bytes, &dev->unpaced_bytes) <= 0)
				wake_up(&dev->paced_room);
		}
	}
	if (wc->status != IB_WC_SUCCESS && !op->status)
		op->status = wc->status;
	WRITE_ONCE(op->progressed, jiffies);
	if (!--op->pending)
		WRITE_ONCE(op->done_ns, ktime_get_ns());
	wake_up(&op->progress);
	spin_unlock_irqrestore(&op->lock, flags);
}

static void lite_op_done(struct ib_cq *cq, struct ib_wc *wc)
{
	lite_op_complete(container_of(wc->wr_cqe, struct lite_op, cqe), wc, false, false);
}

static void lite_op_rdma_done(struct ib_cq *cq, struct ib_wc *wc)
{
	lite_op_complete(container_of(wc->wr_cqe, struct lite_op, rdma_cqe), wc, true, false);
}

static void lite_op_unpaced_done(struct ib_cq *cq, struct ib_wc *wc)
{
	lite_op_complete(container_of(wc->wr_cqe, struct lite_op, unpaced_cqe), wc, true, true);
}

static void lite_op_paced_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct lite_op *op = container_of(wc->wr_cqe, struct lite_op, paced_cqe);

	/* Before the op's count drops: its waiter may free it right after. */
	lite_paced_leave(op->rdma_dev);
	lite_op_complete(op, wc, true, false);
}

struct lite_op *lite_op_new(void)
{
	struct lite_op *op = kzalloc(sizeof(*op), GFP_KERNEL);

	if (!op)
		return NULL;
	op->cqe.done = lite_op_done;
	op->paced_cqe.done = lite_op_paced_done;
	op->rdma_cqe.done = lite_op_rdma_done;
	op->unpaced_cqe.done = lite_op_unpaced_done;
	spin_lock_init(&op->lock);
	init_waitqueue_head(&op->progress);
	return op;
}

int lite_op_wait_below(struct lite_op *op, unsigned int outstanding, unsigned long long timeout_ns)
{
	long left = lite_timeout_jiffies(timeout_ns);

	spin_lock_irq(&op->lock);
	left = wait_event_lock_irq_timeout(op->progress, op->pending <= outstanding, op->lock, left);
	spin_unlock_irq(&op->lock);
	return left ? 0 : -ETIMEDOUT;
}

int lite_op_wait_timeout(struct lite_op *op, unsigned long long timeout_ns)
{
	long left = lite_timeout_jiffies(timeout_ns);
	int status = -ETIMEDOUT;

	spin_lock_irq(&op->lock);
	op->slept |= op->pending != 0;
	left = wait_event_lock_irq_timeout(op->progress, op->pending == 0, op->lock, left);
	if (left) {
		status = op->status;
		op->status = 0;
	}
	spin_unlock_irq(&op->lock);
	return status;
}

int lite_op_wait(struct lite_op *op)
{
	int status;

	spin_lock_irq(&op->lock);
	op->slept |= op->pending != 0;
	wait_event_lock_irq(op->progress, op->pending == 0, op->lock);
	status = op->status;
	op->status = 0;
	spin_unlock_irq(&op->lock);
	return status;
}

int lite_op_wait_polling(struct lite_op *op, struct lite_dev *dev, unsigned long long budget_ns,
			 unsigned long long timeout_ns)
{
	struct ib_wc wc[LITE_POLL_BATCH];
	u64 start = ktime_get_ns(), deadline = start + min(budget_ns, timeout_ns), spent;
	int found;

	/* While this polls, the CQ's event does not wake its work item (send_cq.c). */
	lite_send_cq_poll_begin(dev);
	/* Unlocked: a hint; lite_op_wait() looks again under the lock. */
	while (READ_ONCE(op->pending) && ktime_get_ns() < deadline) {
		/* The work item may poll at the same time: each completion is returned once. */
		found = lite_send_cq_poll(dev, wc, LITE_POLL_BATCH);
		/*
		 * No cpu_relax(): each turn is a call into the provider rather than a
		 * spin on one word, and PAUSE costs an exit to the hypervisor or
		 * emulator in a guest (on the emulated cluster, polling with it was
		 * slower than sleeping).
		 */
		if (found <= 0)
			cond_resched();
	}
	lite_send_cq_poll_end(dev);
	spent = ktime_get_ns() - start;
	return lite_op_wait_timeout(op, timeout_ns > spent ? timeout_ns - spent : 0);
}

unsigned long long lite_op_done_ns(const struct lite_op *op)
{
	return READ_ONCE(op->done_ns);
}

void lite_op_stamps(const struct lite_op *op, struct lite_op_stamps *stamps)
{
	stamps->post_ns = op->post_ns;
	stamps->posted_ns = op->posted_ns;
	stamps->done_ns = READ_ONCE(op->done_ns);
	stamps->slept = READ_ONCE(op->slept);
}

unsigned long long lite_op_idle_ns(const struct lite_op *op)
{
	return jiffies_to_nsecs(jiffies - READ_ONCE(op->progressed));
}

unsigned int lite_op_pending(const struct lite_op *op)
{
	return READ_ONCE(op->pending);
}

void lite_op_free(struct lite_op *op)
{
	kfree(op);
}

unsigned long long lite_dev_delivered(const struct lite_dev *dev)
{
	return atomic64_read(&dev->delivered);
}

/*
 * An RDMA READ or WRITE of `bytes` through `dev` is about to be posted for `op`:
 * counted as lite_op_count() does, and its bytes queued for its completion (and
 * among the device's unpaced bulk bytes if `unpaced`).
 */
static int lite_op_count_rdma(struct lite_op *op, struct lite_dev *dev, u32 bytes, bool unpaced)
{
	unsigned long flags;
	int err = 0;

	spin_lock_irqsave(&op->lock, flags);
	if (op->rdma_posted - op->rdma_done >= LITE_OP_MAX_RDMA) {
		err = -ENOSPC;
	} else {
		op->rdma_bytes[op->rdma_posted++ % LITE_OP_MAX_RDMA] = bytes;
		op->rdma_dev = dev;
		op->pending++;
		WRITE_ONCE(op->progressed, jiffies);
		if (unpaced) {
			atomic64_set(&dev->unpaced_moved_ns, ktime_get_ns());
			atomic64_add(bytes, &dev->unpaced_bytes);
		}
	}
	spin_unlock_irqrestore(&op->lock, flags);
	return err;
}

/* The RDMA READ or WRITE last counted failed to post: no completion will come. */
static void lite_op_uncount_rdma(struct lite_op *op, bool unpaced)
{
	struct lite_dev *dev = op->rdma_dev;
	unsigned long flags;
	u32 bytes;

	spin_lock_irqsave(&op->lock, flags);
	bytes = op->rdma_bytes[--op->rdma_posted % LITE_OP_MAX_RDMA];
	if (unpaced && atomic64_sub_return(bytes, &dev->unpaced_bytes) <= 0)
		wake_up(&dev->paced_room);
	op->pending--;
	wake_up(&op->progress);
	spin_unlock_irqrestore(&op->lock, flags);
}

int lite_qp_post_rdma(struct lite_qp *qp, struct lite_op *op, int write,
		      const struct lite_sge *sge, unsigned int nsge,
		      unsigned long long remote_addr, unsigned int rkey, int pacing)
{
	bool paced = pacing == LITE_PACING_PACED, unpaced = pacing == LITE_PACING_UNPACED;
	struct ib_sge sg[LITE_MAX_SGE];
	struct ib_rdma_wr wr = {
		.wr = {
			.wr_cqe = paced ? &op->paced_cqe :
				  unpaced ? &op->unpaced_cqe : &op->rdma_cqe,
			.opcode = write ? IB_WR_RDMA_WRITE : IB_WR_RDMA_READ,
			.send_flags = IB_SEND_SIGNALED,
			.sg_list = sg,
			.num_sge = nsge,
		},
		.remote_addr = remote_addr,
		.rkey = rkey,
	};
	unsigned int i;
	u32 bytes = 0;
	int err;

	if (nsge == 0 || nsge > LITE_MAX_SGE) {
		err = -EINVAL;
		goto unposted;
	}
	for (i = 0; i < nsge; i++) {
		sg[i].addr = sge[i].addr;
		sg[i].length = sge[i].len;
		sg[i].lkey = qp->dev->global_mr->lkey;
		bytes += sge[i].len;
	}
	err = lite_op_count_rdma(op, qp->dev, bytes, unpaced);
	if (err)
		goto unposted;
	op->post_ns = ktime_get_ns();
	err = ib_post_send(qp->qp, &wr.wr, NULL);
	if (!err) {
		op->posted_ns = ktime_get_ns();
		return 0;
	}
	lite_op_uncount_rdma(op, unpaced);
unposted:
	if (paced)
		lite_paced_leave(qp->dev);
	return err;
}

int lite_qp_post_atomic(struct lite_qp *qp, struct lite_op *op, int compare_swap,
			unsigned long long result_dma, unsigned long long remote_addr,
			unsigned int rkey, unsigned long long compare_add,
			unsigned long long swap)
{
	struct ib_sge sge = {
		.addr = result_dma,
		.length = sizeof(u64),
		.lkey = qp->dev->global_mr->lkey,
	};
	struct ib_atomic_wr wr = {
		.wr = {
			.wr_cqe = &op->cqe,
			.opcode = compare_swap ? IB_WR_ATOMIC_CMP_AND_SWP : IB_WR_ATOMIC_FETCH_AND_ADD,
			.send_flags = IB_SEND_SIGNALED,
			.sg_list = &sge,
			.num_sge = 1,
		},
		.remote_addr = remote_addr,
		.compare_add = compare_add,
		.swap = swap,
		.rkey = rkey,
	};
	int err;

	lite_op_count(op, 1);
	err = ib_post_send(qp->qp, &wr.wr, NULL);
	if (err)
		lite_op_count(op, -1);
	return err;
}
