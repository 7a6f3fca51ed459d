package iwarp

import (
	"errors"
	"fmt"
	"time"

	"github.com/nvmetd/nvmetd/iwarp/wire"
)

// engine is the protocol state machine of one queue pair: RDMAP, DDP and MPA
// framing on an established connection, with its work queues, ordering,
// IRD/ORD accounting, flushes and timers. It is pure: it makes no system
// calls, starts no goroutines and reads no clock. Its inputs are posted work
// requests, bytes received, bytes written, failures and time ticks; its
// outputs are work completions (out), batches of bytes to write (tx) and
// actions for the driver (act). The QP (qp.go, rx.go, tx.go) is the thin
// driver that owns the socket and feeds it, under one lock.
//
// Ownership of a work request is single at every moment, so that a failure
// flushes each exactly once: a send work request is owned by the send queue
// until the write that carries its last byte has finished; an RDMA Read
// moves to the outbound read queue (ORQ) when its Read Request is laid out
// and is owned by it until its response has arrived (the send queue entry
// stays behind, marked, only to keep the queue's order; siw_sq_flush skips
// such entries for the same reason); a receive is owned by the receive queue
// until a Send starts to land in it, then by the receive side until the
// message is complete.
type engine struct {
	qp        *QP // named in completions only
	pd        *PD
	neg       negotiated
	responder bool
	maxFPDU   int
	lim       engineLimits

	state QPState
	err   error           // the first error
	term  *wire.TermError // a locally detected violation to report

	sq  ring[sqEntry]
	rq  ring[RecvWR]
	orq ring[orqEntry] // our RDMA Reads awaiting their responses
	irq ring[irqEntry] // the peer's RDMA Reads awaiting our responses

	// peerSpoke: the peer's first FPDU has arrived. A responder sends
	// nothing before (RFC 5044 §7.1.2 / RFC 6581).
	peerSpoke bool
	// rxBusy: the receive driver is handling what one read brought; the
	// send policy leaves writing to it until it is done (see txClaim).
	rxBusy bool

	rx engineRx
	tx engineTx

	// out holds the completions produced and not yet taken by the driver,
	// in the order they happened.
	out []WC
	act actions

	clock engineClock
	stats EngineStats
}

// engineLimits are the timeouts the engine enforces on ticks.
type engineLimits struct {
	stall, write, linger, nudge time.Duration
	maxNudges                   int
}

// actions tell the driver what the inputs since it last looked require.
type actions uint8

const (
	// actTx: there is something to write and nobody is writing it.
	actTx actions = 1 << iota
	// actClose: the QP went to the error state; close the socket.
	actClose
	// actTerminate: a Terminate must be sent before the connection closes.
	actTerminate
	// actFIN: a graceful disconnect has sent everything; close our
	// direction of the connection.
	actFIN
)

// EngineStats are counters of a QP's protocol engine.
type EngineStats struct {
	FPDUsReceived, FPDUsSent uint64
	// PayloadCopied counts payload bytes copied out of the read-ahead
	// buffer into their destination; PayloadDirect those read from the
	// socket straight into it.
	PayloadCopied, PayloadDirect uint64
	// Writes is the number of write system calls' worth of batches.
	Batches uint64
	// CRCErrors counts FPDUs received with a bad MPA CRC (RFC 5044 §8;
	// the first one ends the connection with a Terminate).
	CRCErrors uint64
	// TerminateSent and TerminateReceived say whether a Terminate was sent
	// or received (RFC 5040 §5.3; at most one each per QP), with its
	// cause: layer<<12 | error type<<8 | error code (RFC 5040 §7.1).
	TerminateSent, TerminateReceived           bool
	TerminateSentCause, TerminateReceivedCause uint16
}

// engineClock holds what the timers need: progress counters sampled at
// each tick and when they last moved.
type engineClock struct {
	now          time.Duration // time of the last tick
	rxProgress   uint64        // bumped on every received byte consumed
	rxSeen       uint64
	rxMovedAt    time.Duration
	txProgress   uint64 // bumped on every byte written
	txSeen       uint64
	txMovedAt    time.Duration
	closingAt    time.Duration // when the graceful disconnect started
	closing      bool
	nudgeAt      time.Duration // next nudge, once the first FPDU went out
	nudgeArmed   bool
	nudges       int
	firstSentAt  time.Duration
	firstSentSet bool
}

// sqEntry is a posted send work request.
type sqEntry struct {
	wr    SendWR
	sge   [MaxSGE][]byte
	nsge  int
	total int
	sent  int    // payload bytes laid out
	msn   uint32 // MSN of an untagged message once started
	// RDMA Read: the resolved local sink and how the request names it.
	sink     []byte
	sinkSTag uint32
	sinkTO   uint64
	// inORQ: the Read Request has been laid out; the ORQ owns the work
	// request now and this entry only keeps the send queue's order.
	inORQ bool
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
	sent     int
}

