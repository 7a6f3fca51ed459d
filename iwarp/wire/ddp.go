package wire

import (
	"encoding/binary"
	"fmt"
)

// Opcode is an RDMAP opcode (RFC 5040 §4.2, §6).
type Opcode uint8

// RDMAP opcodes. Atomics and immediate data (RFC 7306) are not supported,
// as in Linux siw.
const (
	OpWrite        Opcode = 0x0 // RDMA Write (tagged)
	OpReadRequest  Opcode = 0x1 // RDMA Read Request (untagged, QN 1)
	OpReadResponse Opcode = 0x2 // RDMA Read Response (tagged)
	OpSend         Opcode = 0x3 // Send (untagged, QN 0)
	OpSendInv      Opcode = 0x4 // Send with Invalidate
	OpSendSE       Opcode = 0x5 // Send with Solicited Event
	OpSendSEInv    Opcode = 0x6 // Send with Solicited Event and Invalidate
	OpTerminate    Opcode = 0x7 // Terminate (untagged, QN 2)
	// OpMax is the highest opcode this implementation knows.
	OpMax = OpTerminate
)

var opNames = [...]string{"Write", "ReadRequest", "ReadResponse", "Send", "SendInv", "SendSE", "SendSEInv", "Terminate"}

// String names the opcode.
func (o Opcode) String() string {
	if o <= OpMax {
		return opNames[o]
	}
	return fmt.Sprintf("Opcode(%d)", uint8(o))
}

// Tagged reports whether the opcode uses the DDP tagged buffer model.
func (o Opcode) Tagged() bool { return o == OpWrite || o == OpReadResponse }

// Invalidates reports whether a Send variant carries an STag to invalidate.
func (o Opcode) Invalidates() bool { return o == OpSendInv || o == OpSendSEInv }

// Solicited reports whether a Send variant asks for a solicited event.
func (o Opcode) Solicited() bool { return o == OpSendSE || o == OpSendSEInv }

// Untagged queue numbers (RFC 5040 §5.1).
const (
	QNSend        = 0 // Send, Send with Invalidate, Send with SE (and Invalidate)
	QNReadRequest = 1 // RDMA Read Request
	QNTerminate   = 2 // Terminate
	// NumQN is the number of untagged queues RDMAP uses.
	NumQN = 3
)

// Header sizes, counted from the start of the FPDU (including the 2-byte
// ULPDU_Length field), and of the DDP/RDMAP header alone.
const (
	TaggedHeaderLen   = 16 // len(2) ctrl(2) STag(4) TO(8)
	UntaggedHeaderLen = 20 // len(2) ctrl(2) inv STag(4) QN(4) MSN(4) MO(4)
	DDPTaggedLen      = TaggedHeaderLen - FPDULenFieldLen
	DDPUntaggedLen    = UntaggedHeaderLen - FPDULenFieldLen
	// ReadRequestLen is the RDMA Read Request body (RFC 5040 §4.4).
	ReadRequestLen = 28
	// MinHeaderLen is how many bytes DecodeHeader needs to learn the size of
	// the rest of the header.
	MinHeaderLen = 4
)

// DDP and RDMAP control bits (FPDU bytes 2 and 3; RFC 5041 §5.1, RFC 5040 §4.2).
const (
	ddpTagged     = 0x80
	ddpLast       = 0x40
	ddpRsvdMask   = 0x3C
	ddpVerMask    = 0x03
	rdmapVerShift = 6
	rdmapRsvdMask = 0x30
	rdmapOpMask   = 0x0F
	// DDPVersion is the only DDP version (RFC 5041 §5.1).
	DDPVersion = 1
	// RDMAPVersion is the only RDMAP version (RFC 5040 §4.2).
	RDMAPVersion = 1
)

// HeaderLenFor returns the FPDU header length for an opcode: tagged
// opcodes have the tagged header, the rest the untagged one. Like siw, the
// header size follows the opcode; the T bit is checked against it.
func HeaderLenFor(op Opcode) int {
	if op.Tagged() {
		return TaggedHeaderLen
	}
	return UntaggedHeaderLen
}

// Header is a decoded FPDU header: the MPA length field and the DDP/RDMAP
// header of one DDP segment. It is a plain value so that a receive loop can
// reuse one without allocation.
type Header struct {
	ULPDULen     uint16 // MPA ULPDU_Length: DDP/RDMAP header + payload
	Tagged       bool   // DDP T bit
	Last         bool   // DDP L bit: last segment of the message
	DDPVersion   uint8  // DDP DV field
	RDMAPVersion uint8  // RDMAP RV field
	Opcode       Opcode // RDMAP opcode
	Reserved     uint8  // DDP and RDMAP reserved control bits, as received (rsvd DDP<<4 | rsvd RDMAP>>4)
	// STag is the data sink STag of a tagged segment, or the RDMAP header's
	// Invalidate STag of a Send with Invalidate (0 otherwise).
	STag uint32
	TO   uint64 // tagged offset (tagged segments)
	QN   uint32 // queue number (untagged segments)
	MSN  uint32 // message sequence number (untagged segments)
	MO   uint32 // message offset (untagged segments)
}

