package iwarp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/iwarp/wire"
)

// QPState is the state of a queue pair (RFC 5040 §8 / verbs).
type QPState int32

// Queue pair states.
const (
	// QPStateIdle: created, not connected. Receives (and sends, which wait)
	// may be posted.
	QPStateIdle QPState = iota
	// QPStateRTS: connected, ready to send and receive.
	QPStateRTS
	// QPStateClosing: a graceful disconnect is draining the send queue;
	// received messages still complete.
	QPStateClosing
	// QPStateTerminate: a protocol error was detected; a Terminate is
	// being sent before the connection closes.
	QPStateTerminate
	// QPStateError: the connection is gone; outstanding work requests
	// complete with WCFlushErr.
	QPStateError
)

// String names the state.
func (s QPState) String() string {
	switch s {
	case QPStateIdle:
		return "idle"
	case QPStateRTS:
		return "rts"
	case QPStateClosing:
		return "closing"
	case QPStateTerminate:
		return "terminate"
	case QPStateError:
		return "error"
	}
	return fmt.Sprintf("QPState(%d)", int32(s))
}

// QPAttr describes a queue pair to create.
type QPAttr struct {
	PD     *PD
	SendCQ *CQ // completions of send work requests
	RecvCQ *CQ // completions of receive work requests (may equal SendCQ)
	// SendDepth and RecvDepth bound the work requests outstanding on each
	// queue (default 128).
	SendDepth, RecvDepth int
	// IRD is the number of the peer's RDMA Reads this side serves at once
	// (responder resources); ORD the number of RDMA Reads it issues at once
	// (initiator depth). Both are negotiated in MPA v2 (default 16 each,
	// capped by Config.MaxIRDORD).
	IRD, ORD int
}

const defaultDepth = 128
const defaultIRDORD = 16

// ErrPeerClosed means the peer closed the TCP connection.
var ErrPeerClosed = errors.New("iwarp: peer closed the connection")

// QP is a reliable connected queue pair over one TCP connection.
type QP struct {
	pd                *PD
	scq, rcq          *CQ
	wantIRD, wantORD  int
	sqDepth, rqDepth  int
	cfg               Config
	log               *zap.Logger
	logSet            bool // SetLogger was called: Config.Logger does not replace it
	conn              *net.TCPConn
	raw               syscall.RawConn
	neg               negotiated
	responder         bool
	maxFPDU           int
	peerPrivateData   []byte
	localAddr, remote net.Addr

	state atomic.Int32

	mu        sync.Mutex
	sq        ring[sqEntry]
	rq        ring[RecvWR]
	orq       ring[orqEntry] // our RDMA Reads awaiting their responses
	irq       ring[irqEntry] // the peer's RDMA Reads awaiting our responses
	err       error
	term      *wire.TermError
	termHdr   []byte // offending DDP header for the Terminate
	peerSpoke bool   // the peer's first FPDU arrived (responder may send)

	kick    chan struct{}
	txMu    sync.Mutex // owner of tx: the send goroutine or an inline sender
	done    chan struct{}
	loops   atomic.Int32
	started bool

	// rxDefer is set while the receive loop processes what one read
	// brought; posts then leave the sending to it (see readv).
	rxDefer atomic.Bool
	// lastPost is when the last send work request was posted (ns).
	lastPost atomic.Int64

	// stall detection
	rxMid        atomic.Bool
	rxProgress   atomic.Uint64
	lastProgress uint64
	stallTimer   *time.Timer
	lingerTimer  *time.Timer
	nudgeTimer   *time.Timer
	nudges       int
	rxSeen       atomic.Bool // an FPDU has arrived

	rx rxState
	tx txState
}

// sqEntry is a posted send work request.
type sqEntry struct {
	wr    SendWR
	sge   [MaxSGE][]byte
	nsge  int
	total int
	sent  int    // payload bytes emitted
	msn   uint32 // MSN of an untagged message once started
	// RDMA Read: the resolved local sink and how the request names it.
	sink     []byte
	sinkSTag uint32
	sinkTO   uint64
}

