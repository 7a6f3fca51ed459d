package nvmeof

import "encoding/binary"

// Admin command opcodes (NVMe Base 2.0 Figure 28; Linux enum nvme_admin_opcode).
// Create/Delete SQ/CQ are invalid on fabrics (protocol.md §10.1).
const (
	AdminDeleteSQ        = 0x00
	AdminCreateSQ        = 0x01
	AdminGetLogPage      = 0x02
	AdminDeleteCQ        = 0x04
	AdminCreateCQ        = 0x05
	AdminIdentify        = 0x06
	AdminAbort           = 0x08
	AdminSetFeatures     = 0x09
	AdminGetFeatures     = 0x0A
	AdminAsyncEvent      = 0x0C // Asynchronous Event Request
	AdminNSManagement    = 0x0D
	AdminFWCommit        = 0x10
	AdminFWDownload      = 0x11
	AdminDeviceSelfTest  = 0x14
	AdminNSAttachment    = 0x15
	AdminKeepAlive       = 0x18
	AdminDirectiveSend   = 0x19
	AdminDirectiveRecv   = 0x1A
	AdminVirtualizationM = 0x1C
	AdminMISend          = 0x1D
	AdminMIRecv          = 0x1E
	AdminDoorbellBuffer  = 0x7C
	AdminFormatNVM       = 0x80
	AdminSecuritySend    = 0x81
	AdminSecurityRecv    = 0x82
	AdminSanitize        = 0x84
	AdminGetLBAStatus    = 0x86
)

// NVM command set I/O opcodes (NVM Command Set 1.0 Figure 13; Linux enum nvme_opcode).
const (
	NVMFlush              = 0x00
	NVMWrite              = 0x01
	NVMRead               = 0x02
	NVMWriteUncorrectable = 0x04
	NVMCompare            = 0x05
	NVMWriteZeroes        = 0x08
	NVMDatasetManagement  = 0x09
	NVMVerify             = 0x0C
	NVMReservationReg     = 0x0D
	NVMReservationReport  = 0x0E
	NVMReservationAcquire = 0x11
	NVMReservationRelease = 0x15
	NVMCopy               = 0x19
)

// OpFabrics is the opcode of every NVMe-oF Fabrics command, on admin and I/O
// queues alike; the command is selected by FCTYPE in SQE byte 4.
const OpFabrics = 0x7F

// SQE flags byte (CDW0 bits 15..8).
const (
	// FlagFuseFirst and FlagFuseSecond mark the halves of a fused operation.
	FlagFuseFirst  = 1 << 0
	flagFuseSecond = 1 << 1
	// FlagPSDTSGL selects SGLs for the data pointer, with a metadata pointer to
	// a contiguous buffer (PSDT 01b). The Linux RDMA host sets it on every
	// command, fabrics ones included (protocol.md §8.2).
	FlagPSDTSGL = 1 << 6
)

// DataDirection is the data transfer direction of a command, from bits 1..0
// of its opcode (or of FCTYPE for Fabrics commands; NVMe Base 2.0 §5 Figure
// 28 "Data Transfer", NVMe-oF 1.1 §6).
type DataDirection uint8

// Data transfer directions.
const (
	DirNone             DataDirection = 0 // no data
	DirHostToController DataDirection = 1 // write-type: the controller reads host memory (RDMA Read)
	DirControllerToHost DataDirection = 2 // read-type: the controller writes host memory (RDMA Write)
	dirBidirectional    DataDirection = 3
)

// String returns "none", "host-to-controller", "controller-to-host" or "bidirectional".
func (d DataDirection) String() string {
	switch d {
	case DirNone:
		return "none"
	case DirHostToController:
		return "host-to-controller"
	case DirControllerToHost:
		return "controller-to-host"
	}
	return "bidirectional"
}

