package wire

import (
	"encoding/binary"
	"fmt"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// PDUType is the PDU-Type field of the common header (TCP 1.0 §3.6.1,
// Figure 18).
type PDUType uint8

// The PDU types.
const (
	TypeICReq       PDUType = 0x00
	TypeICResp      PDUType = 0x01
	TypeH2CTermReq  PDUType = 0x02
	TypeC2HTermReq  PDUType = 0x03
	TypeCapsuleCmd  PDUType = 0x04
	TypeCapsuleResp PDUType = 0x05
	TypeH2CData     PDUType = 0x06
	TypeC2HData     PDUType = 0x07
	TypeR2T         PDUType = 0x09
)

var typeNames = [...]string{
	TypeICReq: "ICReq", TypeICResp: "ICResp", TypeH2CTermReq: "H2CTermReq", TypeC2HTermReq: "C2HTermReq",
	TypeCapsuleCmd: "CapsuleCmd", TypeCapsuleResp: "CapsuleResp", TypeH2CData: "H2CData", TypeC2HData: "C2HData",
	TypeR2T: "R2T",
}

func (t PDUType) String() string {
	if int(t) < len(typeNames) && typeNames[t] != "" {
		return typeNames[t]
	}
	return fmt.Sprintf("pdu-type(%#x)", uint8(t))
}

// FromHost reports whether a host sends PDUs of this type (the others are
// sent by a controller).
func (t PDUType) FromHost() bool {
	switch t {
	case TypeICReq, TypeH2CTermReq, TypeCapsuleCmd, TypeH2CData:
		return true
	}
	return false
}

// Flags of the common header (TCP 1.0 §3.6.1, Figure 19).
const (
	// FlagHDGST: a header digest follows the PDU header.
	FlagHDGST uint8 = 0x01
	// FlagDDGST: a data digest follows the PDU data.
	FlagDDGST uint8 = 0x02
	// FlagLastPDU: the last H2CData or C2HData PDU of a transfer (of an
	// R2T's range, or of the command's data).
	FlagLastPDU uint8 = 0x04
	// FlagSuccess (C2HData only, with FlagLastPDU): the command completed
	// successfully and no CapsuleResp follows. Only when the host did not
	// disable SQ flow control... (TCP 1.0 §3.6.2.7): a controller may set it
	// only if it needs not report an SQ head pointer update.
	FlagSuccess uint8 = 0x08
)

// Sizes (TCP 1.0 §3.6.2).
const (
	CommonHeaderSize = 8
	// ICSize is HLEN and PLEN of ICReq and ICResp.
	ICSize = 128
	// CapsuleCmdHLen is HLEN of a CapsuleCmd: the common header and an SQE.
	CapsuleCmdHLen = CommonHeaderSize + nvmeof.SQESize
	// CapsuleRespHLen is HLEN of a CapsuleResp: the common header and a CQE.
	CapsuleRespHLen = CommonHeaderSize + nvmeof.CQESize
	// DataHLen is HLEN of H2CData, C2HData and R2T.
	DataHLen = 24
	// TermReqHLen is HLEN of H2CTermReq and C2HTermReq.
	TermReqHLen = 24
	// MaxTermReqPLen is the largest PLEN of a TermReq: its header and at
	// most 128 bytes of the PDU header in error (TCP 1.0 §3.6.2.9).
	MaxTermReqPLen = TermReqHLen + 128
	// DigestSize is the size of a header or data digest (CRC32C).
	DigestSize = 4
	// MinMaxH2CData is the smallest MAXH2CDATA a controller may report
	// (TCP 1.0 §3.6.2.3: at least 4096).
	MinMaxH2CData = 4096
	// MaxPDA is the largest HPDA or CPDA (0's based dwords: 128 bytes).
	MaxPDA = 31
)

// PFV10 is the PDU format version of revision 1.0 (the only one).
const PFV10 = 0

// Digest enable bits of ICReq/ICResp DGST (TCP 1.0 §3.6.2.2).
const (
	digestHeader = 0x01
	digestData   = 0x02
)

// FES is a Fatal Error Status of a TermReq (TCP 1.0 §3.6.2.9, Figure 27).
type FES uint16

// The fatal error statuses.
const (
	FESInvalidHeaderField   FES = 0x01
	FESSequenceError        FES = 0x02
	FESHeaderDigestError    FES = 0x03
	FESDataOutOfRange       FES = 0x04
	FESDataLimitExceeded    FES = 0x05 // R2T Limit Exceeded in the 1.0 text
	FESUnsupportedParameter FES = 0x06
)

var fesNames = map[FES]string{
	FESInvalidHeaderField: "invalid PDU header field", FESSequenceError: "PDU sequence error",
	FESHeaderDigestError: "header digest error", FESDataOutOfRange: "data transfer out of range",
	FESDataLimitExceeded: "data transfer limit exceeded", FESUnsupportedParameter: "unsupported parameter",
}

func (f FES) String() string {
	if s, ok := fesNames[f]; ok {
		return s
	}
	return fmt.Sprintf("fes(%#x)", uint16(f))
}

// FatalError is a fatal transport error in a received PDU: the receiver
// answers with a TermReq carrying FES and FEI (for FESInvalidHeaderField
// and FESUnsupportedParameter, the byte offset of the field in error in
// the PDU header) and closes the connection.
type FatalError struct {
	Type   PDUType // the PDU in error
	FES    FES
	FEI    uint32
	Reason string
}

func (e *FatalError) Error() string {
	return fmt.Sprintf("nvme/tcp: %s: %s (fei %d): %s", e.Type, e.FES, e.FEI, e.Reason)
}

func fatal(t PDUType, fes FES, fei uint32, format string, args ...any) *FatalError {
	return &FatalError{Type: t, FES: fes, FEI: fei, Reason: fmt.Sprintf(format, args...)}
}

// Header is a decoded common header (TCP 1.0 §3.6.1).
type Header struct {
	Type  PDUType
	Flags uint8
	HLen  uint8
	PDO   uint8
	PLen  uint32
}

// ParseHeader decodes the common header at the start of b.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < CommonHeaderSize {
		return Header{}, fmt.Errorf("nvme/tcp: common header: %d bytes, need %d", len(b), CommonHeaderSize)
	}
	return Header{Type: PDUType(b[0]), Flags: b[1], HLen: b[2], PDO: b[3], PLen: binary.LittleEndian.Uint32(b[4:])}, nil
}

