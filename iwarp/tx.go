package iwarp

import (
	"os"
	"syscall"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

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
	// txInlineMax is the largest batch a posting goroutine writes itself;
	// bigger ones go to the send goroutine so that sending and receiving
	// run on two cores.
	txInlineMax = 64 << 10
	// txQuiet: a post writes inline only if the previous post is at least
	// this old. Back-to-back posts are left to the send goroutine, which
	// then writes them all in one system call.
	txQuiet = 10 * time.Microsecond
)

// txState belongs to whoever holds QP.txMu: the send goroutine, or a
// goroutine posting work that found the socket idle and writes inline.
type txState struct {
	msn   [wire.NumQN]uint32 // last MSN used per untagged queue
	arena []byte
	used  int
	iov   [][]byte
	open  bool // the last iovec is arena memory ending at used
	bytes int

	// The batch being written: iovecs from iovIdx on, the first of them
	// from iovOff on. pending is set from build to the end of the write.
	pending bool
	iovIdx  int
	iovOff  int
	sysIov  []unix.Iovec
	writeFn func(fd uintptr) bool
	wblock  bool // writeFn may wait for socket space
	wdone   bool
	werr    error

	sqDone int
	// partial marks a message emitted only in part by the last batch; it
	// must be finished before any other message of its class (siw does not
	// interleave messages).
	partialSQ, partialIRQ bool
	rtrPending            bool
	nudgePending          bool
	sentFPDU              bool // something went out (the nudge waits for it)
	wcs                   []WC
	term                  []byte
}

func (qp *QP) initTx() {
	t := &qp.tx
	t.arena = make([]byte, txArenaSize)
	t.iov = make([][]byte, 0, txMaxIov)
	t.sysIov = make([]unix.Iovec, txMaxIov)
	t.wcs = make([]WC, 0, qp.sqDepth)
	t.rtrPending = qp.neg.p2p && !qp.responder
	t.writeFn = qp.doWrite
}

// txInline is called after work was posted: if no one is sending, the
// caller sends now, without waiting for socket space, and leaves the rest to
// the send goroutine. This saves a goroutine switch per message when the
// socket has room, which it usually has.
func (qp *QP) txInline() {
	if qp.State() != QPStateRTS || !qp.txMu.TryLock() {
		qp.wake()
		return
	}
	more := qp.txRun(false)
	qp.txMu.Unlock()
	if more {
		qp.wake()
	}
}

// txRun builds and writes batches until there is no work (false) or, when
// not blocking, the socket is full or the QP left RTS (true: the send
// goroutine must go on). The caller holds txMu.
func (qp *QP) txRun(blocking bool) (more bool) {
	t := &qp.tx
	for {
		st := qp.State()
		if st != QPStateRTS && (!blocking || st != QPStateClosing) {
			return true
		}
		if !t.pending {
			qp.mu.Lock()
			spoke := qp.peerSpoke
			qp.mu.Unlock()
			if !spoke {
				return false // responder: wait for the initiator's first FPDU
			}
			if qp.buildBatch() == 0 {
				return false
			}
			t.pending, t.iovIdx, t.iovOff = true, 0, 0
		}
		if !blocking && t.bytes > txInlineMax {
			return true
		}
		done, err := qp.writePending(blocking)
		if err != nil {
			if st := qp.State(); st == QPStateRTS || st == QPStateClosing {
				qp.fail(err)
			}
			return true
		}
		if !done {
			return true
		}
		t.pending = false
		t.sentFPDU = true
		qp.completeBatch()
	}
}

func (qp *QP) txLoop() {
	defer qp.loopDone()
	for {
		<-qp.kick
		qp.txMu.Lock()
		st := qp.State()
		switch st {
		case QPStateError:
			qp.txMu.Unlock()
			return
		case QPStateTerminate:
			qp.sendTerminate()
			qp.txMu.Unlock()
			return
		}
		qp.txRun(true)
		if st := qp.State(); st == QPStateClosing && !qp.tx.pending && qp.sendDrained() {
			// Everything posted before Disconnect is out: FIN.
			_ = qp.conn.CloseWrite()
			_ = qp.conn.SetReadDeadline(time.Now().Add(qp.cfg.LingerTimeout))
			qp.txMu.Unlock()
			return
		}
		qp.txMu.Unlock()
	}
}

// sendDrained reports whether the send queue and the read responses owed to
// the peer are empty.
func (qp *QP) sendDrained() bool {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.sq.len() == 0 && qp.irq.len() == 0
}

