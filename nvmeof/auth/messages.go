package auth

import (
	"encoding/binary"
	"fmt"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// The authentication messages travel as the data of Fabrics Authentication
// Send (host to controller) and Authentication Receive (controller to host)
// commands with SECP 0xE9 and SPSP0 = SPSP1 = 0x01 (NVMe Base 2.0 §8.13.5,
// TP 8006; Linux struct nvmf_auth_* in include/linux/nvme.h). Every
// message starts with
//
//	0 AUTH_TYPE   1 AUTH_ID   2..3 reserved   4..5 T_ID (transaction, LE)
//
// All multi-byte fields are little-endian.

var le = binary.LittleEndian

// SPSP is the value of SPSP0 and SPSP1 in every DH-HMAC-CHAP Authentication
// Send/Receive command (Linux nvme_auth_submit; nvmet rejects any other).
const SPSP = 0x01

// AuthType is the AUTH_TYPE byte of a message (Linux NVME_AUTH_*_MESSAGES).
type AuthType uint8

// Message types.
const (
	TypeCommon AuthType = 0x00 // AUTH_Negotiate, AUTH_Failure1, AUTH_Failure2
	TypeDHCHAP AuthType = 0x01 // DH-HMAC-CHAP_Challenge, _Reply, _Success1, _Success2
)

// MessageID is the AUTH_ID byte of a message (Linux
// NVME_AUTH_DHCHAP_MESSAGE_*).
type MessageID uint8

// Message identifiers.
const (
	MsgNegotiate MessageID = 0x00 // AUTH_Negotiate (common)
	MsgChallenge MessageID = 0x01 // DH-HMAC-CHAP_Challenge
	MsgReply     MessageID = 0x02 // DH-HMAC-CHAP_Reply
	MsgSuccess1  MessageID = 0x03 // DH-HMAC-CHAP_Success1
	MsgSuccess2  MessageID = 0x04 // DH-HMAC-CHAP_Success2
	MsgFailure2  MessageID = 0xF0 // AUTH_Failure2 (common; host to controller)
	MsgFailure1  MessageID = 0xF1 // AUTH_Failure1 (common; controller to host)
)

// String names the message.
func (m MessageID) String() string {
	switch m {
	case MsgNegotiate:
		return "AUTH_Negotiate"
	case MsgChallenge:
		return "DH-HMAC-CHAP_Challenge"
	case MsgReply:
		return "DH-HMAC-CHAP_Reply"
	case MsgSuccess1:
		return "DH-HMAC-CHAP_Success1"
	case MsgSuccess2:
		return "DH-HMAC-CHAP_Success2"
	case MsgFailure2:
		return "AUTH_Failure2"
	case MsgFailure1:
		return "AUTH_Failure1"
	}
	return fmt.Sprintf("message(%#02x)", uint8(m))
}

// Protocol and negotiation constants.
const (
	// AuthIDDHCHAP is the AUTHID of the DH-HMAC-CHAP protocol descriptor
	// (Linux NVME_AUTH_DHCHAP_AUTH_ID).
	AuthIDDHCHAP = 0x01
	// MaxHashIDs and MaxDHGroupIDs bound HALEN and DHLEN: the descriptor's
	// 60-byte ID list holds hash IDs in bytes 0..29 and DH group IDs in
	// bytes 30..59 (Linux NVME_AUTH_DHCHAP_MAX_HASH_IDS/_MAX_DH_IDS).
	MaxHashIDs    = 30
	MaxDHGroupIDs = 30
)

// Secure channel concatenation values (SC_C of AUTH_Negotiate; Linux
// NVME_AUTH_SECP_*). Only NVMe/TCP has a secure channel; nvmetd never
// asks for one and answers any other value with ExplConcatMismatch.
const (
	SCCNone          = 0x00 // NVME_AUTH_SECP_NOSC
	SCCNewTLSPSK     = 0x01 // NVME_AUTH_SECP_NEWTLSPSK
	SCCReplaceTLSPSK = 0x02 // NVME_AUTH_SECP_REPLACETLSPSK
)

// ReasonFailed is the only REASON CODE: "authentication failure" (Linux
// NVME_AUTH_DHCHAP_FAILURE_REASON_FAILED); the explanation says why.
const ReasonFailed = 0x01

// Explanation is the reason code explanation of AUTH_Failure1/2 (NVMe Base
// 2.0 Figure 548; Linux NVME_AUTH_DHCHAP_FAILURE_*).
type Explanation uint8

// Reason code explanations.
const (
	ExplFailed           Explanation = 0x01 // authentication failed (e.g. wrong response)
	ExplNotUsable        Explanation = 0x02 // authentication protocol not usable
	ExplConcatMismatch   Explanation = 0x03 // secure channel concatenation mismatch
	ExplHashUnusable     Explanation = 0x04 // hash function not usable
	ExplDHGroupUnusable  Explanation = 0x05 // DH group not usable
	ExplIncorrectPayload Explanation = 0x06 // incorrect payload
	ExplIncorrectMessage Explanation = 0x07 // incorrect protocol message
)

// String describes the explanation.
func (e Explanation) String() string {
	switch e {
	case ExplFailed:
		return "authentication failed"
	case ExplNotUsable:
		return "authentication protocol not usable"
	case ExplConcatMismatch:
		return "secure channel concatenation mismatch"
	case ExplHashUnusable:
		return "hash function not usable"
	case ExplDHGroupUnusable:
		return "DH group not usable"
	case ExplIncorrectPayload:
		return "incorrect payload"
	case ExplIncorrectMessage:
		return "incorrect protocol message"
	}
	return fmt.Sprintf("explanation %#02x", uint8(e))
}

// Message sizes.
const (
	HeaderSize             = 6  // AUTH_TYPE, AUTH_ID, reserved, T_ID
	NegotiateHeaderSize    = 8  // struct nvmf_auth_dhchap_negotiate_data
	ProtocolDescriptorSize = 64 // struct nvmf_auth_dhchap_protocol_descriptor
	// NegotiateSize is an AUTH_Negotiate with one descriptor, what Linux sends.
	NegotiateSize       = NegotiateHeaderSize + ProtocolDescriptorSize
	ChallengeHeaderSize = 16 // struct nvmf_auth_dhchap_challenge_data
	ReplyHeaderSize     = 16 // struct nvmf_auth_dhchap_reply_data
	Success1HeaderSize  = 16 // struct nvmf_auth_dhchap_success1_data
	Success2Size        = 16 // struct nvmf_auth_dhchap_success2_data
	FailureSize         = 8  // struct nvmf_auth_dhchap_failure_data
	// ReceiveBufferSize is the allocation length (AL) a Linux host gives
	// every Authentication Receive (CHAP_BUF_SIZE, enough for ffdhe8192).
	ReceiveBufferSize = 4096
)

// Header is the common start of every message.
type Header struct {
	Type AuthType
	ID   MessageID
	TID  uint16 // transaction identifier
}

// ParseHeader returns the header of a message.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, truncated("message header", len(b), HeaderSize)
	}
	return Header{Type: AuthType(b[0]), ID: MessageID(b[1]), TID: le.Uint16(b[4:])}, nil
}

