package iwarp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/internal/admission"
	"github.com/nvmetd/nvmetd/internal/perfcount"
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
	// queue (default 128). Queue memory grows with use up to them.
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
//
// The protocol lives in a pure state machine (engine); the QP is its
// driver: it owns the socket, feeds the engine what the socket brings and
// what is posted, under one lock (mu), writes what the engine lays out,
// delivers the completions it produces outside the lock, and ticks its
// timers. Goroutines: a receive loop that owns the read side, and a send
// goroutine that writes when a write has to wait for socket space (most
// writes are made by whoever has work and finds no writer: see txClaim).
type QP struct {
	pd               *PD
	scq, rcq         *CQ
	wantIRD, wantORD int
	cfg              Config
	log              *zap.Logger
	logSet           bool // SetLogger was called: Config.Logger does not replace it
	conn             *net.TCPConn
	raw              syscall.RawConn
	neg              negotiated
	responder        bool
	maxFPDU          int
	peerPrivateData  []byte
	localAddr        net.Addr
	remote           net.Addr
	epoch            time.Time // the engine's clock counts from here

	state atomic.Int32 // mirrors e.state, for State without the lock
	// txParked: the writer waits for socket space (a blocking writev that
	// found the socket full); the receive loop does not busy poll then
	// (see doRead).
	txParked atomic.Bool

	mu      perfcount.Mutex
	e       *engine
	adm     *admission.Ticket // the connection's place in its Admission (responders)
	loops   int               // driver loops still running
	started bool              // start ran (or the QP ended idle)
	flushed bool
	timer   *time.Timer

	kick   chan struct{} // wakes the send goroutine
	done   chan struct{}
	onDone func()

	rx rxDriver // the receive loop's
	tx txDriver // the writer's (whoever holds engine.tx.owner)

	// tap sees the connection's bytes (wire traces; nil: none).
	tap tapPointer
	// mpaRequest and mpaReply are the MPA frames of the connection's
	// establishment (RFC 5044 §7.1), for wire traces; set before start.
	mpaRequest, mpaReply []byte
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
		wantIRD: attr.IRD,
		wantORD: attr.ORD,
		kick:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		log:     zap.NewNop(),
	}
	sq, rq := attr.SendDepth, attr.RecvDepth
	if sq <= 0 {
		sq = defaultDepth
	}
	if rq <= 0 {
		rq = defaultDepth
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
	qp.e = newEngine(qp, qp.pd, sq, rq)
	return qp, nil
}

// State is the QP's current state.
func (qp *QP) State() QPState { return QPState(qp.state.Load()) }

// PD is the QP's protection domain.
func (qp *QP) PD() *PD { return qp.pd }

// Done is closed when the QP has reached the error state and flushed its
// work requests.
func (qp *QP) Done() <-chan struct{} { return qp.done }

// OnDone sets a function that runs once the QP is done (after Done is
// closed and every completion was delivered), on the goroutine that ended
// it: a consumer that must act on the end needs no goroutine of its own
// waiting for Done. Set it before the QP connects; fn must not block.
func (qp *QP) OnDone(fn func()) {
	qp.mu.Lock()
	qp.onDone = fn
	qp.mu.Unlock()
}

// Err is the reason the QP ended: nil after a clean disconnect (or while it
// runs), ErrPeerClosed, a *TerminateError, ErrStalled, ErrWriteStalled or a
// socket error.
func (qp *QP) Err() error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.e.err
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

// SetLogger sets the logger for connection events. The QP adds no fields of
// its own: name the connection in l.
func (qp *QP) SetLogger(l *zap.Logger) {
	if l != nil {
		qp.log, qp.logSet = l, true
	}
}

// Admit tells the listener's Admission that the ULP has logged the peer in
// (for NVMe/RDMA: a successful Fabrics Connect): the connection no longer
// counts as pending and its connect timeout no longer runs. A QP that was
// not accepted through an Admission ignores it.
func (qp *QP) Admit() {
	qp.mu.Lock()
	e := qp.adm
	qp.mu.Unlock()
	e.Admit()
}

// Stats returns the engine's counters.
func (qp *QP) Stats() EngineStats {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.e.stats
}

// SendRoom is how many more send work requests the send queue takes now.
func (qp *QP) SendRoom() int {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.e.sendRoom()
}

