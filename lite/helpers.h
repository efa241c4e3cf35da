/* SPDX-License-Identifier: GPL-2.0 */
/*
 * C helpers for the LITE-RS module: verbs that are static inline in
 * <rdma/ib_verbs.h>, and the misc-device and ib_client glue that the 6.12
 * Rust API lacks. Plain C types and opaque pointers only: bindgen turns this
 * header into the Rust declarations (helpers_ffi.rs), so Rust and C cannot
 * drift apart. All logic lives in Rust.
 */
#ifndef LITE_HELPERS_H
#define LITE_HELPERS_H

/* Opaque C objects owned through Rust wrappers. */
struct lite_dev;
struct lite_qp;
struct ib_mr;

/* Maximum QPs per peer; the module parameter qps_per_peer is clamped to it. */
#define LITE_MAX_QPS_PER_PEER 8

/* Registers the ib_client and /dev/lite. `rust_ctx` is passed back to every lite_rust_* callback. */
int lite_glue_init(void *rust_ctx);
void lite_glue_exit(void);
unsigned int lite_param_qps_per_peer(void);
/* remote_access=chunks (1: an MR per exposed range) or global (0: LITE's one MR). */
int lite_param_remote_chunks(void);
/* How messages (messages=) and atomics (atomics=) travel: LITE_PATH_AUTO, the
 * NIC's own opcodes (LITE_PATH_NATIVE) or their stand-in (LITE_PATH_EMULATED),
 * -EINVAL for a value the parameter does not know. */
#define LITE_PATH_AUTO 0
#define LITE_PATH_NATIVE 1
#define LITE_PATH_EMULATED 2
int lite_param_messages(void);
int lite_param_atomics(void);
int lite_capable_net_admin(void);

/* Priority classes: the current task's process and ancestors' ids (itself first,
 * at most max; returns how many), its uid and its cgroup v2 id; a sleep on an
 * hrtimer that a fatal signal cuts short (-EINTR). */
int lite_current_lineage(unsigned int *tgids, int max, unsigned int *uid, unsigned long long *cgroup);
int lite_sleep_ns(unsigned long long ns);
int lite_fatal_signal_pending(void);

/* Device: PD, one global DMA MR (local write; remote read/write/atomic only with
 * remote_access=global), CQs. */
const char *lite_dev_name(const struct lite_dev *dev);
unsigned int lite_dev_port(const struct lite_dev *dev);
/* Port state (IB_PORT_*) and active MTU (IB_MTU_*). */
int lite_dev_query_port(struct lite_dev *dev, unsigned int *state, unsigned int *mtu,
			unsigned int *speed, unsigned int *width);
/*
 * Copies the port's IPv4 address as a v4-mapped GID and returns its GID index (the
 * RoCE v2 entry; 0 on iWARP, whose address is its netdev's), or -errno if none yet.
 */
int lite_dev_ip_gid(struct lite_dev *dev, unsigned char gid[16]);

/* RC QP on the device CQs; `rust_peer` and `index` come back in lite_rust_recv/lite_rust_send_error. */
struct lite_qp *lite_qp_create(struct lite_dev *dev, void *rust_peer, unsigned int index,
			       unsigned int recv_depth,
			       int *err);
unsigned int lite_qp_num(const struct lite_qp *qp);
/* INIT -> RTR -> RTS against the remote QP; `sgid_index` is the local RoCE GID index. */
int lite_qp_connect(struct lite_qp *qp, const unsigned char remote_gid[16], int sgid_index,
		    unsigned int remote_qpn, unsigned int remote_psn, unsigned int local_psn,
		    unsigned int mtu);
/*
 * Through the RDMA CM (cm.c), where the device connects no other way (iWARP). The
 * passive side expects the connection of `peer_node`'s incarnation `peer_epoch` to
 * this QP of ours (`node`, `epoch`); the active side starts it towards the peer's
 * address (`remote_gid`, v4-mapped). Either way lite_rust_qp_connected says when
 * the other side's hello came, or that the connection failed or ended; the QP's
 * teardown ends it.
 */
int lite_qp_cm_expect(struct lite_qp *qp, unsigned int peer_node, unsigned long long peer_epoch,
		      unsigned int node, unsigned long long epoch);