func appendHeader(b []byte, t AuthType, id MessageID, tid uint16) []byte {
	return append(b, byte(t), byte(id), 0, 0, byte(tid), byte(tid>>8))
}

func checkHeader(b []byte, what string, need int, t AuthType, id MessageID) (Header, error) {
	if len(b) < need {
		return Header{}, truncated(what, len(b), need)
	}
	h, _ := ParseHeader(b)
	if h.Type != t || h.ID != id {
		return h, malformed(what, "AUTH_TYPE %#02x AUTH_ID %#02x, want %#02x %#02x", uint8(h.Type), uint8(h.ID), uint8(t), uint8(id))
	}
	return h, nil
}

// Negotiate is an AUTH_Negotiate message (host to controller; NVMe Base 2.0
// §8.13.5.2; struct nvmf_auth_dhchap_negotiate_data):
//
//	0 AUTH_TYPE 00h  1 AUTH_ID 00h  4..5 T_ID  6 SC_C  7 NAPD
//	8.. NAPD protocol descriptors of 64 bytes:
//	    0 AUTHID (01h)  2 HALEN  3 DHLEN  4..33 hash IDs  34..63 DH group IDs
type Negotiate struct {
	TID       uint16
	SCC       uint8 // secure channel concatenation (SCCNone)
	Protocols []Protocol
}

// Protocol is one authentication protocol descriptor of AUTH_Negotiate.
type Protocol struct {
	AuthID   uint8 // AuthIDDHCHAP
	Hashes   []Hash
	DHGroups []DHGroup
}

