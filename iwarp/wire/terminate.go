package wire

import (
	"encoding/binary"
	"fmt"
)

// Terminate layers (RFC 5040 §4.8).
const (
	LayerRDMAP = 0
	LayerDDP   = 1
	LayerLLP   = 2 // MPA
)

// Error types per layer (RFC 5040 §4.8, RFC 5041 §7.2).
const (
	RDMAPLocalCatastrophic = 0
	RDMAPRemoteProtection  = 1
	RDMAPRemoteOperation   = 2

	DDPCatastrophic  = 0
	DDPTaggedError   = 1
	DDPUntaggedError = 2

	LLPError = 0
)

// Cause is a Terminate cause: layer, error type and error code packed as
// layer<<12 | type<<8 | code.
type Cause uint16

// MakeCause packs a layer, error type and error code.
func MakeCause(layer, etype, code uint8) Cause {
	return Cause(layer&0xF)<<12 | Cause(etype&0xF)<<8 | Cause(code)
}

// Layer is the layer that detected the error.
func (c Cause) Layer() uint8 { return uint8(c >> 12) }

// Type is the error type within the layer.
func (c Cause) Type() uint8 { return uint8(c>>8) & 0xF }

// Code is the error code.
func (c Cause) Code() uint8 { return uint8(c) }

// Terminate causes used by this implementation (names follow RFC 5040 §4.8,
// RFC 5041 §7.2, RFC 5044 §8 and RFC 6581 §7; siw uses the same set).
const (
	CauseRDMAPCatastrophic = Cause(LayerRDMAP<<12 | RDMAPLocalCatastrophic<<8 | 0x00)

	CauseRDMAPInvalidSTag       = Cause(LayerRDMAP<<12 | RDMAPRemoteProtection<<8 | 0x00)
	CauseRDMAPBaseBounds        = Cause(LayerRDMAP<<12 | RDMAPRemoteProtection<<8 | 0x01)
	CauseRDMAPAccessRights      = Cause(LayerRDMAP<<12 | RDMAPRemoteProtection<<8 | 0x02)
	CauseRDMAPSTagNotAssociated = Cause(LayerRDMAP<<12 | RDMAPRemoteProtection<<8 | 0x03)
	CauseRDMAPTOWrap            = Cause(LayerRDMAP<<12 | RDMAPRemoteProtection<<8 | 0x04)
	CauseRDMAPCannotInvalidate  = Cause(LayerRDMAP<<12 | RDMAPRemoteProtection<<8 | 0x09)
	CauseRDMAPProtUnspecified   = Cause(LayerRDMAP<<12 | RDMAPRemoteProtection<<8 | 0xFF)

	CauseRDMAPBadVersion          = Cause(LayerRDMAP<<12 | RDMAPRemoteOperation<<8 | 0x05)
	CauseRDMAPUnexpectedOpcode    = Cause(LayerRDMAP<<12 | RDMAPRemoteOperation<<8 | 0x06)
	CauseRDMAPStreamCatastrophic  = Cause(LayerRDMAP<<12 | RDMAPRemoteOperation<<8 | 0x07)
	CauseRDMAPGlobalCatastrophic  = Cause(LayerRDMAP<<12 | RDMAPRemoteOperation<<8 | 0x08)
	CauseRDMAPOpCannotInvalidate  = Cause(LayerRDMAP<<12 | RDMAPRemoteOperation<<8 | 0x09)
	CauseRDMAPOperationUnspecific = Cause(LayerRDMAP<<12 | RDMAPRemoteOperation<<8 | 0xFF)

	CauseDDPCatastrophic = Cause(LayerDDP<<12 | DDPCatastrophic<<8 | 0x00)

	CauseDDPTaggedInvalidSTag   = Cause(LayerDDP<<12 | DDPTaggedError<<8 | 0x00)
	CauseDDPTaggedBaseBounds    = Cause(LayerDDP<<12 | DDPTaggedError<<8 | 0x01)
	CauseDDPTaggedNotAssociated = Cause(LayerDDP<<12 | DDPTaggedError<<8 | 0x02)
	CauseDDPTaggedTOWrap        = Cause(LayerDDP<<12 | DDPTaggedError<<8 | 0x03)
	CauseDDPTaggedBadVersion    = Cause(LayerDDP<<12 | DDPTaggedError<<8 | 0x04)
	CauseDDPUntaggedInvalidQN   = Cause(LayerDDP<<12 | DDPUntaggedError<<8 | 0x01)
	CauseDDPUntaggedNoBuffer    = Cause(LayerDDP<<12 | DDPUntaggedError<<8 | 0x02)
	CauseDDPUntaggedMSNRange    = Cause(LayerDDP<<12 | DDPUntaggedError<<8 | 0x03)
	CauseDDPUntaggedInvalidMO   = Cause(LayerDDP<<12 | DDPUntaggedError<<8 | 0x04)
	CauseDDPUntaggedTooLong     = Cause(LayerDDP<<12 | DDPUntaggedError<<8 | 0x05)
	CauseDDPUntaggedBadVersion  = Cause(LayerDDP<<12 | DDPUntaggedError<<8 | 0x06)
	CauseLLPConnectionLost      = Cause(LayerLLP<<12 | LLPError<<8 | 0x01)
	CauseLLPCRC                 = Cause(LayerLLP<<12 | LLPError<<8 | 0x02)
	CauseLLPMarker              = Cause(LayerLLP<<12 | LLPError<<8 | 0x03)
	CauseLLPInvalidRequest      = Cause(LayerLLP<<12 | LLPError<<8 | 0x04)
	CauseLLPLocalCatastrophic   = Cause(LayerLLP<<12 | LLPError<<8 | 0x05)
	CauseLLPInsufficientIRD     = Cause(LayerLLP<<12 | LLPError<<8 | 0x06)
	CauseLLPNoMatchingRTR       = Cause(LayerLLP<<12 | LLPError<<8 | 0x07)
)