// writePending writes the rest of the current batch with writev. Without
// blocking it stops at a full socket and reports done=false.
func (qp *QP) writePending(blocking bool) (done bool, err error) {
	t := &qp.tx
	t.wblock, t.wdone, t.werr = blocking, false, nil
	for !t.wdone {
		if err := qp.raw.Write(t.writeFn); err != nil {
			return false, err
		}
		if t.werr != nil {
			return false, t.werr
		}
		if !blocking && !t.wdone {
			return false, nil
		}
	}
	// Drop references to registered memory as soon as it is on the wire.
	clear(t.iov)
	return true, nil
}

// doWrite is the RawConn write callback: writev of the pending iovecs.
// Returning false makes the runtime wait for socket space (blocking mode).
func (qp *QP) doWrite(fd uintptr) bool {
	t := &qp.tx
	for {
		n := 0
		for i := t.iovIdx; i < len(t.iov) && n < len(t.sysIov); i++ {
			b := t.iov[i]
			if i == t.iovIdx {
				b = b[t.iovOff:]
			}
			if len(b) == 0 {
				continue
			}
			t.sysIov[n].Base = &b[0]
			t.sysIov[n].SetLen(len(b))
			n++
		}
		if n == 0 {
			t.wdone = true
			return true
		}
		w, _, e := syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&t.sysIov[0])), uintptr(n))
		switch e {
		case 0:
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return !t.wblock
		default:
			t.werr = os.NewSyscallError("writev", e)
			return true
		}
		// Advance past what was written.
		left := int(w)
		for left > 0 {
			rem := len(t.iov[t.iovIdx]) - t.iovOff
			if left < rem {
				t.iovOff += left
				break
			}
			left -= rem
			t.iovIdx++
			t.iovOff = 0
		}
		for t.iovIdx < len(t.iov) && len(t.iov[t.iovIdx]) == t.iovOff {
			t.iovIdx++
			t.iovOff = 0
		}
		if t.iovIdx == len(t.iov) {
			t.wdone = true
			return true
		}
	}
}

// completeBatch retires what the last write sent and reports completions.
func (qp *QP) completeBatch() {
	t := &qp.tx
	t.wcs = t.wcs[:0]
	qp.mu.Lock()
	for i := 0; i < t.sqDone; i++ {
		e := qp.sq.at(0)
		if e.wr.Opcode != WRRead && e.wr.Signaled {
			t.wcs = append(t.wcs, WC{ID: e.wr.ID, QP: qp, Opcode: wcOpFor(e.wr.Opcode), ByteLen: e.total})
		}
		qp.sq.pop()
	}
	qp.mu.Unlock()
	for i := range t.wcs {
		qp.scq.push(&t.wcs[i])
	}
}

// buildBatch lays out as many FPDUs as the limits allow and returns the
// number of iovecs.
func (qp *QP) buildBatch() int {
	t := &qp.tx
	t.iov, t.used, t.open, t.bytes = t.iov[:0], 0, false, 0
	t.sqDone = 0
	qp.mu.Lock()
	nsq, nirq := qp.sq.len(), qp.irq.len()
	qp.mu.Unlock()

	if t.rtrPending {
		if !qp.emitRTR() {
			return len(t.iov)
		}
		t.rtrPending = false
	}
	if t.nudgePending && !t.partialSQ && !t.partialIRQ {
		// A zero-length RDMA Write is a whole tagged message of its own:
		// only between messages.
		hdr := qp.arenaAdd(wire.TaggedHeaderLen)
		wire.PutTaggedHeader(hdr, wire.OpWrite, true, 0, 0, 0)
		qp.emitFPDU(hdr, nil, 0)
		t.nudgePending = false
	}
	// A partly sent Write must finish before a Read Response (both tagged);
	// a partly sent Read Response before the next one.
	if t.partialSQ {
		if !qp.emitSQ(nsq) {
			return len(t.iov)
		}
	}
	for ; nirq > 0; nirq-- {
		e := qp.irq.at(0)
		e.sge[0] = e.src
		done := qp.emitTagged(wire.OpReadResponse, e.sinkSTag, e.sinkTO, e.sge[:], len(e.src), &e.sent)
		t.partialIRQ = !done
		if !done {
			return len(t.iov)
		}
		// The response is laid out (the iovecs hold its memory): the read
		// stops counting against IRD now, before the peer can see the
		// response and issue its next read.
		qp.mu.Lock()
		qp.irq.pop()
		qp.mu.Unlock()
	}
	qp.emitSQ(nsq)
	return len(t.iov)
}

