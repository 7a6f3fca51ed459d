package iwarp

import (
	"fmt"

	"github.com/nvmetd/nvmetd/iwarp/wire"
)

// maxTermPayload bounds how much of a received Terminate is kept.
const maxTermPayload = 128

// rxPhase is where the receive side is within the current FPDU.
type rxPhase uint8

const (
	rxHeader  rxPhase = iota // collecting the header
	rxPayload                // placing the payload
	rxSkip                   // dropping payload beyond what is kept (a long Terminate)
	rxTrailer                // collecting pad and CRC
)

// engineRx is the receive half of the engine: one FPDU at a time, from any
// split of the byte stream into reads.
type engineRx struct {
	phase   rxPhase
	hdr     [wire.UntaggedHeaderLen]byte
	hdrGot  int
	hdrNeed int
	h       wire.Header
	dst     []byte // where the payload goes
	placed  int    // payload bytes placed in dst
	skip    int    // payload bytes to drop after dst
	trl     [3 + wire.CRCLen]byte
	trlGot  int
	trlNeed int
	crc     uint32
	msn     [wire.NumQN]uint32 // next expected MSN per untagged queue
	scratch [maxTermPayload]byte
	seen    bool // an FPDU has arrived

	// the Send message being placed
	send struct {
		active bool
		wr     RecvWR
		got    int
		status WCStatus // reported if the QP fails mid-message
	}
}

func (r *engineRx) init() {
	for i := range r.msn {
		r.msn[i] = 1 // RFC 5040 §5.1: the first message on each queue has MSN 1
	}
	r.phase, r.hdrGot, r.hdrNeed = rxHeader, 0, wire.MinHeaderLen
}

// midFrame reports whether part of an FPDU has arrived and the rest has not
// (one byte of a header is enough: the stall timer watches it).
func (r *engineRx) midFrame() bool {
	return r.phase != rxHeader || r.hdrGot > 0
}

// rxConsume takes received bytes from b and returns how many it used. It
// stops when b is used up, when the current payload's destination should
// be filled straight from the socket (place: the rest of it), or at a
// protocol violation (err; the engine is then failing). Completions go to
// out.
//
// The driver may fill place from the socket (reading any further bytes into
// its read-ahead buffer) and report it with rxPlaced, or read more into the
// read-ahead buffer and call rxConsume again: place is a hint, not a
// demand. Small payloads are copied from the read-ahead buffer; see
// QP.readInto for the policy.
func (e *engine) rxConsume(b []byte) (used int, place []byte, err error) {
	r := &e.rx
	for {
		switch r.phase {
		case rxHeader:
			if used == len(b) {
				return used, nil, nil
			}
			k := copy(r.hdr[r.hdrGot:r.hdrNeed], b[used:])
			r.hdrGot += k
			used += k
			e.clock.rxProgress++
			if r.hdrGot < r.hdrNeed {
				continue
			}
			n, derr := wire.DecodeHeader(r.hdr[:r.hdrGot], &r.h)
			if derr == wire.ErrShort {
				r.hdrNeed = n
				continue
			}
			if derr == nil {
				derr = r.h.Check()
			}
			if derr == nil {
				derr = e.rxBegin()
			}
			if derr != nil {
				e.fail(derr)
				return used, nil, derr
			}

		case rxPayload:
			rest := r.dst[r.placed:]
			if len(rest) == 0 {
				r.phase = rxSkip
				continue
			}
			if used == len(b) {
				return used, rest, nil
			}
			k := copy(rest, b[used:])
			e.placed(rest[:k])
			e.stats.PayloadCopied += uint64(k)
			used += k

		case rxSkip:
			if r.skip > 0 {
				if used == len(b) {
					return used, nil, nil
				}
				k := min(r.skip, len(b)-used)
				r.skip -= k
				used += k
				e.clock.rxProgress++
				continue
			}
			r.phase = rxTrailer
			r.trlGot, r.trlNeed = 0, wire.PadLen(int(r.h.ULPDULen))+wire.CRCLen

		case rxTrailer:
			if used == len(b) {
				return used, nil, nil
			}
			k := copy(r.trl[r.trlGot:r.trlNeed], b[used:])
			r.trlGot += k
			used += k
			e.clock.rxProgress++
			if r.trlGot < r.trlNeed {
				continue
			}
			if cerr := e.rxEnd(); cerr != nil {
				e.fail(cerr)
				return used, nil, cerr
			}
		}
	}
}

