package target

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nvmetd/nvmetd/internal/perfcount"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
)

// admissionConfig is the connection admission of a configuration: the caps
// of LimitsConfig and the time a connection has to log in (connect_timeout
// bounds the MPA exchange and the Fabrics Connect together).
func admissionLimits(cfg *Config) rdma.AdmissionLimits {
	return rdma.AdmissionLimits{
		MaxPending:        cfg.Limits.MaxPending,
		MaxPendingPerAddr: cfg.Limits.MaxPendingPerAddress,
		MaxConns:          cfg.Limits.MaxConnections,
		PendingTimeout:    cfg.Transport.ConnectTimeout,
	}
}

// hostUsage counts each host NQN's controllers and queues against
// LimitsConfig.MaxControllersPerHost and MaxQueuesPerHost.
type hostUsage struct {
	mu perfcount.Mutex
	m  map[string]*hostCount
}

type hostCount struct{ ctrls, queues int }

// take counts ctrls controllers and queues queues for host, or refuses
// with the limit that would be exceeded.
func (h *hostUsage) take(host string, ctrls, queues int, lim *LimitsConfig) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]*hostCount{}
	}
	c := h.m[host]
	if c == nil {
		c = &hostCount{}
		h.m[host] = c
	}
	switch {
	case c.ctrls+ctrls > lim.MaxControllersPerHost:
		return fmt.Errorf("host has %d controllers, limits.max_controllers_per_host is %d", c.ctrls, lim.MaxControllersPerHost)
	case c.queues+queues > lim.MaxQueuesPerHost:
		return fmt.Errorf("host has %d queues, limits.max_queues_per_host is %d", c.queues, lim.MaxQueuesPerHost)
	}
	c.ctrls += ctrls
	c.queues += queues
	return nil
}

// give returns what take counted.
func (h *hostUsage) give(host string, ctrls, queues int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.m[host]
	if c == nil {
		return
	}
	c.ctrls -= ctrls
	c.queues -= queues
	if c.ctrls <= 0 && c.queues <= 0 {
		delete(h.m, host)
	}
}

// ioRef counts a controller's commands that are executing at a backend,
// so that a new association of the same host cannot write before the old
// one's commands have finished (nvmet waits for the old submission queue's
// references in nvmet_sq_destroy for the same reason). Once the controller
// is torn down, get fails: commands that had not started are dropped, never
// executed.
type ioRef struct {
	n       atomic.Int64
	drained chan struct{}
	once    sync.Once
}

const ioRefClosed = int64(1) << 62

func newIORef() *ioRef { return &ioRef{drained: make(chan struct{})} }

// get takes a reference for a command about to run at a backend; false
// once the controller is gone.
func (r *ioRef) get() bool {
	for {
		v := r.n.Load()
		if v&ioRefClosed != 0 {
			return false
		}
		if r.n.CompareAndSwap(v, v+1) {
			return true
		}
	}
}

// put drops a command's reference.
func (r *ioRef) put() {
	if r.n.Add(-1) == ioRefClosed {
		r.once.Do(func() { close(r.drained) })
	}
}

// close stops new commands and returns a channel closed when the running
// ones have finished.
func (r *ioRef) close() <-chan struct{} {
	for {
		v := r.n.Load()
		if v&ioRefClosed != 0 {
			return r.drained
		}
		if r.n.CompareAndSwap(v, v|ioRefClosed) {
			if v == 0 {
				r.once.Do(func() { close(r.drained) })
			}
			return r.drained
		}
	}
}

// running is the number of commands executing.
func (r *ioRef) running() int64 { return r.n.Load() &^ ioRefClosed }

// drainKey names one host's associations with one subsystem.
type drainKey struct{ host, sub string }

// drainRegistry remembers controllers that are gone but still have
// commands running at a backend, by host and subsystem.
type drainRegistry struct {
	mu perfcount.Mutex
	m  map[drainKey][]*controller
}

// add records c until its running commands have finished.
func (d *drainRegistry) add(c *controller, drained <-chan struct{}) {
	select {
	case <-drained:
		return
	default:
	}
	k := drainKey{c.hostNQN, c.sub.nqn}
	d.mu.Lock()
	if d.m == nil {
		d.m = map[drainKey][]*controller{}
	}
	d.m[k] = append(d.m[k], c)
	d.mu.Unlock()
	go func() {
		<-drained
		d.mu.Lock()
		list := d.m[k]
		for i, x := range list {
			if x == c {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(d.m, k)
		} else {
			d.m[k] = list
		}
		d.mu.Unlock()
	}()
}

// pending returns the drain channels of host's gone controllers on sub.
func (d *drainRegistry) pending(host, sub string) []<-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []<-chan struct{}
	for _, c := range d.m[drainKey{host, sub}] {
		out = append(out, c.io.drained)
	}
	return out
}

// waitDrained waits for every channel, until the deadline; it reports
// whether all closed.
func waitDrained(chans []<-chan struct{}, timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for _, ch := range chans {
		select {
		case <-ch:
		case <-t.C:
			return false
		}
	}
	return true
}