// Put writes h into the first CommonHeaderSize bytes of b.
func (h Header) Put(b []byte) {
	_ = b[CommonHeaderSize-1]
	b[0], b[1], b[2], b[3] = byte(h.Type), h.Flags, h.HLen, h.PDO
	binary.LittleEndian.PutUint32(b[4:], h.PLen)
}

// hlenOf is the fixed HLEN of each type.
func hlenOf(t PDUType) (uint8, bool) {
	switch t {
	case TypeICReq, TypeICResp:
		return ICSize, true
	case TypeH2CTermReq, TypeC2HTermReq:
		return TermReqHLen, true
	case TypeCapsuleCmd:
		return CapsuleCmdHLen, true
	case TypeCapsuleResp:
		return CapsuleRespHLen, true
	case TypeH2CData, TypeC2HData, TypeR2T:
		return DataHLen, true
	}
	return 0, false
}

// Digests are the digests a queue negotiated (TCP 1.0 §3.6.2.2).
type Digests struct {
	Header, Data bool
}

// Layout is where the parts of a PDU lie, from its common header.
type Layout struct {
	// HDGST: a header digest follows the HLEN header bytes.
	HDGST bool
	// DataOff and DataLen: the data (DataLen 0: none). For a TermReq the
	// data is the copy of the header in error.
	DataOff, DataLen uint32
	// DDGST: a data digest follows the data.
	DDGST bool
}

// HeaderLen is the length of the header and its digest.
func (l Layout) HeaderLen(h Header) int {
	n := int(h.HLen)
	if l.HDGST {
		n += DigestSize
	}
	return n
}

