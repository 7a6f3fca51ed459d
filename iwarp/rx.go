package iwarp

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/nvmetd/nvmetd/iwarp/wire"
)

// maxTermPayload bounds how much of a received Terminate is kept.
const maxTermPayload = 128

// rxState is owned by the receive loop.
type rxState struct {
	buf      []byte // read-ahead: small FPDUs are parsed from here
	pos, end int
	msn      [wire.NumQN]uint32 // next expected MSN per untagged queue
	hdr      [wire.UntaggedHeaderLen]byte
	hdrLen   int
	scratch  [maxTermPayload]byte
	discard  []byte
	seen     bool // an FPDU has arrived (mirrors QP.rxSeen without atomics)
	wc       WC   // completion being delivered (heap-resident: no per-message allocation)

	// the Send message being placed
	send struct {
		active bool
		wr     RecvWR
		got    int
		status WCStatus // reported if the QP fails mid-message
	}

	// readv through the runtime poller without allocating: the callback
	// is bound once; its arguments travel in these fields.
	iov    [2]unix.Iovec
	iovCnt int
	readFn func(fd uintptr) bool
	readN  int
	rerr   error
	spin   time.Duration
}

func (qp *QP) initRx() {
	r := &qp.rx
	r.buf = make([]byte, qp.cfg.ReadBuffer)
	for i := range r.msn {
		r.msn[i] = 1 // RFC 5040 §5.1: the first message on each queue has MSN 1
	}
	r.readFn = qp.doRead
	r.spin = qp.cfg.BusyPoll
}

// doRead is the RawConn read callback: one readv into the prepared iovecs.
// With busy polling it retries a would-block read until the spin time runs
// out before letting the runtime park the goroutine.
func (qp *QP) doRead(fd uintptr) bool {
	r := &qp.rx
	var deadline time.Time
	for {
		n, _, e := syscall.Syscall(syscall.SYS_READV, fd, uintptr(unsafe.Pointer(&r.iov[0])), uintptr(r.iovCnt))
		switch e {
		case 0:
			r.readN = int(n)
			if n == 0 {
				r.rerr = io.EOF
			}
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			if r.spin <= 0 {
				return false
			}
			now := time.Now()
			if deadline.IsZero() {
				deadline = now.Add(r.spin)
			} else if now.After(deadline) {
				return false
			}
			// Let other goroutines of this P run between polls (the
			// peer's loop may be one of them when both ends share a
			// process).
			runtime.Gosched()
			continue
		default:
			r.rerr = os.NewSyscallError("readv", e)
			return true
		}
	}
}

// readv reads into a then b with one system call. Before it may block, it
// sends what the handlers posted while the previous read's FPDUs were
// processed: all of them in one write, from this goroutine.
func (qp *QP) readv(a, b []byte) (int, error) {
	if qp.rxDefer.Swap(false) {
		qp.txInline()
	}
	r := &qp.rx
	r.iovCnt = 0
	for _, p := range [2][]byte{a, b} {
		if len(p) > 0 {
			r.iov[r.iovCnt].Base = &p[0]
			r.iov[r.iovCnt].SetLen(len(p))
			r.iovCnt++
		}
	}
	r.readN, r.rerr = 0, nil
	err := qp.raw.Read(r.readFn)
	r.iov[0].Base, r.iov[1].Base = nil, nil
	if err != nil {
		return 0, err
	}
	if r.readN > 0 {
		qp.rxProgress.Add(1)
		qp.rxDefer.Store(true)
	}
	return r.readN, r.rerr
}

// fill makes at least n bytes available in the read-ahead buffer.
func (qp *QP) fill(n int) error {
	r := &qp.rx
	for r.end-r.pos < n {
		if r.pos == r.end {
			r.pos, r.end = 0, 0
		} else if len(r.buf)-r.pos < n {
			r.end = copy(r.buf, r.buf[r.pos:r.end])
			r.pos = 0
		}
		m, err := qp.readv(r.buf[r.end:], nil)
		r.end += m
		if err != nil && r.end-r.pos < n {
			return err
		}
	}
	return nil
}

// readInto fills dst from the read-ahead buffer and then straight from the
// socket; bytes beyond dst that the same read returns land in the
// read-ahead buffer.
func (qp *QP) readInto(dst []byte) error {
	r := &qp.rx
	k := copy(dst, r.buf[r.pos:r.end])
	r.pos += k
	dst = dst[k:]
	for len(dst) > 0 {
		r.pos, r.end = 0, 0
		m, err := qp.readv(dst, r.buf)
		if m > len(dst) {
			r.end = m - len(dst)
			m = len(dst)
		}
		dst = dst[m:]
		if err != nil && len(dst) > 0 {
			return err
		}
	}
	return nil
}

