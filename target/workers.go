package target

import (
	"sync"
	"sync/atomic"

	"github.com/nvmetd/nvmetd/internal/perfcount"
)

// workerPool runs backend I/O off the queues' engine goroutines, so that a
// slow disk never blocks a socket loop (design.md, "Backends").
//
// Each queue has its own ring of commands waiting for the pool (ioRing: a
// lock-free bounded queue sized by the queue's depth; a command is in at
// most one ring, so a host cannot make it grow): queues never contend with
// each other, nor take a lock, to hand a command over. The pool's mutex
// guards only the list of rings that want a worker (ready, each ring at
// most once) and the workers' lifecycle; a ring already listed is not
// listed again, so the mutex is not taken for every command. A fixed number
// of goroutines serve the rings: a worker takes a ring from the head of
// ready and runs its commands one after another while it has some; before
// it runs one it lists the ring again if more wait (the next free worker
// takes those in parallel, and a command never waits behind a slow one
// while a worker is idle), and it leaves the ring when other rings wait
// (round robin between queues, one command a turn: a busy host does not
// starve another).
type workerPool struct {
	exec func(*command)

	mu      perfcount.Mutex
	cond    sync.Cond
	ready   []*ioRing // FIFO of rings that want a worker; each at most once
	head    int
	idle    int // workers waiting on cond
	running int // goroutines started and not yet exited
	want    int // goroutines wanted (resize lowers it; extra ones exit)
	closed  bool
	wg      sync.WaitGroup
	// gone is closed, for queues dropping their rings of closed pools.
	gone atomic.Bool

	// nReady and nIdle mirror len(ready)-head and idle (written under mu)
	// for the lock-free checks of push and serve.
	nReady, nIdle atomic.Int32

	// pushed and taken count commands handed to the pool and taken by a
	// worker: queued is the difference, taken the liveness check's
	// progress.
	pushed, taken atomic.Uint64
}

// ioRing holds one queue's commands waiting for one pool: a bounded
// multi-producer multi-consumer queue (D. Vyukov's, each cell with a
// sequence number), so that neither the queue nor the workers lock it.
type ioRing struct {
	pool  *workerPool
	mask  uint64
	cells []ringCell
	enq   atomic.Uint64
	deq   atomic.Uint64
	// onList: the ring is on the pool's ready list. A ring with
	// commands is on it, or a worker serving it will look at it again.
	onList atomic.Bool
}

type ringCell struct {
	seq atomic.Uint64
	c   *command
}

func newIORing(p *workerPool, n int) *ioRing {
	size := 1
	for size < n {
		size <<= 1
	}
	r := &ioRing{pool: p, mask: uint64(size - 1), cells: make([]ringCell, size)}
	for i := range r.cells {
		r.cells[i].seq.Store(uint64(i))
	}
	return r
}

// put adds c; false if the ring is full.
func (r *ioRing) put(c *command) bool {
	pos := r.enq.Load()
	for {
		cell := &r.cells[pos&r.mask]
		switch d := int64(cell.seq.Load() - pos); {
		case d == 0:
			if r.enq.CompareAndSwap(pos, pos+1) {
				cell.c = c
				cell.seq.Store(pos + 1)
				return true
			}
			pos = r.enq.Load()
		case d < 0:
			return false
		default:
			pos = r.enq.Load()
		}
	}
}

// take removes the oldest command; nil if the ring is empty.
func (r *ioRing) take() *command {
	pos := r.deq.Load()
	for {
		cell := &r.cells[pos&r.mask]
		switch d := int64(cell.seq.Load() - (pos + 1)); {
		case d == 0:
			if r.deq.CompareAndSwap(pos, pos+1) {
				c := cell.c
				cell.c = nil
				cell.seq.Store(pos + r.mask + 1)
				return c
			}
			pos = r.deq.Load()
		case d < 0:
			return nil
		default:
			pos = r.deq.Load()
		}
	}
}

// empty reports whether the ring holds no command (a put in progress
// counts).
func (r *ioRing) empty() bool { return r.enq.Load() == r.deq.Load() }

// newWorkerPool starts n workers running exec.
func newWorkerPool(n int, exec func(*command)) *workerPool {
	p := &workerPool{exec: exec}
	p.cond.L = &p.mu
	p.resize(n)
	return p
}

