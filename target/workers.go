package target

import (
	"sync"
	"sync/atomic"

	"github.com/nvmetd/nvmetd/internal/perfcount"
)

// workerPool runs backend I/O off the queues' engine goroutines, so that a
// slow disk never blocks a socket loop (design.md, "Backends"). Commands
// wait in a FIFO that grows when needed and is otherwise reused, so pushing
// never blocks and allocates nothing in steady state; a fixed number of
// goroutines take them in order and run exec on each.
type workerPool struct {
	exec func(*command)

	mu      perfcount.Mutex
	cond    sync.Cond
	ring    []*command
	head, n int
	running int // goroutines started and not yet exited
	want    int // goroutines wanted (resize lowers it; extra ones exit)
	closed  bool
	wg      sync.WaitGroup

	completed atomic.Uint64 // commands run, for the liveness check
}

// newWorkerPool starts n workers running exec.
func newWorkerPool(n int, exec func(*command)) *workerPool {
	p := &workerPool{exec: exec, ring: make([]*command, 256)}
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

// push queues a command; it never blocks.
func (p *workerPool) push(c *command) {
	p.mu.Lock()
	if p.n == len(p.ring) {
		grown := make([]*command, 2*len(p.ring))
		for i := 0; i < p.n; i++ {
			grown[i] = p.ring[(p.head+i)%len(p.ring)]
		}
		p.ring, p.head = grown, 0
	}
	p.ring[(p.head+p.n)%len(p.ring)] = c
	p.n++
	p.mu.Unlock()
	p.cond.Signal()
}

// queued is the number of commands waiting for a worker.
func (p *workerPool) queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

func (p *workerPool) work() {
	defer p.wg.Done()
	p.mu.Lock()
	for {
		for p.n == 0 && !p.closed && p.running <= p.want {
			p.cond.Wait()
		}
		if p.running > p.want || (p.closed && p.n == 0) {
			p.running--
			p.mu.Unlock()
			return
		}
		r := p.ring[p.head]
		p.ring[p.head] = nil
		p.head = (p.head + 1) % len(p.ring)
		p.n--
		p.mu.Unlock()
		p.exec(r)
		p.completed.Add(1)
		p.mu.Lock()
	}
}

// close lets the workers finish the queued commands and waits for them.
func (p *workerPool) close() {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	p.mu.Unlock()
	p.wg.Wait()
}