// skip consumes n payload bytes without keeping them.
func (qp *QP) skip(n int) error {
	for n > 0 {
		if qp.rx.discard == nil {
			qp.rx.discard = make([]byte, 4096)
		}
		k := min(n, len(qp.rx.discard))
		if err := qp.readInto(qp.rx.discard[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

func (qp *QP) rxLoop() {
	defer qp.loopDone()
	err := qp.receive()
	switch st := qp.State(); {
	case st == QPStateClosing && (errors.Is(err, io.EOF) || errors.Is(err, os.ErrDeadlineExceeded) || isClosedErr(err)):
		// Graceful disconnect completed (or lingered out).
		qp.fail(nil)
		return
	case errors.Is(err, io.EOF):
		err = ErrPeerClosed
	case isClosedErr(err) && st != QPStateRTS:
		return // we closed it
	}
	qp.fail(err)
	if qp.State() == QPStateTerminate {
		// Let the Terminate reach the peer: read and drop what comes until
		// the peer closes or the linger time ends.
		_ = qp.conn.SetReadDeadline(time.Now().Add(qp.cfg.LingerTimeout))
		for {
			qp.rx.pos, qp.rx.end = 0, 0
			if _, err := qp.readv(qp.rx.buf, nil); err != nil {
				return
			}
		}
	}
}

// termErr builds a local protocol error about the current FPDU; the
// Terminate will carry its DDP header.
func (qp *QP) termErr(c wire.Cause, format string, args ...any) error {
	return &wire.TermError{Cause: c, Msg: fmt.Sprintf(format, args...)}
}

// receive parses and places FPDUs until the connection ends or a protocol
// violation is found.
func (qp *QP) receive() error {
	r := &qp.rx
	var h wire.Header
	for {
		if err := qp.fill(wire.MinHeaderLen); err != nil {
			return err
		}
		qp.rxMid.Store(true)
		n, err := wire.DecodeHeader(r.buf[r.pos:r.end], &h)
		if errors.Is(err, wire.ErrShort) {
			if err := qp.fill(n); err != nil {
				return err
			}
			n, err = wire.DecodeHeader(r.buf[r.pos:r.end], &h)
		}
		if err != nil {
			qp.noteHeader(r.buf[r.pos:min(r.end, r.pos+wire.UntaggedHeaderLen)])
			return err
		}
		qp.noteHeader(r.buf[r.pos : r.pos+n])
		if err := h.Check(); err != nil {
			return err
		}
		var crc uint32
		if qp.neg.crc {
			crc = wire.CRCUpdate(0, r.buf[r.pos:r.pos+n])
		}
		r.pos += n
		plen := h.PayloadLen()

		dst, err := qp.rxTarget(&h, plen)
		if err != nil {
			return err
		}
		if err := qp.readInto(dst); err != nil {
			return err
		}
		if qp.neg.crc {
			crc = wire.CRCUpdate(crc, dst)
		}
		if extra := plen - len(dst); extra > 0 {
			// only a long Terminate: keep its start, drop the rest
			if qp.neg.crc {
				return qp.termErr(wire.CauseDDPUntaggedTooLong, "terminate of %d bytes", plen)
			}
			if err := qp.skip(extra); err != nil {
				return err
			}
		}
		pad := wire.PadLen(int(h.ULPDULen))
		if err := qp.fill(pad + wire.CRCLen); err != nil {
			return err
		}
		if qp.neg.crc {
			crc = wire.CRCUpdate(crc, r.buf[r.pos:r.pos+pad])
			if got := wire.GetCRC(r.buf[r.pos+pad:]); got != crc {
				return qp.termErr(wire.CauseLLPCRC, "CRC %08x, computed %08x", got, crc)
			}
		}
		r.pos += pad + wire.CRCLen
		qp.rxMid.Store(false)
		if err := qp.rxComplete(&h, dst); err != nil {
			return err
		}
	}
}

// noteHeader keeps the current FPDU's header for a Terminate.
func (qp *QP) noteHeader(b []byte) {
	qp.rx.hdrLen = copy(qp.rx.hdr[:], b)
}

// rxTarget validates a segment and returns where its payload goes.
func (qp *QP) rxTarget(h *wire.Header, plen int) ([]byte, error) {
	r := &qp.rx
	switch h.Opcode {
	case wire.OpWrite:
		if plen == 0 {
			// Nothing to place; the peer-to-peer Write RTR is one of these
			// (STag 1, TO 0) and must not be checked against our memory.
			return nil, nil
		}
		dst, _, aerr := qp.pd.resolve(h.STag, h.TO, uint64(plen), AccessRemoteWrite)
		if aerr != accessOK {
			return nil, qp.termErr(aerr.taggedCause(), "RDMA Write of %d bytes to STag %#x TO %#x: %v", plen, h.STag, h.TO, aerr)
		}
		return dst, nil

	case wire.OpReadResponse:
		qp.mu.Lock()
		if qp.orq.len() == 0 {
			qp.mu.Unlock()
			return nil, qp.termErr(wire.CauseRDMAPUnexpectedOpcode, "RDMA Read Response with no Read outstanding")
		}
		e := qp.orq.at(0)
		qp.mu.Unlock()
		switch {
		case h.STag != e.sinkSTag:
			return nil, qp.termErr(wire.CauseDDPTaggedInvalidSTag, "Read Response to STag %#x, expected %#x", h.STag, e.sinkSTag)
		case h.TO != e.sinkTO+uint64(e.got):
			return nil, qp.termErr(wire.CauseDDPTaggedBaseBounds, "Read Response at TO %#x, expected %#x", h.TO, e.sinkTO+uint64(e.got))
		case plen > len(e.sink)-e.got:
			return nil, qp.termErr(wire.CauseDDPTaggedBaseBounds, "Read Response longer than the %d bytes requested", len(e.sink))
		}
		return e.sink[e.got : e.got+plen], nil

	case wire.OpSend, wire.OpSendInv, wire.OpSendSE, wire.OpSendSEInv:
		switch {
		case h.QN != wire.QNSend:
			return nil, qp.termErr(wire.CauseDDPUntaggedInvalidQN, "%v on QN %d", h.Opcode, h.QN)
		case h.MSN != r.msn[wire.QNSend]:
			return nil, qp.termErr(wire.CauseDDPUntaggedMSNRange, "Send MSN %d, expected %d", h.MSN, r.msn[wire.QNSend])
		}
		if !r.send.active {
			if h.MO != 0 {
				return nil, qp.termErr(wire.CauseDDPUntaggedInvalidMO, "first Send segment at MO %d", h.MO)
			}
			qp.mu.Lock()
			if qp.rq.len() == 0 {
				qp.mu.Unlock()
				return nil, qp.termErr(wire.CauseDDPUntaggedNoBuffer, "Send MSN %d: no receive buffer posted", h.MSN)
			}
			r.send.wr = *qp.rq.at(0)
			qp.rq.pop()
			r.send.active, r.send.got, r.send.status = true, 0, WCFlushErr
			qp.mu.Unlock()
		}
		switch {
		case int(h.MO) != r.send.got:
			return nil, qp.termErr(wire.CauseDDPUntaggedInvalidMO, "Send MO %d, expected %d", h.MO, r.send.got)
		case plen > len(r.send.wr.Buf)-r.send.got:
			r.send.status = WCLocalLengthErr
			return nil, qp.termErr(wire.CauseDDPUntaggedTooLong, "Send of more than %d bytes into a %d-byte buffer", r.send.got+plen, len(r.send.wr.Buf))
		}
		return r.send.wr.Buf[r.send.got : r.send.got+plen], nil

	case wire.OpReadRequest:
		switch {
		case h.QN != wire.QNReadRequest:
			return nil, qp.termErr(wire.CauseDDPUntaggedInvalidQN, "Read Request on QN %d", h.QN)
		case h.MSN != r.msn[wire.QNReadRequest]:
			return nil, qp.termErr(wire.CauseDDPUntaggedMSNRange, "Read Request MSN %d, expected %d", h.MSN, r.msn[wire.QNReadRequest])
		case h.MO != 0:
			return nil, qp.termErr(wire.CauseDDPUntaggedInvalidMO, "Read Request at MO %d", h.MO)
		case !h.Last || plen != wire.ReadRequestLen:
			return nil, qp.termErr(wire.CauseDDPUntaggedTooLong, "Read Request of %d bytes (last %v)", plen, h.Last)
		}
		return r.scratch[:wire.ReadRequestLen], nil

	case wire.OpTerminate:
		switch {
		case h.QN != wire.QNTerminate:
			return nil, qp.termErr(wire.CauseDDPUntaggedInvalidQN, "Terminate on QN %d", h.QN)
		case h.MO != 0 || !h.Last:
			return nil, qp.termErr(wire.CauseDDPUntaggedInvalidMO, "Terminate at MO %d (last %v)", h.MO, h.Last)
		}
		return r.scratch[:min(plen, maxTermPayload)], nil
	}
	return nil, qp.termErr(wire.CauseRDMAPUnexpectedOpcode, "opcode %v", h.Opcode)
}

// rxComplete acts on a placed segment.
func (qp *QP) rxComplete(h *wire.Header, payload []byte) error {
	r := &qp.rx
	if !r.seen {
		r.seen = true
		qp.rxSeen.Store(true)
	}
	if !qp.peerSpoke {
		// RFC 5044 §7.1.2: the responder sends nothing until the
		// initiator's first FPDU (the peer-to-peer RTR, or the first
		// message) has arrived.
		qp.mu.Lock()
		qp.peerSpoke = true
		qp.mu.Unlock()
		qp.txInline()
	}
	switch h.Opcode {
	case wire.OpReadResponse:
		qp.mu.Lock()
		e := qp.orq.at(0)
		e.got += len(payload)
		if !h.Last {
			qp.mu.Unlock()
			return nil
		}
		if e.got != len(e.sink) {
			qp.mu.Unlock()
			return qp.termErr(wire.CauseDDPTaggedBaseBounds, "Read Response of %d bytes, %d requested", e.got, len(e.sink))
		}
		r.wc = WC{ID: e.id, QP: qp, Opcode: WCRead, ByteLen: e.got}
		signaled := e.signaled && !e.internal
		qp.orq.pop()
		qp.mu.Unlock()
		qp.txInline() // a Read waiting for ORD room may go now
		if signaled {
			qp.scq.push(&r.wc)
		}

	case wire.OpSend, wire.OpSendInv, wire.OpSendSE, wire.OpSendSEInv:
		r.send.got += len(payload)
		if !h.Last {
			return nil
		}
		r.msn[wire.QNSend]++
		wc := &r.wc
		*wc = WC{ID: r.send.wr.ID, QP: qp, Opcode: WCRecv, ByteLen: r.send.got, Solicited: h.Opcode.Solicited()}
		if h.Opcode.Invalidates() {
			// RFC 5040 §6.10: invalidate the STag once the message is placed;
			// it must name a region of this QP's PD.
			mr := qp.pd.lookup(h.STag)
			if mr == nil || mr.pd != qp.pd {
				return qp.termErr(wire.CauseRDMAPCannotInvalidate, "Send with Invalidate of unknown STag %#x", h.STag)
			}
			mr.mu.Lock()
			ok := mr.stag == h.STag
			if ok {
				mr.valid = false
			}
			mr.mu.Unlock()
			if !ok {
				return qp.termErr(wire.CauseRDMAPCannotInvalidate, "Send with Invalidate of stale STag %#x", h.STag)
			}
			wc.Invalidated, wc.InvalidatedSTag = true, h.STag
		}
		r.send.active = false
		qp.rcq.push(wc)

	case wire.OpReadRequest:
		r.msn[wire.QNReadRequest]++
		rr, _ := wire.DecodeReadRequest(payload)
		var src []byte
		if rr.Size > 0 {
			var aerr accessErr
			src, _, aerr = qp.pd.resolve(rr.SrcSTag, rr.SrcTO, uint64(rr.Size), AccessRemoteRead)
			if aerr != accessOK {
				return qp.termErr(aerr.rdmapCause(), "RDMA Read of %d bytes from STag %#x TO %#x: %v", rr.Size, rr.SrcSTag, rr.SrcTO, aerr)
			}
		}
		qp.mu.Lock()
		if qp.irq.len() >= qp.neg.ird {
			qp.mu.Unlock()
			// siw answers reads beyond the negotiated IRD this way.
			return qp.termErr(wire.CauseRDMAPStreamCatastrophic, "more than IRD %d RDMA Reads outstanding", qp.neg.ird)
		}
		e := qp.irq.push()
		e.sinkSTag, e.sinkTO, e.src = rr.SinkSTag, rr.SinkTO, src
		qp.mu.Unlock()
		qp.txInline()

	case wire.OpTerminate:
		t, siw, err := wire.DecodeTerminateAny(payload)
		if err != nil {
			return &TerminateError{Remote: true, Cause: wire.CauseRDMAPOperationUnspecific, Msg: "undecodable terminate"}
		}
		qp.log.Warn("iwarp: terminate received", zap.Stringer("remote", qp.remote), zap.Stringer("cause", t.Cause), zap.Bool("siwLayout", siw))
		return &TerminateError{Remote: true, Cause: t.Cause, SIWLayout: siw}
	}
	return nil
}