// Len is the size of the encoded header, from the ULPDU_Length field to the
// first payload byte. Like DecodeHeader it follows the opcode, not the T bit.
func (h *Header) Len() int { return HeaderLenFor(h.Opcode) }

// PayloadLen is the ULP payload carried by the segment. It is negative if
// ULPDU_Length is smaller than the header (DecodeHeader rejects that).
func (h *Header) PayloadLen() int { return int(h.ULPDULen) - (h.Len() - FPDULenFieldLen) }

// FPDULen is the wire size of the whole FPDU.
func (h *Header) FPDULen() int { return FPDULen(int(h.ULPDULen)) }

// Encode writes the header at the start of b, which must hold Len() bytes,
// and returns the number of bytes written. ULPDULen must already be set. The
// layout follows the opcode; the T bit is written as h.Tagged says.
func (h *Header) Encode(b []byte) int {
	_ = b[h.Len()-1]
	binary.BigEndian.PutUint16(b[0:2], h.ULPDULen)
	c0 := h.DDPVersion & ddpVerMask
	if h.Tagged {
		c0 |= ddpTagged
	}
	if h.Last {
		c0 |= ddpLast
	}
	b[2] = c0
	b[3] = h.RDMAPVersion<<rdmapVerShift | byte(h.Opcode)&rdmapOpMask
	binary.BigEndian.PutUint32(b[4:8], h.STag)
	if h.Opcode.Tagged() {
		binary.BigEndian.PutUint64(b[8:16], h.TO)
		return TaggedHeaderLen
	}
	binary.BigEndian.PutUint32(b[8:12], h.QN)
	binary.BigEndian.PutUint32(b[12:16], h.MSN)
	binary.BigEndian.PutUint32(b[16:20], h.MO)
	return UntaggedHeaderLen
}

// PutTaggedHeader encodes a tagged (RDMA Write or Read Response) segment
// header with version 1 into b[:TaggedHeaderLen] for payloadLen bytes.
func PutTaggedHeader(b []byte, op Opcode, last bool, stag uint32, to uint64, payloadLen int) {
	_ = b[TaggedHeaderLen-1]
	binary.BigEndian.PutUint16(b[0:2], uint16(DDPTaggedLen+payloadLen))
	c0 := byte(ddpTagged | DDPVersion)
	if last {
		c0 |= ddpLast
	}
	b[2] = c0
	b[3] = RDMAPVersion<<rdmapVerShift | byte(op)
	binary.BigEndian.PutUint32(b[4:8], stag)
	binary.BigEndian.PutUint64(b[8:16], to)
}

// PutUntaggedHeader encodes an untagged segment header with version 1 into
// b[:UntaggedHeaderLen] for payloadLen bytes. invSTag is the RDMAP
// Invalidate STag field (Send with Invalidate) and 0 otherwise.
func PutUntaggedHeader(b []byte, op Opcode, last bool, invSTag, qn, msn, mo uint32, payloadLen int) {
	_ = b[UntaggedHeaderLen-1]
	binary.BigEndian.PutUint16(b[0:2], uint16(DDPUntaggedLen+payloadLen))
	c0 := byte(DDPVersion)
	if last {
		c0 |= ddpLast
	}
	b[2] = c0
	b[3] = RDMAPVersion<<rdmapVerShift | byte(op)
	binary.BigEndian.PutUint32(b[4:8], invSTag)
	binary.BigEndian.PutUint32(b[8:12], qn)
	binary.BigEndian.PutUint32(b[12:16], msn)
	binary.BigEndian.PutUint32(b[16:20], mo)
}