// PostSend queues a send work request. It is safe for concurrent use and
// never blocks.
func (qp *QP) PostSend(wr *SendWR) error {
	var ent [1]sqEntry
	if err := qp.prepare(wr, &ent[0]); err != nil {
		return err
	}
	return qp.post(ent[:])
}

// PostSendChain queues a chain of send work requests at once, all or none
// (as ibv_post_send with a linked list): with an RDMA Write and the Send
// that follows it, a response can never be posted in half. wrs must hold at
// most MaxChain requests.
func (qp *QP) PostSendChain(wrs []SendWR) error {
	if len(wrs) > MaxChain {
		return fmt.Errorf("%w: chain of %d, at most %d", ErrInvalidWR, len(wrs), MaxChain)
	}
	var ent [MaxChain]sqEntry
	for i := range wrs {
		if err := qp.prepare(&wrs[i], &ent[i]); err != nil {
			return err
		}
	}
	return qp.post(ent[:len(wrs)])
}

// MaxChain is the longest chain PostSendChain takes.
const MaxChain = 4

// prepare checks a send work request and resolves it into a queue entry.
func (qp *QP) prepare(wr *SendWR, e *sqEntry) error {
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
	e.wr = *wr
	e.wr.Local = nil
	e.nsge = copy(e.sge[:], wr.Local)
	e.total = total
	if wr.Opcode != WRRead {
		if uint64(total) > 1<<32-1 {
			return fmt.Errorf("%w: message of %d bytes", ErrInvalidWR, total)
		}
		return nil
	}
	if wr.SinkMR == nil {
		return fmt.Errorf("%w: RDMA Read without SinkMR", ErrInvalidWR)
	}
	if wr.SinkMR.pd != qp.pd {
		return fmt.Errorf("%w: RDMA Read sink in another PD", ErrInvalidWR)
	}
	if len(wr.Local) != 0 {
		return fmt.Errorf("%w: RDMA Read with a gather list", ErrInvalidWR)
	}
	r := region{}
	wr.SinkMR.mu.Lock()
	r.stag, r.buf, r.iova = wr.SinkMR.stag, wr.SinkMR.buf, wr.SinkMR.iova
	ok := wr.SinkMR.valid && wr.SinkMR.access&AccessLocalWrite != 0
	wr.SinkMR.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: RDMA Read sink not valid for local write", ErrInvalidWR)
	}
	sink, fits := r.slice(r.iova+wr.SinkOffset, uint64(wr.Length))
	if !fits {
		return fmt.Errorf("%w: RDMA Read of %d bytes at sink offset %d beyond the %d-byte region", ErrInvalidWR, wr.Length, wr.SinkOffset, len(r.buf))
	}
	e.sink, e.sinkSTag, e.sinkTO = sink, r.stag, r.iova+wr.SinkOffset
	e.total = int(wr.Length)
	e.wr.SinkMR = nil
	return nil
}

// post hands prepared entries to the engine and, per the send policy,
// writes them from this goroutine.
func (qp *QP) post(ent []sqEntry) error {
	qp.mu.Lock()
	err := qp.e.postSend(ent)
	if err != nil {
		qp.mu.Unlock()
		return err
	}
	if qp.e.txClaim(writerPoster) {
		qp.writeLocked(writerPoster)
		return nil
	}
	a := qp.takeActions()
	if qp.e.state == QPStateRTS {
		// Somebody else writes it (txClaim): the receive loop when it is
		// done with its read, the writer in turn (it loops until nothing
		// is left), or the send goroutine after a handoff. Another claim
		// in apply would only take the lock again.
		a &^= actTx
	}
	qp.mu.Unlock()
	qp.apply(a, writerPoster)
	return nil
}

// PostRecv queues a receive buffer for one incoming Send.
func (qp *QP) PostRecv(wr *RecvWR) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.e.postRecv(wr)
}

// syncState mirrors the engine's state for State. The caller holds mu.
func (qp *QP) syncState() { qp.state.Store(int32(qp.e.state)) }

// takeActions returns the engine's pending actions and mirrors its state.
// The caller holds mu.
func (qp *QP) takeActions() actions {
	qp.syncState()
	return qp.e.takeActions()
}