// orqEntry is an outstanding outbound RDMA Read.
type orqEntry struct {
	id       uint64
	signaled bool
	internal bool // the peer-to-peer RTR read: no completion
	sinkSTag uint32
	sinkTO   uint64
	sink     []byte
	got      int
}

// irqEntry is an inbound RDMA Read Request to answer.
type irqEntry struct {
	sinkSTag uint32
	sinkTO   uint64
	src      []byte
	sge      [1][]byte // src as a gather list
	sent     int
}

// NewQP creates an idle queue pair. Post receives on it before it connects
// (Dial or ConnRequest.Accept) so that the peer's first messages find them.
func NewQP(attr QPAttr) (*QP, error) {
	if attr.PD == nil || attr.SendCQ == nil || attr.RecvCQ == nil {
		return nil, fmt.Errorf("iwarp: new QP: PD, SendCQ and RecvCQ are required")
	}
	qp := &QP{
		pd:      attr.PD,
		scq:     attr.SendCQ,
		rcq:     attr.RecvCQ,
		sqDepth: attr.SendDepth,
		rqDepth: attr.RecvDepth,
		wantIRD: attr.IRD,
		wantORD: attr.ORD,
		kick:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		log:     zap.NewNop(),
	}
	if qp.sqDepth <= 0 {
		qp.sqDepth = defaultDepth
	}
	if qp.rqDepth <= 0 {
		qp.rqDepth = defaultDepth
	}
	if qp.wantIRD <= 0 {
		qp.wantIRD = defaultIRDORD
	}
	if qp.wantORD <= 0 {
		qp.wantORD = defaultIRDORD
	}
	if qp.wantIRD > wire.MaxIRDORD || qp.wantORD > wire.MaxIRDORD {
		return nil, fmt.Errorf("iwarp: new QP: IRD %d / ORD %d exceed %d", qp.wantIRD, qp.wantORD, wire.MaxIRDORD)
	}
	qp.sq = newRing[sqEntry](qp.sqDepth)
	qp.rq = newRing[RecvWR](qp.rqDepth)
	return qp, nil
}

// State is the QP's current state.
func (qp *QP) State() QPState { return QPState(qp.state.Load()) }

// PD is the QP's protection domain.
func (qp *QP) PD() *PD { return qp.pd }

// Done is closed when the QP has reached the error state and flushed its
// work requests.
func (qp *QP) Done() <-chan struct{} { return qp.done }

// Err is the reason the QP ended: nil after a clean disconnect (or while it
// runs), ErrPeerClosed, a *TerminateError, ErrStalled or a socket error.
func (qp *QP) Err() error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.err
}

// IRD and ORD are the negotiated inbound and outbound RDMA Read depths.
func (qp *QP) IRD() int { return qp.neg.ird }

// ORD is the negotiated outbound RDMA Read depth.
func (qp *QP) ORD() int { return qp.neg.ord }

// CRC reports whether MPA CRCs are in use.
func (qp *QP) CRC() bool { return qp.neg.crc }

// MaxFPDU is the largest FPDU this side sends.
func (qp *QP) MaxFPDU() int { return qp.maxFPDU }

// PeerPrivateData is the ULP private data of the peer's MPA frame (the
// reply for an initiator; the request for a responder).
func (qp *QP) PeerPrivateData() []byte { return qp.peerPrivateData }

// LocalAddr is the local TCP address.
func (qp *QP) LocalAddr() net.Addr { return qp.localAddr }

// RemoteAddr is the peer's TCP address.
func (qp *QP) RemoteAddr() net.Addr { return qp.remote }

// SetLogger sets the logger for connection events.
func (qp *QP) SetLogger(l *zap.Logger) {
	if l != nil {
		qp.log, qp.logSet = l, true
	}
}

