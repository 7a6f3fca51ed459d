// Package wire holds the pure codecs of the iWARP protocol suite: MPA
// connection setup frames (RFC 5044 §7.1, RFC 6581 §5), MPA FPDU framing
// (RFC 5044 §4), DDP and RDMAP headers (RFC 5041 §5, RFC 5040 §4) and the
// RDMAP Terminate message (RFC 5040 §4.8). Nothing here does I/O: every
// function works on byte slices so that it can be fuzzed and checked
// against golden bytes alone.
//
// All iWARP fields are big-endian (network order), except the MPA CRC,
// which Linux siw stores little-endian (see CRC).
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// MPA frame keys (RFC 5044 §7.1): 16 ASCII bytes, no terminator.
const (
	MPAKeyRequest = "MPA ID Req Frame"
	MPAKeyReply   = "MPA ID Rep Frame"
)

// MPA frame sizes.
const (
	// MPAHeaderLen is the fixed part of a request or reply frame: key (16),
	// flags (1), revision (1), private data length (2).
	MPAHeaderLen = 20
	// MPAMaxPrivateData is the RFC 5044 §7.1 limit on private data.
	MPAMaxPrivateData = 512
	// SIWMaxPrivateData is what Linux siw accepts (MPA_MAX_PRIVDATA =
	// RDMA_MAX_PRIVATE_DATA); larger frames make siw drop the connection.
	// It counts the 4-byte enhanced header.
	SIWMaxPrivateData = 256
	// EnhancedHeaderLen is the IRD/ORD word pair of RFC 6581 §5 at the start
	// of the private data of an enhanced (revision 2) frame.
	EnhancedHeaderLen = 4
	// MaxIRDORD is the largest IRD or ORD an enhanced header can carry (14 bits).
	MaxIRDORD = 0x3FFF
)

// MPA flag bits in byte 16 of a frame (RFC 5044 §7.1, RFC 6581 §5).
const (
	MPAFlagMarkers  = 0x80 // M: markers requested
	MPAFlagCRC      = 0x40 // C: CRC requested
	MPAFlagReject   = 0x20 // R: connection rejected (reply only)
	MPAFlagEnhanced = 0x10 // RFC 6581: enhanced RDMA connection establishment
	mpaFlagReserved = 0x0F
)

// RFC 6581 §5 enhanced header bits.
const (
	enhP2P      = 0x8000 // A: peer-to-peer mode (IRD word)
	enhSendRTR  = 0x4000 // B: zero-length Send RTR (IRD word)
	enhWriteRTR = 0x8000 // C: zero-length RDMA Write RTR (ORD word)
	enhReadRTR  = 0x4000 // D: zero-length RDMA Read RTR (ORD word)
	enhMask     = 0x3FFF
)

// Errors returned by the MPA frame parsers. They are wrapped with detail;
// test with errors.Is.
var (
	// ErrShort means the buffer ends before the frame does.
	ErrShort = errors.New("truncated")
	// ErrMPAKey means the 16-byte key is neither the request nor the reply key.
	ErrMPAKey = errors.New("mpa: bad key")
	// ErrMPAPrivateDataLen means the private data length exceeds the limit.
	ErrMPAPrivateDataLen = errors.New("mpa: private data too long")
	// ErrMPAEnhanced means an enhanced frame lacks its 4-byte IRD/ORD header.
	ErrMPAEnhanced = errors.New("mpa: enhanced frame without IRD/ORD header")
)

// RTR is a set of ready-to-receive message types of RFC 6581 peer-to-peer mode.
type RTR uint8

// RTR message types.
const (
	RTRSend  RTR = 1 << iota // zero-length Send
	RTRWrite                 // zero-length RDMA Write
	RTRRead                  // zero-length RDMA Read Request
)

// String names the RTR set.
func (r RTR) String() string {
	if r == 0 {
		return "none"
	}
	s := ""
	for _, n := range []struct {
		b RTR
		s string
	}{{RTRSend, "send"}, {RTRWrite, "write"}, {RTRRead, "read"}} {
		if r&n.b != 0 {
			if s != "" {
				s += "|"
			}
			s += n.s
		}
	}
	return s
}

// MPAFrame is a decoded MPA request or reply frame (RFC 5044 §7.1). For an
// enhanced revision-2 frame (RFC 6581) the IRD/ORD header is decoded into
// its fields and PrivateData holds only the ULP's bytes after it.
type MPAFrame struct {
	Reply    bool  // key is "MPA ID Rep Frame"
	Markers  bool  // M
	CRC      bool  // C
	Reject   bool  // R
	Enhanced bool  // RFC 6581 enhanced connection establishment
	Reserved uint8 // the low 4 flag bits, as received (send 0)
	Revision uint8 // 1 or 2

	// RFC 6581 fields, meaningful when Enhanced && Revision >= 2.
	IRD uint16 // inbound RDMA Read queue depth (14 bits)
	ORD uint16 // outbound RDMA Read queue depth (14 bits)
	P2P bool   // peer-to-peer mode requested / confirmed
	RTR RTR    // RTR types offered (request) or chosen (reply)

	// PrivateData is the ULP private data (after the enhanced header if any).
	PrivateData []byte
}

// HasEnhancedHeader reports whether the frame carries the RFC 6581 IRD/ORD
// header at the start of its private data.
func (f *MPAFrame) HasEnhancedHeader() bool { return f.Enhanced && f.Revision >= 2 }

// WireLen is the encoded size of the frame.
func (f *MPAFrame) WireLen() int {
	n := MPAHeaderLen + len(f.PrivateData)
	if f.HasEnhancedHeader() {
		n += EnhancedHeaderLen
	}
	return n
}