// NewNegotiate returns the AUTH_Negotiate of transaction tid offering one
// DH-HMAC-CHAP descriptor with hashes and groups.
func NewNegotiate(tid uint16, hashes []Hash, groups []DHGroup) *Negotiate {
	return &Negotiate{TID: tid, Protocols: []Protocol{{AuthID: AuthIDDHCHAP, Hashes: hashes, DHGroups: groups}}}
}

// AppendNegotiate appends the encoding of m to b. Each descriptor keeps at
// most MaxHashIDs hashes and MaxDHGroupIDs groups; at most 255 descriptors.
func AppendNegotiate(b []byte, m *Negotiate) []byte {
	n := min(len(m.Protocols), 255)
	b = appendHeader(b, TypeCommon, MsgNegotiate, m.TID)
	b = append(b, m.SCC, byte(n))
	for _, p := range m.Protocols[:n] {
		var d [ProtocolDescriptorSize]byte
		d[0] = p.AuthID
		nh, ng := min(len(p.Hashes), MaxHashIDs), min(len(p.DHGroups), MaxDHGroupIDs)
		d[2], d[3] = byte(nh), byte(ng)
		for i, h := range p.Hashes[:nh] {
			d[4+i] = byte(h)
		}
		for i, g := range p.DHGroups[:ng] {
			d[4+MaxHashIDs+i] = byte(g)
		}
		b = append(b, d[:]...)
	}
	return b
}

// ParseNegotiate decodes an AUTH_Negotiate. It needs the 8-byte header and
// NAPD whole descriptors, each with HALEN and DHLEN at most 30; bytes past
// them are ignored.
func ParseNegotiate(b []byte) (*Negotiate, error) {
	h, err := checkHeader(b, "AUTH_Negotiate", NegotiateHeaderSize, TypeCommon, MsgNegotiate)
	if err != nil {
		return nil, err
	}
	napd := int(b[7])
	if need := NegotiateHeaderSize + napd*ProtocolDescriptorSize; len(b) < need {
		return nil, truncated("AUTH_Negotiate", len(b), need)
	}
	m := &Negotiate{TID: h.TID, SCC: b[6], Protocols: make([]Protocol, napd)}
	for i := range m.Protocols {
		d := b[NegotiateHeaderSize+i*ProtocolDescriptorSize:][:ProtocolDescriptorSize]
		halen, dhlen := int(d[2]), int(d[3])
		if halen > MaxHashIDs || dhlen > MaxDHGroupIDs {
			return nil, malformed("AUTH_Negotiate", "descriptor %d: HALEN %d DHLEN %d, at most %d each", i, halen, dhlen, MaxHashIDs)
		}
		p := Protocol{AuthID: d[0], Hashes: make([]Hash, halen), DHGroups: make([]DHGroup, dhlen)}
		for j := range p.Hashes {
			p.Hashes[j] = Hash(d[4+j])
		}
		for j := range p.DHGroups {
			p.DHGroups[j] = DHGroup(d[4+MaxHashIDs+j])
		}
		m.Protocols[i] = p
	}
	return m, nil
}

// Challenge is a DH-HMAC-CHAP_Challenge message (controller to host; NVMe
// Base 2.0 §8.13.5.3; struct nvmf_auth_dhchap_challenge_data):
//
//	0 AUTH_TYPE 01h  1 AUTH_ID 01h  4..5 T_ID  6 HL  8 HASHID  9 DHGID
//	10..11 DHVLEN  12..15 SEQNUM  16.. C1 (HL bytes), DH value (DHVLEN bytes)
type Challenge struct {
	TID     uint16
	Hash    Hash
	DHGroup DHGroup
	Seqnum  uint32
	C       []byte // the challenge C1; HL = len(C) ≤ 255
	DHValue []byte // the controller's DH public value (empty for the NULL group)
}

// AppendChallenge appends the encoding of m to b; len(m.C) must be ≤ 255
// and len(m.DHValue) ≤ 65535.
func AppendChallenge(b []byte, m *Challenge) []byte {
	b = appendHeader(b, TypeDHCHAP, MsgChallenge, m.TID)
	b = append(b, byte(len(m.C)), 0, byte(m.Hash), byte(m.DHGroup))
	b = le.AppendUint16(b, uint16(len(m.DHValue)))
	b = le.AppendUint32(b, m.Seqnum)
	b = append(b, m.C...)
	return append(b, m.DHValue...)
}