// PostSend queues a send work request. It is safe for concurrent use and
// never blocks.
func (qp *QP) PostSend(wr *SendWR) error {
	if wr.Opcode >= wrOpcodeCount {
		return fmt.Errorf("%w: opcode %d", ErrInvalidWR, wr.Opcode)
	}
	if len(wr.Local) > MaxSGE {
		return fmt.Errorf("%w: %d SGEs, at most %d", ErrInvalidWR, len(wr.Local), MaxSGE)
	}
	total := 0
	for _, b := range wr.Local {
		total += len(b)
	}
	var sink []byte
	var sinkSTag uint32
	var sinkTO uint64
	if wr.Opcode == WRRead {
		if wr.SinkMR == nil {
			return fmt.Errorf("%w: RDMA Read without SinkMR", ErrInvalidWR)
		}
		if wr.SinkMR.pd != qp.pd {
			return fmt.Errorf("%w: RDMA Read sink in another PD", ErrInvalidWR)
		}
		r := region{}
		wr.SinkMR.mu.Lock()
		r.stag, r.buf, r.iova = wr.SinkMR.stag, wr.SinkMR.buf, wr.SinkMR.iova
		sinkSTag, sinkTO = r.stag, r.iova+wr.SinkOffset
		ok := wr.SinkMR.valid && wr.SinkMR.access&AccessLocalWrite != 0
		wr.SinkMR.mu.Unlock()
		if !ok {
			return fmt.Errorf("%w: RDMA Read sink not valid for local write", ErrInvalidWR)
		}
		var fits bool
		sink, fits = r.slice(r.iova+wr.SinkOffset, uint64(wr.Length))
		if !fits {
			return fmt.Errorf("%w: RDMA Read of %d bytes at sink offset %d beyond the %d-byte region", ErrInvalidWR, wr.Length, wr.SinkOffset, len(r.buf))
		}
		if len(wr.Local) != 0 {
			return fmt.Errorf("%w: RDMA Read with a gather list", ErrInvalidWR)
		}
	} else if uint64(total) > 1<<32-1 {
		return fmt.Errorf("%w: message of %d bytes", ErrInvalidWR, total)
	}
	qp.mu.Lock()
	st := qp.State()
	if st != QPStateIdle && st != QPStateRTS {
		qp.mu.Unlock()
		return fmt.Errorf("%w (%v)", ErrQPState, st)
	}
	if qp.sq.full() {
		qp.mu.Unlock()
		return ErrQueueFull
	}
	e := qp.sq.push()
	e.wr = *wr
	e.wr.Local = nil
	e.nsge = copy(e.sge[:], wr.Local)
	e.total = total
	e.sink = sink
	if wr.Opcode == WRRead {
		e.total = int(wr.Length)
		e.wr.SinkMR = nil
		e.sinkSTag, e.sinkTO = sinkSTag, sinkTO
	}
	qp.mu.Unlock()
	if st != QPStateRTS {
		return nil
	}
	// While the receive loop works through FPDUs it already read, it sends
	// what is posted meanwhile when it is done (batching the answers to a
	// burst of requests in one write). Otherwise a post after a quiet
	// spell is written at once by the poster (no goroutine switch), and a
	// post right behind another is left to the send goroutine, which
	// batches the burst.
	now := time.Now().UnixNano()
	last := qp.lastPost.Swap(now)
	switch {
	case qp.rxDefer.Load():
	case now-last >= int64(txQuiet):
		qp.txInline()
	default:
		qp.wake()
	}
	return nil
}

// PostRecv queues a receive buffer for one incoming Send.
func (qp *QP) PostRecv(wr *RecvWR) error {
	qp.mu.Lock()
	st := qp.State()
	if st != QPStateIdle && st != QPStateRTS && st != QPStateClosing {
		qp.mu.Unlock()
		return fmt.Errorf("%w (%v)", ErrQPState, st)
	}
	if qp.rq.full() {
		qp.mu.Unlock()
		return ErrQueueFull
	}
	*qp.rq.push() = *wr
	qp.mu.Unlock()
	return nil
}

func (qp *QP) wake() {
	select {
	case qp.kick <- struct{}{}:
	default:
	}
}