int lite_qp_cm_connect(struct lite_qp *qp, const unsigned char remote_gid[16],
		       unsigned int node, unsigned long long epoch, unsigned int peer_node,
		       unsigned long long peer_epoch);
/*
 * Sends this side's hello: the active side's goes when the connection is
 * established (cm.c); the passive side answers once it knows the peer's mailbox.
 */
int lite_qp_cm_hello(struct lite_qp *qp);
/*
 * Ends the QP's RDMA CM connection, if any (the QP goes to error), and waits until
 * no CM event or hello of it runs any more: from then on nothing of cm.c calls
 * lite_rust_qp_connected for it. Also part of lite_qp_destroy.
 */
void lite_qp_cm_end(struct lite_qp *qp);
/* Current QP state (IB_QPS_*) or -errno. */
int lite_qp_state(struct lite_qp *qp);
int lite_qp_to_error(struct lite_qp *qp);
void lite_qp_drain(struct lite_qp *qp);
/* Moves the QP to ERR, waits until every posted WR has completed (no more callbacks), destroys it. */
void lite_qp_destroy(struct lite_qp *qp);
struct lite_op;
/*
 * RDMA write with immediate of `len` bytes at `local_dma` (under the global MR's
 * lkey) to `remote_addr` of the peer (under `rkey`); `imm` in host order.
 * len 0 writes nothing and only delivers the immediate. Counted in `op` when not
 * NULL (see lite_op_wait), otherwise only a failure is reported.
 */
int lite_qp_post_write_imm(struct lite_qp *qp, struct lite_op *op, unsigned long long local_dma,
			   unsigned int len, unsigned long long remote_addr, unsigned int rkey,
			   unsigned int imm);
/*
 * From now on the device's QPs carry what a write-with-immediate carries as an
 * RDMA WRITE followed by a SEND of the 32-bit value (iWARP has no immediate).
 * Before its first QP. Receives take either form on every device.
 */
void lite_dev_use_send_messages(struct lite_dev *dev);

/* Kernel memory the RNIC may read and write: physically contiguous, zeroed, DMA-mapped.
 * NULL when the memory is not there, without a warning for blocks of more than 8 pages
 * (a user may ask for them). `may_fail`: also give up early instead of reclaiming hard
 * (the caller falls back to smaller ones). */
void *lite_dma_buf_alloc(struct lite_dev *dev, unsigned long size, int may_fail,
			 unsigned long long *dma);
void lite_dma_buf_free(struct lite_dev *dev, void *buf, unsigned long size, unsigned long long dma);
/* Ownership hand-over of a DMA buffer range between the CPU and the RNIC. */
void lite_dma_sync_for_cpu(struct lite_dev *dev, unsigned long long dma, unsigned int len);
void lite_dma_sync_for_device(struct lite_dev *dev, unsigned long long dma, unsigned int len);
/* The global MR's remote key, published to peers (remote_access=global). */
unsigned int lite_dev_global_rkey(const struct lite_dev *dev);

/* Whether the device's peers reach only ranges registered with lite_mr_register()
 * (remote_access=chunks): its global MR then has local access only. */
int lite_dev_remote_chunks(const struct lite_dev *dev);

/* What a peer may do through an MR of lite_mr_register(). */
#define LITE_MR_REMOTE_READ 1
#define LITE_MR_REMOTE_WRITE 2
#define LITE_MR_REMOTE_ATOMIC 4
/* Most DMA runs one MR covers (an RPC reply buffer of 4 MiB, one run per page). */
#define LITE_MR_MAX_RUNS 1025

struct lite_sge;
/*
 * Registers an MR over the DMA `runs` (iova: the first run's address; the runs
 * follow each other in it) with a fresh key byte, and waits until the NIC took it.
 * One run gets one page entry of its size; several must be page-aligned inside.
 * NULL and *err on failure; else the MR, its rkey in *rkey.
 */
struct ib_mr *lite_mr_register(struct lite_dev *dev, const struct lite_sge *runs,
			       unsigned int nruns, int access, unsigned int *rkey, int *err);