// ParseChallenge decodes a DH-HMAC-CHAP_Challenge; bytes past the DH value
// are ignored (the controller pads the message to the allocation length).
// C and DHValue alias b.
func ParseChallenge(b []byte) (*Challenge, error) {
	h, err := checkHeader(b, "DH-HMAC-CHAP_Challenge", ChallengeHeaderSize, TypeDHCHAP, MsgChallenge)
	if err != nil {
		return nil, err
	}
	hl, dhvlen := int(b[6]), int(le.Uint16(b[10:]))
	if need := ChallengeHeaderSize + hl + dhvlen; len(b) < need {
		return nil, truncated("DH-HMAC-CHAP_Challenge", len(b), need)
	}
	v := b[ChallengeHeaderSize:]
	return &Challenge{TID: h.TID, Hash: Hash(b[8]), DHGroup: DHGroup(b[9]), Seqnum: le.Uint32(b[12:]),
		C: v[:hl:hl], DHValue: v[hl : hl+dhvlen : hl+dhvlen]}, nil
}

// Reply is a DH-HMAC-CHAP_Reply message (host to controller; NVMe Base 2.0
// §8.13.5.4; struct nvmf_auth_dhchap_reply_data):
//
//	0 AUTH_TYPE 01h  1 AUTH_ID 02h  4..5 T_ID  6 HL  8 CVALID  10..11 DHVLEN
//	12..15 SEQNUM (S2; 0: no controller authentication)
//	16.. R1 (HL bytes), C2 (HL bytes, zero when CVALID is 0), DH value (DHVLEN)
type Reply struct {
	TID     uint16
	CValid  bool   // C2 is valid: the host asks for controller authentication
	Seqnum  uint32 // S2
	R       []byte // the response R1; HL = len(R) ≤ 255
	C       []byte // the challenge C2: len(R) bytes, or nil for zeros
	DHValue []byte // the host's DH public value
}

// AppendReply appends the encoding of m to b; len(m.R) must be ≤ 255, m.C
// nil or as long as m.R, and len(m.DHValue) ≤ 65535.
func AppendReply(b []byte, m *Reply) []byte {
	hl := len(m.R)
	b = appendHeader(b, TypeDHCHAP, MsgReply, m.TID)
	cvalid := byte(0)
	if m.CValid {
		cvalid = 1
	}
	b = append(b, byte(hl), 0, cvalid, 0)
	b = le.AppendUint16(b, uint16(len(m.DHValue)))
	b = le.AppendUint32(b, m.Seqnum)
	b = append(b, m.R...)
	if m.C != nil {
		b = append(b, m.C[:hl]...)
	} else {
		b = append(b, make([]byte, hl)...)
	}
	return append(b, m.DHValue...)
}

// ParseReply decodes a DH-HMAC-CHAP_Reply; it needs 16 + 2×HL + DHVLEN
// bytes (what nvmet checks) and ignores bytes past them. R, C and DHValue
// alias b; C is returned whatever CVALID says.
func ParseReply(b []byte) (*Reply, error) {
	h, err := checkHeader(b, "DH-HMAC-CHAP_Reply", ReplyHeaderSize, TypeDHCHAP, MsgReply)
	if err != nil {
		return nil, err
	}
	hl, dhvlen := int(b[6]), int(le.Uint16(b[10:]))
	if need := ReplyHeaderSize + 2*hl + dhvlen; len(b) < need {
		return nil, truncated("DH-HMAC-CHAP_Reply", len(b), need)
	}
	v := b[ReplyHeaderSize:]
	return &Reply{TID: h.TID, CValid: b[8] != 0, Seqnum: le.Uint32(b[12:]),
		R: v[:hl:hl], C: v[hl : 2*hl : 2*hl], DHValue: v[2*hl : 2*hl+dhvlen : 2*hl+dhvlen]}, nil
}

// Success1 is a DH-HMAC-CHAP_Success1 message (controller to host; NVMe
// Base 2.0 §8.13.5.5; struct nvmf_auth_dhchap_success1_data):
//
//	0 AUTH_TYPE 01h  1 AUTH_ID 03h  4..5 T_ID  6 HL  8 RVALID (bit 0)
//	16.. R2 (HL bytes) when RVALID
type Success1 struct {
	TID    uint16
	HL     uint8  // hash length of the transaction
	RValid bool   // R carries the controller's response R2
	R      []byte // R2 (HL bytes) when RValid
}

