package target

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nvmetd/nvmetd/internal/lathist"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
	"github.com/nvmetd/nvmetd/nvmeof/tcp"
	tcpwire "github.com/nvmetd/nvmetd/nvmeof/tcp/wire"
)

// This file holds the counters behind the target's metrics: plain atomics
// that the data path updates (no allocation, no lock, no Prometheus type),
// summed on scrape by the collector in metrics_collector.go.

// opClass is the opcode label of a command.
type opClass uint8

const (
	opRead opClass = iota
	opWrite
	opFlush
	opWriteZeroes
	opDSM
	opOtherIO
	opAdmin
	opFabrics
	nOpClasses
)

var opClassNames = [nOpClasses]string{"read", "write", "flush", "write_zeroes", "dataset_management", "other_io", "admin", "fabrics"}

// statusClass is the status label of a completed command: success, or the
// Status Code Type of the error (NVMe Base 2.0 §4.2.3.2).
type statusClass uint8

const (
	stSuccess statusClass = iota
	stGeneric
	stCommandSpecific
	stMedia
	stPath
	stOther
	nStatusClasses
)

var statusClassNames = [nStatusClasses]string{"success", "generic", "command_specific", "media", "path", "other"}

func classifyStatus(st nvmeof.Status) statusClass {
	if st.IsSuccess() {
		return stSuccess
	}
	switch st.SCT() {
	case 0:
		return stGeneric
	case 1:
		return stCommandSpecific
	case 2:
		return stMedia
	case 3:
		return stPath
	}
	return stOther
}

func classifyOp(qid uint16, sqe *nvmeof.SQE) opClass {
	if sqe.IsFabrics() {
		return opFabrics
	}
	if qid == 0 {
		return opAdmin
	}
	switch sqe.Opcode() {
	case nvmeof.NVMRead:
		return opRead
	case nvmeof.NVMWrite:
		return opWrite
	case nvmeof.NVMFlush:
		return opFlush
	case nvmeof.NVMWriteZeroes:
		return opWriteZeroes
	case nvmeof.NVMDatasetManagement:
		return opDSM
	}
	return opOtherIO
}

// latOp is the op label of a latency histogram: reads, writes, and
// everything else.
type latOp uint8

const (
	latRead latOp = iota
	latWrite
	latOther
	nLatOps
)

var latOpNames = [nLatOps]string{"read", "write", "other"}

func latOpOf(c opClass) latOp {
	switch c {
	case opRead:
		return latRead
	case opWrite:
		return latWrite
	}
	return latOther
}

// The latency histograms (package lathist: 4 buckets per octave from
// 100 ns).
const latBuckets = lathist.Buckets

var latBounds = lathist.Bounds

func latIndex(d time.Duration) int { return lathist.Index(d) }

type (
	latHist  = lathist.Hist
	histSnap = lathist.Snap
)

// cmdStats are the command counters of a queue (or the sum of retired
// ones): commands by opcode class and status class, data bytes, and the
// latency from the capsule's arrival to the response being posted.
type cmdStats struct {
	cmds   [nOpClasses][nStatusClasses]atomic.Uint64
	rbytes atomic.Uint64 // bytes read by hosts (data sent to them)
	wbytes atomic.Uint64 // bytes written by hosts
	lat    [nLatOps]latHist
}

// record counts a completed command; the caller is the queue's goroutine
// or the worker that completed it.
func (m *cmdStats) record(op opClass, st statusClass, n int, d time.Duration, timed bool) {
	m.cmds[op][st].Add(1)
	if st == stSuccess {
		switch op {
		case opRead:
			m.rbytes.Add(uint64(n))
		case opWrite:
			m.wbytes.Add(uint64(n))
		}
	}
	if timed {
		m.lat[latOpOf(op)].Observe(d)
	}
}

// add adds o's counters to m (folding a closed queue into a total).
func (m *cmdStats) add(o *cmdStats) {
	for i := range m.cmds {
		for j := range m.cmds[i] {
			if v := o.cmds[i][j].Load(); v != 0 {
				m.cmds[i][j].Add(v)
			}
		}
	}
	m.rbytes.Add(o.rbytes.Load())
	m.wbytes.Add(o.wbytes.Load())
	for i := range m.lat {
		m.lat[i].Add(&o.lat[i])
	}
}

// cmdSnap is a plain sum of cmdStats.
type cmdSnap struct {
	cmds           [nOpClasses][nStatusClasses]uint64
	rbytes, wbytes uint64
	lat            [nLatOps]histSnap
}

