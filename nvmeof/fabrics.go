package nvmeof

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// Fabrics command types: FCTYPE, SQE byte 4 of opcode 0x7F (NVMe-oF 1.1
// Figure 20; protocol.md §9). Bits 1..0 give the data direction.
const (
	FCTypePropertySet = 0x00
	FCTypeConnect     = 0x01 // host-to-controller, 1024 bytes of Connect data
	FCTypePropertyGet = 0x04
	FCTypeAuthSend    = 0x05 // host-to-controller: a DH-HMAC-CHAP message (nvmeof/auth)
	FCTypeAuthReceive = 0x06 // controller-to-host: a DH-HMAC-CHAP message (nvmeof/auth)
	FCTypeDisconnect  = 0x08 // NVMe-oF 1.1; not sent by Linux
)

var fabricsNames = map[uint8]string{
	FCTypePropertySet: "Property Set", FCTypeConnect: "Connect", FCTypePropertyGet: "Property Get",
	FCTypeAuthSend: "Authentication Send", FCTypeAuthReceive: "Authentication Receive",
	FCTypeDisconnect: "Disconnect",
}

// initFabrics resets s as a Fabrics command of type fctype.
func (s *SQE) initFabrics(fctype uint8) {
	s.init(OpFabrics)
	s[4] = fctype
}

// ConnectCmd is a view of a Fabrics Connect command (protocol.md §9.1):
// RECFMT bytes 40..41, QID 42..43, SQSIZE 44..45 (0's based), CATTR 46,
// KATO 48..51 (ms). Its data is a 1024-byte ConnectData.
type ConnectCmd struct{ *SQE }

// ConnectCmd returns the Connect view of s.
func (s *SQE) ConnectCmd() ConnectCmd { return ConnectCmd{s} }

// Connect attributes (CATTR).
const (
	// cattrDisableSQFlow asks the controller to disable SQ flow control: it
	// then reports SQHD 0xFFFF (Linux NVME_CONNECT_DISABLE_SQFLOW).
	cattrDisableSQFlow = 1 << 2
)

// BuildConnect fills s with a Connect command for queue qid with a 0's based
// sqsize (admin: 31) and keep-alive timeout kato in milliseconds (admin
// queue only; 0 for I/O queues). Set SGL1 to the 1024-byte Connect data:
// keyed on the admin queue, in-capsule allowed on I/O queues (protocol.md §9.1).
func (s *SQE) BuildConnect(qid, sqsize uint16, kato uint32) ConnectCmd {
	s.initFabrics(FCTypeConnect)
	c := ConnectCmd{s}
	c.SetQID(qid)
	c.SetSQSize(sqsize)
	c.SetKATO(kato)
	return c
}

// RECFMT returns the record format (0; nvmet answers any other value with
// StatusConnectIncompatibleFormat|DNR).
func (c ConnectCmd) RECFMT() uint16 { return binary.LittleEndian.Uint16(c.SQE[40:]) }

// SetRECFMT sets the record format.
func (c ConnectCmd) SetRECFMT(v uint16) { binary.LittleEndian.PutUint16(c.SQE[40:], v) }

// QID returns the queue identifier: 0 for the admin queue, 1..N for I/O queues.
func (c ConnectCmd) QID() uint16 { return binary.LittleEndian.Uint16(c.SQE[42:]) }

// SetQID sets the queue identifier.
func (c ConnectCmd) SetQID(v uint16) { binary.LittleEndian.PutUint16(c.SQE[42:], v) }

// SQSize returns the 0's based submission queue size (nvmet rejects 0).
func (c ConnectCmd) SQSize() uint16 { return binary.LittleEndian.Uint16(c.SQE[44:]) }

// SetSQSize sets the 0's based submission queue size.
func (c ConnectCmd) SetSQSize(v uint16) { binary.LittleEndian.PutUint16(c.SQE[44:], v) }

// QueueSize returns the 1's based queue size (SQSIZE+1).
func (c ConnectCmd) QueueSize() int { return int(c.SQSize()) + 1 }

// cattr returns the connect attributes byte.
func (c ConnectCmd) cattr() uint8 { return c.SQE[46] }

// SQFlowControlDisable reports whether the host asks the controller to
// disable SQ flow control (CATTR bit 2, Fabrics 1.1 §3.3): the controller
// then reports SQHD FFFFh, and on NVMe/TCP may fold a read's response into
// its last C2HData (the SUCCESS flag, TCP 1.0 §3.6.2.7).
func (c ConnectCmd) SQFlowControlDisable() bool { return c.cattr()&cattrDisableSQFlow != 0 }