/* Most ranges one lite_mr_register_each() takes (a 4 GiB share of 4 MiB chunks). */
#define LITE_MR_MAX_EACH 1024
/*
 * Registers each of the `n` physically contiguous `ranges` as an MR of its own,
 * as lite_mr_register() does one, but posts the work requests together and waits
 * for them at once. 0 and the MRs in `mrs`, their rkeys in `rkeys`; or an errno,
 * and none is registered.
 */
int lite_mr_register_each(struct lite_dev *dev, const struct lite_sge *ranges, unsigned int n,
			  int access, struct ib_mr **mrs, unsigned int *rkeys);
/* Deregisters the MR: when it returns, the NIC no longer reaches its memory. */
void lite_mr_deregister(struct ib_mr *mr);

/* SGEs per RDMA read/write work request the module uses (capped by the device). */
#define LITE_MAX_SGE 16

/* What the device can do, read once at attach (ib_device_attr and the port's protocol). */
struct lite_dev_caps {
	unsigned int transport;		/* LITE_TRANSPORT_* of the ABI */
	unsigned int write_imm;		/* RDMA WRITE with immediate: not on iWARP */
	unsigned int cm_connect;	/* QPs reach RTS only through the iWARP CM */
	unsigned int max_send_sge;
	unsigned int max_sge_rd;
	unsigned int atomic_cap;	/* enum ib_atomic_cap */
	unsigned int max_qp_rd_atom;
};
void lite_dev_caps(const struct lite_dev *dev, struct lite_dev_caps *caps);

/* One scatter/gather element (local: under the global MR's lkey; a run of
 * lite_mr_register()). */
struct lite_sge {
	unsigned long long addr;
	unsigned int len;
	unsigned int reserved;
};

/*
 * A one-sided operation's completion: every work request posted for it is signaled
 * and counted; lite_op_wait() returns once all of them completed.
 */
struct lite_op;
struct lite_op *lite_op_new(void);
/* Waits for every posted WR (uninterruptibly: they may still DMA into memory the
 * caller frees next). Returns 0 or the first failed WR's IB_WC_* status, which it clears. */
int lite_op_wait(struct lite_op *op);
/* As lite_op_wait(), for at most `timeout_ns`: -ETIMEDOUT if WRs are still posted then. */
int lite_op_wait_timeout(struct lite_op *op, unsigned long long timeout_ns);
/* As lite_op_wait_timeout(), after polling `dev`'s send CQ for up to `budget_ns` and
 * running the completions found, whichever ops they belong to. The caller must hold no
 * lock that a completion handler takes (lite_rust_send_error's). */
int lite_op_wait_polling(struct lite_op *op, struct lite_dev *dev, unsigned long long budget_ns,
			 unsigned long long timeout_ns);
/* Waits until at most `outstanding` of the posted WRs are still in flight, for at most
 * `timeout_ns`: 0, or -ETIMEDOUT if more still are. */
int lite_op_wait_below(struct lite_op *op, unsigned int outstanding, unsigned long long timeout_ns);
/* When the op's last completion ran (ktime ns; 0: none yet). */
unsigned long long lite_op_done_ns(const struct lite_op *op);
/* Where an op's time went (ktime ns): its last RDMA READ or WRITE handed to the
 * provider (`post_ns`) and back from it (`posted_ns`), its last completion run
 * (`done_ns`), and whether a waiter slept on it. For the poster once it is done. */
struct lite_op_stamps {
	unsigned long long post_ns;
	unsigned long long posted_ns;
	unsigned long long done_ns;
	int slept;
};
void lite_op_stamps(const struct lite_op *op, struct lite_op_stamps *stamps);
/* How long ago one of its WRs was last posted or completed (ns, to a jiffy). */
unsigned long long lite_op_idle_ns(const struct lite_op *op);
unsigned int lite_op_pending(const struct lite_op *op);
void lite_op_free(struct lite_op *op);
/*
 * Paced WRs in flight from a device: SW-Pri bounds them per node, whichever
 * transfers they belong to. lite_paced_enter() waits (killable) for at most
 * `timeout_ns` until fewer than `limit` are and no unpaced bulk WR is (unless those
 * stalled: none posted or completed for 500 ms), then takes a place: 0, -ETIMEDOUT
 * or -EINTR. A WR posted LITE_PACING_PACED holds the place until its completion (or
 * failure to post); lite_paced_leave() gives back one never posted.
 */
