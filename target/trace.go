package target

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/internal/wiretrace"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
)

// TraceSpec selects the queues a wire trace captures and bounds it. Set
// exactly one of Host, Address or Subsystem (with CNTLID).
type TraceSpec struct {
	// Host is a host NQN: the queues of its controllers, those connected
	// now and those that connect while the trace runs (these from their
	// first FPDU on: their Connect capsule is in the trace).
	Host string `json:"host,omitempty"`
	// Address is a host's IP address: its queues, now and new ones (from
	// their MPA exchange on).
	Address string `json:"address,omitempty"`
	// Subsystem and CNTLID name a controller: QID selects one of its
	// queues (0 is the admin queue); QID < 0 all of them.
	Subsystem string `json:"subsystem,omitempty"`
	CNTLID    uint16 `json:"cntlid,omitempty"`
	QID       int    `json:"qid,omitempty"`
	// MaxBytes bounds the pcap file, Duration the trace's run: it stops
	// itself at whichever comes first.
	MaxBytes int64         `json:"max_bytes"`
	Duration time.Duration `json:"duration"`
}

// Trace limits: the defaults StartTrace applies to zero fields, and the
// largest it accepts.
const (
	DefaultTraceMaxBytes = 64 << 20
	DefaultTraceDuration = time.Minute
	MaxTraceBytes        = 4 << 30
	MaxTraceDuration     = 24 * time.Hour
)

// TraceStatus is the state of the current (or last) trace.
type TraceStatus struct {
	Spec TraceSpec `json:"spec"`
	wiretrace.Status
	// Queues is how many queues it captured.
	Queues int `json:"queues"`
}

// ErrTraceRunning is StartTrace's error while a trace runs.
var ErrTraceRunning = errors.New("target: a trace is already running")

// ErrNoTrace is StopTrace's error when no trace has run.
var ErrNoTrace = errors.New("target: no trace")

// activeTrace is the running trace.
type activeTrace struct {
	s    *server
	spec TraceSpec
	addr netip.Addr
	tr   *wiretrace.Trace

	mu     sync.Mutex
	tapped []*rdma.ControllerQueue
	// pending: queues not yet connected, recorded while a trace by host
	// NQN waits for their Connect to say whose they are.
	pending map[*rdma.ControllerQueue]*wiretrace.Pending
	ended   bool
}

// pendingTraceBytes bounds what a queue's pending record keeps (its
// Connect exchange is about 2 KiB).
const pendingTraceBytes = 16 << 10

// traceState is the server's side of traces.
type traceState struct {
	mu   sync.Mutex // serializes start and stop
	cur  atomic.Pointer[activeTrace]
	last *activeTrace
}

func (spec *TraceSpec) validate() (netip.Addr, error) {
	n := 0
	var addr netip.Addr
	if spec.Host != "" {
		n++
	}
	if spec.Address != "" {
		n++
		a, err := netip.ParseAddr(spec.Address)
		if err != nil {
			return addr, fmt.Errorf("trace: address %q: %w", spec.Address, err)
		}
		addr = a.Unmap()
	}
	if spec.Subsystem != "" {
		n++
	}
	if n != 1 {
		return addr, errors.New("trace: name exactly one of a host NQN, a host address, or a controller (subsystem and CNTLID)")
	}
	if spec.MaxBytes == 0 {
		spec.MaxBytes = DefaultTraceMaxBytes
	}
	if spec.Duration == 0 {
		spec.Duration = DefaultTraceDuration
	}
	if spec.MaxBytes < 4096 || spec.MaxBytes > MaxTraceBytes {
		return addr, fmt.Errorf("trace: max bytes %d out of range (4096..%d)", spec.MaxBytes, int64(MaxTraceBytes))
	}
	if spec.Duration < 0 || spec.Duration > MaxTraceDuration {
		return addr, fmt.Errorf("trace: duration %v out of range (up to %v)", spec.Duration, MaxTraceDuration)
	}
	return addr, nil
}

// StartTrace starts a wire trace of the queues spec selects into w (a
// classic pcap file that Wireshark dissects as iWARP; see package
// wiretrace), closing w when it stops: at StopTrace, or by itself at its
// size or time limit. One trace runs at a time. Queues not traced pay
// nothing on their data path; a traced queue's reads and writes are
// copied into the file under the trace's lock.
func (t *Target) StartTrace(spec TraceSpec, w io.WriteCloser) error {
	return t.s.startTrace(spec, w)
}

// StopTrace stops the running trace and returns its status; with no trace
// running, it returns the last one's. A write is recorded just after it
// went out: one that a host has already answered may still miss the
// trace if it stops at that moment.
func (t *Target) StopTrace() (TraceStatus, error) { return t.s.stopTrace() }

// TraceStatus returns the running (or last) trace's status; false when no
// trace has run.
func (t *Target) TraceStatus() (TraceStatus, bool) {
	ts := &t.s.traces
	ts.mu.Lock()
	at := ts.cur.Load()
	if at == nil {
		at = ts.last
	}
	ts.mu.Unlock()
	if at == nil {
		return TraceStatus{}, false
	}
	return at.status(), true
}