// SetSQFlowControlDisable sets or clears CATTR bit 2.
func (c ConnectCmd) SetSQFlowControlDisable(on bool) {
	if on {
		c.setCATTR(c.cattr() | cattrDisableSQFlow)
	} else {
		c.setCATTR(c.cattr() &^ cattrDisableSQFlow)
	}
}

// setCATTR sets the connect attributes byte.
func (c ConnectCmd) setCATTR(v uint8) { c.SQE[46] = v }

// KATO returns the keep-alive timeout in milliseconds (admin queue only; 0
// disables keep alive, but nvmet gives discovery controllers 120 s then).
func (c ConnectCmd) KATO() uint32 { return binary.LittleEndian.Uint32(c.SQE[48:]) }

// SetKATO sets the keep-alive timeout in milliseconds.
func (c ConnectCmd) SetKATO(v uint32) { binary.LittleEndian.PutUint32(c.SQE[48:], v) }

// Offsets of the Connect SQE fields, for ConnectInvalidParamResult (IPO
// values nvmet uses: IPO_IATTR_CONNECT_SQE).
const (
	ConnectSQEOffQID    = 42
	ConnectSQEOffSQSIZE = 44
	ConnectSQEOffKATO   = 48
)

// ConnectData is the 1024-byte Connect command data (protocol.md §9.1):
//
//	0..15 HOSTID   16..17 CNTLID   256..511 SUBNQN   512..767 HOSTNQN
//
// The NQNs are NUL-terminated UTF-8 strings in 256-byte fields.
type ConnectData [ConnectDataSize]byte

// Offsets of the Connect data fields (IPO values with IATTR=1).
const (
	ConnectDataOffHOSTID  = 0
	ConnectDataOffCNTLID  = 16
	ConnectDataOffSUBNQN  = 256
	ConnectDataOffHOSTNQN = 512
)

// ParseConnectData returns a view of the first 1024 bytes of b as Connect
// data after checking it with Validate. A short b is a transfer length
// error: the error wraps StatusSGLInvalidData|DNR (nvmet checks the SGL
// length is exactly 1024). Validation failures are *ConnectParamError.
func ParseConnectData(b []byte) (*ConnectData, error) {
	if len(b) < ConnectDataSize {
		return nil, fmt.Errorf("%w (%w)", truncated("connect data", len(b), ConnectDataSize), StatusSGLInvalidData|StatusDNR)
	}
	d := (*ConnectData)(b[:ConnectDataSize])
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return d, nil
}

// HostID returns the 128-bit host identifier (the hostid= UUID bytes).
func (d *ConnectData) HostID() [16]byte { return [16]byte(d[0:16]) }

// SetHostID sets the host identifier.
func (d *ConnectData) SetHostID(id [16]byte) { copy(d[0:16], id[:]) }

// CNTLID returns the controller ID: CNTLIDDynamic (0xFFFF) on an admin
// connect, the admin connect's result on I/O connects.
func (d *ConnectData) CNTLID() uint16 { return binary.LittleEndian.Uint16(d[16:]) }

// SetCNTLID sets the controller ID.
func (d *ConnectData) SetCNTLID(v uint16) { binary.LittleEndian.PutUint16(d[16:], v) }

// SubNQN returns the subsystem NQN up to its NUL terminator.
func (d *ConnectData) SubNQN() string { return cString(d[256:512]) }

// SetSubNQN sets the subsystem NQN, NUL-padding the field; it is truncated
// to 255 bytes so the field stays terminated (validate it with ValidateNQN).
func (d *ConnectData) SetSubNQN(nqn string) { putCString(d[256:512], nqn) }

// HostNQN returns the host NQN up to its NUL terminator.
func (d *ConnectData) HostNQN() string { return cString(d[512:768]) }

// SetHostNQN sets the host NQN like SetSubNQN.
func (d *ConnectData) SetHostNQN(nqn string) { putCString(d[512:768], nqn) }

// Validate checks what a controller must check before using the data: both
// NQN fields are NUL-terminated within their 256 bytes, non-empty, at most
// NQNMaxLen (223) bytes and valid UTF-8 without control characters. It does
// not check the NQN format (see ValidateNQN) nor the CNTLID rules, which
// depend on the queue. Errors are *ConnectParamError locating the field.
func (d *ConnectData) Validate() error {
	if err := checkNQNField(d[256:512], "SUBNQN", ConnectDataOffSUBNQN); err != nil {
		return err
	}
	return checkNQNField(d[512:768], "HOSTNQN", ConnectDataOffHOSTNQN)
}

