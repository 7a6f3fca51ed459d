package iwarp

import (
	"github.com/nvmetd/nvmetd/iwarp/wire"
)

// Batching limits of one vectored write.
const (
	txArenaSize = 64 << 10 // headers, pads, CRCs and small payloads
	txMaxIov    = 1024     // IOV_MAX
	txMaxBytes  = 4 << 20  // bytes per write
	// txCopyMax is the largest payload piece copied into the arena instead
	// of being sent from its own iovec: below it, one more iovec costs
	// more than the copy, and consecutive small FPDUs coalesce into one.
	txCopyMax = 256
)

// engineTx is the send half of the engine: it lays out batches of FPDUs
// (headers, pads and CRCs in an arena; payloads as slices of the registered
// memory they come from) for one vectored write, and retires the work
// requests a finished write carried.
type engineTx struct {
	// owner: a goroutine is laying out or writing (see txClaim). Only the
	// owner touches the fields below the line.
	owner   bool
	handoff bool // the owner gave up until the socket has room: the send goroutine takes over

	msn   [wire.NumQN]uint32 // last MSN used per untagged queue
	arena []byte
	used  int
	iov   [][]byte
	open  bool // the last iovec is arena memory ending at used
	bytes int

	// The batch being written: iovecs from iovIdx on, the first of them
	// from iovOff on. pending is set from layout to the end of the write.
	pending bool
	iovIdx  int
	iovOff  int

	sqDone int // send queue entries (from the head) wholly laid out
	// partial marks a message laid out only in part by the last batch; it
	// must be finished before any other message of its class (siw does not
	// interleave messages).
	partialSQ, partialIRQ bool
	rtrPending            bool
	nudgePending          bool
	sentFPDU              bool // something went out (the nudge waits for it)
}

func (t *engineTx) init(rtr bool) {
	if t.arena == nil {
		t.arena = make([]byte, txArenaSize)
		t.iov = make([][]byte, 0, txMaxIov)
	}
	t.rtrPending = rtr
}

// reset drops the batch (after a failure).
func (t *engineTx) reset() {
	clear(t.iov)
	t.iov = t.iov[:0]
	t.pending, t.sqDone, t.partialSQ, t.partialIRQ = false, 0, false, false
	t.rtrPending, t.nudgePending = false, false
}

// writer names who may become the writer in txClaim.
type writer uint8

const (
	writerPoster writer = iota // a goroutine that just posted work
	writerRx                   // the receive loop, done with what one read brought
	writerTx                   // the send goroutine
)

// txClaim is the send policy, in one place. It decides whether the caller
// writes what is waiting, and returns true if it has become the writer:
//
//   - While the receive loop handles what one read brought (rxBusy), work
//     posted meanwhile is left to it: when it is done it writes everything
//     in one batch (the answers to a burst of commands in one system call).
//   - Otherwise the first goroutine that finds work and no writer becomes
//     the writer, and writes without waiting for socket space: no goroutine
//     switch when the socket has room, which it usually has.
//   - A writer that finds the socket full hands over to the send goroutine
//     (txRelease with full), which waits for room; so does everything in a
//     state other than RTS (Terminate, a graceful disconnect's FIN).
//   - A writer keeps writing until nothing is left, so work posted while
//     it writes needs no one else.
func (e *engine) txClaim(w writer) bool {
	t := &e.tx
	if t.owner {
		return false
	}
	if w == writerPoster && e.rxBusy {
		return false
	}
	if t.handoff && w != writerTx {
		return false
	}
	if w != writerTx && e.state != QPStateRTS {
		e.act |= actTx // the send goroutine handles the closing states
		return false
	}
	if !e.txHasWork() {
		return false
	}
	t.owner, t.handoff = true, false
	return true
}

// txRelease ends the caller's turn as writer. full means it stopped
// because the socket had no room (a non-blocking writer): the send
// goroutine must take over. It returns true if work remains that the caller
// must see to (as writer again, or by waking the send goroutine): the
// driver calls txClaim again.
func (e *engine) txRelease(full bool) {
	t := &e.tx
	t.owner = false
	if full {
		t.handoff = true
		e.act |= actTx
		return
	}
	if e.txHasWork() {
		e.act |= actTx
	}
}