// Check validates the common header of a PDU received on a queue with
// negotiated digests d, whose receiver asked for data aligned to pda bytes
// ((HPDA or CPDA + 1) × 4; 0 or 4 for none), against the rules every PDU of
// its type obeys (TCP 1.0 §3.6), and returns its layout. fromHost says
// which side sent it. The PDU-specific fields (DATAL of a data PDU, the
// command's transfer) are checked by the caller.
func Check(h Header, fromHost bool, d Digests, pda int) (Layout, error) {
	t := h.Type
	hlen, ok := hlenOf(t)
	if !ok || t.FromHost() != fromHost {
		return Layout{}, fatal(t, FESInvalidHeaderField, 0, "a %s is not sent by the %s", t, map[bool]string{true: "host", false: "controller"}[fromHost])
	}
	if h.HLen != hlen {
		return Layout{}, fatal(t, FESInvalidHeaderField, 2, "HLEN %d, want %d", h.HLen, hlen)
	}
	var l Layout
	switch t {
	case TypeICReq, TypeICResp:
		// TCP 1.0 §3.6.2.2: no digests, no data; flags reserved.
		if h.Flags&(FlagHDGST|FlagDDGST) != 0 {
			return Layout{}, fatal(t, FESInvalidHeaderField, 1, "digest flags %#x on an %s", h.Flags, t)
		}
		if h.PDO != 0 {
			return Layout{}, fatal(t, FESInvalidHeaderField, 3, "PDO %d, want 0", h.PDO)
		}
		if h.PLen != ICSize {
			return Layout{}, fatal(t, FESInvalidHeaderField, 4, "PLEN %d, want %d", h.PLen, ICSize)
		}
		return l, nil
	case TypeH2CTermReq, TypeC2HTermReq:
		// TCP 1.0 §3.6.2.9: no digests; the header in error follows at HLEN.
		if h.Flags&(FlagHDGST|FlagDDGST) != 0 {
			return Layout{}, fatal(t, FESInvalidHeaderField, 1, "digest flags %#x on a %s", h.Flags, t)
		}
		if h.PDO != 0 {
			return Layout{}, fatal(t, FESInvalidHeaderField, 3, "PDO %d, want 0", h.PDO)
		}
		if h.PLen < TermReqHLen || h.PLen > MaxTermReqPLen {
			return Layout{}, fatal(t, FESInvalidHeaderField, 4, "PLEN %d outside %d..%d", h.PLen, TermReqHLen, MaxTermReqPLen)
		}
		l.DataOff, l.DataLen = TermReqHLen, h.PLen-TermReqHLen
		return l, nil
	}
	l.HDGST = h.Flags&FlagHDGST != 0
	if l.HDGST != d.Header {
		return Layout{}, fatal(t, FESInvalidHeaderField, 1, "header digest flag %v, negotiated %v", l.HDGST, d.Header)
	}
	l.DDGST = h.Flags&FlagDDGST != 0
	if l.DDGST && !d.Data {
		return Layout{}, fatal(t, FESInvalidHeaderField, 1, "data digest flag without a negotiated data digest")
	}
	min := uint32(hlen)
	if l.HDGST {
		min += DigestSize
	}
	if h.PLen < min {
		return Layout{}, fatal(t, FESInvalidHeaderField, 4, "PLEN %d < header %d", h.PLen, min)
	}
	hasData := h.PLen > min
	switch t {
	case TypeCapsuleResp, TypeR2T:
		hasData = false
		if h.PLen != min || h.PDO != 0 {
			return Layout{}, fatal(t, FESInvalidHeaderField, 4, "PLEN %d PDO %d: a %s carries no data", h.PLen, h.PDO, t)
		}
	case TypeH2CData, TypeC2HData:
		if !hasData {
			return Layout{}, fatal(t, FESInvalidHeaderField, 4, "PLEN %d: a %s without data", h.PLen, t)
		}
	case TypeCapsuleCmd:
		if !hasData && h.PDO != 0 {
			return Layout{}, fatal(t, FESInvalidHeaderField, 3, "PDO %d without data", h.PDO)
		}
	}
	if !hasData {
		if l.DDGST {
			return Layout{}, fatal(t, FESInvalidHeaderField, 1, "data digest flag without data")
		}
		return l, nil
	}
	if l.DDGST != d.Data {
		return Layout{}, fatal(t, FESInvalidHeaderField, 1, "data digest flag %v, negotiated %v", l.DDGST, d.Data)
	}
	pdo := uint32(h.PDO)
	if pdo < min {
		return Layout{}, fatal(t, FESInvalidHeaderField, 3, "PDO %d inside the header (%d)", pdo, min)
	}
	if pda > 4 && pdo%uint32(pda) != 0 {
		// TCP 1.0 §3.6.2.2: data of a PDU starts at a multiple of the
		// receiver's PDU data alignment.
		return Layout{}, fatal(t, FESInvalidHeaderField, 3, "PDO %d not aligned to %d", pdo, pda)
	}
	end := pdo
	if l.DDGST {
		end += DigestSize
	}
	if h.PLen <= end {
		return Layout{}, fatal(t, FESInvalidHeaderField, 4, "PLEN %d leaves no data after PDO %d", h.PLen, pdo)
	}
	l.DataOff, l.DataLen = pdo, h.PLen-end
	return l, nil
}

