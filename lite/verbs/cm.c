// SPDX-License-Identifier: GPL-2.0
/*
 * Connections through the RDMA CM, for devices whose QPs reach RTS no other way
 * (iWARP: siw, cxgb4): the QPs stay the module's own (verbs.c), created before any
 * connection, and the CM is handed their numbers (conn_param.qp_num), as iw_cm
 * allows. The node with the lower id connects (active), the other listens on
 * cm_port (passive) and accepts only a connection whose private data names a QP it
 * prepared for exactly that pair of incarnations. On iWARP the passive side must
 * not send first (siw takes data right behind the MPA reply as a protocol error),
 * so the active side's first SEND is a hello; the passive side answers with its
 * own once it also knows the active side's mailbox (net/peer.rs), and each side's
 * QP is up when the other's hello came. No policy lives here: which side is
 * which, and what a failure means, is net/peer.rs's.
 */
#include <linux/in.h>
#include <linux/inet.h>
#include <linux/moduleparam.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <net/ipv6.h>
#include <rdma/ib_cm.h>
#include <rdma/rdma_cm.h>

#include "helpers.h"
#include "rust_callbacks.h"
#include "verbs.h"

/* "LCM1" */
#define LITE_CM_MAGIC 0x4c434d31
/* The hello, each side's first SEND on a QP: kind 15, no message's (net/wire/imm.rs). */
#define LITE_CM_HELLO 0xfc4d0001
/*
 * The active side sends its hello again until the answer comes: siw hands the
 * socket to the QP only after its MPA reply went out, and data that arrived in
 * between waits in the socket until more comes. At most 40 tries, 20 s.
 */
#define LITE_CM_HELLO_EVERY_MS 500
#define LITE_CM_HELLO_TRIES 40
/* A node id no member has: both ends of a device's connection to itself. */
#define LITE_CM_SELF 0xffffffffu
/* Address and route resolution, each. */
#define LITE_CM_RESOLVE_MS 5000
/* Outstanding RDMA READs and atomics each way, as lite_qp_connect() allows. */
#define LITE_CM_RD_ATOMIC 16

/*
 * A real TCP port on iWARP (siw listens on a kernel socket): apart from the
 * manager's (18500) and perftest's (18515).
 */
static ushort cm_port = 18520;
module_param(cm_port, ushort, 0444);
MODULE_PARM_DESC(cm_port, "Port the RDMA CM listens on for LITE-RS connections (iWARP devices)");

/* The listener, made with the first passive QP; under lite_cm_listen_lock. */
static DEFINE_MUTEX(lite_cm_listen_lock);
static struct rdma_cm_id *lite_cm_listener;
/* Passive QPs not yet claimed by a connection, and every QP's cm_id, under lite_cm_lock. */
static DEFINE_SPINLOCK(lite_cm_lock);
static LIST_HEAD(lite_cm_expected);

/* The QP's key, as the connection is still to come. Under lite_cm_lock. */
static void lite_cm_prepare(struct lite_qp *qp, u32 from, u64 from_epoch, u32 to, u64 to_epoch)
{
	struct lite_cm_key *key = &qp->cm_key;

	key->magic = cpu_to_be32(LITE_CM_MAGIC);
	key->from_node = cpu_to_be32(from);
	key->from_epoch = cpu_to_be64(from_epoch);
	key->to_node = cpu_to_be32(to);
	key->to_epoch = cpu_to_be64(to_epoch);
	key->index = cpu_to_be32(qp->index);
	qp->cm_status = -EINPROGRESS;
	WRITE_ONCE(qp->cm_wait_hello, true);
}

/*
 * The peer's hello came (0), or the connection failed or ended (-errno): each
 * said once, and a failure only after a hello, never the other way round.
 */
static void lite_cm_report(struct lite_qp *qp, int status)
{
	bool tell;

	spin_lock_bh(&lite_cm_lock);
	if (status) {
		tell = !qp->cm_reported;
		WRITE_ONCE(qp->cm_reported, true);
		qp->cm_status = status;
	} else {
		tell = qp->cm_status == -EINPROGRESS;
		if (tell)
			qp->cm_status = 0;
	}
	spin_unlock_bh(&lite_cm_lock);
	if (!tell)
		return;
	complete_all(&qp->cm_done);
	if (qp->rust_peer && !READ_ONCE(qp->closing))
		lite_rust_qp_connected(lite_ctx, qp->rust_peer, qp->index, status);
}

int lite_qp_cm_hello(struct lite_qp *qp)
{
	__be32 value = cpu_to_be32(LITE_CM_HELLO);
	struct ib_sge sge = { .addr = (uintptr_t)&value, .length = sizeof(value) };
	struct ib_send_wr wr = {
		.opcode = IB_WR_SEND,
		.send_flags = IB_SEND_SIGNALED | IB_SEND_INLINE,
		.sg_list = &sge,
		.num_sge = 1,
	};

	return lite_qp_post_send(qp, &wr);
}