// txLayout lays out the next batch if none is pending, and returns the
// iovecs still to be written (nil: nothing to write). Only the writer calls
// it.
func (e *engine) txLayout() [][]byte {
	t := &e.tx
	if e.state != QPStateRTS && e.state != QPStateClosing {
		return nil // a half-written batch stays half written (see terminateFrame)
	}
	if !t.pending {
		if !e.peerSpoke {
			return nil
		}
		if e.buildBatch() == 0 {
			return nil
		}
		t.pending, t.iovIdx, t.iovOff = true, 0, 0
		e.stats.Batches++
	}
	return t.iov[t.iovIdx:]
}

// txOffset is how much of the first iovec txLayout returned was written
// already.
func (e *engine) txOffset() int { return e.tx.iovOff }

// txWritten accounts n bytes written from the pending batch. When the
// batch is complete it retires what it carried (completions go to out) and
// returns true.
func (e *engine) txWritten(n int) bool {
	t := &e.tx
	if n > 0 {
		e.clock.txProgress++
	}
	for n > 0 {
		rem := len(t.iov[t.iovIdx]) - t.iovOff
		if n < rem {
			t.iovOff += n
			break
		}
		n -= rem
		t.iovIdx++
		t.iovOff = 0
	}
	for t.iovIdx < len(t.iov) && len(t.iov[t.iovIdx]) == t.iovOff {
		t.iovIdx++
		t.iovOff = 0
	}
	if t.iovIdx < len(t.iov) {
		return false
	}
	// Drop references to registered memory as soon as it is on the wire.
	clear(t.iov)
	t.iov = t.iov[:0]
	t.pending = false
	t.sentFPDU = true
	e.completeBatch()
	return true
}

// completeBatch retires the send queue entries the last write finished.
func (e *engine) completeBatch() {
	t := &e.tx
	for i := 0; i < t.sqDone; i++ {
		s := e.sq.at(0)
		if s.wr.Opcode != WRRead && s.wr.Signaled {
			e.out = append(e.out, WC{ID: s.wr.ID, QP: e.qp, Opcode: wcOpFor(s.wr.Opcode), ByteLen: s.total})
		}
		e.sq.pop()
	}
	t.sqDone = 0
	if e.state == QPStateClosing && e.sendDrained() {
		e.act |= actFIN
	}
}

// buildBatch lays out as many FPDUs as the limits allow and returns the
// number of iovecs.
func (e *engine) buildBatch() int {
	t := &e.tx
	t.iov, t.used, t.open, t.bytes = t.iov[:0], 0, false, 0
	t.sqDone = 0

	if t.rtrPending {
		e.emitRTR()
		t.rtrPending = false
	}
	if t.nudgePending && !t.partialSQ && !t.partialIRQ {
		// A zero-length RDMA Write is a whole tagged message of its own:
		// only between messages.
		hdr := e.arenaAdd(wire.TaggedHeaderLen)
		wire.PutTaggedHeader(hdr, wire.OpWrite, true, 0, 0, 0)
		e.emitFPDU(hdr, nil, 0)
		t.nudgePending = false
	}
	// A partly sent Write must finish before a Read Response (both tagged);
	// a partly sent Read Response before the next one.
	if t.partialSQ {
		if !e.emitSQ() {
			return len(t.iov)
		}
	}
	for e.irq.len() > 0 {
		i := e.irq.at(0)
		var sge [1][]byte
		sge[0] = i.src
		done := e.emitTagged(wire.OpReadResponse, i.sinkSTag, i.sinkTO, sge[:], len(i.src), &i.sent)
		t.partialIRQ = !done
		if !done {
			return len(t.iov)
		}
		// The response is laid out (the iovecs hold its memory): the read
		// stops counting against IRD now, before the peer can see the
		// response and issue its next read.
		e.irq.pop()
	}
	e.emitSQ()
	return len(t.iov)
}