func (s *server) startTrace(spec TraceSpec, w io.WriteCloser) error {
	addr, err := spec.validate()
	if err != nil {
		w.Close()
		return err
	}
	ts := &s.traces
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.cur.Load() != nil {
		w.Close()
		return ErrTraceRunning
	}
	at := &activeTrace{s: s, spec: spec, addr: addr}
	tr, err := wiretrace.New(w, wiretrace.Limits{MaxBytes: spec.MaxBytes, Duration: spec.Duration}, func(reason string) {
		s.endTrace(at, reason)
	})
	if err != nil {
		w.Close()
		return err
	}
	at.tr = tr
	ts.cur.Store(at)
	for _, q := range s.allQueues() {
		at.maybeTap(q)
	}
	s.log.Info("wire trace started", zap.String("host_nqn", spec.Host), zap.String("address", spec.Address),
		zap.String("subsystem", spec.Subsystem), zap.Uint16("cntlid", spec.CNTLID), zap.Int("qid", spec.QID),
		zap.Int64("max_bytes", spec.MaxBytes), zap.Duration("duration", spec.Duration))
	return nil
}

func (s *server) stopTrace() (TraceStatus, error) {
	ts := &s.traces
	ts.mu.Lock()
	at := ts.cur.Load()
	last := ts.last
	ts.mu.Unlock()
	if at == nil {
		if last == nil {
			return TraceStatus{}, ErrNoTrace
		}
		return last.status(), nil
	}
	at.tr.Stop() // calls endTrace
	<-at.tr.Done()
	return at.status(), at.tr.Err()
}

// endTrace removes the trace's taps once it stopped (wiretrace's onStop).
func (s *server) endTrace(at *activeTrace, reason string) {
	at.mu.Lock()
	at.ended = true
	tapped := at.tapped
	for c, p := range at.pending {
		c.SetTap(nil)
		p.Discard()
	}
	at.pending = nil
	at.mu.Unlock()
	for _, c := range tapped {
		c.SetTap(nil)
	}
	ts := &s.traces
	ts.mu.Lock()
	ts.cur.CompareAndSwap(at, nil)
	ts.last = at
	ts.mu.Unlock()
	st := at.tr.Status()
	s.log.Info("wire trace stopped", zap.String("reason", reason), zap.Int64("bytes", st.Bytes), zap.Int64("packets", st.Packets), zap.Int("queues", st.Conns))
}

func (at *activeTrace) status() TraceStatus {
	at.mu.Lock()
	n := len(at.tapped)
	at.mu.Unlock()
	return TraceStatus{Spec: at.spec, Status: at.tr.Status(), Queues: n}
}

// matches reports whether the trace selects q.
func (at *activeTrace) matches(q *queue) bool {
	switch {
	case at.addr.IsValid():
		ap, err := netip.ParseAddrPort(q.remote.String())
		return err == nil && ap.Addr().Unmap() == at.addr
	case at.spec.Host != "":
		c := q.ctrl.Load()
		return c != nil && c.hostNQN == at.spec.Host
	default:
		c := q.ctrl.Load()
		return c != nil && c.sub.nqn == at.spec.Subsystem && c.cntlid == at.spec.CNTLID && (at.spec.QID < 0 || int(q.qid) == at.spec.QID)
	}
}

// maybeTap taps q if the trace selects it. A trace by host NQN records a
// queue that has not connected yet (wiretrace.Pending), so that when its
// Connect names the host the trace has the queue from its first FPDU on,
// the Connect capsule included; a queue of another host is dropped then.
func (at *activeTrace) maybeTap(q *queue) {
	conn := q.conn.Load()
	if conn == nil {
		return
	}
	match := at.matches(q)
	at.mu.Lock()
	defer at.mu.Unlock()
	if at.ended {
		return
	}
	for _, c := range at.tapped {
		if c == conn {
			return
		}
	}
	p := at.pending[conn]
	if !match {
		switch {
		case p != nil && q.ctrl.Load() != nil: // connected: another host's
			delete(at.pending, conn)
			conn.SetTap(nil)
			p.Discard()
		case p == nil && at.spec.Host != "" && q.ctrl.Load() == nil:
			if at.pending == nil {
				at.pending = map[*rdma.ControllerQueue]*wiretrace.Pending{}
			}
			p = wiretrace.NewPending(pendingTraceBytes)
			at.pending[conn] = p
			conn.SetTap(p)
		}
		return
	}
	info := conn.TapInfo()
	c := at.tr.Conn(wiretrace.ConnInfo{Initiator: info.Remote, Responder: info.Local, LocalIsResponder: info.Responder,
		Request: info.Request, Reply: info.Reply})
	if c == nil {
		return
	}
	if p != nil {
		delete(at.pending, conn)
		if !p.Attach(c) {
			// More crossed than a Connect exchange: the record cannot
			// start at an FPDU boundary; the queue goes untraced.
			conn.SetTap(nil)
			return
		}
	} else {
		conn.SetTap(c)
	}
	at.tapped = append(at.tapped, conn)
}

// traceQueue taps a new or newly connected queue if a trace selects it;
// without a trace it is one atomic load.
func (s *server) traceQueue(q *queue) {
	if at := s.traces.cur.Load(); at != nil {
		at.maybeTap(q)
	}
}
