package target

import (
	"sync"
	"sync/atomic"
	"testing"
)

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestNSRefRetire: commands counted on queues' own counts (nsRef) hold a
// retiring namespace as those on its own count do: retire's channel
// closes after the last of them, and no reference is taken after retire.
func TestNSRefRetire(t *testing.T) {
	ns := &namespace{drained: make(chan struct{})}
	q1, q2 := testQueue(4), testQueue(4)
	r1, r2 := q1.nsRef(ns), q2.nsRef(ns)
	if q1.nsRef(ns) != r1 {
		t.Fatal("a second lookup made another count")
	}
	if !r1.get() || !r2.get() || !ns.tryGet() {
		t.Fatal("get failed on a live namespace")
	}
	drained := ns.retire()
	if r1.get() || ns.tryGet() {
		t.Fatal("a reference was taken after retire")
	}
	for i, put := range []func(){r1.put, ns.put, r2.put} {
		if isClosed(drained) {
			t.Fatalf("drained before put %d", i)
		}
		put()
	}
	if !isClosed(drained) {
		t.Fatal("not drained after the last put")
	}
}

// TestNSRefRetireIdle: a retired namespace whose queues hold nothing is
// drained at once, however many queues used it.
func TestNSRefRetireIdle(t *testing.T) {
	ns := &namespace{drained: make(chan struct{})}
	for range 3 {
		r := testQueue(4).nsRef(ns)
		r.get()
		r.put()
	}
	if !isClosed(ns.retire()) {
		t.Fatal("an idle namespace did not drain")
	}
}

// TestNSRefGoneQueues: the counts of closed queues are dropped from the
// namespace once they hold nothing (the list does not grow with every
// queue ever connected).
func TestNSRefGoneQueues(t *testing.T) {
	ns := &namespace{drained: make(chan struct{})}
	for range 100 {
		q := testQueue(4)
		r := q.nsRef(ns)
		r.get()
		r.put()
		r.dead.Store(true) // as QueueClosed
	}
	testQueue(4).nsRef(ns)
	ns.qrefsMu.Lock()
	n := len(ns.qrefs)
	ns.qrefsMu.Unlock()
	if n != 1 {
		t.Fatalf("%d counts registered, want 1", n)
	}
}

// TestNSRefRetireRace: queues taking and dropping references while the
// namespace retires: once drained, no reference is held, and none is
// taken after (run with -race).
func TestNSRefRetireRace(t *testing.T) {
	for range 50 {
		ns := &namespace{drained: make(chan struct{})}
		var held atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 4 {
			r := testQueue(4).nsRef(ns)
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for range 200 {
					if !r.get() {
						return
					}
					held.Add(1)
					if isClosed(ns.drained) {
						t.Error("a reference was taken on a drained namespace")
					}
					held.Add(-1)
					r.put()
				}
			}()
		}
		close(start)
		drained := ns.retire()
		<-drained
		if h := held.Load(); h != 0 {
			t.Fatalf("drained with %d references held", h)
		}
		wg.Wait()
	}
}