// emitSQ lays out send queue entries from t.sqDone on; false if it stopped
// inside a message, at the ORD limit or for lack of room.
func (e *engine) emitSQ() bool {
	t := &e.tx
	for t.sqDone < e.sq.len() {
		s := e.sq.at(t.sqDone)
		var done bool
		switch s.wr.Opcode {
		case WRWrite:
			done = e.emitTagged(wire.OpWrite, s.wr.RemoteSTag, s.wr.RemoteTO, s.sge[:s.nsge], s.total, &s.sent)
		case WRRead:
			if !e.room(wire.UntaggedHeaderLen + wire.ReadRequestLen) {
				return false
			}
			if e.orq.len() >= e.neg.ord {
				return false // ORD reached: the send queue waits for a response
			}
			// The Read moves to the ORQ now: from here on only the ORQ
			// completes or flushes it.
			o := e.orq.push()
			o.id, o.signaled, o.sinkSTag, o.sinkTO, o.sink = s.wr.ID, s.wr.Signaled, s.sinkSTag, s.sinkTO, s.sink
			s.inORQ = true
			e.emitReadRequest(&wire.ReadRequest{SinkSTag: s.sinkSTag, SinkTO: s.sinkTO, Size: uint32(s.total), SrcSTag: s.wr.RemoteSTag, SrcTO: s.wr.RemoteTO})
			done = true
		default:
			done = e.emitSend(s)
		}
		t.partialSQ = !done
		if !done {
			return false
		}
		t.sqDone++
	}
	return true
}

// room reports whether one more FPDU of the given arena need fits the batch.
func (e *engine) room(arenaNeed int) bool {
	t := &e.tx
	if len(t.iov) == 0 {
		return true
	}
	return t.used+arenaNeed+wire.CRCLen+3 <= len(t.arena) &&
		len(t.iov)+MaxSGE+2 <= cap(t.iov) && t.bytes < txMaxBytes
}

// arenaAdd appends n arena bytes after used to the iovecs and returns them.
func (e *engine) arenaAdd(n int) []byte {
	t := &e.tx
	b := t.arena[t.used : t.used+n]
	if t.open {
		last := &t.iov[len(t.iov)-1]
		*last = (*last)[:len(*last)+n]
	} else {
		t.iov = append(t.iov, b)
		t.open = true
	}
	t.used += n
	t.bytes += n
	return b
}

func (e *engine) iovAdd(b []byte) {
	t := &e.tx
	t.iov = append(t.iov, b)
	t.open = false
	t.bytes += len(b)
}

// emitFPDU lays out one FPDU: the header (already encoded in hdr, which is
// arena memory just added), the payload pieces, pad and CRC.
func (e *engine) emitFPDU(hdr []byte, pieces [][]byte, plen int) {
	var crc uint32
	if e.neg.crc {
		crc = wire.CRCUpdate(0, hdr)
	}
	if plen <= txCopyMax {
		for _, p := range pieces {
			copy(e.arenaAdd(len(p)), p)
		}
	} else {
		for _, p := range pieces {
			e.iovAdd(p)
		}
	}
	if e.neg.crc {
		for _, p := range pieces {
			crc = wire.CRCUpdate(crc, p)
		}
	}
	pad := wire.PadLen(len(hdr) - wire.FPDULenFieldLen + plen)
	tr := e.arenaAdd(pad + wire.CRCLen)
	clear(tr[:pad])
	if e.neg.crc {
		crc = wire.CRCUpdate(crc, tr[:pad])
	}
	wire.PutCRC(tr[pad:], crc)
	e.stats.FPDUsSent++
}

// gather returns the pieces of a gather list covering [off, off+n).
func gather(dst [][]byte, sge [][]byte, off, n int) [][]byte {
	for _, s := range sge {
		if n == 0 {
			break
		}
		if off >= len(s) {
			off -= len(s)
			continue
		}
		k := min(len(s)-off, n)
		dst = append(dst, s[off:off+k])
		off, n = 0, n-k
	}
	return dst
}

func (e *engine) maxPayload(hdrLen int) int {
	return e.maxFPDU - hdrLen - wire.CRCLen
}

// emitSend lays out the FPDUs of a Send variant; false if the batch filled.
func (e *engine) emitSend(s *sqEntry) bool {
	t := &e.tx
	op := s.wr.Opcode.rdmap()
	var inv uint32
	if op.Invalidates() {
		inv = s.wr.InvalidateSTag
	}
	if s.sent == 0 && s.msn == 0 {
		t.msn[wire.QNSend]++
		s.msn = t.msn[wire.QNSend]
	}
	var pieces [MaxSGE][]byte
	for {
		plen := min(s.total-s.sent, e.maxPayload(wire.UntaggedHeaderLen))
		need := wire.UntaggedHeaderLen
		if plen <= txCopyMax {
			need += plen
		}
		if !e.room(need) {
			return false
		}
		last := s.sent+plen == s.total
		hdr := e.arenaAdd(wire.UntaggedHeaderLen)
		wire.PutUntaggedHeader(hdr, op, last, inv, wire.QNSend, s.msn, uint32(s.sent), plen)
		e.emitFPDU(hdr, gather(pieces[:0], s.sge[:s.nsge], s.sent, plen), plen)
		s.sent += plen
		if last {
			return true
		}
	}
}