// resize changes the number of workers: new ones start at once, surplus
// ones exit after the command they are running.
func (p *workerPool) resize(n int) {
	n = max(n, 1)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.want = n
	for p.running < p.want {
		p.running++
		p.wg.Add(1)
		go p.work()
	}
	p.cond.Broadcast()
}

// ring returns q's ring for p, made on first use (once per queue and
// pool, never on the I/O path after that). The list is copied on write so
// that the lookup takes no lock.
func (q *queue) ring(p *workerPool) *ioRing {
	if l := q.rings.Load(); l != nil {
		for _, r := range *l {
			if r.pool == p {
				return r
			}
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	var list []*ioRing
	if l := q.rings.Load(); l != nil {
		for _, r := range *l {
			if r.pool == p {
				return r
			}
		}
		for _, r := range *l {
			if !r.pool.gone.Load() { // not a retired namespace's own pool
				list = append(list, r)
			}
		}
	}
	r := newIORing(p, len(q.cmds))
	list = append(list, r)
	q.rings.Store(&list)
	return r
}

// push queues a command on its queue's ring; it never blocks.
func (p *workerPool) push(c *command) {
	r := c.q.ring(p)
	p.pushed.Add(1) // before a worker can take it: queued never underflows
	if !r.put(c) {
		// Cannot happen: a command is in at most one ring, and the ring
		// has a cell for each of the queue's commands. Run it here
		// rather than lose it.
		p.taken.Add(1)
		p.exec(c)
		return
	}
	// Listed even when a worker serves the ring: that worker may be stuck
	// in a slow command while others are idle.
	p.wake(r)
}

// wake lists r unless it is listed already.
func (p *workerPool) wake(r *ioRing) {
	if r.onList.Load() || !r.onList.CompareAndSwap(false, true) {
		return
	}
	p.mu.Lock()
	if p.head > 0 && len(p.ready) == cap(p.ready) {
		// Reuse the consumed front instead of growing: the list holds
		// each ring at most once, so it stays as long as the number of
		// rings.
		n := copy(p.ready, p.ready[p.head:])
		clear(p.ready[n:])
		p.ready, p.head = p.ready[:n], 0
	}
	p.ready = append(p.ready, r)
	p.nReady.Add(1)
	if p.idle > 0 {
		p.cond.Signal()
	}
	p.mu.Unlock()
}

// queued is the number of commands waiting for a worker.
func (p *workerPool) queued() int {
	t := p.taken.Load() // first: pushed only grows, so the difference is never negative
	return int(p.pushed.Load() - t)
}

func (p *workerPool) work() {
	defer p.wg.Done()
	p.mu.Lock()
	for {
		for p.head == len(p.ready) && !p.closed && p.running <= p.want {
			p.idle++
			p.nIdle.Add(1)
			p.cond.Wait()
			p.idle--
			p.nIdle.Add(-1)
		}
		if p.running > p.want || (p.closed && p.head == len(p.ready)) {
			p.running--
			p.mu.Unlock()
			return
		}
		r := p.ready[p.head]
		p.ready[p.head] = nil
		p.head++
		if p.head == len(p.ready) {
			p.ready, p.head = p.ready[:0], 0
		}
		p.nReady.Add(-1)
		p.mu.Unlock()
		p.serve(r)
		p.mu.Lock()
	}
}

// serve runs r's commands until it is empty or other rings wait.
func (p *workerPool) serve(r *ioRing) {
	r.onList.Store(false)
	for {
		c := r.take()
		if c == nil {
			break
		}
		p.taken.Add(1)
		if !r.empty() {
			p.wake(r) // the next worker free takes the next one, in parallel
		}
		p.exec(c)
		if n := p.nReady.Load(); n > 1 || n == 1 && !r.onList.Load() {
			break // other rings wait: their turn
		}
	}
	// A push that found the ring listed before this worker took it off
	// the list relies on this look.
	if !r.empty() {
		p.wake(r)
	}
}

// close lets the workers finish the queued commands and waits for them.
func (p *workerPool) close() {
	p.mu.Lock()
	p.closed = true
	p.gone.Store(true)
	p.cond.Broadcast()
	p.mu.Unlock()
	p.wg.Wait()
}