// apply carries out the engine's actions after the lock is released. who
// is the caller, for the send policy.
func (qp *QP) apply(a actions, who writer) {
	if a == 0 {
		return
	}
	if a&(actClose|actTerminate) != 0 {
		qp.mu.Lock()
		qp.syncState()
		err := qp.e.err
		qp.mu.Unlock()
		qp.logEnd(err)
	}
	if a&actClose != 0 && qp.conn != nil {
		_ = qp.conn.Close()
		qp.wake()
	}
	if a&actTerminate != 0 {
		// Bound the Terminate's send and the drain that follows.
		_ = qp.conn.SetWriteDeadline(time.Now().Add(qp.cfg.LingerTimeout))
		qp.wake()
	}
	if a&actFIN != 0 {
		qp.wake() // the send goroutine sends the FIN
	}
	if a&actTx != 0 {
		if who == writerTx {
			return // the send goroutine loops on its own
		}
		qp.mu.Lock()
		if qp.e.txClaim(who) {
			qp.writeLocked(who)
			return
		}
		more := qp.takeActions()
		qp.mu.Unlock()
		if more&actTx != 0 {
			qp.wake()
		}
		if more&^actTx != 0 {
			qp.apply(more&^actTx, who)
		}
	}
}

// logEnd logs why the QP ends (once per error kind; the ULP logs the rest).
func (qp *QP) logEnd(err error) {
	if err == nil || errors.Is(err, ErrPeerClosed) {
		return
	}
	var te *wire.TermError
	if errors.As(err, &te) {
		qp.log.Debug("iwarp: protocol error, sending terminate", zap.Error(err))
		return
	}
	qp.log.Debug("iwarp: connection failed", zap.Error(err))
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
	if err := cfg.TCP.Apply(conn); err != nil {
		return err
	}
	qp.mu.Lock()
	if qp.started || qp.e.state != QPStateIdle {
		qp.mu.Unlock()
		return fmt.Errorf("%w: QP already used", ErrQPState)
	}
	qp.started = true
	qp.cfg = *cfg
	if cfg.Logger != nil && !qp.logSet {
		qp.log = cfg.Logger.With(zap.Stringer("remote", conn.RemoteAddr()))
	}
	if cfg.SocketSendBuffer > 0 {
		_ = conn.SetWriteBuffer(cfg.SocketSendBuffer)
	}
	if cfg.SocketReceiveBuffer > 0 {
		_ = conn.SetReadBuffer(cfg.SocketReceiveBuffer)
	}
	qp.conn, qp.raw, qp.neg, qp.responder = conn, raw, neg, responder
	qp.peerPrivateData = peerPD
	qp.localAddr, qp.remote = conn.LocalAddr(), conn.RemoteAddr()
	qp.maxFPDU = fpduSize(cfg.MaxFPDU, raw)
	qp.epoch = time.Now()
	lim := engineLimits{stall: qp.cfg.StallTimeout, write: qp.cfg.WriteTimeout, linger: qp.cfg.LingerTimeout, maxNudges: maxNudges}
	if !responder && qp.cfg.Nudge > 0 {
		lim.nudge = qp.cfg.Nudge
	}
	qp.e.start(neg, responder, qp.maxFPDU, lim, 0)
	qp.syncState()
	qp.rx.init(qp)
	qp.tx.init(qp)
	qp.loops = 2
	if next := qp.e.nextTick(); next > 0 {
		qp.timer = time.AfterFunc(next, qp.onTick)
	}
	a := qp.takeActions()
	qp.mu.Unlock()
	go qp.rxLoop()
	go qp.txLoop()
	if a&actTx != 0 {
		qp.wake()
	}
	return nil
}