// AppendSuccess1 appends the encoding of m to b; when m.RValid, m.R must
// hold m.HL bytes.
func AppendSuccess1(b []byte, m *Success1) []byte {
	b = appendHeader(b, TypeDHCHAP, MsgSuccess1, m.TID)
	rvalid := byte(0)
	if m.RValid {
		rvalid = 1
	}
	b = append(b, m.HL, 0, rvalid, 0, 0, 0, 0, 0, 0, 0)
	if m.RValid {
		b = append(b, m.R[:m.HL]...)
	}
	return b
}

// ParseSuccess1 decodes a DH-HMAC-CHAP_Success1: 16 bytes, plus HL when
// RVALID bit 0 is set. R aliases b.
func ParseSuccess1(b []byte) (*Success1, error) {
	h, err := checkHeader(b, "DH-HMAC-CHAP_Success1", Success1HeaderSize, TypeDHCHAP, MsgSuccess1)
	if err != nil {
		return nil, err
	}
	m := &Success1{TID: h.TID, HL: b[6], RValid: b[8]&1 != 0}
	if m.RValid {
		need := Success1HeaderSize + int(m.HL)
		if len(b) < need {
			return nil, truncated("DH-HMAC-CHAP_Success1", len(b), need)
		}
		m.R = b[Success1HeaderSize:need:need]
	}
	return m, nil
}

// Success2 is a DH-HMAC-CHAP_Success2 message (host to controller, after a
// successful controller authentication; NVMe Base 2.0 §8.13.5.6):
//
//	0 AUTH_TYPE 01h  1 AUTH_ID 04h  4..5 T_ID  6..15 reserved
type Success2 struct {
	TID uint16
}

// AppendSuccess2 appends the encoding of m to b.
func AppendSuccess2(b []byte, m *Success2) []byte {
	b = appendHeader(b, TypeDHCHAP, MsgSuccess2, m.TID)
	return append(b, make([]byte, Success2Size-HeaderSize)...)
}

// ParseSuccess2 decodes a DH-HMAC-CHAP_Success2.
func ParseSuccess2(b []byte) (*Success2, error) {
	h, err := checkHeader(b, "DH-HMAC-CHAP_Success2", Success2Size, TypeDHCHAP, MsgSuccess2)
	if err != nil {
		return nil, err
	}
	return &Success2{TID: h.TID}, nil
}

// Failure is an AUTH_Failure1 (controller to host) or AUTH_Failure2 (host
// to controller) message (NVMe Base 2.0 §8.13.5.7; struct
// nvmf_auth_dhchap_failure_data):
//
//	0 AUTH_TYPE 00h  1 AUTH_ID F1h/F0h  4..5 T_ID  6 REASON CODE  7 EXPLANATION
type Failure struct {
	ID          MessageID // MsgFailure1 or MsgFailure2
	TID         uint16
	Reason      uint8 // ReasonFailed
	Explanation Explanation
}

// AppendFailure appends the encoding of m to b.
func AppendFailure(b []byte, m *Failure) []byte {
	b = appendHeader(b, TypeCommon, m.ID, m.TID)
	return append(b, m.Reason, byte(m.Explanation))
}

// ParseFailure decodes an AUTH_Failure1 or AUTH_Failure2.
func ParseFailure(b []byte) (*Failure, error) {
	if len(b) < FailureSize {
		return nil, truncated("AUTH_Failure", len(b), FailureSize)
	}
	h, _ := ParseHeader(b)
	if h.Type != TypeCommon || (h.ID != MsgFailure1 && h.ID != MsgFailure2) {
		return nil, malformed("AUTH_Failure", "AUTH_TYPE %#02x AUTH_ID %#02x", uint8(h.Type), uint8(h.ID))
	}
	return &Failure{ID: h.ID, TID: h.TID, Reason: b[6], Explanation: Explanation(b[7])}, nil
}

func truncated(what string, have, need int) error {
	return fmt.Errorf("auth: %s: %d bytes, need %d: %w", what, have, need, nvmeof.ErrTruncated)
}

func malformed(what, format string, args ...any) error {
	return fmt.Errorf("auth: %s: %s: %w", what, fmt.Sprintf(format, args...), nvmeof.ErrMalformed)
}