// newEngine makes the engine of an idle QP.
func newEngine(qp *QP, pd *PD, sqDepth, rqDepth int) *engine {
	e := &engine{qp: qp, pd: pd, state: QPStateIdle}
	e.sq = newRing[sqEntry](sqDepth)
	e.rq = newRing[RecvWR](rqDepth)
	e.out = make([]WC, 0, 16)
	return e
}

// start moves an idle engine to RTS on a connection with the negotiated
// settings, at time now.
func (e *engine) start(neg negotiated, responder bool, maxFPDU int, lim engineLimits, now time.Duration) {
	e.neg, e.responder, e.maxFPDU, e.lim = neg, responder, maxFPDU, lim
	e.orq = newRing[orqEntry](max(neg.ord, 1))
	e.irq = newRing[irqEntry](max(neg.ird, 1))
	e.peerSpoke = !responder
	e.rx.init()
	e.tx.init(neg.p2p && !responder)
	e.clock.now, e.clock.rxMovedAt, e.clock.txMovedAt = now, now, now
	e.state = QPStateRTS
	if e.txHasWork() {
		e.act |= actTx
	}
}

// postSend queues prepared send work requests, all or none.
func (e *engine) postSend(entries []sqEntry) error {
	if e.state != QPStateIdle && e.state != QPStateRTS {
		return fmt.Errorf("%w (%v)", ErrQPState, e.state)
	}
	if e.sq.room() < len(entries) {
		return ErrQueueFull
	}
	for i := range entries {
		if entries[i].wr.Opcode == WRRead && e.state == QPStateRTS && e.neg.ord == 0 {
			return fmt.Errorf("%w: RDMA Read on a connection with ORD 0", ErrInvalidWR)
		}
	}
	for i := range entries {
		*e.sq.push() = entries[i]
	}
	if e.state == QPStateRTS {
		e.act |= actTx
	}
	return nil
}

// postRecv queues a receive buffer.
func (e *engine) postRecv(wr *RecvWR) error {
	if e.state != QPStateIdle && e.state != QPStateRTS && e.state != QPStateClosing {
		return fmt.Errorf("%w (%v)", ErrQPState, e.state)
	}
	if e.rq.full() {
		return ErrQueueFull
	}
	*e.rq.push() = *wr
	return nil
}

// sendRoom is how many more send work requests fit the send queue.
func (e *engine) sendRoom() int { return e.sq.room() }

// disconnect starts a graceful disconnect at time now: what is posted is
// sent, then our direction closes (actFIN), then the peer's close or the
// linger timeout ends the QP. It reports whether the QP was idle (never
// connected) and went straight to error.
func (e *engine) disconnect(now time.Duration) (idle bool) {
	switch e.state {
	case QPStateIdle:
		e.state = QPStateError
		return true
	case QPStateRTS:
		e.state = QPStateClosing
		e.clock.closing, e.clock.closingAt = true, now
		e.act |= actTx
	}
	return false
}

// fail moves the engine towards the error state. A locally detected
// protocol violation (*wire.TermError) first sends a Terminate; anything
// else closes the connection at once. The first error is kept. Nothing is
// flushed here: flush runs when the driver has stopped using the socket.
func (e *engine) fail(err error) {
	if e.state == QPStateError || e.state == QPStateTerminate {
		return
	}
	if e.err == nil {
		e.err = err
	}
	var te *wire.TermError
	if errors.As(err, &te) && e.state != QPStateIdle {
		e.term = te
		e.state = QPStateTerminate
		e.act |= actTerminate
		return
	}
	e.state = QPStateError
	e.act |= actClose
}

// closed records that the connection is gone for good (both driver loops
// stopped and nobody writes): the QP is in the error state.
func (e *engine) closed() {
	e.state = QPStateError
}

// flush completes every outstanding work request with WCFlushErr (a Send
// being received: with the status it had reached), each exactly once, and
// empties the queues. The driver calls it once, after the connection is
// gone and nobody lays out or writes anything any more.
func (e *engine) flush() {
	qp := e.qp
	e.state = QPStateError
	// In posting order: every Read in the ORQ was posted before every
	// request still owned by the send queue.
	for e.orq.len() > 0 {
		o := e.orq.at(0)
		if !o.internal {
			e.out = append(e.out, WC{ID: o.id, QP: qp, Status: WCFlushErr, Opcode: WCRead})
		}
		e.orq.pop()
	}
	for e.sq.len() > 0 {
		s := e.sq.at(0)
		if !s.inORQ {
			e.out = append(e.out, WC{ID: s.wr.ID, QP: qp, Status: WCFlushErr, Opcode: wcOpFor(s.wr.Opcode)})
		}
		e.sq.pop()
	}
	for e.irq.len() > 0 {
		e.irq.pop()
	}
	if e.rx.send.active {
		e.out = append(e.out, WC{ID: e.rx.send.wr.ID, QP: qp, Status: e.rx.send.status, Opcode: WCRecv})
		e.rx.send.active = false
	}
	for e.rq.len() > 0 {
		e.out = append(e.out, WC{ID: e.rq.at(0).ID, QP: qp, Status: WCFlushErr, Opcode: WCRecv})
		e.rq.pop()
	}
	e.tx.reset()
}