// start runs the QP on a connection after a successful MPA exchange.
func (qp *QP) start(conn *net.TCPConn, cfg *Config, neg negotiated, responder bool, peerPD []byte) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	qp.mu.Lock()
	if qp.started || qp.State() != QPStateIdle {
		qp.mu.Unlock()
		return fmt.Errorf("%w: QP already used", ErrQPState)
	}
	qp.started = true
	qp.cfg = *cfg
	if cfg.Logger != nil && !qp.logSet {
		qp.log = cfg.Logger
	}
	qp.conn, qp.raw, qp.neg, qp.responder = conn, raw, neg, responder
	qp.peerPrivateData = peerPD
	qp.localAddr, qp.remote = conn.LocalAddr(), conn.RemoteAddr()
	qp.maxFPDU = fpduSize(cfg.MaxFPDU, raw)
	qp.orq = newRing[orqEntry](max(neg.ord, 1))
	qp.irq = newRing[irqEntry](max(neg.ird, 1))
	qp.peerSpoke = !responder
	qp.initRx()
	qp.initTx()
	qp.state.Store(int32(QPStateRTS))
	if qp.cfg.StallTimeout > 0 {
		qp.stallTimer = time.AfterFunc(qp.cfg.StallTimeout/2, qp.checkStall)
	}
	if !responder && qp.cfg.Nudge > 0 {
		qp.nudgeTimer = time.AfterFunc(qp.cfg.Nudge, qp.nudge)
	}
	qp.mu.Unlock()
	qp.loops.Store(2)
	go qp.rxLoop()
	go qp.txLoop()
	qp.wake()
	return nil
}

// fpduSize picks the largest FPDU to send: the configured size, or the
// connection's MSS as siw does; a multiple of 8 so that non-final payloads
// are multiples of 4 and need no pad.
func fpduSize(configured int, raw syscall.RawConn) int {
	n := configured
	if n == 0 {
		n = maxFPDU
		_ = raw.Control(func(fd uintptr) {
			if mss, err := syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG); err == nil && mss > 0 {
				n = mss
			}
		})
	}
	n = min(max(n, minFPDU), maxFPDU)
	return n &^ 7
}

// checkStall closes the connection if the receive loop has waited in the
// middle of an FPDU without progress for a whole check interval.
func (qp *QP) checkStall() {
	select {
	case <-qp.done:
		return
	default:
	}
	p := qp.rxProgress.Load()
	if qp.rxMid.Load() && p == qp.lastProgress {
		qp.log.Warn("iwarp: peer stalled mid-FPDU", zap.Stringer("remote", qp.remote))
		qp.fail(ErrStalled)
		return
	}
	qp.lastProgress = p
	qp.mu.Lock()
	qp.stallTimer.Reset(qp.cfg.StallTimeout / 2)
	qp.mu.Unlock()
}

// nudge sends a zero-length RDMA Write if the responder has not sent
// anything since our first FPDU (see Config.Nudge).
func (qp *QP) nudge() {
	if qp.rxSeen.Load() || qp.State() != QPStateRTS {
		return
	}
	qp.txMu.Lock()
	sent := qp.tx.sentFPDU
	if sent {
		qp.tx.nudgePending = true
	}
	qp.txMu.Unlock()
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if sent {
		qp.nudges++
		qp.log.Debug("iwarp: responder silent after our first FPDU; nudging", zap.Stringer("remote", qp.remote), zap.Int("nudge", qp.nudges))
		qp.wake()
	}
	if qp.nudges < maxNudges {
		qp.nudgeTimer.Reset(qp.cfg.Nudge << qp.nudges)
	}
}

// Disconnect starts a graceful disconnect: work requests already posted are
// sent, then the TCP connection is closed with a FIN (as rdma_disconnect).
// Done is closed when the peer has closed its side or after the linger
// timeout. Posting new send work requests fails from now on.
func (qp *QP) Disconnect() {
	qp.mu.Lock()
	switch qp.State() {
	case QPStateIdle:
		qp.state.Store(int32(QPStateError))
		qp.mu.Unlock()
		qp.finish()
		return
	case QPStateRTS:
		qp.state.Store(int32(QPStateClosing))
		qp.lingerTimer = time.AfterFunc(qp.cfg.LingerTimeout, func() {
			qp.fail(fmt.Errorf("iwarp: disconnect: peer did not close within %v", qp.cfg.LingerTimeout))
		})
	}
	qp.mu.Unlock()
	qp.wake()
}