var causeNames = map[Cause]string{
	CauseRDMAPCatastrophic:        "RDMAP local catastrophic error",
	CauseRDMAPInvalidSTag:         "RDMAP invalid STag",
	CauseRDMAPBaseBounds:          "RDMAP base or bounds violation",
	CauseRDMAPAccessRights:        "RDMAP access rights violation",
	CauseRDMAPSTagNotAssociated:   "RDMAP STag not associated with RDMAP stream",
	CauseRDMAPTOWrap:              "RDMAP TO wrap",
	CauseRDMAPCannotInvalidate:    "RDMAP STag cannot be invalidated",
	CauseRDMAPProtUnspecified:     "RDMAP unspecified protection error",
	CauseRDMAPBadVersion:          "RDMAP invalid RDMAP version",
	CauseRDMAPUnexpectedOpcode:    "RDMAP unexpected opcode",
	CauseRDMAPStreamCatastrophic:  "RDMAP catastrophic error localized to stream",
	CauseRDMAPGlobalCatastrophic:  "RDMAP catastrophic error global",
	CauseRDMAPOpCannotInvalidate:  "RDMAP operation: STag cannot be invalidated",
	CauseRDMAPOperationUnspecific: "RDMAP unspecified operation error",
	CauseDDPCatastrophic:          "DDP local catastrophic error",
	CauseDDPTaggedInvalidSTag:     "DDP tagged: invalid STag",
	CauseDDPTaggedBaseBounds:      "DDP tagged: base or bounds violation",
	CauseDDPTaggedNotAssociated:   "DDP tagged: STag not associated with stream",
	CauseDDPTaggedTOWrap:          "DDP tagged: TO wrap",
	CauseDDPTaggedBadVersion:      "DDP tagged: invalid DDP version",
	CauseDDPUntaggedInvalidQN:     "DDP untagged: invalid QN",
	CauseDDPUntaggedNoBuffer:      "DDP untagged: invalid MSN, no buffer available",
	CauseDDPUntaggedMSNRange:      "DDP untagged: invalid MSN, MSN range",
	CauseDDPUntaggedInvalidMO:     "DDP untagged: invalid MO",
	CauseDDPUntaggedTooLong:       "DDP untagged: message too long for buffer",
	CauseDDPUntaggedBadVersion:    "DDP untagged: invalid DDP version",
	CauseLLPConnectionLost:        "MPA: TCP connection lost",
	CauseLLPCRC:                   "MPA: CRC error",
	CauseLLPMarker:                "MPA: marker and ULPDU pointer mismatch",
	CauseLLPInvalidRequest:        "MPA: invalid request or reply frame",
	CauseLLPLocalCatastrophic:     "MPA: local catastrophic error",
	CauseLLPInsufficientIRD:       "MPA: insufficient IRD resources",
	CauseLLPNoMatchingRTR:         "MPA: no matching RTR model",
}

// String describes the cause.
func (c Cause) String() string {
	if s, ok := causeNames[c]; ok {
		return fmt.Sprintf("%s (layer %d type %d code 0x%02x)", s, c.Layer(), c.Type(), c.Code())
	}
	return fmt.Sprintf("layer %d type %d code 0x%02x", c.Layer(), c.Type(), c.Code())
}

// Valid reports whether the layer/type combination exists in the RFCs.
func (c Cause) Valid() bool {
	switch c.Layer() {
	case LayerRDMAP, LayerDDP:
		return c.Type() <= 2
	case LayerLLP:
		return c.Type() == 0
	}
	return false
}

// TermError is a protocol violation detected locally: the cause is what the
// Terminate message sent to the peer carries.
type TermError struct {
	Cause Cause
	Msg   string
}

