package rdma

import (
	"fmt"
	"math/bits"
	"unsafe"
)

// Buffer pool geometry.
const (
	poolPage     = 4096 // smallest block and the alignment of every block (O_DIRECT-safe)
	poolPageBits = 12
)

// bufferPool hands out page-aligned pieces of one arena with a buddy
// allocator: blocks of 2^k pages, split on demand and merged when freed.
// Nothing is allocated after construction. The arena is ordinary Go memory
// (the collector never moves large objects), so a buffer stays valid for as
// long as anybody holds it, even after its queue is gone. It has no lock
// of its own: its queue's mutex guards it (ControllerQueue.mu).
type bufferPool struct {
	arena    []byte
	maxOrder int     // largest block: 2^maxOrder pages
	head     []int32 // per order: first free block (page index) or -1
	next     []int32 // per page: next free block of the same order
	prev     []int32
	order    []int8 // per page: order+1 if a free block starts here, else 0
	inUse    int    // pages handed out
}

// newBufferPool makes a pool of size bytes (rounded up to whole blocks of
// maxBlock bytes) whose largest buffer is maxBlock bytes (a power of two
// multiple of 4 KiB).
func newBufferPool(size, maxBlock int) (*bufferPool, error) {
	if maxBlock < poolPage || maxBlock&(maxBlock-1) != 0 {
		return nil, fmt.Errorf("nvme-rdma: buffer pool: largest buffer %d is not a power of two ≥ %d", maxBlock, poolPage)
	}
	size = (max(size, maxBlock) + maxBlock - 1) / maxBlock * maxBlock
	pages := size / poolPage
	p := &bufferPool{
		maxOrder: bits.TrailingZeros(uint(maxBlock / poolPage)),
		next:     make([]int32, pages),
		prev:     make([]int32, pages),
		order:    make([]int8, pages),
	}
	p.head = make([]int32, p.maxOrder+1)
	for i := range p.head {
		p.head[i] = -1
	}
	raw := make([]byte, size+poolPage)
	off := int(-uintptr(unsafe.Pointer(&raw[0])) & (poolPage - 1))
	p.arena = raw[off : off+size : off+size]
	step := 1 << p.maxOrder
	for pg := pages - step; pg >= 0; pg -= step {
		p.pushFree(int32(pg), p.maxOrder)
	}
	return p, nil
}

func (p *bufferPool) pushFree(pg int32, order int) {
	p.order[pg] = int8(order + 1)
	p.prev[pg] = -1
	p.next[pg] = p.head[order]
	if h := p.head[order]; h >= 0 {
		p.prev[h] = pg
	}
	p.head[order] = pg
}

func (p *bufferPool) removeFree(pg int32, order int) {
	p.order[pg] = 0
	if p.prev[pg] >= 0 {
		p.next[p.prev[pg]] = p.next[pg]
	} else {
		p.head[order] = p.next[pg]
	}
	if p.next[pg] >= 0 {
		p.prev[p.next[pg]] = p.prev[pg]
	}
}

// orderFor is the block order that holds n bytes.
func orderFor(n int) int {
	pages := (n + poolPage - 1) >> poolPageBits
	if pages <= 1 {
		return 0
	}
	return bits.Len(uint(pages - 1))
}

// maxBuffer is the largest buffer the pool can give.
func (p *bufferPool) maxBuffer() int { return poolPage << p.maxOrder }

// get returns a buffer of n bytes (its capacity is the whole block) and its
// byte offset in the arena, or ok=false if no block is free.
func (p *bufferPool) get(n int) (buf []byte, off int, ok bool) {
	o := orderFor(n)
	if o > p.maxOrder {
		return nil, 0, false
	}
	k := o
	for k <= p.maxOrder && p.head[k] < 0 {
		k++
	}
	if k > p.maxOrder {
		return nil, 0, false
	}
	pg := p.head[k]
	p.removeFree(pg, k)
	for k > o { // split, keeping the lower half
		k--
		p.pushFree(pg+int32(1)<<k, k)
	}
	p.inUse += 1 << o
	off = int(pg) << poolPageBits
	return p.arena[off : off+n : off+(poolPage<<o)], off, true
}

// put returns a buffer given by get (its capacity says its block size).
func (p *bufferPool) put(off, capacity int) {
	o := orderFor(capacity)
	pg := int32(off >> poolPageBits)
	p.inUse -= 1 << o
	for o < p.maxOrder {
		buddy := pg ^ int32(1)<<o
		if p.order[buddy] != int8(o+1) {
			break
		}
		p.removeFree(buddy, o)
		pg = min(pg, buddy)
		o++
	}
	p.pushFree(pg, o)
}

// used is the number of bytes handed out.
func (p *bufferPool) used() int {
	return p.inUse << poolPageBits
}