static void lite_cm_hello_again(struct work_struct *work)
{
	struct lite_qp *qp = container_of(to_delayed_work(work), struct lite_qp, cm_hello_work);

	if (!READ_ONCE(qp->cm_wait_hello) || READ_ONCE(qp->closing))
		return;
	if (++qp->cm_hello_tries >= LITE_CM_HELLO_TRIES) {
		lite_cm_report(qp, -ETIMEDOUT);
		return;
	}
	if (lite_qp_cm_hello(qp))
		lite_cm_report(qp, -ECONNRESET);
	else
		queue_delayed_work(lite_workqueue(), &qp->cm_hello_work,
				   msecs_to_jiffies(LITE_CM_HELLO_EVERY_MS));
}

void lite_cm_init_qp(struct lite_qp *qp)
{
	INIT_LIST_HEAD(&qp->cm_expected);
	init_completion(&qp->cm_done);
	INIT_DELAYED_WORK(&qp->cm_hello_work, lite_cm_hello_again);
}

bool lite_cm_take_hello(struct lite_qp *qp, u32 value)
{
	int err = 0;

	if (value != LITE_CM_HELLO)
		return false;
	WRITE_ONCE(qp->cm_wait_hello, false);
	/* A device's connection to itself (mr.c) answers at once: no mailbox to wait for. */
	if (!qp->cm_active && !qp->rust_peer)
		err = lite_qp_cm_hello(qp);
	lite_cm_report(qp, err);
	return true;
}

static void lite_cm_param(struct lite_qp *qp, struct rdma_conn_param *param)
{
	const struct ib_device_attr *attrs = &qp->dev->ibdev->attrs;

	memset(param, 0, sizeof(*param));
	param->qp_num = qp->qp->qp_num;
	param->responder_resources = min(attrs->max_qp_rd_atom, LITE_CM_RD_ATOMIC);
	param->initiator_depth = min(attrs->max_qp_init_rd_atom, LITE_CM_RD_ATOMIC);
	param->retry_count = 6;
	param->rnr_retry_count = 7;
}

/* A connection request on the listener: accepted onto the QP it names, if prepared. */
static int lite_cm_request(struct rdma_cm_id *id, const struct rdma_cm_event *event)
{
	const struct lite_cm_key *key = event->param.conn.private_data;
	struct rdma_conn_param param;
	struct lite_qp *qp = NULL, *pos;
	int err;

	if (event->param.conn.private_data_len >= sizeof(*key) &&
	    key->magic == cpu_to_be32(LITE_CM_MAGIC)) {
		spin_lock_bh(&lite_cm_lock);
		list_for_each_entry(pos, &lite_cm_expected, cm_expected) {
			if (pos->dev->ibdev == id->device && !memcmp(&pos->cm_key, key, sizeof(*key))) {
				qp = pos;
				list_del_init(&qp->cm_expected);
				qp->cm_id = id;
				break;
			}
		}
		spin_unlock_bh(&lite_cm_lock);
	}
	if (!qp) {
		/* An unprepared, replaced or foreign peer: the CM destroys the id. */
		rdma_reject(id, NULL, 0, IB_CM_REJ_CONSUMER_DEFINED);
		return -ECONNREFUSED;
	}
	/* From here the id is the QP's, destroyed with it (lite_qp_cm_end), never by the CM. */
	id->context = qp;
	lite_cm_param(qp, &param);
	err = rdma_accept(id, &param);
	if (err)
		lite_cm_report(qp, err);
	return 0;
}

static int lite_cm_handler(struct rdma_cm_id *id, struct rdma_cm_event *event)
{
	struct lite_qp *qp = id->context;
	struct rdma_conn_param param;
	int err = 0;

	if (event->event == RDMA_CM_EVENT_CONNECT_REQUEST)
		return lite_cm_request(id, event);
	/* The listener's own events (its device went): nothing of ours to tell. */
	if (!qp)
		return 0;
	switch (event->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (id->device != qp->dev->ibdev)
			err = -ENETUNREACH;
		else
			err = rdma_resolve_route(id, LITE_CM_RESOLVE_MS);
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		lite_cm_param(qp, &param);
		param.private_data = &qp->cm_key;
		param.private_data_len = sizeof(qp->cm_key);
		err = rdma_connect_locked(id, &param);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		/* The passive side sends nothing before the active side's hello came. */
		if (qp->cm_active)
			err = lite_qp_cm_hello(qp);
		if (qp->cm_active && !err)
			queue_delayed_work(lite_workqueue(), &qp->cm_hello_work,
					   msecs_to_jiffies(LITE_CM_HELLO_EVERY_MS));
		break;
	case RDMA_CM_EVENT_REJECTED:
		err = -ECONNREFUSED;
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
		err = event->status ? event->status : -EHOSTUNREACH;
		break;
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		err = -ECONNRESET;
		break;
	default:
		break;
	}
	if (err)
		lite_cm_report(qp, err < 0 ? err : -EIO);
	/* The id is the QP's: destroyed with it (lite_qp_cm_end), never by the CM. */
	return 0;
}