// Close disconnects gracefully and waits until the QP is done.
func (qp *QP) Close() error {
	qp.Disconnect()
	<-qp.done
	return nil
}

// fail moves the QP towards the error state. A locally detected protocol
// violation (*wire.TermError) first sends a Terminate; anything else closes
// the connection at once. The first error is kept.
func (qp *QP) fail(err error) {
	qp.mu.Lock()
	st := qp.State()
	if st == QPStateError || st == QPStateTerminate {
		qp.mu.Unlock()
		return
	}
	if qp.err == nil {
		qp.err = err
	}
	var te *wire.TermError
	if errors.As(err, &te) && qp.conn != nil {
		qp.term = te
		qp.state.Store(int32(QPStateTerminate))
		qp.mu.Unlock()
		qp.log.Warn("iwarp: protocol error, sending terminate", zap.Stringer("remote", qp.remote), zap.Error(err))
		// Bound the Terminate's send and the drain that follows.
		_ = qp.conn.SetWriteDeadline(time.Now().Add(qp.cfg.LingerTimeout))
		qp.wake()
		return
	}
	qp.state.Store(int32(QPStateError))
	qp.mu.Unlock()
	if err != nil && !errors.Is(err, ErrPeerClosed) {
		qp.log.Info("iwarp: connection failed", zap.Stringer("remote", qp.remote), zap.Error(err))
	}
	if qp.conn != nil {
		_ = qp.conn.Close()
	}
	qp.wake()
}

// loopDone is called by each of the two loops as it exits; the last one
// finishes the QP.
func (qp *QP) loopDone() {
	if qp.loops.Add(-1) == 0 {
		qp.finish()
	}
}

// finish closes the socket, flushes every outstanding work request and
// closes Done.
func (qp *QP) finish() {
	qp.mu.Lock()
	qp.state.Store(int32(QPStateError))
	if qp.conn != nil {
		_ = qp.conn.Close()
	}
	if qp.stallTimer != nil {
		qp.stallTimer.Stop()
	}
	if qp.lingerTimer != nil {
		qp.lingerTimer.Stop()
	}
	if qp.nudgeTimer != nil {
		qp.nudgeTimer.Stop()
	}
	var swcs, rwcs []WC
	for qp.sq.len() > 0 {
		e := qp.sq.at(0)
		swcs = append(swcs, WC{ID: e.wr.ID, QP: qp, Status: WCFlushErr, Opcode: wcOpFor(e.wr.Opcode)})
		qp.sq.pop()
	}
	for qp.orq.len() > 0 {
		e := qp.orq.at(0)
		if !e.internal {
			swcs = append(swcs, WC{ID: e.id, QP: qp, Status: WCFlushErr, Opcode: WCRead})
		}
		qp.orq.pop()
	}
	for qp.irq.len() > 0 {
		qp.irq.pop()
	}
	if qp.rx.send.active {
		rwcs = append(rwcs, WC{ID: qp.rx.send.wr.ID, QP: qp, Status: qp.rx.send.status, Opcode: WCRecv})
		qp.rx.send.active = false
	}
	for qp.rq.len() > 0 {
		rwcs = append(rwcs, WC{ID: qp.rq.at(0).ID, QP: qp, Status: WCFlushErr, Opcode: WCRecv})
		qp.rq.pop()
	}
	err := qp.err
	qp.mu.Unlock()
	for i := range rwcs {
		qp.rcq.push(&rwcs[i])
	}
	for i := range swcs {
		qp.scq.push(&swcs[i])
	}
	if qp.conn != nil {
		if err == nil || errors.Is(err, ErrPeerClosed) {
			qp.log.Debug("iwarp: disconnected", zap.Stringer("remote", qp.remote), zap.Error(err))
		}
	}
	close(qp.done)
}

// isClosedErr reports errors that mean our own side closed the socket.
func isClosedErr(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, io.ErrClosedPipe)
}
