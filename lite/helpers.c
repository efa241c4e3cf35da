// SPDX-License-Identifier: GPL-2.0
/*
 * Thin C glue for the LITE-RS module (see helpers.h): the module parameter, the
 * calling task's identity, the ib_client that hands devices to Rust, and the
 * /dev/lite misc device. The verbs objects are in verbs.c. No policy lives here.
 */
#include <linux/capability.h>
#include <linux/cgroup.h>
#include <linux/cred.h>
#include <linux/fs.h>
#include <linux/hrtimer.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/workqueue.h>
#include <rdma/ib_verbs.h>

#include "helpers.h"
#include "rust_callbacks.h"
#include "verbs/verbs.h"

static unsigned int qps_per_peer = 4;
module_param(qps_per_peer, uint, 0444);
MODULE_PARM_DESC(qps_per_peer, "RC QPs to each peer (1-8, default 4)");

static char *remote_access = "chunks";
module_param(remote_access, charp, 0444);
MODULE_PARM_DESC(remote_access,
		 "what a peer's rkeys reach: chunks (an MR per LMR chunk, mailbox and ring, revoked at free; default) or global (LITE's one MR over all memory)");

static char *messages = "auto";
module_param(messages, charp, 0444);
MODULE_PARM_DESC(messages,
		 "how kernel messages and RPC signal their receiver: auto (RDMA WRITE with immediate where the device has it, else WRITE + SEND; default), imm, or send");

static char *atomics = "auto";
module_param(atomics, charp, 0444);
MODULE_PARM_DESC(atomics,
		 "who executes LT atomics, locks and barriers: auto (the holder's RNIC where it has atomics, else the holder's kernel; default), nic, or holder");

/* Sized for LITE_MAX_NODES peers x LITE_MAX_QPS_PER_PEER QPs x queue depth (clamped by the device). */
#define LITE_CQ_ENTRIES 32768

/* The Rust side's context, handed back to every callback (verbs.c's too). */
void *lite_ctx;
static struct workqueue_struct *lite_wq;

unsigned int lite_param_qps_per_peer(void)
{
	return clamp(qps_per_peer, 1U, (unsigned int)LITE_MAX_QPS_PER_PEER);
}

int lite_param_remote_chunks(void)
{
	return strcmp(remote_access, "global") != 0;
}

static int lite_param_path(const char *value, const char *native, const char *emulated)
{
	if (!strcmp(value, "auto"))
		return LITE_PATH_AUTO;
	if (!strcmp(value, native))
		return LITE_PATH_NATIVE;
	if (!strcmp(value, emulated))
		return LITE_PATH_EMULATED;
	return -EINVAL;
}

int lite_param_messages(void)
{
	return lite_param_path(messages, "imm", "send");
}

int lite_param_atomics(void)
{
	return lite_param_path(atomics, "nic", "holder");
}

int lite_capable_net_admin(void)
{
	return capable(CAP_NET_ADMIN);
}

int lite_current_lineage(unsigned int *tgids, int max, unsigned int *uid, unsigned long long *cgroup)
{
	struct task_struct *task;
	int n = 0;

	*uid = from_kuid_munged(&init_user_ns, current_uid());
	rcu_read_lock();
#ifdef CONFIG_CGROUPS
	*cgroup = cgroup_id(task_dfl_cgroup(current));
#else
	*cgroup = 0;
#endif
	for (task = current; n < max; task = rcu_dereference(task->real_parent)) {
		tgids[n++] = task_tgid_nr(task);
		/* init, or the idle task that is kthreadd's parent, ends the walk. */
		if (task_tgid_nr(task) <= 1)
			break;
	}
	rcu_read_unlock();
	return n;
}

int lite_sleep_ns(unsigned long long ns)
{
	ktime_t expires = ns_to_ktime(ns);

	set_current_state(TASK_KILLABLE);
	/* A little slack lets the timer coalesce; pacing needs no better. */
	schedule_hrtimeout_range(&expires, min_t(u64, ns / 8, 50 * NSEC_PER_USEC), HRTIMER_MODE_REL);
	return fatal_signal_pending(current) ? -EINTR : 0;
}