// emitTagged lays out the FPDUs of a tagged message (RDMA Write, RDMA Read
// Response) of total bytes gathered from sge, from *sent on; false if the
// batch filled first.
func (e *engine) emitTagged(op wire.Opcode, stag uint32, to uint64, sge [][]byte, total int, sent *int) bool {
	var pieces [MaxSGE][]byte
	for {
		plen := min(total-*sent, e.maxPayload(wire.TaggedHeaderLen))
		need := wire.TaggedHeaderLen
		if plen <= txCopyMax {
			need += plen
		}
		if !e.room(need) {
			return false
		}
		last := *sent+plen == total
		hdr := e.arenaAdd(wire.TaggedHeaderLen)
		wire.PutTaggedHeader(hdr, op, last, stag, to+uint64(*sent), plen)
		e.emitFPDU(hdr, gather(pieces[:0], sge, *sent, plen), plen)
		*sent += plen
		if last {
			return true
		}
	}
}

// emitReadRequest lays out an RDMA Read Request (room already checked).
func (e *engine) emitReadRequest(rr *wire.ReadRequest) {
	t := &e.tx
	t.msn[wire.QNReadRequest]++
	b := e.arenaAdd(wire.UntaggedHeaderLen + wire.ReadRequestLen)
	wire.PutUntaggedHeader(b, wire.OpReadRequest, true, 0, wire.QNReadRequest, t.msn[wire.QNReadRequest], 0, wire.ReadRequestLen)
	rr.Encode(b[wire.UntaggedHeaderLen:])
	// The body is arena memory already in place: account it as the header.
	e.emitFPDU(b, nil, 0)
}

// emitRTR lays out the peer-to-peer ready-to-receive message the responder
// chose (RFC 6581 §6): a zero-length RDMA Write or Read.
func (e *engine) emitRTR() {
	if e.neg.rtr == wire.RTRRead {
		o := e.orq.push()
		o.internal = true
		// siw's form: sink STag 0 / TO 0, size 0, source STag 1 / TO 0.
		e.emitReadRequest(&wire.ReadRequest{SrcSTag: 1})
		return
	}
	hdr := e.arenaAdd(wire.TaggedHeaderLen)
	wire.PutTaggedHeader(hdr, wire.OpWrite, true, 1, 0, 0)
	e.emitFPDU(hdr, nil, 0)
}

// terminateFrame returns the Terminate FPDU for a locally detected error
// (RFC 5040 §5.3), or nil when a message is half sent (as siw, it is then
// skipped: the peer could not parse it). buf is scratch space.
func (e *engine) terminateFrame(buf []byte) []byte {
	t := &e.tx
	te := e.term
	if te == nil || t.pending || t.partialSQ || t.partialIRQ {
		return nil
	}
	term := wire.Terminate{Cause: te.Cause}
	r := &e.rx
	if l := te.Cause.Layer(); l != wire.LayerLLP && r.hdrGot > wire.FPDULenFieldLen {
		// Include the offending DDP header with its segment length.
		n := min(r.hdrGot, r.h.Len())
		term.SegLenValid, term.DDPHeaderIncluded = true, true
		term.DDPSegLen = uint16(r.hdr[0])<<8 | uint16(r.hdr[1])
		term.Headers = r.hdr[wire.FPDULenFieldLen:n]
	}
	fr := buf[:wire.UntaggedHeaderLen]
	fr = term.AppendPayload(fr)
	plen := len(fr) - wire.UntaggedHeaderLen
	// RFC 5040 §5.3 / siw: Terminate on QN 2 with MSN 1, MO 0, last.
	wire.PutUntaggedHeader(fr, wire.OpTerminate, true, 0, wire.QNTerminate, 1, 0, plen)
	pad := wire.PadLen(len(fr) - wire.FPDULenFieldLen)
	for i := 0; i < pad+wire.CRCLen; i++ {
		fr = append(fr, 0)
	}
	if e.neg.crc {
		wire.PutCRC(fr[len(fr)-wire.CRCLen:], wire.CRC(fr[:len(fr)-wire.CRCLen]))
	}
	e.stats.TerminateSent, e.stats.TerminateSentCause = true, uint16(te.Cause)
	return fr
}