// SQE is a 64-byte NVMe submission queue entry (command), viewed in place.
// All multi-byte fields are little-endian (protocol.md §8.2):
//
//	0  opcode   1 flags (FUSE, PSDT)   2..3 CID   4..7 NSID (fabrics: byte 4 FCTYPE)
//	8  CDW2..3  16 MPTR   24 DPTR (SGL1)   40..63 CDW10..CDW15
type SQE [SQESize]byte

// ParseSQE returns a view of the first 64 bytes of b as an SQE; the view
// aliases b (no copy). In-capsule data, if any, follows at b[64:].
func ParseSQE(b []byte) (*SQE, error) {
	if len(b) < SQESize {
		return nil, truncated("SQE", len(b), SQESize)
	}
	return (*SQE)(b[:SQESize]), nil
}

// reset zeroes the whole entry.
func (s *SQE) reset() { *s = SQE{} }

// Opcode returns the command opcode (byte 0).
func (s *SQE) Opcode() uint8 { return s[0] }

// SetOpcode sets the command opcode.
func (s *SQE) SetOpcode(op uint8) { s[0] = op }

// flags returns the flags byte (FUSE bits 1..0, PSDT bits 7..6).
func (s *SQE) flags() uint8 { return s[1] }

// SetFlags sets the flags byte.
func (s *SQE) SetFlags(f uint8) { s[1] = f }

// FUSE returns the fused operation field (bits 1..0 of the flags).
func (s *SQE) FUSE() uint8 { return s[1] & 3 }

// SetFUSE sets the fused operation field.
func (s *SQE) SetFUSE(v uint8) { s[1] = s[1]&^3 | v&3 }

// PSDT returns the PRP or SGL for data transfer field (bits 7..6 of the flags):
// 0 PRPs, 1 SGL with MPTR to a buffer, 2 SGL with MPTR to a segment.
func (s *SQE) PSDT() uint8 { return s[1] >> 6 }

// SetPSDT sets the PSDT field.
func (s *SQE) SetPSDT(v uint8) { s[1] = s[1]&0x3F | v<<6 }

// CID returns the command identifier. Linux keeps a generation counter in
// bits 15..12; a controller echoes it untouched (protocol.md §12.14).
func (s *SQE) CID() uint16 { return binary.LittleEndian.Uint16(s[2:]) }

// SetCID sets the command identifier.
func (s *SQE) SetCID(cid uint16) { binary.LittleEndian.PutUint16(s[2:], cid) }

// NSID returns the namespace identifier (bytes 4..7). For Fabrics commands
// byte 4 is FCTYPE instead.
func (s *SQE) NSID() uint32 { return binary.LittleEndian.Uint32(s[4:]) }

// SetNSID sets the namespace identifier.
func (s *SQE) SetNSID(nsid uint32) { binary.LittleEndian.PutUint32(s[4:], nsid) }

// FCType returns the Fabrics command type (byte 4), meaningful when the
// opcode is OpFabrics.
func (s *SQE) FCType() uint8 { return s[4] }

// SetFCType sets the Fabrics command type.
func (s *SQE) SetFCType(t uint8) { s[4] = t }

// IsFabrics reports whether the command is a Fabrics command (opcode 0x7F).
func (s *SQE) IsFabrics() bool { return s[0] == OpFabrics }

// CDW returns command dword n (0..15) as stored at byte offset 4n. CDW0 holds
// opcode/flags/CID, CDW1 the NSID, CDW4..5 MPTR and CDW6..9 DPTR. It returns 0
// for n outside 0..15.
func (s *SQE) CDW(n int) uint32 {
	if n < 0 || n > 15 {
		return 0
	}
	return binary.LittleEndian.Uint32(s[4*n:])
}

// SetCDW sets command dword n (0..15); other values of n are ignored.
func (s *SQE) SetCDW(n int, v uint32) {
	if n < 0 || n > 15 {
		return
	}
	binary.LittleEndian.PutUint32(s[4*n:], v)
}

// setCDW2 sets command dword 2.
func (s *SQE) setCDW2(v uint32) { binary.LittleEndian.PutUint32(s[8:], v) }