// onTick runs the engine's timers.
func (qp *QP) onTick() {
	qp.mu.Lock()
	nudges := qp.e.clock.nudges
	next := qp.e.tick(time.Since(qp.epoch))
	if qp.e.clock.nudges != nudges {
		qp.log.Debug("iwarp: responder silent after our first FPDU; nudging", zap.Int("nudge", qp.e.clock.nudges))
	}
	a := qp.takeActions()
	if next > 0 && qp.timer != nil && !qp.flushed {
		qp.timer.Reset(next - qp.e.clock.now)
	}
	qp.mu.Unlock()
	if a&(actClose|actTerminate) != 0 {
		qp.mu.Lock()
		err := qp.e.err
		qp.mu.Unlock()
		if errors.Is(err, ErrStalled) || errors.Is(err, ErrWriteStalled) {
			qp.log.Info("iwarp: closing a stalled connection", zap.Error(err))
		}
	}
	if a&actTx != 0 {
		qp.wake() // the nudge goes out from the send goroutine
		a &^= actTx
	}
	qp.apply(a, writerTx)
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

// Disconnect starts a graceful disconnect: work requests already posted are
// sent, then the TCP connection is closed with a FIN (as rdma_disconnect).
// Done is closed when the peer has closed its side or after the linger
// timeout. Posting new send work requests fails from now on.
func (qp *QP) Disconnect() {
	qp.mu.Lock()
	if !qp.started {
		qp.started = true
		qp.e.disconnect(0)
		qp.syncState()
		qp.mu.Unlock()
		qp.finish()
		return
	}
	qp.e.disconnect(time.Since(qp.epoch))
	qp.syncState()
	if qp.timer != nil && !qp.flushed {
		if next := qp.e.nextTick(); next > 0 {
			qp.timer.Reset(next - qp.e.clock.now)
		}
	}
	a := qp.takeActions()
	qp.mu.Unlock()
	if a&actTx != 0 {
		qp.wake()
		a &^= actTx
	}
	qp.apply(a, writerTx)
}

// Close disconnects gracefully and waits until the QP is done.
func (qp *QP) Close() error {
	qp.Disconnect()
	<-qp.done
	return nil
}

// fail moves the QP towards the error state (see engine.fail).
func (qp *QP) fail(err error) {
	qp.mu.Lock()
	qp.e.fail(err)
	qp.syncState()
	a := qp.takeActions()
	qp.mu.Unlock()
	qp.apply(a&^actTx, writerTx)
}

// loopDone is called by each driver loop as it exits; the QP finishes when
// both have and nobody writes.
func (qp *QP) loopDone() {
	qp.mu.Lock()
	qp.loops--
	qp.mu.Unlock()
	qp.maybeFinish()
}

// maybeFinish flushes and ends the QP once the connection is gone: both
// loops have exited and no goroutine holds the send side.
func (qp *QP) maybeFinish() {
	qp.mu.Lock()
	if qp.loops > 0 || qp.e.tx.owner || qp.flushed {
		qp.mu.Unlock()
		return
	}
	qp.mu.Unlock()
	qp.finish()
}

// finish closes the socket, flushes every outstanding work request and
// closes Done.
func (qp *QP) finish() {
	qp.mu.Lock()
	if qp.flushed {
		qp.mu.Unlock()
		return
	}
	qp.flushed = true
	if qp.timer != nil {
		qp.timer.Stop()
	}
	qp.e.flush()
	qp.syncState()
	wcs := qp.e.out
	qp.e.out = nil
	err := qp.e.err
	adm := qp.adm
	onDone := qp.onDone
	qp.mu.Unlock()
	if qp.conn != nil {
		_ = qp.conn.Close()
	}
	adm.Release()
	qp.deliver(wcs)
	if qp.conn != nil && (err == nil || errors.Is(err, ErrPeerClosed)) {
		qp.log.Debug("iwarp: disconnected", zap.Error(err))
	}
	close(qp.done)
	if onDone != nil {
		onDone()
	}
}

// deliver hands completions to their CQs, in order. A full polled CQ is
// an overrun: the QP fails (its remaining work flushes into the same full
// queue and is lost, as with verbs).
func (qp *QP) deliver(wcs []WC) {
	overrun := false
	for i := range wcs {
		cq := qp.scq
		if wcs[i].Opcode == WCRecv {
			cq = qp.rcq
		}
		if !cq.push(&wcs[i]) {
			overrun = true
		}
	}
	if overrun {
		qp.fail(ErrCQOverrun)
	}
}

// takeOut moves the engine's completions into buf (reused) and returns it.
// The caller holds mu.
func (qp *QP) takeOut(buf []WC) []WC {
	buf = append(buf[:0], qp.e.out...)
	clear(qp.e.out)
	qp.e.out = qp.e.out[:0]
	return buf
}

// isClosedErr reports errors that mean our own side closed the socket.
func isClosedErr(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, io.ErrClosedPipe)
}