int lite_fatal_signal_pending(void)
{
	return fatal_signal_pending(current);
}

unsigned long long lite_total_ram(void)
{
	return (unsigned long long)totalram_pages() << PAGE_SHIFT;
}

unsigned int lite_online_cpus(void)
{
	return num_online_cpus();
}

void *lite_workqueue(void)
{
	return lite_wq;
}

void *lite_shared_page_alloc(void)
{
	return (void *)get_zeroed_page(GFP_KERNEL);
}

void lite_shared_page_free(void *page)
{
	/* Drops our reference; a process that still maps the page keeps it alive. */
	free_page((unsigned long)page);
}

/* ---- ib_client ---- */

static struct ib_client lite_client;

static void lite_dev_free(struct lite_dev *dev)
{
	lite_send_cq_destroy(dev);
	if (dev->recv_cq)
		ib_free_cq(dev->recv_cq);
	/* Mirrors ib_dealloc_pd_user(): the DMA MR is released through the device op. */
	if (dev->global_mr)
		WARN_ON(dev->ibdev->ops.dereg_mr(dev->global_mr, NULL));
	if (dev->pd)
		ib_dealloc_pd(dev->pd);
	kfree(dev);
}

/*
 * The one global MR, whose lkey every local SGE uses. With remote_access=global it
 * is also LITE's global rkey: ib_alloc_pd(IB_PD_UNSAFE_GLOBAL_RKEY) would give one
 * without remote atomic access, so build it the way __ib_alloc_pd() does, atomics
 * included (and say so, as the core does). With chunks, peers get no access here.
 */
static int lite_dev_alloc_global_mr(struct lite_dev *dev)
{
	int remote = IB_ACCESS_REMOTE_READ | IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_ATOMIC;
	struct ib_mr *mr = dev->ibdev->ops.get_dma_mr(dev->pd,
		IB_ACCESS_LOCAL_WRITE | (dev->remote_chunks ? 0 : remote));

	if (IS_ERR(mr))
		return PTR_ERR(mr);
	mr->device = dev->ibdev;
	mr->pd = dev->pd;
	mr->type = IB_MR_TYPE_DMA;
	mr->uobject = NULL;
	mr->need_inval = false;
	dev->global_mr = mr;
	if (!dev->remote_chunks)
		pr_warn("lite: %s: enabling unsafe global rkey (remote_access=global)\n",
			dev_name(&dev->ibdev->dev));
	return 0;
}

static int lite_add_one(struct ib_device *ibdev)
{
	u32 port = rdma_start_port(ibdev);
	int cqe = min(ibdev->attrs.max_cqe, LITE_CQ_ENTRIES);
	struct lite_dev *dev;
	int err;

	/* Which transports it can serve is the Rust side's choice (net/network.rs). */
	if (!ibdev->ops.get_dma_mr)
		return -EOPNOTSUPP;
	dev = kzalloc(sizeof(*dev), GFP_KERNEL);
	if (!dev)
		return -ENOMEM;
	dev->ibdev = ibdev;
	dev->port = port;
	dev->remote_chunks = lite_param_remote_chunks();
	mutex_init(&dev->reg_lock);
	init_waitqueue_head(&dev->paced_room);
	spin_lock_init(&dev->paced_lock);
	dev->pd = ib_alloc_pd(ibdev, 0);
	if (IS_ERR(dev->pd)) {
		err = PTR_ERR(dev->pd);
		dev->pd = NULL;
		goto fail;
	}
	err = lite_dev_alloc_global_mr(dev);
	if (err)
		goto fail;
	err = lite_send_cq_create(dev, cqe);
	if (err)
		goto fail;
	/* Workqueue polling: completions are reaped in batches and the CQ re-armed, no spinning thread. */
	dev->recv_cq = ib_alloc_cq(ibdev, dev, cqe, ibdev->num_comp_vectors > 1 ? 1 : 0,
				   IB_POLL_WORKQUEUE);
	if (IS_ERR(dev->recv_cq)) {
		err = PTR_ERR(dev->recv_cq);
		dev->recv_cq = NULL;
		goto fail;
	}
	dev->rust = lite_rust_dev_added(lite_ctx, dev);
	if (!dev->rust) {
		err = -ENOMEM;
		goto fail;
	}
	ib_set_client_data(ibdev, &lite_client, dev);
	return 0;
fail:
	lite_dev_free(dev);
	return err;
}