// takeActions returns and clears the pending actions.
func (e *engine) takeActions() actions {
	a := e.act
	e.act = 0
	return a
}

// tick advances the engine's clock to now and applies the timers: a peer
// stalled in the middle of an FPDU (stall timeout), a socket that takes no
// bytes while something waits to be written (write timeout), a graceful
// disconnect that the peer does not complete (linger timeout), and the
// initiator's nudges of a silent responder. It returns the time at which it
// wants the next tick (0: none needed).
//
// A timer fires on the first tick at least its timeout after the progress
// counter it watches last moved, as seen by ticks: with ticks every T/2 or
// more often, a stall is detected between T and 1.5 T after it began.
func (e *engine) tick(now time.Duration) (next time.Duration) {
	c := &e.clock
	c.now = now
	if c.rxProgress != c.rxSeen {
		c.rxSeen, c.rxMovedAt = c.rxProgress, now
	}
	if c.txProgress != c.txSeen {
		c.txSeen, c.txMovedAt = c.txProgress, now
	}
	switch e.state {
	case QPStateRTS, QPStateClosing:
	default:
		return 0
	}
	if e.lim.stall > 0 && e.rx.midFrame() && now-c.rxMovedAt >= e.lim.stall {
		e.fail(ErrStalled)
		return 0
	}
	if e.lim.write > 0 && e.tx.pending && now-c.txMovedAt >= e.lim.write {
		e.fail(ErrWriteStalled)
		return 0
	}
	if c.closing && e.lim.linger > 0 && now-c.closingAt >= e.lim.linger {
		e.fail(fmt.Errorf("iwarp: disconnect: peer did not close within %v", e.lim.linger))
		return 0
	}
	// The nudge (Config.Nudge): an initiator whose first FPDU went out and
	// that has heard nothing since.
	if !e.responder && e.lim.nudge > 0 && !e.rx.seen && e.state == QPStateRTS {
		if e.tx.sentFPDU && !c.nudgeArmed {
			c.nudgeArmed, c.nudgeAt = true, now+e.lim.nudge
		}
		if c.nudgeArmed && now >= c.nudgeAt && c.nudges < e.lim.maxNudges {
			c.nudges++
			e.tx.nudgePending = true
			e.act |= actTx
			c.nudgeAt = now + e.lim.nudge<<c.nudges
		}
	}
	return e.nextTick()
}

// nextTick is when the engine wants to be ticked next, from its current
// clock (0: no timer is running).
func (e *engine) nextTick() time.Duration {
	c := &e.clock
	var next time.Duration
	want := func(at time.Duration) {
		if at > 0 && (next == 0 || at < next) {
			next = at
		}
	}
	// Progress timers: check every half timeout.
	if e.lim.stall > 0 {
		want(c.now + e.lim.stall/2)
	}
	if e.lim.write > 0 {
		want(c.now + e.lim.write/2)
	}
	if c.closing && e.lim.linger > 0 {
		want(c.closingAt + e.lim.linger)
	}
	if !e.responder && e.lim.nudge > 0 && !e.rx.seen && c.nudges < e.lim.maxNudges {
		if c.nudgeArmed {
			want(max(c.nudgeAt, c.now+1))
		} else {
			want(c.now + e.lim.nudge)
		}
	}
	return next
}

// txHasWork reports whether something is waiting to be laid out or written.
func (e *engine) txHasWork() bool {
	t := &e.tx
	switch e.state {
	case QPStateRTS, QPStateClosing:
	default:
		return false
	}
	if !e.peerSpoke {
		return false
	}
	if t.pending || t.rtrPending || t.nudgePending {
		return true
	}
	if e.irq.len() > 0 {
		return true
	}
	// Send queue entries not yet laid out: a Read waiting for ORD room is
	// not work until a response frees a slot.
	if t.sqDone < e.sq.len() {
		s := e.sq.at(t.sqDone)
		if s.wr.Opcode == WRRead && !t.partialSQ && e.orq.len() >= e.neg.ord {
			return false
		}
		return true
	}
	return false
}

// sendDrained reports whether everything posted and owed has been written.
func (e *engine) sendDrained() bool {
	return !e.tx.pending && e.sq.len() == 0 && e.irq.len() == 0 && !e.tx.rtrPending
}

// ErrWriteStalled means the peer took no bytes for the write timeout while
// we had something to send (it stopped reading its socket).
var ErrWriteStalled = errors.New("iwarp: peer stopped reading: no write progress")