// NewHeader returns the common header of a PDU of type t with dataLen
// bytes of data on a queue with digests d, the data aligned to the
// receiver's pda bytes (0 or 4: none), and other flags (FlagLastPDU,
// FlagSuccess).
func NewHeader(t PDUType, flags uint8, d Digests, dataLen uint32, pda int) Header {
	hlen, _ := hlenOf(t)
	h := Header{Type: t, Flags: flags, HLen: hlen}
	n := uint32(hlen)
	if t == TypeICReq || t == TypeICResp || t == TypeH2CTermReq || t == TypeC2HTermReq {
		h.PLen = n + dataLen
		return h
	}
	if d.Header {
		h.Flags |= FlagHDGST
		n += DigestSize
	}
	if dataLen == 0 {
		h.PLen = n
		return h
	}
	if pda > 4 {
		n = (n + uint32(pda) - 1) / uint32(pda) * uint32(pda)
	}
	h.PDO = uint8(n)
	n += dataLen
	if d.Data {
		h.Flags |= FlagDDGST
		n += DigestSize
	}
	h.PLen = n
	return h
}

// ICReq is the Initialize Connection Request PDU (TCP 1.0 §3.6.2.2).
type ICReq [ICSize]byte

// PFV is the PDU format version.
func (p *ICReq) PFV() uint16 { return binary.LittleEndian.Uint16(p[8:]) }

// HPDA is the host PDU data alignment (0's based dwords).
func (p *ICReq) HPDA() uint8 { return p[10] }

// Digests are the digests the host asks for.
func (p *ICReq) Digests() Digests {
	return Digests{Header: p[11]&digestHeader != 0, Data: p[11]&digestData != 0}
}

// MaxR2T is the most outstanding R2Ts per command the host accepts (0's
// based).
func (p *ICReq) MaxR2T() uint32 { return binary.LittleEndian.Uint32(p[12:]) }

// NewICReq builds an ICReq.
func NewICReq(hpda uint8, d Digests, maxR2T uint32) *ICReq {
	var p ICReq
	NewHeader(TypeICReq, 0, Digests{}, 0, 0).Put(p[:])
	p[10] = hpda
	p[11] = digestByte(d)
	binary.LittleEndian.PutUint32(p[12:], maxR2T)
	return &p
}

func digestByte(d Digests) byte {
	var b byte
	if d.Header {
		b |= digestHeader
	}
	if d.Data {
		b |= digestData
	}
	return b
}

// ParseICReq decodes and checks an ICReq (the common header included).
func ParseICReq(b []byte) (*ICReq, error) {
	if len(b) < ICSize {
		return nil, fmt.Errorf("nvme/tcp: ICReq: %d bytes, need %d", len(b), ICSize)
	}
	h, _ := ParseHeader(b)
	if h.Type != TypeICReq {
		return nil, fatal(h.Type, FESSequenceError, 0, "%s where an ICReq is due", h.Type)
	}
	if _, err := Check(h, true, Digests{}, 0); err != nil {
		return nil, err
	}
	p := (*ICReq)(b[:ICSize])
	if p.PFV() != PFV10 {
		return nil, fatal(TypeICReq, FESUnsupportedParameter, 8, "PFV %d", p.PFV())
	}
	if p.HPDA() > MaxPDA {
		return nil, fatal(TypeICReq, FESUnsupportedParameter, 10, "HPDA %d > %d", p.HPDA(), MaxPDA)
	}
	return p, nil
}

// ICResp is the Initialize Connection Response PDU (TCP 1.0 §3.6.2.3).
type ICResp [ICSize]byte

// PFV is the PDU format version.
func (p *ICResp) PFV() uint16 { return binary.LittleEndian.Uint16(p[8:]) }

// CPDA is the controller PDU data alignment (0's based dwords).
func (p *ICResp) CPDA() uint8 { return p[10] }

// Digests are the digests in use on the queue.
func (p *ICResp) Digests() Digests {
	return Digests{Header: p[11]&digestHeader != 0, Data: p[11]&digestData != 0}
}