// rxPlaced reports that the driver read n bytes of the place returned by
// rxConsume straight from the socket.
func (e *engine) rxPlaced(n int) {
	r := &e.rx
	e.placed(r.dst[r.placed : r.placed+n])
	e.stats.PayloadDirect += uint64(n)
}

// placed accounts payload bytes that landed in dst.
func (e *engine) placed(p []byte) {
	r := &e.rx
	if e.neg.crc {
		r.crc = wire.CRCUpdate(r.crc, p)
	}
	r.placed += len(p)
	e.clock.rxProgress++
}

// rxBegin starts the segment whose header is complete: validation and the
// payload's destination.
func (e *engine) rxBegin() error {
	r := &e.rx
	hlen := r.h.Len()
	if e.neg.crc {
		r.crc = wire.CRCUpdate(0, r.hdr[:hlen])
	}
	plen := r.h.PayloadLen()
	dst, err := e.rxTarget(&r.h, plen)
	if err != nil {
		return err
	}
	if extra := plen - len(dst); extra > 0 {
		// Only a long Terminate: its start is kept, the rest dropped; a
		// CRC over the dropped bytes could not be checked.
		if e.neg.crc {
			return termErr(wire.CauseDDPUntaggedTooLong, "terminate of %d bytes", plen)
		}
		r.skip = extra
	} else {
		r.skip = 0
	}
	r.dst, r.placed, r.phase = dst, 0, rxPayload
	return nil
}

// rxEnd checks the trailer of the segment and acts on it.
func (e *engine) rxEnd() error {
	r := &e.rx
	pad := r.trlNeed - wire.CRCLen
	if e.neg.crc {
		crc := wire.CRCUpdate(r.crc, r.trl[:pad])
		if got := wire.GetCRC(r.trl[pad:r.trlNeed]); got != crc {
			e.stats.CRCErrors++
			return termErr(wire.CauseLLPCRC, "CRC %08x, computed %08x", got, crc)
		}
	}
	e.stats.FPDUsReceived++
	// The header stays in r.hdr until the segment has been acted on: a
	// Terminate about it carries it.
	if err := e.rxComplete(&r.h, r.dst); err != nil {
		return err
	}
	r.dst = nil
	r.phase, r.hdrGot, r.hdrNeed = rxHeader, 0, wire.MinHeaderLen
	return nil
}

// termErr builds a local protocol error about the current FPDU; the
// Terminate will carry its DDP header.
func termErr(c wire.Cause, format string, args ...any) error {
	return &wire.TermError{Cause: c, Msg: fmt.Sprintf(format, args...)}
}