static int lite_cm_listen(void)
{
	struct sockaddr_in any = { .sin_family = AF_INET, .sin_port = htons(cm_port) };
	struct rdma_cm_id *id;
	int err = 0;

	mutex_lock(&lite_cm_listen_lock);
	if (lite_cm_listener)
		goto out;
	id = rdma_create_id(&init_net, lite_cm_handler, NULL, RDMA_PS_TCP, IB_QPT_RC);
	if (IS_ERR(id)) {
		err = PTR_ERR(id);
		goto out;
	}
	err = rdma_bind_addr(id, (struct sockaddr *)&any);
	if (!err)
		err = rdma_listen(id, 64);
	if (err) {
		pr_err("lite: cannot listen for RDMA CM connections on port %u (%d)\n", cm_port, err);
		rdma_destroy_id(id);
		goto out;
	}
	lite_cm_listener = id;
out:
	mutex_unlock(&lite_cm_listen_lock);
	return err;
}

void lite_cm_exit(void)
{
	if (lite_cm_listener)
		rdma_destroy_id(lite_cm_listener);
	lite_cm_listener = NULL;
}

int lite_qp_cm_expect(struct lite_qp *qp, unsigned int peer_node, unsigned long long peer_epoch,
		      unsigned int node, unsigned long long epoch)
{
	int err = lite_cm_listen();

	if (err)
		return err;
	spin_lock_bh(&lite_cm_lock);
	if (!qp->cm_id && list_empty(&qp->cm_expected)) {
		lite_cm_prepare(qp, peer_node, peer_epoch, node, epoch);
		list_add_tail(&qp->cm_expected, &lite_cm_expected);
	} else
		err = -EEXIST;
	spin_unlock_bh(&lite_cm_lock);
	return err;
}

int lite_qp_cm_connect(struct lite_qp *qp, const unsigned char remote_gid[16],
		       unsigned int node, unsigned long long epoch, unsigned int peer_node,
		       unsigned long long peer_epoch)
{
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(cm_port) };
	struct sockaddr_in src = { .sin_family = AF_INET };
	unsigned char local_gid[16];
	struct rdma_cm_id *id;
	int err;

	if (!ipv6_addr_v4mapped((const struct in6_addr *)remote_gid))
		return -EADDRNOTAVAIL;
	err = lite_dev_ip_gid(qp->dev, local_gid);
	if (err < 0)
		return err;
	/* From this device's address, so that the CM picks this device. */
	src.sin_addr.s_addr = ((const struct in6_addr *)local_gid)->s6_addr32[3];
	dst.sin_addr.s_addr = ((const struct in6_addr *)remote_gid)->s6_addr32[3];
	id = rdma_create_id(&init_net, lite_cm_handler, qp, RDMA_PS_TCP, IB_QPT_RC);
	if (IS_ERR(id))
		return PTR_ERR(id);
	spin_lock_bh(&lite_cm_lock);
	if (qp->cm_id || !list_empty(&qp->cm_expected)) {
		err = -EEXIST;
	} else {
		lite_cm_prepare(qp, node, epoch, peer_node, peer_epoch);
		qp->cm_active = true;
		qp->cm_id = id;
	}
	spin_unlock_bh(&lite_cm_lock);
	if (err) {
		rdma_destroy_id(id);
		return err;
	}
	/* Failures from here come as events; the id goes with the QP. */
	err = rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst,
				LITE_CM_RESOLVE_MS);
	if (err)
		lite_cm_report(qp, err);
	return 0;
}

int lite_cm_connect_pair(struct lite_qp *qp, struct lite_qp *partner)
{
	unsigned char gid[16];
	int err = lite_dev_ip_gid(qp->dev, gid);

	if (err < 0)
		return err;
	err = lite_qp_cm_expect(partner, LITE_CM_SELF, 0, LITE_CM_SELF, 0);
	if (!err)
		err = lite_qp_cm_connect(qp, gid, LITE_CM_SELF, 0, LITE_CM_SELF, 0);
	if (err)
		return err;
	if (!wait_for_completion_timeout(&qp->cm_done, msecs_to_jiffies(4 * LITE_CM_RESOLVE_MS)))
		return -ETIMEDOUT;
	return READ_ONCE(qp->cm_status);
}

void lite_qp_cm_end(struct lite_qp *qp)
{
	struct rdma_cm_id *id;

	/*
	 * The module ends the connection: the QP's error that follows (siw raises
	 * one when a READ response can no longer be sent) is nothing to report.
	 */
	WRITE_ONCE(qp->closing, true);
	spin_lock_bh(&lite_cm_lock);
	list_del_init(&qp->cm_expected);
	id = qp->cm_id;
	qp->cm_id = NULL;
	spin_unlock_bh(&lite_cm_lock);
	/* Waits for a handler running on it, which may still use the QP. */
	if (id)
		rdma_destroy_id(id);
	cancel_delayed_work_sync(&qp->cm_hello_work);
}