// MaxH2CData is the most data the controller accepts in one H2CData PDU.
func (p *ICResp) MaxH2CData() uint32 { return binary.LittleEndian.Uint32(p[12:]) }

// NewICResp builds an ICResp.
func NewICResp(cpda uint8, d Digests, maxH2CData uint32) *ICResp {
	var p ICResp
	NewHeader(TypeICResp, 0, Digests{}, 0, 0).Put(p[:])
	p[10] = cpda
	p[11] = digestByte(d)
	binary.LittleEndian.PutUint32(p[12:], maxH2CData)
	return &p
}

// ParseICResp decodes and checks an ICResp; asked are the digests the
// host's ICReq asked for (the controller may grant fewer, never more).
func ParseICResp(b []byte, asked Digests) (*ICResp, error) {
	if len(b) < ICSize {
		return nil, fmt.Errorf("nvme/tcp: ICResp: %d bytes, need %d", len(b), ICSize)
	}
	h, _ := ParseHeader(b)
	if h.Type != TypeICResp {
		return nil, fatal(h.Type, FESSequenceError, 0, "%s where an ICResp is due", h.Type)
	}
	if _, err := Check(h, false, Digests{}, 0); err != nil {
		return nil, err
	}
	p := (*ICResp)(b[:ICSize])
	if p.PFV() != PFV10 {
		return nil, fatal(TypeICResp, FESUnsupportedParameter, 8, "PFV %d", p.PFV())
	}
	if p.CPDA() > MaxPDA {
		return nil, fatal(TypeICResp, FESUnsupportedParameter, 10, "CPDA %d > %d", p.CPDA(), MaxPDA)
	}
	if g := p.Digests(); (g.Header && !asked.Header) || (g.Data && !asked.Data) {
		return nil, fatal(TypeICResp, FESUnsupportedParameter, 11, "digests %+v granted, %+v asked", g, asked)
	}
	if p.MaxH2CData() < MinMaxH2CData {
		return nil, fatal(TypeICResp, FESUnsupportedParameter, 12, "MAXH2CDATA %d < %d", p.MaxH2CData(), MinMaxH2CData)
	}
	return p, nil
}

// PDA is the data alignment in bytes of a 0's based HPDA or CPDA.
func PDA(v uint8) int { return (int(v) + 1) * 4 }

// CapsuleSQE is the SQE of a CapsuleCmd PDU whose header is at the start
// of b (at least CapsuleCmdHLen bytes).
func CapsuleSQE(b []byte) *nvmeof.SQE {
	return (*nvmeof.SQE)(b[CommonHeaderSize:CapsuleCmdHLen])
}

// CapsuleCQE is the CQE of a CapsuleResp PDU whose header is at the start
// of b (at least CapsuleRespHLen bytes).
func CapsuleCQE(b []byte) *nvmeof.CQE {
	return (*nvmeof.CQE)(b[CommonHeaderSize:CapsuleRespHLen])
}

// DataHeader is the header of an H2CData, C2HData or R2T PDU (TCP 1.0
// §3.6.2.6, §3.6.2.7, §3.6.2.8): the command's CID, the transfer tag of
// the R2T (H2CData, R2T), and the range of the command's data.
type DataHeader [DataHLen]byte

// Header is the common header.
func (p *DataHeader) Header() Header { h, _ := ParseHeader(p[:]); return h }

// CID is the command identifier.
func (p *DataHeader) CID() uint16 { return binary.LittleEndian.Uint16(p[8:]) }

// TTag is the transfer tag (H2CData: the R2T's; R2T: the controller's).
func (p *DataHeader) TTag() uint16 { return binary.LittleEndian.Uint16(p[10:]) }

// Offset is DATAO (R2TO): the offset of the range in the command's data.
func (p *DataHeader) Offset() uint32 { return binary.LittleEndian.Uint32(p[12:]) }

// Length is DATAL (R2TL): the length of the range.
func (p *DataHeader) Length() uint32 { return binary.LittleEndian.Uint32(p[16:]) }