// DecodeHeader decodes the FPDU header at the start of b into h and returns
// its length. It needs MinHeaderLen bytes to learn the header size and then
// the whole header; with fewer it returns ErrShort and the number of bytes
// it needs in total, so a stream reader can wait for them. It rejects an
// opcode beyond OpMax and a ULPDU_Length too small for the header, each
// with a *TermError carrying the Terminate cause to send. Versions, reserved
// bits and the T bit are decoded but not judged: see Check.
func DecodeHeader(b []byte, h *Header) (int, error) {
	if len(b) < MinHeaderLen {
		return MinHeaderLen, ErrShort
	}
	h.ULPDULen = binary.BigEndian.Uint16(b[0:2])
	c0, c1 := b[2], b[3]
	h.Tagged = c0&ddpTagged != 0
	h.Last = c0&ddpLast != 0
	h.DDPVersion = c0 & ddpVerMask
	h.RDMAPVersion = c1 >> rdmapVerShift
	h.Opcode = Opcode(c1 & rdmapOpMask)
	h.Reserved = (c0&ddpRsvdMask)<<2 | (c1&rdmapRsvdMask)>>4
	if h.Opcode > OpMax {
		return 0, &TermError{Cause: CauseRDMAPUnexpectedOpcode, Msg: fmt.Sprintf("opcode %d", h.Opcode)}
	}
	n := HeaderLenFor(h.Opcode)
	if int(h.ULPDULen) < n-FPDULenFieldLen {
		if h.Opcode.Tagged() {
			return 0, &TermError{Cause: CauseDDPTaggedBaseBounds, Msg: fmt.Sprintf("ULPDU_Length %d below tagged header", h.ULPDULen)}
		}
		return 0, &TermError{Cause: CauseDDPUntaggedTooLong, Msg: fmt.Sprintf("ULPDU_Length %d below untagged header", h.ULPDULen)}
	}
	if len(b) < n {
		return n, ErrShort
	}
	h.STag = binary.BigEndian.Uint32(b[4:8])
	if h.Opcode.Tagged() {
		h.TO = binary.BigEndian.Uint64(b[8:16])
		h.QN, h.MSN, h.MO = 0, 0, 0
	} else {
		h.TO = 0
		h.QN = binary.BigEndian.Uint32(b[8:12])
		h.MSN = binary.BigEndian.Uint32(b[12:16])
		h.MO = binary.BigEndian.Uint32(b[16:20])
	}
	return n, nil
}

// Check judges the version and model fields of a decoded header the way
// RFC 5040 §7.2 / RFC 5041 §7.2 and siw do, and returns the Terminate cause
// for the first violation. Order follows siw's receive path: DDP version,
// RDMAP version, T bit against opcode.
func (h *Header) Check() error {
	if h.DDPVersion != DDPVersion {
		if h.Tagged {
			return &TermError{Cause: CauseDDPTaggedBadVersion, Msg: fmt.Sprintf("DDP version %d", h.DDPVersion)}
		}
		return &TermError{Cause: CauseDDPUntaggedBadVersion, Msg: fmt.Sprintf("DDP version %d", h.DDPVersion)}
	}
	if h.RDMAPVersion != RDMAPVersion {
		return &TermError{Cause: CauseRDMAPBadVersion, Msg: fmt.Sprintf("RDMAP version %d", h.RDMAPVersion)}
	}
	if h.Tagged != h.Opcode.Tagged() {
		return &TermError{Cause: CauseRDMAPUnexpectedOpcode, Msg: fmt.Sprintf("%v with T=%v", h.Opcode, h.Tagged)}
	}
	return nil
}

// ReadRequest is the body of an RDMA Read Request (RFC 5040 §4.4).
type ReadRequest struct {
	SinkSTag uint32 // requester's buffer, written by the Read Response
	SinkTO   uint64
	Size     uint32 // RDMA Read Message Size
	SrcSTag  uint32 // responder's buffer
	SrcTO    uint64
}

// Encode writes the body into b[:ReadRequestLen].
func (r *ReadRequest) Encode(b []byte) {
	_ = b[ReadRequestLen-1]
	binary.BigEndian.PutUint32(b[0:4], r.SinkSTag)
	binary.BigEndian.PutUint64(b[4:12], r.SinkTO)
	binary.BigEndian.PutUint32(b[12:16], r.Size)
	binary.BigEndian.PutUint32(b[16:20], r.SrcSTag)
	binary.BigEndian.PutUint64(b[20:28], r.SrcTO)
}

// DecodeReadRequest decodes a Read Request body.
func DecodeReadRequest(b []byte) (ReadRequest, error) {
	if len(b) < ReadRequestLen {
		return ReadRequest{}, fmt.Errorf("rdmap: read request: %w (%d of %d bytes)", ErrShort, len(b), ReadRequestLen)
	}
	return ReadRequest{
		SinkSTag: binary.BigEndian.Uint32(b[0:4]),
		SinkTO:   binary.BigEndian.Uint64(b[4:12]),
		Size:     binary.BigEndian.Uint32(b[12:16]),
		SrcSTag:  binary.BigEndian.Uint32(b[16:20]),
		SrcTO:    binary.BigEndian.Uint64(b[20:28]),
	}, nil
}