// rxTarget validates a segment and returns where its payload goes.
func (e *engine) rxTarget(h *wire.Header, plen int) ([]byte, error) {
	r := &e.rx
	switch h.Opcode {
	case wire.OpWrite:
		if plen == 0 {
			// Nothing to place; the peer-to-peer Write RTR and the nudge
			// are such (RFC 5040 §4.3: a zero-length Write is not checked
			// against any STag).
			return nil, nil
		}
		dst, _, aerr := e.pd.resolve(h.STag, h.TO, uint64(plen), AccessRemoteWrite)
		if aerr != accessOK {
			return nil, termErr(aerr.taggedCause(), "RDMA Write of %d bytes to STag %#x TO %#x: %v", plen, h.STag, h.TO, aerr)
		}
		return dst, nil

	case wire.OpReadResponse:
		if e.orq.len() == 0 {
			return nil, termErr(wire.CauseRDMAPUnexpectedOpcode, "RDMA Read Response with no Read outstanding")
		}
		o := e.orq.at(0)
		switch {
		case h.STag != o.sinkSTag:
			return nil, termErr(wire.CauseDDPTaggedInvalidSTag, "Read Response to STag %#x, expected %#x", h.STag, o.sinkSTag)
		case h.TO != o.sinkTO+uint64(o.got):
			return nil, termErr(wire.CauseDDPTaggedBaseBounds, "Read Response at TO %#x, expected %#x", h.TO, o.sinkTO+uint64(o.got))
		case plen > len(o.sink)-o.got:
			return nil, termErr(wire.CauseDDPTaggedBaseBounds, "Read Response longer than the %d bytes requested", len(o.sink))
		}
		return o.sink[o.got : o.got+plen], nil

	case wire.OpSend, wire.OpSendInv, wire.OpSendSE, wire.OpSendSEInv:
		switch {
		case h.QN != wire.QNSend:
			return nil, termErr(wire.CauseDDPUntaggedInvalidQN, "%v on QN %d", h.Opcode, h.QN)
		case h.MSN != r.msn[wire.QNSend]:
			return nil, termErr(wire.CauseDDPUntaggedMSNRange, "Send MSN %d, expected %d", h.MSN, r.msn[wire.QNSend])
		}
		if !r.send.active {
			if h.MO != 0 {
				return nil, termErr(wire.CauseDDPUntaggedInvalidMO, "first Send segment at MO %d", h.MO)
			}
			if e.rq.len() == 0 {
				return nil, termErr(wire.CauseDDPUntaggedNoBuffer, "Send MSN %d: no receive buffer posted", h.MSN)
			}
			r.send.wr = *e.rq.at(0)
			e.rq.pop()
			r.send.active, r.send.got, r.send.status = true, 0, WCFlushErr
		}
		switch {
		case int(h.MO) != r.send.got:
			return nil, termErr(wire.CauseDDPUntaggedInvalidMO, "Send MO %d, expected %d", h.MO, r.send.got)
		case plen > len(r.send.wr.Buf)-r.send.got:
			r.send.status = WCLocalLengthErr
			return nil, termErr(wire.CauseDDPUntaggedTooLong, "Send of more than %d bytes into a %d-byte buffer", r.send.got+plen, len(r.send.wr.Buf))
		}
		return r.send.wr.Buf[r.send.got : r.send.got+plen], nil

	case wire.OpReadRequest:
		switch {
		case h.QN != wire.QNReadRequest:
			return nil, termErr(wire.CauseDDPUntaggedInvalidQN, "Read Request on QN %d", h.QN)
		case h.MSN != r.msn[wire.QNReadRequest]:
			return nil, termErr(wire.CauseDDPUntaggedMSNRange, "Read Request MSN %d, expected %d", h.MSN, r.msn[wire.QNReadRequest])
		case h.MO != 0:
			return nil, termErr(wire.CauseDDPUntaggedInvalidMO, "Read Request at MO %d", h.MO)
		case !h.Last || plen != wire.ReadRequestLen:
			return nil, termErr(wire.CauseDDPUntaggedTooLong, "Read Request of %d bytes (last %v)", plen, h.Last)
		}
		return r.scratch[:wire.ReadRequestLen], nil

	case wire.OpTerminate:
		switch {
		case h.QN != wire.QNTerminate:
			return nil, termErr(wire.CauseDDPUntaggedInvalidQN, "Terminate on QN %d", h.QN)
		case h.MO != 0 || !h.Last:
			return nil, termErr(wire.CauseDDPUntaggedInvalidMO, "Terminate at MO %d (last %v)", h.MO, h.Last)
		}
		return r.scratch[:min(plen, maxTermPayload)], nil
	}
	return nil, termErr(wire.CauseRDMAPUnexpectedOpcode, "opcode %v", h.Opcode)
}