func checkNQNField(f []byte, name string, off uint16) error {
	n := bytes.IndexByte(f, 0)
	switch {
	case n < 0:
		return &ConnectParamError{InData: true, Offset: off, Reason: name + " is not NUL-terminated"}
	case n == 0:
		return &ConnectParamError{InData: true, Offset: off, Reason: name + " is empty"}
	case n > NQNMaxLen:
		return &ConnectParamError{InData: true, Offset: off, Reason: fmt.Sprintf("%s is %d bytes, longer than %d", name, n, NQNMaxLen)}
	}
	if err := checkNQNChars(f[:n]); err != nil {
		return &ConnectParamError{InData: true, Offset: off, Reason: name + " " + err.Error()}
	}
	return nil
}

// checkNQNChars rejects invalid UTF-8 and control characters.
func checkNQNChars(b []byte) error {
	if !utf8.Valid(b) {
		return fmt.Errorf("is not valid UTF-8")
	}
	for _, c := range b {
		if c < 0x20 || c == 0x7F {
			return fmt.Errorf("contains control character %#02x", c)
		}
	}
	return nil
}

// ConnectParamError is a Connect Invalid Parameters failure (status 0x182
// with DNR). Its location goes into the completion DW0 (see Result): InData
// selects the Connect data (IATTR=1) or the SQE (IATTR=0), Offset the byte
// offset of the offending field, e.g. 0x10100 for SUBNQN (protocol.md §9.1).
type ConnectParamError struct {
	InData bool
	Offset uint16
	Reason string
}

// Error describes the parameter and the status.
func (e *ConnectParamError) Error() string {
	where := "command"
	if e.InData {
		where = "data"
	}
	return fmt.Sprintf("nvmeof: connect: invalid parameter at %s offset %#x: %s: %v", where, e.Offset, e.Reason, e.Status())
}

// Status returns StatusConnectInvalidParameters|StatusDNR.
func (e *ConnectParamError) Status() Status { return StatusConnectInvalidParameters | StatusDNR }

// Unwrap returns the Status, so StatusFromError finds it.
func (e *ConnectParamError) Unwrap() error { return e.Status() }

// Result returns the completion DW0 for the error (IATTR/IPO).
func (e *ConnectParamError) Result() uint32 { return ConnectInvalidParamResult(e.InData, e.Offset) }

// ConnectInvalidParamResult encodes the DW0 of a Connect Invalid Parameters
// completion: bit 16 IATTR (1: offset is in the Connect data, 0: in the SQE)
// and bits 15..0 IPO, the byte offset (NVMe-oF 1.1 Figure 22; nvmet
// IPO_IATTR_CONNECT_DATA/SQE).
func ConnectInvalidParamResult(inData bool, offset uint16) uint32 {
	v := uint32(offset)
	if inData {
		v |= 1 << 16
	}
	return v
}

// ConnectResponse is the DW0 of a Connect completion.
type ConnectResponse uint32

// Connect response bits (Linux NVME_CONNECT_AUTHREQ_*).
const (
	// ConnectATR: authentication required (in-band, before the queue is usable).
	ConnectATR = 1 << 17
	// ConnectASCR: secure channel concatenation required.
	ConnectASCR = 1 << 18
)

// NewConnectResponse returns the successful Connect DW0 for controller cntlid
// with no authentication required (what nvmetd answers).
func NewConnectResponse(cntlid uint16) ConnectResponse { return ConnectResponse(cntlid) }

// CNTLID returns the controller ID of a successful Connect (bits 15..0).
func (r ConnectResponse) CNTLID() uint16 { return uint16(r) }

// ATR reports whether the controller requires in-band authentication.
func (r ConnectResponse) ATR() bool { return r&ConnectATR != 0 }

// ASCR reports whether the controller requires secure channel concatenation.
func (r ConnectResponse) ASCR() bool { return r&ConnectASCR != 0 }

// InvalidParam decodes the DW0 of a Connect Invalid Parameters completion.
func (r ConnectResponse) InvalidParam() (inData bool, offset uint16) {
	return r&(1<<16) != 0, uint16(r)
}

// Property attribute sizes (ATTRIB bits 2..0).
const (
	PropertySize8 = 1 // 8-byte property
)

// PropertyGetCmd is a view of a Fabrics Property Get command: ATTRIB byte 40,
// OFFSET bytes 44..47 (protocol.md §9.2). The value returns in CQE DW0..DW1.
type PropertyGetCmd struct{ *SQE }