// PutDataHeader writes a data or R2T header into b (at least DataHLen
// bytes): h its common header, then the fields.
func PutDataHeader(b []byte, h Header, cid, ttag uint16, offset, length uint32) {
	_ = b[DataHLen-1]
	h.Put(b)
	binary.LittleEndian.PutUint16(b[8:], cid)
	binary.LittleEndian.PutUint16(b[10:], ttag)
	binary.LittleEndian.PutUint32(b[12:], offset)
	binary.LittleEndian.PutUint32(b[16:], length)
	clear(b[20:DataHLen])
}

// ParseDataHeader decodes and checks the header of an H2CData, C2HData or
// R2T PDU received on a queue with digests d and data alignment pda.
// For a data PDU, DATAL must be the data the PDU carries.
func ParseDataHeader(b []byte, fromHost bool, d Digests, pda int) (*DataHeader, Layout, error) {
	if len(b) < DataHLen {
		return nil, Layout{}, fmt.Errorf("nvme/tcp: data PDU header: %d bytes, need %d", len(b), DataHLen)
	}
	h, _ := ParseHeader(b)
	if h.Type != TypeH2CData && h.Type != TypeC2HData && h.Type != TypeR2T {
		return nil, Layout{}, fatal(h.Type, FESInvalidHeaderField, 0, "not a data PDU")
	}
	l, err := Check(h, fromHost, d, pda)
	if err != nil {
		return nil, Layout{}, err
	}
	p := (*DataHeader)(b[:DataHLen])
	if h.Type != TypeR2T && p.Length() != l.DataLen {
		return nil, Layout{}, fatal(h.Type, FESInvalidHeaderField, 16, "DATAL %d, the PDU carries %d", p.Length(), l.DataLen)
	}
	if h.Type == TypeR2T && p.Length() == 0 {
		return nil, Layout{}, fatal(h.Type, FESInvalidHeaderField, 16, "R2TL 0")
	}
	if uint64(p.Offset())+uint64(p.Length()) > 1<<32 {
		return nil, Layout{}, fatal(h.Type, FESDataOutOfRange, 12, "range %d+%d wraps", p.Offset(), p.Length())
	}
	if h.Type == TypeC2HData && h.Flags&FlagSuccess != 0 && h.Flags&FlagLastPDU == 0 {
		// TCP 1.0 §3.6.2.7: SUCCESS only on the last C2HData.
		return nil, Layout{}, fatal(h.Type, FESInvalidHeaderField, 1, "SUCCESS without LAST_PDU")
	}
	return p, l, nil
}

// TermReq is the header of an H2CTermReq or C2HTermReq (TCP 1.0
// §3.6.2.9, §3.6.2.10).
type TermReq [TermReqHLen]byte

// FES is the fatal error status.
func (p *TermReq) FES() FES { return FES(binary.LittleEndian.Uint16(p[8:])) }

// FEI is the fatal error information (a field's offset, for
// FESInvalidHeaderField and FESUnsupportedParameter).
func (p *TermReq) FEI() uint32 { return binary.LittleEndian.Uint32(p[10:]) }

// AppendTermReq appends a TermReq of type t (H2CTermReq or C2HTermReq)
// for e, carrying up to 128 bytes of the header in error (hdr).
func AppendTermReq(dst []byte, t PDUType, fes FES, fei uint32, hdr []byte) []byte {
	if len(hdr) > MaxTermReqPLen-TermReqHLen {
		hdr = hdr[:MaxTermReqPLen-TermReqHLen]
	}
	var p TermReq
	NewHeader(t, 0, Digests{}, uint32(len(hdr)), 0).Put(p[:])
	binary.LittleEndian.PutUint16(p[8:], uint16(fes))
	binary.LittleEndian.PutUint32(p[10:], fei)
	return append(append(dst, p[:]...), hdr...)
}

// ParseTermReq decodes a TermReq (the header in error, if any, follows at
// TermReqHLen up to PLEN).
func ParseTermReq(b []byte, fromHost bool) (*TermReq, error) {
	if len(b) < TermReqHLen {
		return nil, fmt.Errorf("nvme/tcp: TermReq: %d bytes, need %d", len(b), TermReqHLen)
	}
	h, _ := ParseHeader(b)
	if h.Type != TypeH2CTermReq && h.Type != TypeC2HTermReq {
		return nil, fatal(h.Type, FESInvalidHeaderField, 0, "not a TermReq")
	}
	if _, err := Check(h, fromHost, Digests{}, 0); err != nil {
		return nil, err
	}
	return (*TermReq)(b[:TermReqHLen]), nil
}
