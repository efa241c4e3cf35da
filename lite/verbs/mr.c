// SPDX-License-Identifier: GPL-2.0
/*
 * Memory regions that peers reach (remote_access=chunks, see helpers.h): every
 * range the module exposes gets its own fast-registered MR, whose rkey reaches
 * only that range, and deregistering it is what revokes the range at the NIC.
 * A registration is a work request, which needs a QP in RTS: each device has one
 * connected to itself (iWARP: to a partner QP, through the RDMA CM) that only ever
 * carries them. No policy lives here.
 */
#include <linux/log2.h>
#include <linux/mutex.h>
#include <linux/random.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <rdma/ib_verbs.h>

#include "helpers.h"
#include "verbs.h"

/*
 * Connects the registration QP to itself by hand, or through the RDMA CM to a
 * partner QP where the device connects only that way (iWARP).
 */
static int lite_reg_qp_connect(struct lite_dev *dev, struct lite_qp *qp)
{
	struct ib_port_attr port;
	unsigned char gid[16];
	int sgid_index, err;
	u32 psn;

	if (rdma_protocol_iwarp(dev->ibdev, dev->port)) {
		dev->reg_partner = lite_qp_create(dev, NULL, 0, 1, &err);
		return dev->reg_partner ? lite_cm_connect_pair(qp, dev->reg_partner) : err;
	}
	sgid_index = lite_dev_ip_gid(dev, gid);
	if (sgid_index < 0)
		return sgid_index;
	err = ib_query_port(dev->ibdev, dev->port, &port);
	if (err)
		return err;
	psn = get_random_u32() & 0xffffff;
	return lite_qp_connect(qp, gid, sgid_index, lite_qp_num(qp), psn, psn, port.active_mtu);
}

/* The device's registration QP, made on first use (the port's address must exist by then). */
static struct lite_qp *lite_reg_qp(struct lite_dev *dev, int *err)
{
	struct lite_qp *qp;

	lockdep_assert_held(&dev->reg_lock);
	if (dev->reg_qp)
		return dev->reg_qp;
	qp = lite_qp_create(dev, NULL, 0, 1, err);
	if (!qp)
		return NULL;
	*err = lite_reg_qp_connect(dev, qp);
	if (*err) {
		lite_qp_destroy(qp);
		if (dev->reg_partner)
			lite_qp_destroy(dev->reg_partner);
		dev->reg_partner = NULL;
		return NULL;
	}
	dev->reg_qp = qp;
	return qp;
}

void lite_mr_dev_cleanup(struct lite_dev *dev)
{
	if (dev->reg_qp)
		lite_qp_destroy(dev->reg_qp);
	dev->reg_qp = NULL;
	if (dev->reg_partner)
		lite_qp_destroy(dev->reg_partner);
	dev->reg_partner = NULL;
}

int lite_dev_remote_chunks(const struct lite_dev *dev)
{
	return dev->remote_chunks;
}

/*
 * The page size that maps [addr, addr + len) with a single page entry: the
 * smallest power of two of at least PAGE_SIZE whose aligned block holds it.
 */
static unsigned int lite_one_page(u64 addr, u64 len)
{
	u64 size = max_t(u64, roundup_pow_of_two(len), PAGE_SIZE);

	while ((addr & ~(size - 1)) + size < addr + len)
		size <<= 1;
	return size > UINT_MAX ? 0 : size;
}

static int lite_ib_access(int access)
{
	int ib = IB_ACCESS_LOCAL_WRITE;

	if (access & LITE_MR_REMOTE_READ)
		ib |= IB_ACCESS_REMOTE_READ;
	if (access & LITE_MR_REMOTE_WRITE)
		ib |= IB_ACCESS_REMOTE_WRITE;
	if (access & LITE_MR_REMOTE_ATOMIC)
		ib |= IB_ACCESS_REMOTE_ATOMIC;
	return ib;
}

static int lite_mr_map(struct ib_mr *mr, const struct lite_sge *runs, unsigned int nruns,
		       unsigned int page_size)
{
	struct scatterlist *sgl = kmalloc_array(nruns, sizeof(*sgl), GFP_KERNEL);
	unsigned int i;
	int mapped;

	if (!sgl)
		return -ENOMEM;
	sg_init_table(sgl, nruns);
	for (i = 0; i < nruns; i++) {
		sgl[i].length = runs[i].len;
		sg_dma_address(&sgl[i]) = runs[i].addr;
		sg_dma_len(&sgl[i]) = runs[i].len;
	}
	mapped = ib_map_mr_sg(mr, sgl, nruns, NULL, page_size);
	kfree(sgl);
	if (mapped < 0)
		return mapped;
	return mapped == nruns ? 0 : -EINVAL;
}

/* Registration work requests posted at once: well within the QP's send queue. */
#define LITE_REG_BATCH 64

/*
 * A batch of registrations in flight: done once the last one completed. `left`
 * counts them and the poster, so that exactly one of the handlers or the poster
 * takes it to zero and completes: a poster that only looked at it (subtracting
 * nothing) saw a handler's zero, completed itself and returned while that handler
 * had yet to complete `done`, on the poster's stack by then.
 */
struct lite_reg_batch {
	struct ib_cqe cqe;
	struct completion done;
	atomic_t left;
	bool failed;
};

static void lite_reg_batch_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct lite_reg_batch *batch = container_of(wc->wr_cqe, struct lite_reg_batch, cqe);

	if (wc->status != IB_WC_SUCCESS)
		WRITE_ONCE(batch->failed, true);
	if (atomic_dec_and_test(&batch->left))
		complete(&batch->done);
}