// rxComplete acts on a segment that is wholly placed and checked.
func (e *engine) rxComplete(h *wire.Header, payload []byte) error {
	r := &e.rx
	r.seen = true
	if !e.peerSpoke {
		// RFC 5044 §7.1.2: the responder sends nothing until the
		// initiator's first FPDU (the peer-to-peer RTR, or the first
		// message) has arrived.
		e.peerSpoke = true
		e.wantTx()
	}
	switch h.Opcode {
	case wire.OpReadResponse:
		o := e.orq.at(0)
		o.got += len(payload)
		if !h.Last {
			return nil
		}
		if o.got != len(o.sink) {
			return termErr(wire.CauseDDPTaggedBaseBounds, "Read Response of %d bytes, %d requested", o.got, len(o.sink))
		}
		wc := WC{ID: o.id, QP: e.qp, Opcode: WCRead, ByteLen: o.got}
		signaled := o.signaled && !o.internal
		e.orq.pop()
		e.wantTx() // a Read waiting for ORD room may go now
		if signaled {
			e.out = append(e.out, wc)
		}

	case wire.OpSend, wire.OpSendInv, wire.OpSendSE, wire.OpSendSEInv:
		r.send.got += len(payload)
		if !h.Last {
			return nil
		}
		r.msn[wire.QNSend]++
		wc := WC{ID: r.send.wr.ID, QP: e.qp, Opcode: WCRecv, ByteLen: r.send.got, Solicited: h.Opcode.Solicited()}
		if h.Opcode.Invalidates() {
			if err := e.remoteInvalidate(h.STag); err != nil {
				return err
			}
			wc.Invalidated, wc.InvalidatedSTag = true, h.STag
		}
		r.send.active = false
		e.out = append(e.out, wc)

	case wire.OpReadRequest:
		r.msn[wire.QNReadRequest]++
		rr, _ := wire.DecodeReadRequest(payload)
		var src []byte
		if rr.Size > 0 {
			var aerr accessErr
			src, _, aerr = e.pd.resolve(rr.SrcSTag, rr.SrcTO, uint64(rr.Size), AccessRemoteRead)
			if aerr != accessOK {
				return termErr(aerr.rdmapCause(), "RDMA Read of %d bytes from STag %#x TO %#x: %v", rr.Size, rr.SrcSTag, rr.SrcTO, aerr)
			}
		}
		if e.irq.len() >= e.neg.ird {
			// siw answers reads beyond the negotiated IRD this way.
			return termErr(wire.CauseRDMAPStreamCatastrophic, "more than IRD %d RDMA Reads outstanding", e.neg.ird)
		}
		i := e.irq.push()
		i.sinkSTag, i.sinkTO, i.src = rr.SinkSTag, rr.SinkTO, src
		e.wantTx()

	case wire.OpTerminate:
		t, siw, err := wire.DecodeTerminateAny(payload)
		e.stats.TerminateReceived = true
		if err != nil {
			e.stats.TerminateReceivedCause = uint16(wire.CauseRDMAPOperationUnspecific)
			return &TerminateError{Remote: true, Cause: wire.CauseRDMAPOperationUnspecific, Msg: "undecodable terminate"}
		}
		e.stats.TerminateReceivedCause = uint16(t.Cause)
		return &TerminateError{Remote: true, Cause: t.Cause, SIWLayout: siw}
	}
	return nil
}

// remoteInvalidate applies a received Send with Invalidate (RFC 5040 §6.10):
// once the message is placed, the named STag is invalidated. It must name a
// region of this QP's PD that was registered for remote access: an STag
// that only the local side uses (an RDMA Read sink, a receive buffer) is
// not the peer's to invalidate (RFC 5040 §6.10 and §7.1: "the STag must be
// associated with the QP's PD" and valid for remote access), or a host
// could break the target's own buffers.
func (e *engine) remoteInvalidate(stag uint32) error {
	mr := e.pd.lookup(stag)
	if mr == nil || mr.pd != e.pd {
		return termErr(wire.CauseRDMAPCannotInvalidate, "Send with Invalidate of unknown STag %#x", stag)
	}
	mr.mu.Lock()
	ok := mr.stag == stag
	remote := mr.access&(AccessRemoteRead|AccessRemoteWrite) != 0
	if ok && remote {
		mr.valid = false
	}
	mr.mu.Unlock()
	switch {
	case !ok:
		return termErr(wire.CauseRDMAPCannotInvalidate, "Send with Invalidate of stale STag %#x", stag)
	case !remote:
		return termErr(wire.CauseRDMAPCannotInvalidate, "Send with Invalidate of STag %#x, which is not registered for remote access", stag)
	}
	return nil
}

// wantTx notes that there may be something new to write.
func (e *engine) wantTx() {
	if e.txHasWork() {
		e.act |= actTx
	}
}