static void lite_remove_one(struct ib_device *ibdev, void *client_data)
{
	struct lite_dev *dev = client_data;

	lite_rust_dev_removing(lite_ctx, dev->rust);
	/* Deferred requests may still use the device's memory and QPs. */
	flush_workqueue(lite_wq);
	lite_mr_dev_cleanup(dev);
	lite_send_cq_destroy(dev);
	ib_free_cq(dev->recv_cq);
	dev->recv_cq = NULL;
	lite_rust_dev_release(lite_ctx, dev->rust);
	lite_dev_free(dev);
}

static struct ib_client lite_client = {
	.name = "lite",
	.add = lite_add_one,
	.remove = lite_remove_one,
};

/* ---- /dev/lite ---- */

static int lite_open(struct inode *inode, struct file *file)
{
	void *priv = NULL;
	int err = lite_rust_open(lite_ctx, &priv);

	if (err)
		return err;
	file->private_data = priv;
	return 0;
}

static int lite_release(struct inode *inode, struct file *file)
{
	lite_rust_release(lite_ctx, file->private_data);
	return 0;
}

static long lite_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	return lite_rust_ioctl(lite_ctx, file->private_data, cmd, arg);
}

static int lite_mmap(struct file *file, struct vm_area_struct *vma)
{
	void *page = lite_rust_shared_page(file->private_data);

	if (vma->vm_pgoff != 0 || vma->vm_end - vma->vm_start != PAGE_SIZE)
		return -EINVAL;
	if (vma->vm_flags & VM_EXEC)
		return -EPERM;
	vm_flags_mod(vma, VM_DONTEXPAND | VM_DONTDUMP, VM_MAYEXEC);
	return vm_insert_page(vma, vma->vm_start, virt_to_page(page));
}

static const struct file_operations lite_fops = {
	.owner = THIS_MODULE,
	.open = lite_open,
	.release = lite_release,
	.unlocked_ioctl = lite_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = lite_mmap,
	.llseek = noop_llseek,
};

static struct miscdevice lite_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "lite",
	.fops = &lite_fops,
	.mode = 0666,
};

int lite_glue_init(void *rust_ctx)
{
	int err;

	if (strcmp(remote_access, "chunks") && strcmp(remote_access, "global")) {
		pr_err("lite: remote_access=%s: it is chunks or global\n", remote_access);
		return -EINVAL;
	}
	lite_ctx = rust_ctx;
	lite_wq = alloc_workqueue("lite", WQ_UNBOUND | WQ_MEM_RECLAIM, 0);
	if (!lite_wq)
		return -ENOMEM;
	err = lite_send_cq_init();
	if (err)
		goto fail_wq;
	err = ib_register_client(&lite_client);
	if (err)
		goto fail_cq_wq;
	err = misc_register(&lite_misc);
	if (err)
		goto fail_client;
	return 0;
fail_client:
	ib_unregister_client(&lite_client);
fail_cq_wq:
	lite_send_cq_exit();
fail_wq:
	destroy_workqueue(lite_wq);
	return err;
}

void lite_glue_exit(void)
{
	misc_deregister(&lite_misc);
	ib_unregister_client(&lite_client);
	lite_cm_exit();
	lite_send_cq_exit();
	destroy_workqueue(lite_wq);
}
