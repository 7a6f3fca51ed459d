package target

import (
	"testing"
	"time"
)

// testQueue is a queue with n command slots, enough for the pool.
func testQueue(n int) *queue {
	q := &queue{cmds: make([]command, n)}
	for i := range q.cmds {
		q.cmds[i].q = q
	}
	return q
}

// TestWorkerPoolFair: one worker, a busy queue with many commands waiting
// and another queue's single command arriving behind them: the other
// queue's command runs after at most one more of the busy queue's, not
// after all of them (round robin over the rings with work).
func TestWorkerPoolFair(t *testing.T) {
	ran := make(chan *command, 64)
	release := make(chan struct{})
	first := true
	p := newWorkerPool(1, func(c *command) {
		if first {
			first = false
			<-release // hold the only worker while the queues fill
		}
		ran <- c
	})
	defer p.close()
	busy, other := testQueue(32), testQueue(4)
	p.push(&busy.cmds[0])
	waitFor(t, "the worker to take the first command", 30*time.Second, func() bool { return p.queued() == 0 })
	for i := 1; i < 32; i++ {
		p.push(&busy.cmds[i])
	}
	p.push(&other.cmds[0])
	if got := p.queued(); got != 32 {
		t.Fatalf("queued = %d, want 32", got)
	}
	close(release)
	pos := -1
	for i := 0; i < 33; i++ {
		c := <-ran
		if c.q == other {
			pos = i
		}
	}
	// The first command; at most one more of the busy queue (its ring
	// was listed again before the other's); then the other queue's.
	if pos < 1 || pos > 2 {
		t.Fatalf("the other queue's command ran at position %d of 33, want 1 or 2", pos)
	}
	if got := p.queued(); got != 0 {
		t.Fatalf("queued = %d after all ran", got)
	}
}

// TestWorkerPoolParallel: one queue's commands run on several workers at
// once (a slow disk at queue depth N gets N commands in parallel).
func TestWorkerPoolParallel(t *testing.T) {
	const n = 4
	started := make(chan struct{}, n)
	release := make(chan struct{})
	p := newWorkerPool(n, func(c *command) {
		started <- struct{}{}
		<-release
	})
	q := testQueue(n)
	for i := range n {
		p.push(&q.cmds[i])
	}
	for range n {
		select {
		case <-started:
		case <-time.After(30 * time.Second): // hang guard
			t.Fatal("the queue's commands did not all start in parallel")
		}
	}
	close(release)
	p.close()
}

// TestWorkerPoolCloseDrains: close runs every queued command before it
// returns, across queues.
func TestWorkerPoolCloseDrains(t *testing.T) {
	release := make(chan struct{})
	var ran [3]int
	qs := []*queue{testQueue(8), testQueue(8), testQueue(8)}
	done := make(chan *command, 24)
	p := newWorkerPool(2, func(c *command) {
		<-release
		done <- c
	})
	for _, q := range qs {
		for i := range q.cmds {
			p.push(&q.cmds[i])
		}
	}
	close(release)
	p.close()
	close(done)
	for c := range done {
		for i, q := range qs {
			if c.q == q {
				ran[i]++
			}
		}
	}
	if ran != [3]int{8, 8, 8} {
		t.Fatalf("ran %v commands per queue, want 8 each", ran)
	}
}