// setCDW3 sets command dword 3.
func (s *SQE) setCDW3(v uint32) { binary.LittleEndian.PutUint32(s[12:], v) }

// cdw10 returns command dword 10 (bytes 40..43).
func (s *SQE) cdw10() uint32 { return binary.LittleEndian.Uint32(s[40:]) }

// setCDW10 sets command dword 10.
func (s *SQE) setCDW10(v uint32) { binary.LittleEndian.PutUint32(s[40:], v) }

// CDW11 returns command dword 11 (bytes 44..47).
func (s *SQE) CDW11() uint32 { return binary.LittleEndian.Uint32(s[44:]) }

// SetCDW11 sets command dword 11.
func (s *SQE) SetCDW11(v uint32) { binary.LittleEndian.PutUint32(s[44:], v) }

// CDW12 returns command dword 12 (bytes 48..51).
func (s *SQE) CDW12() uint32 { return binary.LittleEndian.Uint32(s[48:]) }

// SetCDW12 sets command dword 12.
func (s *SQE) SetCDW12(v uint32) { binary.LittleEndian.PutUint32(s[48:], v) }

// cdw13 returns command dword 13 (bytes 52..55).
func (s *SQE) cdw13() uint32 { return binary.LittleEndian.Uint32(s[52:]) }

// setCDW13 sets command dword 13.
func (s *SQE) setCDW13(v uint32) { binary.LittleEndian.PutUint32(s[52:], v) }

// cdw14 returns command dword 14 (bytes 56..59).
func (s *SQE) cdw14() uint32 { return binary.LittleEndian.Uint32(s[56:]) }

// setCDW14 sets command dword 14.
func (s *SQE) setCDW14(v uint32) { binary.LittleEndian.PutUint32(s[56:], v) }

// setCDW15 sets command dword 15.
func (s *SQE) setCDW15(v uint32) { binary.LittleEndian.PutUint32(s[60:], v) }

// setMPTR sets the metadata pointer.
func (s *SQE) setMPTR(v uint64) { binary.LittleEndian.PutUint64(s[16:], v) }

// SGL1 returns a view of the data pointer (bytes 24..39) as an SGL
// descriptor; writes through the view change the SQE.
func (s *SQE) SGL1() *SGL { return (*SGL)(s[24:40]) }

// DataDirection returns the command's data transfer direction, from opcode
// bits 1..0, or FCTYPE bits 1..0 for Fabrics commands (Connect 0x01 is
// host-to-controller, Property Get 0x04 none, Auth Receive 0x06
// controller-to-host).
func (s *SQE) DataDirection() DataDirection {
	op := s[0]
	if op == OpFabrics {
		op = s[4]
	}
	return DataDirection(op & 3)
}

// IsWrite reports whether the command moves data from host to controller,
// by Linux's rule (nvme_is_write): opcode bit 0, or FCTYPE bit 0 for Fabrics
// commands. nvmet accepts in-capsule data only for such commands.
func (s *SQE) IsWrite() bool {
	if s[0] == OpFabrics {
		return s[4]&1 != 0
	}
	return s[0]&1 != 0
}

// init resets s and sets the opcode and the SGL PSDT flag the Linux RDMA
// host puts on every command; the caller sets CID and SGL1 afterwards.
func (s *SQE) init(op uint8) {
	*s = SQE{}
	s[0] = op
	s[1] = FlagPSDTSGL
}

// BuildKeepAlive fills s with a Keep Alive command (admin 0x18, no data).
// Like every Build method it zeroes s first and sets PSDT to SGL; set the CID
// and, for commands with data, SGL1 afterwards.
func (s *SQE) BuildKeepAlive() { s.init(AdminKeepAlive) }

// BuildAER fills s with an Asynchronous Event Request (admin 0x0C, no data).
// The controller holds it until an event occurs (protocol.md §9.4).
func (s *SQE) BuildAER() { s.init(AdminAsyncEvent) }

// AbortCmd is a view of an Abort command (admin 0x08).
type AbortCmd struct{ *SQE }