// PropertyGetCmd returns the Property Get view of s.
func (s *SQE) PropertyGetCmd() PropertyGetCmd { return PropertyGetCmd{s} }

// BuildPropertyGet fills s with a Property Get of the property at offset,
// with the size the property has (PropertySize).
func (s *SQE) BuildPropertyGet(offset uint32) PropertyGetCmd {
	s.initFabrics(FCTypePropertyGet)
	c := PropertyGetCmd{s}
	c.SetOffset(offset)
	c.SetSize(PropertySize(offset))
	return c
}

// Attrib returns the ATTRIB byte.
func (c PropertyGetCmd) Attrib() uint8 { return c.SQE[40] }

// setAttrib sets the ATTRIB byte.
func (c PropertyGetCmd) setAttrib(v uint8) { c.SQE[40] = v }

// size returns the property size in bytes the command asks for: 8 if ATTRIB
// bits 2..0 are 1, else 4 (nvmet tests bit 0 only).
func (c PropertyGetCmd) size() int { return attribSize(c.SQE[40]) }

// SetSize sets ATTRIB for a 4- or 8-byte property.
func (c PropertyGetCmd) SetSize(n int) { c.SQE[40] = sizeAttrib(c.SQE[40], n) }

// Offset returns the property offset.
func (c PropertyGetCmd) Offset() uint32 { return binary.LittleEndian.Uint32(c.SQE[44:]) }

// SetOffset sets the property offset.
func (c PropertyGetCmd) SetOffset(v uint32) { binary.LittleEndian.PutUint32(c.SQE[44:], v) }

// PropertySetCmd is a view of a Fabrics Property Set command: ATTRIB byte 40,
// OFFSET bytes 44..47, VALUE bytes 48..55 (protocol.md §9.2).
type PropertySetCmd struct{ *SQE }

// PropertySetCmd returns the Property Set view of s.
func (s *SQE) PropertySetCmd() PropertySetCmd { return PropertySetCmd{s} }

// BuildPropertySet fills s with a Property Set of value at offset, with the
// size the property has (Linux only sets CC, 4 bytes; nvmet rejects 8-byte sets).
func (s *SQE) BuildPropertySet(offset uint32, value uint64) PropertySetCmd {
	s.initFabrics(FCTypePropertySet)
	c := PropertySetCmd{s}
	c.SetOffset(offset)
	c.SetSize(PropertySize(offset))
	c.SetValue(value)
	return c
}

// Attrib returns the ATTRIB byte.
func (c PropertySetCmd) Attrib() uint8 { return c.SQE[40] }

// Size returns the property size in bytes: 8 if ATTRIB bits 2..0 are 1, else 4.
func (c PropertySetCmd) Size() int { return attribSize(c.SQE[40]) }

// SetSize sets ATTRIB for a 4- or 8-byte property.
func (c PropertySetCmd) SetSize(n int) { c.SQE[40] = sizeAttrib(c.SQE[40], n) }

// Offset returns the property offset.
func (c PropertySetCmd) Offset() uint32 { return binary.LittleEndian.Uint32(c.SQE[44:]) }

// SetOffset sets the property offset.
func (c PropertySetCmd) SetOffset(v uint32) { binary.LittleEndian.PutUint32(c.SQE[44:], v) }

// Value returns the value to set; for a 4-byte property only the low 32
// bits count.
func (c PropertySetCmd) Value() uint64 {
	v := binary.LittleEndian.Uint64(c.SQE[48:])
	if c.Size() == 4 {
		v &= 0xFFFFFFFF
	}
	return v
}

// SetValue sets the value bytes 48..55.
func (c PropertySetCmd) SetValue(v uint64) { binary.LittleEndian.PutUint64(c.SQE[48:], v) }

func attribSize(a uint8) int {
	if a&7 == PropertySize8 {
		return 8
	}
	return 4
}

func sizeAttrib(a uint8, n int) uint8 {
	a &^= 7
	if n == 8 {
		a |= PropertySize8
	}
	return a
}

// DisconnectCmd is a view of a Fabrics Disconnect command (NVMe-oF 1.1
// §3.6; FCTYPE 0x08): RECFMT bytes 40..41. It deletes the I/O queue it is
// sent on, or the whole controller when sent on the admin queue. Linux
// hosts do not send it; Identify Controller OFCS bit 0 advertises it.
type DisconnectCmd struct{ *SQE }

