package iwarp

import (
	"context"
	"errors"

	"github.com/nvmetd/nvmetd/internal/perfcount"
)

// CQ is a completion queue. It works in one of two modes:
//
//   - polled (NewCQ): completions queue up, at most its depth; Poll takes
//     them and Wait blocks until there is one, as with ibv_poll_cq and a
//     completion channel. Size it for the work requests of the QPs that
//     use it, as with verbs: a completion that finds the queue full is an
//     overrun (ErrCQOverrun), which fails the QP that produced it;
//   - direct (NewCQHandler): each completion is handed to a function on the
//     engine goroutine that produced it (the QP's receive or send loop), so
//     a consumer reacts without a goroutine switch. The function must not
//     block; it may post work requests.
//
// One CQ may serve many QPs.
type CQ struct {
	handler func(*WC)

	mu      perfcount.Mutex
	ring    []WC // circular, of the CQ's depth
	head    int
	n       int
	notify  chan struct{}
	closed  bool
	overrun bool
}

// ErrCQOverrun means a completion found its polled completion queue full
// (IBV_EVENT_CQ_ERR): the CQ is smaller than the work its QPs post.
var ErrCQOverrun = errors.New("iwarp: completion queue overrun")

// NewCQ returns a polled completion queue with room for depth completions
// (at least 16).
func NewCQ(depth int) *CQ {
	return &CQ{ring: make([]WC, max(depth, 16)), notify: make(chan struct{}, 1)}
}

// NewCQHandler returns a completion queue that calls fn for each completion
// on the goroutine that produced it. fn must not block, and the *WC it gets
// is valid only during the call (copy what you keep).
func NewCQHandler(fn func(*WC)) *CQ {
	return &CQ{handler: fn, notify: make(chan struct{}, 1)}
}

// push delivers a completion; false if the queue was full (overrun).
func (cq *CQ) push(wc *WC) bool {
	if cq.handler != nil {
		cq.handler(wc)
		return true
	}
	cq.mu.Lock()
	if cq.n == len(cq.ring) {
		cq.overrun = true
		cq.mu.Unlock()
		return false
	}
	cq.ring[(cq.head+cq.n)%len(cq.ring)] = *wc
	cq.n++
	cq.mu.Unlock()
	select {
	case cq.notify <- struct{}{}:
	default:
	}
	return true
}

// Overrun reports whether a completion ever found the queue full.
func (cq *CQ) Overrun() bool {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.overrun
}

// Poll moves up to len(wcs) completions into wcs and returns how many. It
// never blocks.
func (cq *CQ) Poll(wcs []WC) int {
	cq.mu.Lock()
	k := min(len(wcs), cq.n)
	for i := 0; i < k; i++ {
		wcs[i] = cq.ring[cq.head]
		cq.ring[cq.head] = WC{}
		cq.head = (cq.head + 1) % len(cq.ring)
	}
	cq.n -= k
	cq.mu.Unlock()
	return k
}

// Len is the number of completions waiting.
func (cq *CQ) Len() int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.n
}

// Wait blocks until at least one completion is waiting, the CQ is closed
// (ErrClosed) or ctx ends.
func (cq *CQ) Wait(ctx context.Context) error {
	for {
		cq.mu.Lock()
		n, closed := cq.n, cq.closed
		cq.mu.Unlock()
		if n > 0 {
			return nil
		}
		if closed {
			return ErrClosed
		}
		select {
		case <-cq.notify:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// PollWait blocks like Wait, then polls.
func (cq *CQ) PollWait(ctx context.Context, wcs []WC) (int, error) {
	for {
		if n := cq.Poll(wcs); n > 0 {
			return n, nil
		}
		if err := cq.Wait(ctx); err != nil {
			return 0, err
		}
	}
}

// Close wakes waiters; Wait returns ErrClosed once the queue is empty.
func (cq *CQ) Close() {
	cq.mu.Lock()
	cq.closed = true
	cq.mu.Unlock()
	select {
	case cq.notify <- struct{}{}:
	default:
	}
}
