// SPDX-License-Identifier: GPL-2.0
/*
 * Memory the RDMA device reaches (see helpers.h): the module's DMA buffers
 * (allocated, mapped, synced), and user pages pinned and DMA-mapped one by one for
 * LMRs. No policy lives here.
 */
#include <linux/mm.h>
#include <rdma/ib_verbs.h>

#include "helpers.h"
#include "verbs.h"

void *lite_dma_buf_alloc(struct lite_dev *dev, unsigned long size, int may_fail,
			 unsigned long long *dma)
{
	gfp_t gfp = GFP_KERNEL | __GFP_ZERO | (may_fail ? __GFP_NOWARN | __GFP_NORETRY : 0);
	void *buf;
	u64 addr;

	/*
	 * A user's call may ask for megabytes in one block (an RPC of 4 MiB): on a
	 * fragmented node that fails, which the caller reports as ENOMEM; it is not a
	 * kernel problem worth a warning with a stack trace.
	 */
	if (size > PAGE_SIZE << PAGE_ALLOC_COSTLY_ORDER)
		gfp |= __GFP_NOWARN;
	buf = alloc_pages_exact(size, gfp);
	if (!buf)
		return NULL;
	addr = ib_dma_map_single(dev->ibdev, buf, size, DMA_BIDIRECTIONAL);
	if (ib_dma_mapping_error(dev->ibdev, addr)) {
		free_pages_exact(buf, size);
		return NULL;
	}
	*dma = addr;
	return buf;
}

void lite_dma_buf_free(struct lite_dev *dev, void *buf, unsigned long size, unsigned long long dma)
{
	ib_dma_unmap_single(dev->ibdev, dma, size, DMA_BIDIRECTIONAL);
	free_pages_exact(buf, size);
}

void lite_dma_sync_for_cpu(struct lite_dev *dev, unsigned long long dma, unsigned int len)
{
	ib_dma_sync_single_for_cpu(dev->ibdev, dma, len, DMA_BIDIRECTIONAL);
}

void lite_dma_sync_for_device(struct lite_dev *dev, unsigned long long dma, unsigned int len)
{
	ib_dma_sync_single_for_device(dev->ibdev, dma, len, DMA_BIDIRECTIONAL);
}

long lite_pin_user_pages(unsigned long start, unsigned int nr_pages, int writable, int longterm,
			 void **pages)
{
	/* The fast path walks on past `start` when asked for no pages. */
	if (!nr_pages)
		return 0;
	return pin_user_pages_fast(start, nr_pages,
				   (writable ? FOLL_WRITE : 0) | (longterm ? FOLL_LONGTERM : 0),
				   (struct page **)pages);
}

void *lite_page_address(void *page)
{
	return page_address((struct page *)page);
}

void lite_unpin_user_pages(void **pages, unsigned int nr_pages, int dirty)
{
	unpin_user_pages_dirty_lock((struct page **)pages, nr_pages, dirty);
}

int lite_dma_map_page(struct lite_dev *dev, void *page, int dir, unsigned long long *dma)
{
	u64 addr;

	if (!valid_dma_direction(dir))
		return -EINVAL;
	addr = ib_dma_map_page(dev->ibdev, page, 0, PAGE_SIZE, dir);

	if (ib_dma_mapping_error(dev->ibdev, addr))
		return -ENOMEM;
	*dma = addr;
	return 0;
}

void lite_dma_unmap_page(struct lite_dev *dev, unsigned long long dma, int dir)
{
	ib_dma_unmap_page(dev->ibdev, dma, PAGE_SIZE, dir);
}