func (e *TermError) Error() string {
	if e.Msg == "" {
		return e.Cause.String()
	}
	return e.Cause.String() + ": " + e.Msg
}

// Terminate header control bits (RFC 5040 §4.8, byte 2 of the control word).
const (
	termHdrM = 0x80 // DDP Segment Length valid
	termHdrD = 0x40 // DDP header included
	termHdrR = 0x20 // RDMAP header included
)

// TerminateControlLen is the size of the Terminate Control word.
const TerminateControlLen = 4

// Terminate is the payload of an RDMAP Terminate message (RFC 5040 §4.8).
type Terminate struct {
	Cause Cause
	// SegLenValid (M): DDPSegLen holds the length of the offending segment.
	SegLenValid bool
	// DDPHeaderIncluded (D): Headers starts with the offending DDP header.
	DDPHeaderIncluded bool
	// RDMAPHeaderIncluded (R): the offending RDMAP header (a Read Request
	// body) follows the DDP header.
	RDMAPHeaderIncluded bool
	// DDPSegLen is the offending segment's length (meaningful with M).
	DDPSegLen uint16
	// Headers holds the included DDP (and RDMAP) header bytes, without the
	// ULPDU_Length field.
	Headers []byte
}

// AppendPayload encodes the Terminate payload in RFC layout at the end of b.
// When a header is included the 2-byte DDP Segment Length always precedes
// it (as siw does), so that the payload stays 4-byte aligned.
func (t *Terminate) AppendPayload(b []byte) []byte {
	var flags byte
	if t.SegLenValid {
		flags |= termHdrM
	}
	if t.DDPHeaderIncluded {
		flags |= termHdrD
	}
	if t.RDMAPHeaderIncluded {
		flags |= termHdrR
	}
	b = append(b, t.Cause.Layer()<<4|t.Cause.Type(), t.Cause.Code(), flags, 0)
	if t.DDPHeaderIncluded || t.SegLenValid {
		b = binary.BigEndian.AppendUint16(b, t.DDPSegLen)
		b = append(b, t.Headers...)
	}
	return b
}

// DecodeTerminate decodes a Terminate payload in RFC layout. It is lenient
// about what follows the control word: a Terminate is diagnostic.
func DecodeTerminate(p []byte) (Terminate, error) {
	var t Terminate
	if len(p) < TerminateControlLen {
		return t, fmt.Errorf("rdmap: terminate: %w (%d of %d bytes)", ErrShort, len(p), TerminateControlLen)
	}
	t.Cause = MakeCause(p[0]>>4, p[0]&0xF, p[1])
	t.SegLenValid = p[2]&termHdrM != 0
	t.DDPHeaderIncluded = p[2]&termHdrD != 0
	t.RDMAPHeaderIncluded = p[2]&termHdrR != 0
	rest := p[TerminateControlLen:]
	if (t.SegLenValid || t.DDPHeaderIncluded) && len(rest) >= 2 {
		t.DDPSegLen = binary.BigEndian.Uint16(rest[:2])
		t.Headers = rest[2:]
	}
	return t, nil
}

// DecodeTerminateSIW decodes a Terminate payload as Linux siw writes it on a
// little-endian machine: it fills the control word from C bitfields in host
// order, so byte 0 is type<<4|layer and the M/D/R flags are bits 0/1/2 of
// byte 2 (see protocol.md §5.4).
func DecodeTerminateSIW(p []byte) (Terminate, error) {
	t, err := DecodeTerminate(p)
	if err != nil {
		return t, err
	}
	t.Cause = MakeCause(p[0]&0xF, p[0]>>4, p[1])
	t.SegLenValid = p[2]&0x01 != 0
	t.DDPHeaderIncluded = p[2]&0x02 != 0
	t.RDMAPHeaderIncluded = p[2]&0x04 != 0
	t.DDPSegLen, t.Headers = 0, nil
	rest := p[TerminateControlLen:]
	if (t.SegLenValid || t.DDPHeaderIncluded) && len(rest) >= 2 {
		t.DDPSegLen = binary.BigEndian.Uint16(rest[:2])
		t.Headers = rest[2:]
	}
	return t, nil
}

// DecodeTerminateAny decodes a Terminate from an unknown peer: siw's layout
// when its flag bits or its nibble order give it away, the RFC layout
// otherwise. siw reports whether the siw interpretation was chosen.
func DecodeTerminateAny(p []byte) (t Terminate, siw bool, err error) {
	rfc, err := DecodeTerminate(p)
	if err != nil {
		return rfc, false, err
	}
	s, _ := DecodeTerminateSIW(p)
	switch {
	case p[2]&0xE0 == 0 && p[2]&0x07 != 0:
		return s, true, nil
	case !rfc.Cause.Valid() && s.Cause.Valid():
		return s, true, nil
	}
	return rfc, false, nil
}