func (s *cmdSnap) addStats(m *cmdStats) {
	for i := range m.cmds {
		for j := range m.cmds[i] {
			s.cmds[i][j] += m.cmds[i][j].Load()
		}
	}
	s.rbytes += m.rbytes.Load()
	s.wbytes += m.wbytes.Load()
	for i := range m.lat {
		m.lat[i].AddTo(&s.lat[i])
	}
}

func (s *cmdSnap) add(o *cmdSnap) {
	for i := range o.cmds {
		for j := range o.cmds[i] {
			s.cmds[i][j] += o.cmds[i][j]
		}
	}
	s.rbytes += o.rbytes
	s.wbytes += o.wbytes
	for i := range o.lat {
		s.lat[i].Add(&o.lat[i])
	}
}

// nsStats are a namespace's backend latency histograms (time spent in the
// backend call, by op), shared by every queue that uses the namespace.
type nsStats struct {
	lat [nLatOps]latHist
}

// observe counts a backend call of an NVM opcode.
func (m *nsStats) observe(opcode uint8, d time.Duration) {
	switch opcode {
	case nvmeof.NVMRead:
		m.lat[latRead].Observe(d)
	case nvmeof.NVMWrite:
		m.lat[latWrite].Observe(d)
	default:
		m.lat[latOther].Observe(d)
	}
}

// termKey is a Terminate counted by direction and cause.
type termKey struct {
	sent  bool
	cause uint16 // layer<<12 | type<<8 | code (RFC 5040 §7.1)
}

// qpTotals are the QP counters of a port's closed queues.
type qpTotals struct {
	fpdusSent, fpdusRecv, crcErrors uint64
	terms                           map[termKey]uint64
	// NVMe/TCP queues' counters.
	tcpPDUsSent, tcpPDUsRecv, hdgstErrors, ddgstErrors uint64
	tcpTerms                                           map[tcpTermKey]uint64
}

// tcpTermKey is a TermReq that ended an NVMe/TCP queue: sent (C2HTermReq)
// or received (H2CTermReq), and its FES.
type tcpTermKey struct {
	sent bool
	fes  tcpwire.FES
}

func (t *qpTotals) addTCP(st tcp.QueueStats) {
	t.tcpPDUsSent += st.PDUsSent
	t.tcpPDUsRecv += st.PDUsReceived
	t.hdgstErrors += st.HeaderDigestErrors
	t.ddgstErrors += st.DataDigestErrors
	if t.tcpTerms == nil {
		t.tcpTerms = map[tcpTermKey]uint64{}
	}
	if st.TermReqSent {
		t.tcpTerms[tcpTermKey{true, st.TermReqSentFES}]++
	}
	if st.TermReqReceived {
		t.tcpTerms[tcpTermKey{false, st.TermReqReceivedFES}]++
	}
}

func (t *qpTotals) addQP(st rdma.QPStats) {
	t.fpdusSent += st.FPDUsSent
	t.fpdusRecv += st.FPDUsReceived
	t.crcErrors += st.CRCErrors
	if t.terms == nil {
		t.terms = map[termKey]uint64{}
	}
	if st.TerminateSent {
		t.terms[termKey{true, st.TerminateSentCause}]++
	}
	if st.TerminateReceived {
		t.terms[termKey{false, st.TerminateReceivedCause}]++
	}
}

// eventKey is a counted event with its labels.
type eventKey struct {
	name   string // metric: one of the event* constants
	sub    string // subsystem NQN ("" where none)
	reason string
}

// Event metric names (the collector's descriptors are keyed by them).
const (
	eventKeepAliveExpired  = "keepalive_expired"
	eventControllerCreated = "controller_created"
	eventControllerEnded   = "controller_ended"
	eventReconnect         = "reconnect"
	eventRefused           = "refused"
	eventAuthFailure       = "auth_failure"
)

// maxReconnectPairs caps the (host, subsystem) pairs remembered to tell a
// reconnect from a first connect.
const maxReconnectPairs = 1 << 16