// BuildDisconnect fills s with a Disconnect command (RECFMT 0).
func (s *SQE) BuildDisconnect() DisconnectCmd {
	s.initFabrics(FCTypeDisconnect)
	return DisconnectCmd{s}
}

// recfmt returns the record format (0).
func (c DisconnectCmd) recfmt() uint16 { return binary.LittleEndian.Uint16(c.SQE[40:]) }

// setRECFMT sets the record format.
func (c DisconnectCmd) setRECFMT(v uint16) { binary.LittleEndian.PutUint16(c.SQE[40:], v) }

// AuthCmd is a view of the Fabrics Authentication Send (FCTYPE 0x05) and
// Receive (0x06) commands (NVMe-oF 1.1 §6.3; Linux struct
// nvmf_auth_common_command): SECP byte 43, SPSP0 byte 41, SPSP1 byte 42,
// TL (send) / AL (receive) bytes 44..47. The DH-HMAC-CHAP messages they
// carry and the protocol state machines are in package nvmeof/auth.
type AuthCmd struct{ *SQE }

// AuthCmd returns the authentication command view of s.
func (s *SQE) AuthCmd() AuthCmd { return AuthCmd{s} }

// AuthProtocolDHCHAP is the SECP value of NVMe in-band authentication
// (Linux NVME_AUTH_DHCHAP_PROTOCOL_IDENTIFIER).
const AuthProtocolDHCHAP = 0xE9

// Offsets of the authentication command fields in the SQE (for the error
// location nvmet reports: offsetof(struct nvmf_auth_send_command, ...)).
const (
	AuthSQEOffSPSP0 = 41
	AuthSQEOffSPSP1 = 42
	AuthSQEOffSECP  = 43
	AuthSQEOffTL    = 44 // TL of Authentication Send, AL of Authentication Receive
)

// BuildAuthSend fills s with an Authentication Send of tl bytes of
// DH-HMAC-CHAP message (SECP 0xE9, SPSP0 = SPSP1 = 1, as Linux
// nvme_auth_submit). Set SGL1 to the data.
func (s *SQE) BuildAuthSend(tl uint32) AuthCmd {
	return s.buildAuth(FCTypeAuthSend, tl)
}

// BuildAuthReceive fills s with an Authentication Receive with allocation
// length al (Linux uses 4096). Set SGL1 to the buffer.
func (s *SQE) BuildAuthReceive(al uint32) AuthCmd {
	return s.buildAuth(FCTypeAuthReceive, al)
}

func (s *SQE) buildAuth(fctype uint8, n uint32) AuthCmd {
	s.initFabrics(fctype)
	c := AuthCmd{s}
	c.SetSECP(AuthProtocolDHCHAP)
	c.SetSPSP0(1)
	c.SetSPSP1(1)
	c.SetLength(n)
	return c
}

// IsAuth reports whether s is an Authentication Send or Receive command.
func (s *SQE) IsAuth() bool {
	return s.IsFabrics() && (s.FCType() == FCTypeAuthSend || s.FCType() == FCTypeAuthReceive)
}

// SECP returns the security protocol.
func (c AuthCmd) SECP() uint8 { return c.SQE[43] }

// SetSECP sets the security protocol.
func (c AuthCmd) SetSECP(v uint8) { c.SQE[43] = v }

// SPSP0 returns SP specific byte 0.
func (c AuthCmd) SPSP0() uint8 { return c.SQE[41] }

// SetSPSP0 sets SP specific byte 0.
func (c AuthCmd) SetSPSP0(v uint8) { c.SQE[41] = v }

// SPSP1 returns SP specific byte 1.
func (c AuthCmd) SPSP1() uint8 { return c.SQE[42] }

// SetSPSP1 sets SP specific byte 1.
func (c AuthCmd) SetSPSP1(v uint8) { c.SQE[42] = v }

// Length returns TL (Authentication Send transfer length) or AL
// (Authentication Receive allocation length).
func (c AuthCmd) Length() uint32 { return binary.LittleEndian.Uint32(c.SQE[44:]) }

// SetLength sets TL or AL.
func (c AuthCmd) SetLength(v uint32) { binary.LittleEndian.PutUint32(c.SQE[44:], v) }

// cString returns the bytes of f up to the first NUL (all of f if none).
func cString(f []byte) string {
	if n := bytes.IndexByte(f, 0); n >= 0 {
		f = f[:n]
	}
	return string(f)
}

// putCString copies s into f, truncated to len(f)-1 bytes, and NUL-pads the rest.
func putCString(f []byte, s string) {
	n := copy(f[:len(f)-1], s)
	clear(f[n:])
}