// abortCmd returns the Abort view of s.
func (s *SQE) abortCmd() AbortCmd { return AbortCmd{s} }

// BuildAbort fills s with an Abort of command cid on submission queue sqid.
func (s *SQE) BuildAbort(sqid, cid uint16) AbortCmd {
	s.init(AdminAbort)
	c := AbortCmd{s}
	c.SetSQID(sqid)
	c.SetAbortCID(cid)
	return c
}

// sqid returns the submission queue of the command to abort (CDW10 15..0).
func (c AbortCmd) sqid() uint16 { return binary.LittleEndian.Uint16(c.SQE[40:]) }

// SetSQID sets the submission queue of the command to abort.
func (c AbortCmd) SetSQID(v uint16) { binary.LittleEndian.PutUint16(c.SQE[40:], v) }

// abortCID returns the identifier of the command to abort (CDW10 31..16).
func (c AbortCmd) abortCID() uint16 { return binary.LittleEndian.Uint16(c.SQE[42:]) }

// SetAbortCID sets the identifier of the command to abort.
func (c AbortCmd) SetAbortCID(v uint16) { binary.LittleEndian.PutUint16(c.SQE[42:], v) }

// AbortNotAborted is the Abort completion DW0 bit 0: set when the command was
// not aborted (nvmet always answers 1: it aborts nothing).
const AbortNotAborted = 1 << 0

// OpcodeName returns a readable name of the command in s for logs, e.g.
// "Identify", "Read" or "Fabrics Connect"; qid 0 selects the admin opcode
// table, any other qid the NVM I/O table (like Linux's show_opcode_name).
func OpcodeName(qid uint16, s *SQE) string {
	if s.IsFabrics() {
		if n, ok := fabricsNames[s.FCType()]; ok {
			return "Fabrics " + n
		}
		return "Fabrics unknown"
	}
	names := nvmNames
	if qid == 0 {
		names = adminNames
	}
	if n, ok := names[s.Opcode()]; ok {
		return n
	}
	return "unknown"
}

var adminNames = map[uint8]string{
	AdminDeleteSQ: "Delete I/O SQ", AdminCreateSQ: "Create I/O SQ", AdminGetLogPage: "Get Log Page",
	AdminDeleteCQ: "Delete I/O CQ", AdminCreateCQ: "Create I/O CQ", AdminIdentify: "Identify",
	AdminAbort: "Abort", AdminSetFeatures: "Set Features", AdminGetFeatures: "Get Features",
	AdminAsyncEvent: "Asynchronous Event Request", AdminNSManagement: "Namespace Management",
	AdminFWCommit: "Firmware Commit", AdminFWDownload: "Firmware Image Download",
	AdminDeviceSelfTest: "Device Self-test", AdminNSAttachment: "Namespace Attachment",
	AdminKeepAlive: "Keep Alive", AdminDirectiveSend: "Directive Send", AdminDirectiveRecv: "Directive Receive",
	AdminVirtualizationM: "Virtualization Management", AdminMISend: "NVMe-MI Send", AdminMIRecv: "NVMe-MI Receive",
	AdminDoorbellBuffer: "Doorbell Buffer Config", AdminFormatNVM: "Format NVM",
	AdminSecuritySend: "Security Send", AdminSecurityRecv: "Security Receive", AdminSanitize: "Sanitize",
	AdminGetLBAStatus: "Get LBA Status",
}

var nvmNames = map[uint8]string{
	NVMFlush: "Flush", NVMWrite: "Write", NVMRead: "Read", NVMWriteUncorrectable: "Write Uncorrectable",
	NVMCompare: "Compare", NVMWriteZeroes: "Write Zeroes", NVMDatasetManagement: "Dataset Management",
	NVMVerify: "Verify", NVMReservationReg: "Reservation Register", NVMReservationReport: "Reservation Report",
	NVMReservationAcquire: "Reservation Acquire", NVMReservationRelease: "Reservation Release", NVMCopy: "Copy",
}