// emitSQ emits send queue entries from t.sqDone on; false if it stopped
// inside a message or for lack of room.
func (qp *QP) emitSQ(nsq int) bool {
	t := &qp.tx
	for t.sqDone < nsq {
		e := qp.sq.at(t.sqDone)
		var done bool
		switch e.wr.Opcode {
		case WRWrite:
			done = qp.emitTagged(wire.OpWrite, e.wr.RemoteSTag, e.wr.RemoteTO, e.sge[:e.nsge], e.total, &e.sent)
		case WRRead:
			if !qp.room(wire.UntaggedHeaderLen + wire.ReadRequestLen) {
				return false
			}
			qp.mu.Lock()
			if qp.orq.len() >= qp.neg.ord {
				qp.mu.Unlock()
				return false // ORD reached: the send queue waits for a response
			}
			o := qp.orq.push()
			o.id, o.signaled, o.sinkSTag, o.sinkTO, o.sink = e.wr.ID, e.wr.Signaled, e.sinkSTag, e.sinkTO, e.sink
			qp.mu.Unlock()
			qp.emitReadRequest(&wire.ReadRequest{SinkSTag: e.sinkSTag, SinkTO: e.sinkTO, Size: uint32(e.total), SrcSTag: e.wr.RemoteSTag, SrcTO: e.wr.RemoteTO})
			done = true
		default:
			done = qp.emitSend(e)
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
func (qp *QP) room(arenaNeed int) bool {
	t := &qp.tx
	if len(t.iov) == 0 {
		return true
	}
	return t.used+arenaNeed+wire.CRCLen+3 <= len(t.arena) &&
		len(t.iov)+MaxSGE+2 <= cap(t.iov) && t.bytes < txMaxBytes
}

// arenaAdd appends n arena bytes after used to the iovecs and returns them.
func (qp *QP) arenaAdd(n int) []byte {
	t := &qp.tx
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

func (qp *QP) iovAdd(b []byte) {
	t := &qp.tx
	t.iov = append(t.iov, b)
	t.open = false
	t.bytes += len(b)
}

// emitFPDU lays out one FPDU: the header (already encoded in hdr, which is
// arena memory just added), the payload pieces, pad and CRC.
func (qp *QP) emitFPDU(hdr []byte, pieces [][]byte, plen int) {
	t := &qp.tx
	var crc uint32
	if qp.neg.crc {
		crc = wire.CRCUpdate(0, hdr)
	}
	if plen <= txCopyMax {
		for _, p := range pieces {
			copy(qp.arenaAdd(len(p)), p)
		}
	} else {
		for _, p := range pieces {
			qp.iovAdd(p)
		}
	}
	if qp.neg.crc {
		for _, p := range pieces {
			crc = wire.CRCUpdate(crc, p)
		}
	}
	pad := wire.PadLen(len(hdr) - wire.FPDULenFieldLen + plen)
	tr := qp.arenaAdd(pad + wire.CRCLen)
	clear(tr[:pad])
	if qp.neg.crc {
		crc = wire.CRCUpdate(crc, tr[:pad])
	}
	wire.PutCRC(tr[pad:], crc)
	_ = t
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

func (qp *QP) maxPayload(hdrLen int) int {
	return qp.maxFPDU - hdrLen - wire.CRCLen
}

// emitSend emits the FPDUs of a Send variant; false if the batch filled.
func (qp *QP) emitSend(e *sqEntry) bool {
	t := &qp.tx
	op := e.wr.Opcode.rdmap()
	var inv uint32
	if op.Invalidates() {
		inv = e.wr.InvalidateSTag
	}
	if e.sent == 0 && e.msn == 0 {
		t.msn[wire.QNSend]++
		e.msn = t.msn[wire.QNSend]
	}
	var pieces [MaxSGE][]byte
	for {
		plen := min(e.total-e.sent, qp.maxPayload(wire.UntaggedHeaderLen))
		need := wire.UntaggedHeaderLen
		if plen <= txCopyMax {
			need += plen
		}
		if !qp.room(need) {
			return false
		}
		last := e.sent+plen == e.total
		hdr := qp.arenaAdd(wire.UntaggedHeaderLen)
		wire.PutUntaggedHeader(hdr, op, last, inv, wire.QNSend, e.msn, uint32(e.sent), plen)
		qp.emitFPDU(hdr, gather(pieces[:0], e.sge[:e.nsge], e.sent, plen), plen)
		e.sent += plen
		if last {
			return true
		}
	}
}

// emitTagged emits the FPDUs of a tagged message (RDMA Write, RDMA Read
// Response) of total bytes gathered from sge, from *sent on; false if the
// batch filled first.
func (qp *QP) emitTagged(op wire.Opcode, stag uint32, to uint64, sge [][]byte, total int, sent *int) bool {
	var pieces [MaxSGE][]byte
	for {
		plen := min(total-*sent, qp.maxPayload(wire.TaggedHeaderLen))
		need := wire.TaggedHeaderLen
		if plen <= txCopyMax {
			need += plen
		}
		if !qp.room(need) {
			return false
		}
		last := *sent+plen == total
		hdr := qp.arenaAdd(wire.TaggedHeaderLen)
		wire.PutTaggedHeader(hdr, op, last, stag, to+uint64(*sent), plen)
		qp.emitFPDU(hdr, gather(pieces[:0], sge, *sent, plen), plen)
		*sent += plen
		if last {
			return true
		}
	}
}

// emitReadRequest emits an RDMA Read Request (room already checked).
func (qp *QP) emitReadRequest(rr *wire.ReadRequest) {
	t := &qp.tx
	t.msn[wire.QNReadRequest]++
	b := qp.arenaAdd(wire.UntaggedHeaderLen + wire.ReadRequestLen)
	wire.PutUntaggedHeader(b, wire.OpReadRequest, true, 0, wire.QNReadRequest, t.msn[wire.QNReadRequest], 0, wire.ReadRequestLen)
	rr.Encode(b[wire.UntaggedHeaderLen:])
	// The body is arena memory already in place: account it as the header.
	qp.emitFPDU(b, nil, 0)
}

// emitRTR emits the peer-to-peer ready-to-receive message the responder
// chose (RFC 6581 §6): a zero-length RDMA Write or Read.
func (qp *QP) emitRTR() bool {
	if qp.neg.rtr == wire.RTRRead {
		qp.mu.Lock()
		o := qp.orq.push()
		o.internal = true
		qp.mu.Unlock()
		// siw's form: sink STag 0 / TO 0, size 0, source STag 1 / TO 0.
		qp.emitReadRequest(&wire.ReadRequest{SrcSTag: 1})
		return true
	}
	hdr := qp.arenaAdd(wire.TaggedHeaderLen)
	wire.PutTaggedHeader(hdr, wire.OpWrite, true, 1, 0, 0)
	qp.emitFPDU(hdr, nil, 0)
	return true
}

// sendTerminate sends the Terminate for a locally detected error (RFC 5040
// §5.3), unless a message is half sent (as siw, it is then skipped), and
// closes our direction of the connection.
func (qp *QP) sendTerminate() {
	t := &qp.tx
	qp.mu.Lock()
	te := qp.term
	qp.mu.Unlock()
	if te != nil && !t.pending && !t.partialSQ && !t.partialIRQ {
		term := wire.Terminate{Cause: te.Cause}
		if l := te.Cause.Layer(); l != wire.LayerLLP && qp.rx.hdrLen > wire.FPDULenFieldLen {
			// Include the offending DDP header with its segment length.
			term.SegLenValid, term.DDPHeaderIncluded = true, true
			term.DDPSegLen = uint16(qp.rx.hdr[0])<<8 | uint16(qp.rx.hdr[1])
			term.Headers = qp.rx.hdr[wire.FPDULenFieldLen:qp.rx.hdrLen]
		}
		payload := term.AppendPayload(t.term[:0])
		fr := make([]byte, wire.UntaggedHeaderLen, wire.UntaggedHeaderLen+len(payload)+8)
		// RFC 5040 §5.3 / siw: Terminate on QN 2 with MSN 1, MO 0, last.
		wire.PutUntaggedHeader(fr, wire.OpTerminate, true, 0, wire.QNTerminate, 1, 0, len(payload))
		fr = append(fr, payload...)
		pad := wire.PadLen(len(fr) - wire.FPDULenFieldLen)
		fr = append(fr, make([]byte, pad+wire.CRCLen)...)
		if qp.neg.crc {
			wire.PutCRC(fr[len(fr)-wire.CRCLen:], wire.CRC(fr[:len(fr)-wire.CRCLen]))
		}
		if _, err := qp.conn.Write(fr); err != nil {
			qp.log.Debug("iwarp: terminate not sent", zap.Error(err))
		}
	}
	_ = qp.conn.CloseWrite()
}