/* Makes `wr` register `mr` for `access`, under a fresh key byte: a stale or guessed key misses. */
static void lite_reg_wr(struct ib_reg_wr *wr, struct ib_mr *mr, int access)
{
	ib_update_fast_reg_key(mr, get_random_u8());
	*wr = (struct ib_reg_wr){
		.wr.opcode = IB_WR_REG_MR,
		.wr.send_flags = IB_SEND_SIGNALED,
		.mr = mr,
		.key = mr->rkey,
		.access = lite_ib_access(access),
	};
}

/* Posts the chained `wrs` (`n` of them) on the registration QP and waits for all. */
static int lite_reg_post_batch(struct lite_dev *dev, struct ib_reg_wr *wrs, unsigned int n)
{
	struct lite_reg_batch batch = { .cqe.done = lite_reg_batch_done };
	const struct ib_send_wr *bad = NULL;
	unsigned int i, posted = n;
	struct lite_qp *qp;
	int err;

	for (i = 0; i < n; i++) {
		wrs[i].wr.wr_cqe = &batch.cqe;
		wrs[i].wr.next = i + 1 < n ? &wrs[i + 1].wr : NULL;
	}
	init_completion(&batch.done);
	atomic_set(&batch.left, n + 1);
	mutex_lock(&dev->reg_lock);
	qp = lite_reg_qp(dev, &err);
	if (qp) {
		err = ib_post_send(qp->qp, &wrs[0].wr, &bad);
		/* Those from `bad` on were not posted and will not complete. */
		if (err)
			posted = bad ? container_of(bad, struct ib_reg_wr, wr) - wrs : 0;
	} else {
		posted = 0;
	}
	/* The unposted ones will not complete; nor does the poster count any more. */
	if (atomic_sub_and_test(n - posted + 1, &batch.left))
		complete(&batch.done);
	/* Uninterruptibly: the completions name `batch`, on this stack. */
	wait_for_completion(&batch.done);
	if (qp && !err && READ_ONCE(batch.failed)) {
		err = -EIO;
		/* The QP is in error now: the next registration makes another. */
		lite_mr_dev_cleanup(dev);
	}
	mutex_unlock(&dev->reg_lock);
	return err;
}

struct ib_mr *lite_mr_register(struct lite_dev *dev, const struct lite_sge *runs,
			       unsigned int nruns, int access, unsigned int *rkey, int *err)
{
	struct ib_reg_wr wr;
	unsigned int page_size = PAGE_SIZE, entries = 0, i;
	struct ib_mr *mr;

	if (!nruns || nruns > LITE_MR_MAX_RUNS) {
		*err = -EINVAL;
		return NULL;
	}
	if (nruns == 1) {
		/* One physically contiguous range: one page entry of its size. */
		page_size = lite_one_page(runs[0].addr, runs[0].len);
		entries = 1;
		if (!page_size) {
			*err = -EINVAL;
			return NULL;
		}
	} else {
		for (i = 0; i < nruns; i++)
			entries += DIV_ROUND_UP(offset_in_page(runs[i].addr) + runs[i].len, PAGE_SIZE);
	}
	mr = ib_alloc_mr(dev->pd, IB_MR_TYPE_MEM_REG, entries);
	if (IS_ERR(mr)) {
		*err = PTR_ERR(mr);
		return NULL;
	}
	*err = lite_mr_map(mr, runs, nruns, page_size);
	if (*err)
		goto fail;
	lite_reg_wr(&wr, mr, access);
	*err = lite_reg_post_batch(dev, &wr, 1);
	if (*err)
		goto fail;
	*rkey = mr->rkey;
	return mr;
fail:
	WARN_ON(ib_dereg_mr(mr));
	return NULL;
}

int lite_mr_register_each(struct lite_dev *dev, const struct lite_sge *ranges, unsigned int n,
			  int access, struct ib_mr **mrs, unsigned int *rkeys)
{
	struct ib_reg_wr *wrs;
	unsigned int made, from;
	int err = 0;

	if (!n || n > LITE_MR_MAX_EACH)
		return -EINVAL;
	wrs = kcalloc(min_t(unsigned int, n, LITE_REG_BATCH), sizeof(*wrs), GFP_KERNEL);
	if (!wrs)
		return -ENOMEM;
	for (made = 0; made < n && !err; made++) {
		unsigned int page_size = lite_one_page(ranges[made].addr, ranges[made].len);
		struct ib_reg_wr *wr = &wrs[made % LITE_REG_BATCH];
		struct ib_mr *mr;

		if (!page_size) {
			err = -EINVAL;
			break;
		}
		mr = ib_alloc_mr(dev->pd, IB_MR_TYPE_MEM_REG, 1);
		if (IS_ERR(mr)) {
			err = PTR_ERR(mr);
			break;
		}
		mrs[made] = mr;
		err = lite_mr_map(mr, &ranges[made], 1, page_size);
		if (err) {
			made++;
			break;
		}
		lite_reg_wr(wr, mr, access);
		rkeys[made] = mr->rkey;
		if ((made + 1) % LITE_REG_BATCH == 0 || made + 1 == n) {
			from = made / LITE_REG_BATCH * LITE_REG_BATCH;
			err = lite_reg_post_batch(dev, wrs, made + 1 - from);
		}
	}
	kfree(wrs);
	if (err) {
		/* Registered or not, each MR goes: deregistering revokes what the NIC took. */
		while (made--)
			WARN_ON(ib_dereg_mr(mrs[made]));
	}
	return err;
}

void lite_mr_deregister(struct ib_mr *mr)
{
	/* Synchronous: once it returns, the NIC executes nothing more under the key. */
	WARN_ON(ib_dereg_mr(mr));
}