int lite_paced_enter(struct lite_dev *dev, unsigned int limit, unsigned long long timeout_ns);
void lite_paced_leave(struct lite_dev *dev);
unsigned int lite_paced_inflight(const struct lite_dev *dev);
/* How much longer (ns) unpaced bulk bytes in flight hold `dev`'s paced WRs: 0 when
 * none are in flight, or none moved for 500 ms. */
unsigned long long lite_unpaced_hold(struct lite_dev *dev);
/* A device's places over time, summed since it was added (ns, and WRs). */
struct lite_paced_stat {
	/* Places held: the integral over time of the paced WRs in flight. */
	unsigned long long held_ns;
	/* Tasks' time waiting for a place. */
	unsigned long long wait_ns;
	/* Places given back: paced WRs completed or never posted. */
	unsigned long long wrs;
};
void lite_paced_stat(struct lite_dev *dev, struct lite_paced_stat *stat);
/* Bytes of RDMA READs and WRITEs from `dev` completed without error, summed since it
 * was added: a count taken as completions run, for the link's delivery rate. */
unsigned long long lite_dev_delivered(const struct lite_dev *dev);
/* RDMA READs and WRITEs of one op in flight at most (through one QP: they complete in
 * the order posted, which is how each completion knows its bytes). */
#define LITE_OP_MAX_RDMA 16
/* How an RDMA READ or WRITE stands to SW-Pri's pacing: the latency class's, or its
 * probe, never waited for; bulk not paced, while any of which is in flight no paced WR
 * takes a place; paced, holding a place of its QP's device (lite_paced_enter()). */
#define LITE_PACING_EXEMPT 0
#define LITE_PACING_UNPACED 1
#define LITE_PACING_PACED 2
/* RDMA WRITE (`write`) from or READ into the local SGEs, at `remote_addr` of the peer.
 * -ENOSPC when LITE_OP_MAX_RDMA of the op's are in flight. */
int lite_qp_post_rdma(struct lite_qp *qp, struct lite_op *op, int write,
		      const struct lite_sge *sge, unsigned int nsge,
		      unsigned long long remote_addr, unsigned int rkey, int pacing);
/* 8-byte atomic at `remote_addr`: compare-and-swap (`compare_swap`) of `compare_add`
 * by `swap`, else fetch-and-add of `compare_add`; the old value lands at `result_dma`. */
int lite_qp_post_atomic(struct lite_qp *qp, struct lite_op *op, int compare_swap,
			unsigned long long result_dma, unsigned long long remote_addr,
			unsigned int rkey, unsigned long long compare_add,
			unsigned long long swap);

/* Pins `nr_pages` user pages from `start` (writable when the RNIC writes them;
 * `longterm` for pins that outlive the call). Returns the number pinned (may be
 * fewer) or -errno. */
long lite_pin_user_pages(unsigned long start, unsigned int nr_pages, int writable, int longterm,
			 void **pages);
/* Kernel address of a pinned page. */
void *lite_page_address(void *page);
void lite_unpin_user_pages(void **pages, unsigned int nr_pages, int dirty);
/* DMA-maps one whole page in direction `dir` (enum dma_data_direction: 0 both ways,
 * 1 to the device, 2 from it); returns 0 or -errno. */
int lite_dma_map_page(struct lite_dev *dev, void *page, int dir, unsigned long long *dma);
void lite_dma_unmap_page(struct lite_dev *dev, unsigned long long dma, int dir);

/* Total RAM of this node in bytes (bounds what peers may make us allocate). */
unsigned long long lite_total_ram(void);
/* CPUs online now (how many may zero a large allocation's chunks at once). */
unsigned int lite_online_cpus(void);
/* Workqueue for requests that sleep (allocation, copies); drained on unload. */
void *lite_workqueue(void);

/* Per-open shared page: a zeroed kernel page, mapped into the process by mmap. */
void *lite_shared_page_alloc(void);
void lite_shared_page_free(void *page);

#endif
