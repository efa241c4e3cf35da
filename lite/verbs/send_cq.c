// SPDX-License-Identifier: GPL-2.0
/*
 * A device's send CQ, and who reaps it: a work item woken by the CQ's event,
 * or a waiter that busy-polls for its completion (lite_op_wait_polling()).
 *
 * ib_alloc_cq()'s CQs re-arm after every drain, so each completion woke a
 * kworker even while a waiter was polling for it: a wakeup, two context switches
 * and a re-arm per operation, on a CPU that the emulated NIC needs. Here, while
 * a waiter polls, the event leaves the CQ unarmed instead, and the last poller
 * to leave arms it again (and hands what came meanwhile to the work item).
 *
 * The CQ is armed, or the work item is queued or running (it arms before it
 * ends), or `unarmed` is set while a poller polls, which arms at its end.
 */

#include <linux/atomic.h>
#include <linux/workqueue.h>
#include <rdma/ib_verbs.h>

#include "helpers.h"
#include "verbs.h"

/* Completions taken from the CQ per poll. */
#define LITE_REAP_BATCH 8
/* Completions one run of the work item handles before it yields its CPU. */
#define LITE_REAP_BUDGET 256

/* Bound and high-priority, as ib_alloc_cq()'s IB_POLL_WORKQUEUE CQs are served. */
static struct workqueue_struct *lite_cq_wq;

int lite_send_cq_poll(struct lite_dev *dev, struct ib_wc *wc, int entries)
{
	int found = ib_poll_cq(dev->send_cq, entries, wc);
	int i;

	for (i = 0; i < found; i++)
		if (!WARN_ON_ONCE(!wc[i].wr_cqe))
			wc[i].wr_cqe->done(dev->send_cq, &wc[i]);
	return found;
}

static void lite_send_cq_reap(struct work_struct *work)
{
	struct lite_dev *dev = container_of(work, struct lite_dev, send_cq_work);
	struct ib_wc wc[LITE_REAP_BATCH];
	int budget = LITE_REAP_BUDGET;
	int found;

	do {
		while ((found = lite_send_cq_poll(dev, wc, LITE_REAP_BATCH)) > 0) {
			budget -= found;
			if (budget <= 0) {
				queue_work(lite_cq_wq, work);
				return;
			}
		}
	} while (ib_req_notify_cq(dev->send_cq, IB_CQ_NEXT_COMP | IB_CQ_REPORT_MISSED_EVENTS) > 0);
}

/* Arms the CQ; what completed before that goes to the work item. */
static void lite_send_cq_arm(struct lite_dev *dev)
{
	if (ib_req_notify_cq(dev->send_cq, IB_CQ_NEXT_COMP | IB_CQ_REPORT_MISSED_EVENTS) > 0)
		queue_work(lite_cq_wq, &dev->send_cq_work);
}

/* The CQ's event: the provider disarmed it. Called in atomic context. */
static void lite_send_cq_event(struct ib_cq *cq, void *context)
{
	struct lite_dev *dev = context;

	if (atomic_read(&dev->send_pollers)) {
		/* Ordered before the second look at send_pollers (a full barrier). */
		atomic_xchg(&dev->send_cq_unarmed, 1);
		if (atomic_read(&dev->send_pollers))
			return;
		/* The last poller left meanwhile: unless it took `unarmed`, serve it here. */
		if (!atomic_xchg(&dev->send_cq_unarmed, 0))
			return;
	}
	queue_work(lite_cq_wq, &dev->send_cq_work);
}

int lite_send_cq_create(struct lite_dev *dev, int entries)
{
	struct ib_cq_init_attr attr = { .cqe = entries, .comp_vector = 0 };
	struct ib_cq *cq;

	INIT_WORK(&dev->send_cq_work, lite_send_cq_reap);
	atomic_set(&dev->send_pollers, 0);
	atomic_set(&dev->send_cq_unarmed, 0);
	cq = ib_create_cq(dev->ibdev, lite_send_cq_event, NULL, dev, &attr);
	if (IS_ERR(cq))
		return PTR_ERR(cq);
	dev->send_cq = cq;
	lite_send_cq_arm(dev);
	return 0;
}

/* Once no QP uses the CQ any more. */
void lite_send_cq_destroy(struct lite_dev *dev)
{
	if (!dev->send_cq)
		return;
	cancel_work_sync(&dev->send_cq_work);
	ib_destroy_cq(dev->send_cq);
	dev->send_cq = NULL;
}

void lite_send_cq_poll_begin(struct lite_dev *dev)
{
	atomic_inc(&dev->send_pollers);
}

void lite_send_cq_poll_end(struct lite_dev *dev)
{
	atomic_dec(&dev->send_pollers);
	/* Pairs with the event's barrier: one of the two sees the other's store. */
	smp_mb__after_atomic();
	if (atomic_xchg(&dev->send_cq_unarmed, 0))
		lite_send_cq_arm(dev);
}

int lite_send_cq_init(void)
{
	lite_cq_wq = alloc_workqueue("lite-cq", WQ_PERCPU | WQ_HIGHPRI | WQ_MEM_RECLAIM, 0);
	return lite_cq_wq ? 0 : -ENOMEM;
}

void lite_send_cq_exit(void)
{
	destroy_workqueue(lite_cq_wq);
}