// metricsState is the target's side of its metrics that is not a live
// queue's: the counters of closed queues and rare events.
type metricsState struct {
	// evMu guards events and seen; it is a leaf lock (taken with any
	// other held, nothing taken under it).
	evMu   sync.Mutex
	events map[eventKey]uint64
	// seen holds the (host, subsystem) pairs that had a controller, and
	// whether the last one that ended did so without a clean shutdown.
	seen map[[2]string]bool

	// mu guards the totals and every queue's folded flag; it comes before
	// the port, subsystem and controller locks (the collector holds it
	// while it reads live queues) and is never taken under them.
	mu sync.Mutex
	// retiredSub sums the commands of closed queues, by subsystem NQN.
	retiredSub map[string]*cmdSnap
	// retiredPort sums the QP counters of closed queues, by port ID.
	retiredPort map[uint16]*qpTotals
}

func newMetricsState() *metricsState {
	return &metricsState{
		retiredSub: map[string]*cmdSnap{}, retiredPort: map[uint16]*qpTotals{},
		events: map[eventKey]uint64{}, seen: map[[2]string]bool{},
	}
}

func (m *metricsState) event(name, sub, reason string) {
	m.evMu.Lock()
	m.events[eventKey{name, sub, reason}]++
	m.evMu.Unlock()
}

// controllerCreated counts a new controller, and a reconnect when the
// host's last controller on the subsystem ended without a clean shutdown
// (lost connection, keep-alive timeout, Terminate): a host that shut its
// controller down (CC.SHN) and comes back, as every `nvmeof bench` or
// `nvme connect` after a disconnect does, is no reconnect.
func (m *metricsState) controllerCreated(sub, host string) {
	m.evMu.Lock()
	defer m.evMu.Unlock()
	m.events[eventKey{eventControllerCreated, sub, ""}]++
	k := [2]string{host, sub}
	if m.seen[k] {
		m.events[eventKey{eventReconnect, sub, ""}]++
		m.seen[k] = false
	}
}

// controllerEnded counts an ended controller by reason, and remembers for
// the host's next one whether it ended cleanly. A controller that never
// authenticated was no association of the host (a peer may forge its
// NQN): it leaves nothing to reconnect after.
func (m *metricsState) controllerEnded(sub, host, reason string, clean, authenticated bool) {
	m.evMu.Lock()
	defer m.evMu.Unlock()
	m.events[eventKey{eventControllerEnded, sub, reason}]++
	if !authenticated {
		return
	}
	k := [2]string{host, sub}
	if _, ok := m.seen[k]; ok || len(m.seen) < maxReconnectPairs {
		m.seen[k] = !clean
	}
}

// reasonLabel turns a teardown reason into a label value.
func reasonLabel(s string) string {
	return strings.NewReplacer(" ", "_", "-", "_").Replace(s)
}

// connectRefusedReason is the reason label of a refused Connect, from its
// status (a bounded set).
func connectRefusedReason(st nvmeof.Status) string {
	switch st.Code() {
	case nvmeof.StatusConnectInvalidHost:
		return "host_not_allowed"
	case nvmeof.StatusConnectInvalidParameters:
		return "invalid_parameters"
	case nvmeof.StatusConnectControllerBusy:
		return "controller_busy"
	case nvmeof.StatusConnectIncompatibleFormat:
		return "incompatible_format"
	case nvmeof.StatusInternalError:
		return "no_resources"
	}
	return "other"
}

// queueClosed folds a closing queue's counters into the totals, once;
// the collector skips folded queues.
func (m *metricsState) queueClosed(q *queue, conn *rdma.ControllerQueue, tconn *tcp.ControllerQueue, c *controller) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if q.folded {
		return
	}
	q.folded = true
	if c != nil {
		s := m.retiredSub[c.sub.nqn]
		if s == nil {
			s = &cmdSnap{}
			m.retiredSub[c.sub.nqn] = s
		}
		s.addStats(&q.met)
		if q.qid != 0 {
			c.retiredMet.add(&q.met)
		}
	}
	if conn != nil {
		t := m.retiredPort[q.port.id]
		if t == nil {
			t = &qpTotals{}
			m.retiredPort[q.port.id] = t
		}
		t.addQP(conn.QPStats())
	}
	if tconn != nil {
		t := m.retiredPort[q.port.id]
		if t == nil {
			t = &qpTotals{}
			m.retiredPort[q.port.id] = t
		}
		t.addTCP(tconn.Stats())
	}
}

// AuthFailed counts a failed in-band authentication (DH-HMAC-CHAP) of a
// host on subsystem nqn: the hook the authentication code calls.
func (s *server) metricAuthFailed(nqn string) {
	s.met.event(eventAuthFailure, nqn, "")
}