// PrivateDataLen is the value of the PD_Length field: ULP data plus the
// enhanced header when present.
func (f *MPAFrame) PrivateDataLen() int {
	return f.WireLen() - MPAHeaderLen
}

// Append encodes the frame at the end of b. It does not check limits; use
// Validate first where the caller's input is not trusted.
func (f *MPAFrame) Append(b []byte) []byte {
	if f.Reply {
		b = append(b, MPAKeyReply...)
	} else {
		b = append(b, MPAKeyRequest...)
	}
	var flags byte
	if f.Markers {
		flags |= MPAFlagMarkers
	}
	if f.CRC {
		flags |= MPAFlagCRC
	}
	if f.Reject {
		flags |= MPAFlagReject
	}
	if f.Enhanced {
		flags |= MPAFlagEnhanced
	}
	flags |= f.Reserved & mpaFlagReserved
	b = append(b, flags, f.Revision)
	b = binary.BigEndian.AppendUint16(b, uint16(f.PrivateDataLen()))
	if f.HasEnhancedHeader() {
		ird := f.IRD & enhMask
		ord := f.ORD & enhMask
		if f.P2P {
			ird |= enhP2P
		}
		if f.RTR&RTRSend != 0 {
			ird |= enhSendRTR
		}
		if f.RTR&RTRWrite != 0 {
			ord |= enhWriteRTR
		}
		if f.RTR&RTRRead != 0 {
			ord |= enhReadRTR
		}
		b = binary.BigEndian.AppendUint16(b, ird)
		b = binary.BigEndian.AppendUint16(b, ord)
	}
	return append(b, f.PrivateData...)
}

// Validate checks the frame against the RFC limits before it is sent.
func (f *MPAFrame) Validate() error {
	if f.PrivateDataLen() > MPAMaxPrivateData {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrMPAPrivateDataLen, f.PrivateDataLen(), MPAMaxPrivateData)
	}
	if f.IRD > MaxIRDORD || f.ORD > MaxIRDORD {
		return fmt.Errorf("mpa: IRD %d / ORD %d exceed %d", f.IRD, f.ORD, MaxIRDORD)
	}
	return nil
}

// MPAHeader is the fixed 20-byte start of an MPA request or reply frame. A
// stream reader decodes it first to learn how many private-data bytes follow.
type MPAHeader [MPAHeaderLen]byte

// IsRequest reports whether the key is the request key.
func (h *MPAHeader) IsRequest() bool { return string(h[:16]) == MPAKeyRequest }

// IsReply reports whether the key is the reply key.
func (h *MPAHeader) IsReply() bool { return string(h[:16]) == MPAKeyReply }

// Flags is the flag byte (M, C, R, enhanced, reserved).
func (h *MPAHeader) Flags() byte { return h[16] }

// Revision is the MPA revision.
func (h *MPAHeader) Revision() uint8 { return h[17] }

// PrivateDataLen is the PD_Length field.
func (h *MPAHeader) PrivateDataLen() int { return int(binary.BigEndian.Uint16(h[18:20])) }

// ParseMPAFrame decodes a whole request or reply frame from b and returns the
// number of bytes it used. The returned PrivateData aliases b. maxPD bounds
// PD_Length (use SIWMaxPrivateData to behave like Linux siw, or
// MPAMaxPrivateData for the RFC limit). The caller decides what to do with
// markers, revisions and rejects; this function only decodes.
func ParseMPAFrame(b []byte, maxPD int) (MPAFrame, int, error) {
	var f MPAFrame
	if len(b) < MPAHeaderLen {
		return f, 0, fmt.Errorf("mpa: header: %w (%d of %d bytes)", ErrShort, len(b), MPAHeaderLen)
	}
	h := (*MPAHeader)(b[:MPAHeaderLen])
	switch {
	case h.IsRequest():
	case h.IsReply():
		f.Reply = true
	default:
		return f, 0, fmt.Errorf("%w %q", ErrMPAKey, b[:16])
	}
	flags := h.Flags()
	f.Markers = flags&MPAFlagMarkers != 0
	f.CRC = flags&MPAFlagCRC != 0
	f.Reject = flags&MPAFlagReject != 0
	f.Enhanced = flags&MPAFlagEnhanced != 0
	f.Reserved = flags & mpaFlagReserved
	f.Revision = h.Revision()
	pdLen := h.PrivateDataLen()
	if pdLen > maxPD {
		return f, 0, fmt.Errorf("%w: %d bytes, limit %d", ErrMPAPrivateDataLen, pdLen, maxPD)
	}
	n := MPAHeaderLen + pdLen
	if len(b) < n {
		return f, 0, fmt.Errorf("mpa: private data: %w (%d of %d bytes)", ErrShort, len(b)-MPAHeaderLen, pdLen)
	}
	pd := b[MPAHeaderLen:n]
	if f.HasEnhancedHeader() {
		if pdLen < EnhancedHeaderLen {
			return f, 0, fmt.Errorf("%w (PD_Length %d)", ErrMPAEnhanced, pdLen)
		}
		ird := binary.BigEndian.Uint16(pd[0:2])
		ord := binary.BigEndian.Uint16(pd[2:4])
		f.IRD = ird & enhMask
		f.ORD = ord & enhMask
		f.P2P = ird&enhP2P != 0
		if ird&enhSendRTR != 0 {
			f.RTR |= RTRSend
		}
		if ord&enhWriteRTR != 0 {
			f.RTR |= RTRWrite
		}
		if ord&enhReadRTR != 0 {
			f.RTR |= RTRRead
		}
		pd = pd[EnhancedHeaderLen:]
	}
	if len(pd) > 0 {
		f.PrivateData = pd
	}
	return f, n, nil
}
