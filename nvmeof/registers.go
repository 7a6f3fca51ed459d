package nvmeof

import "fmt"

// Controller property offsets (NVMe Base 2.0 §3.1.4 Figure 33; NVMe-oF 1.1
// §3.4; Linux NVME_REG_*). On fabrics they are read and written with
// Property Get / Property Set (protocol.md §9.2).
const (
	PropCAP    = 0x00 // Controller Capabilities, 8 bytes
	PropVS     = 0x08 // Version, 4 bytes
	PropCC     = 0x14 // Controller Configuration, 4 bytes
	PropCSTS   = 0x1C // Controller Status, 4 bytes
	propNSSR   = 0x20 // NVM Subsystem Reset, 4 bytes
	PropASQ    = 0x28 // Admin SQ Base Address (reserved on fabrics), 8 bytes
	PropACQ    = 0x30 // Admin CQ Base Address (reserved on fabrics), 8 bytes
	PropBPMBL  = 0x48 // 8 bytes
	PropCMBMSC = 0x50 // 8 bytes
	PropCRTO   = 0x68 // Controller Ready Timeouts, 4 bytes; read only if CAP.CRMS.CRWMS
)

// PropertySize returns the size in bytes of the property at offset: 8 for
// CAP, ASQ, ACQ, BPMBL and CMBMSC, 4 for every other.
func PropertySize(offset uint32) int {
	switch offset {
	case PropCAP, PropASQ, PropACQ, PropBPMBL, PropCMBMSC:
		return 8
	}
	return 4
}

// CAP is the Controller Capabilities property (offset 0x00, 8 bytes).
// Suggested value for an NVMe/RDMA target: MQES 127, CQR, TO 15 (7.5 s),
// CSS NVM, MPSMIN 0 (protocol.md §11.3).
type CAP uint64

// Field positions in CAP.
const (
	capCQR     = 16
	capAMS     = 17
	capTO      = 24
	capDSTRD   = 32
	capNSSRS   = 36
	capCSS     = 37
	capBPS     = 45
	capMPSMIN  = 48
	capMPSMAX  = 52
	capCRWMS   = 59
	capCRIMS   = 60
	capCSSBits = 0xFF
)

// Command sets in CAP.CSS (bits 44..37; Linux NVME_CAP_CSS_*).
const (
	CAPCSSNVM = 1 << 0 // NVM command set
	CAPCSSCSI = 1 << 6 // one or more I/O command sets (CC.CSS = 6 selects by CSI)
)

// Controller ready modes in CAP.CRMS (bits 60..59).
const (
	CRMSCRWMS = 1 << 0 // controller ready with media support: host reads CRTO
	CRMSCRIMS = 1 << 1 // controller ready independent of media support
)

func (c CAP) bits(shift, width uint) uint64 { return uint64(c) >> shift & (1<<width - 1) }

func (c *CAP) setBits(shift, width uint, v uint64) {
	m := uint64(1<<width-1) << shift
	*c = CAP(uint64(*c)&^m | v<<shift&m)
}

// MQES returns Maximum Queue Entries Supported, 0's based.
func (c CAP) MQES() uint16 { return uint16(c.bits(0, 16)) }

// SetMQES sets MQES (0's based).
func (c *CAP) SetMQES(v uint16) { c.setBits(0, 16, uint64(v)) }

// CQR reports Contiguous Queues Required.
func (c CAP) CQR() bool { return c.bits(capCQR, 1) != 0 }

// SetCQR sets CQR.
func (c *CAP) SetCQR(v bool) { c.setBits(capCQR, 1, b2u(v)) }

// ams returns the Arbitration Mechanism Supported bits (bit 0 weighted round
// robin with urgent, bit 1 vendor specific).
func (c CAP) ams() uint8 { return uint8(c.bits(capAMS, 2)) }

// setAMS sets AMS.
func (c *CAP) setAMS(v uint8) { c.setBits(capAMS, 2, uint64(v)) }

// TO returns the ready timeout in 500 ms units.
func (c CAP) TO() uint8 { return uint8(c.bits(capTO, 8)) }

// SetTO sets the ready timeout in 500 ms units.
func (c *CAP) SetTO(v uint8) { c.setBits(capTO, 8, uint64(v)) }

// dstrd returns the doorbell stride (0 on fabrics).
func (c CAP) dstrd() uint8 { return uint8(c.bits(capDSTRD, 4)) }

// setDSTRD sets the doorbell stride.
func (c *CAP) setDSTRD(v uint8) { c.setBits(capDSTRD, 4, uint64(v)) }

// nssrs reports NVM Subsystem Reset Supported.
func (c CAP) nssrs() bool { return c.bits(capNSSRS, 1) != 0 }

// setNSSRS sets NSSRS.
func (c *CAP) setNSSRS(v bool) { c.setBits(capNSSRS, 1, b2u(v)) }

// CSS returns the Command Sets Supported bits (CAPCSS*).
func (c CAP) CSS() uint8 { return uint8(c.bits(capCSS, 8)) }

// SetCSS sets the Command Sets Supported bits.
func (c *CAP) SetCSS(v uint8) { c.setBits(capCSS, 8, uint64(v)) }

// bps reports Boot Partition Support.
func (c CAP) bps() bool { return c.bits(capBPS, 1) != 0 }

// setBPS sets BPS.
func (c *CAP) setBPS(v bool) { c.setBits(capBPS, 1, b2u(v)) }

// MPSMIN returns the minimum memory page size as 2^(12+MPSMIN); the Linux
// host fails if it is not 0 (4 KiB).
func (c CAP) MPSMIN() uint8 { return uint8(c.bits(capMPSMIN, 4)) }

// setMPSMIN sets MPSMIN.
func (c *CAP) setMPSMIN(v uint8) { c.setBits(capMPSMIN, 4, uint64(v)) }

// MPSMAX returns the maximum memory page size as 2^(12+MPSMAX).
func (c CAP) MPSMAX() uint8 { return uint8(c.bits(capMPSMAX, 4)) }

// setMPSMAX sets MPSMAX.
func (c *CAP) setMPSMAX(v uint8) { c.setBits(capMPSMAX, 4, uint64(v)) }

// CRMS returns the Controller Ready Modes Supported bits (CRMS*); with
// CRWMS set the Linux host reads CRTO.
func (c CAP) CRMS() uint8 { return uint8(c.bits(capCRWMS, 2)) }

// setCRMS sets CRMS.
func (c *CAP) setCRMS(v uint8) { c.setBits(capCRWMS, 2, uint64(v)) }

// String formats the fields for logs.
func (c CAP) String() string {
	return fmt.Sprintf("CAP(%#x: MQES %d, CQR %t, TO %d, CSS %#x, MPSMIN %d, MPSMAX %d, CRMS %d)",
		uint64(c), c.MQES(), c.CQR(), c.TO(), c.CSS(), c.MPSMIN(), c.MPSMAX(), c.CRMS())
}

// VS is the Version property (offset 0x08): major 31..16, minor 15..8,
// tertiary 7..0. It is also the Identify Controller VER field.
type VS uint32

// Version returns the VS value for major.minor.ter (Linux NVME_VS).
func Version(major uint16, minor, ter uint8) VS {
	return VS(uint32(major)<<16 | uint32(minor)<<8 | uint32(ter))
}

// Common versions.
var (
	vs1_2 = Version(1, 2, 0)
	VS1_3 = Version(1, 3, 0) // what nvmetd reports (protocol.md §11.3)
	vs1_4 = Version(1, 4, 0)
	vs2_0 = Version(2, 0, 0)
)

// Major returns the major version.
func (v VS) Major() uint16 { return uint16(v >> 16) }

// Minor returns the minor version.
func (v VS) Minor() uint8 { return uint8(v >> 8) }

// Tertiary returns the tertiary version.
func (v VS) Tertiary() uint8 { return uint8(v) }

// AtLeast reports whether v is major.minor or later.
func (v VS) AtLeast(major uint16, minor uint8) bool {
	return v.Major() > major || v.Major() == major && v.Minor() >= minor
}

// String returns "major.minor.tertiary".
func (v VS) String() string { return fmt.Sprintf("%d.%d.%d", v.Major(), v.Minor(), v.Tertiary()) }

// CC is the Controller Configuration property (offset 0x14, 4 bytes). The
// Linux host writes 0x00460000 (IOCQES 4, IOSQES 6) then sets EN
// (protocol.md §9.2).
type CC uint32

// CC field values (Linux NVME_CC_*).
const (
	CCCSSNVM    = 0 // CC.CSS: NVM command set
	CCCSSCSI    = 6 // CC.CSS: all I/O command sets, selected by CSI
	CCAMSRR     = 0 // CC.AMS: round robin
	CCSHNNone   = 0 // CC.SHN: no notification
	CCSHNNormal = 1 // CC.SHN: normal shutdown
)

func (c CC) bits(shift, width uint) uint32 { return uint32(c) >> shift & (1<<width - 1) }

func (c *CC) setBits(shift, width uint, v uint32) {
	m := uint32(1<<width-1) << shift
	*c = CC(uint32(*c)&^m | v<<shift&m)
}

// EN reports Enable.
func (c CC) EN() bool { return c.bits(0, 1) != 0 }

// SetEN sets Enable.
func (c *CC) SetEN(v bool) { c.setBits(0, 1, uint32(b2u(v))) }

// CSS returns the I/O Command Set Selected (CCCSS*).
func (c CC) CSS() uint8 { return uint8(c.bits(4, 3)) }

// SetCSS sets the I/O Command Set Selected.
func (c *CC) SetCSS(v uint8) { c.setBits(4, 3, uint32(v)) }

// MPS returns the memory page size as 2^(12+MPS) (nvmet requires 0).
func (c CC) MPS() uint8 { return uint8(c.bits(7, 4)) }

// SetMPS sets MPS.
func (c *CC) SetMPS(v uint8) { c.setBits(7, 4, uint32(v)) }

// AMS returns the Arbitration Mechanism Selected (nvmet requires 0).
func (c CC) AMS() uint8 { return uint8(c.bits(11, 3)) }

// SetAMS sets AMS.
func (c *CC) SetAMS(v uint8) { c.setBits(11, 3, uint32(v)) }

// SHN returns the Shutdown Notification (CCSHN*).
func (c CC) SHN() uint8 { return uint8(c.bits(14, 2)) }

// SetSHN sets the Shutdown Notification.
func (c *CC) SetSHN(v uint8) { c.setBits(14, 2, uint32(v)) }

// IOSQES returns the I/O submission queue entry size as a power of two (6).
func (c CC) IOSQES() uint8 { return uint8(c.bits(16, 4)) }

// SetIOSQES sets IOSQES.
func (c *CC) SetIOSQES(v uint8) { c.setBits(16, 4, uint32(v)) }

// IOCQES returns the I/O completion queue entry size as a power of two (4).
func (c CC) IOCQES() uint8 { return uint8(c.bits(20, 4)) }

// SetIOCQES sets IOCQES.
func (c *CC) SetIOCQES(v uint8) { c.setBits(20, 4, uint32(v)) }

// CRIME reports Controller Ready Independent of Media Enable.
func (c CC) CRIME() bool { return c.bits(24, 1) != 0 }

// SetCRIME sets CRIME.
func (c *CC) SetCRIME(v bool) { c.setBits(24, 1, uint32(b2u(v))) }

// String formats the fields for logs.
func (c CC) String() string {
	return fmt.Sprintf("CC(%#x: EN %t, CSS %d, MPS %d, AMS %d, SHN %d, IOSQES %d, IOCQES %d)",
		uint32(c), c.EN(), c.CSS(), c.MPS(), c.AMS(), c.SHN(), c.IOSQES(), c.IOCQES())
}

// CSTS is the Controller Status property (offset 0x1C, 4 bytes).
type CSTS uint32

// CSTS.SHST values (Linux NVME_CSTS_SHST_*).
const (
	SHSTNormal    = 0 // normal operation
	SHSTOccurring = 1 // shutdown processing occurring
	SHSTComplete  = 2 // shutdown processing complete
)

func (c CSTS) bits(shift, width uint) uint32 { return uint32(c) >> shift & (1<<width - 1) }

func (c *CSTS) setBits(shift, width uint, v uint32) {
	m := uint32(1<<width-1) << shift
	*c = CSTS(uint32(*c)&^m | v<<shift&m)
}

// RDY reports Ready.
func (c CSTS) RDY() bool { return c.bits(0, 1) != 0 }

// SetRDY sets Ready.
func (c *CSTS) SetRDY(v bool) { c.setBits(0, 1, uint32(b2u(v))) }

// CFS reports Controller Fatal Status.
func (c CSTS) CFS() bool { return c.bits(1, 1) != 0 }

// SetCFS sets Controller Fatal Status.
func (c *CSTS) SetCFS(v bool) { c.setBits(1, 1, uint32(b2u(v))) }

// SHST returns the Shutdown Status (SHST*).
func (c CSTS) SHST() uint8 { return uint8(c.bits(2, 2)) }

// SetSHST sets the Shutdown Status.
func (c *CSTS) SetSHST(v uint8) { c.setBits(2, 2, uint32(v)) }

// NSSRO reports NVM Subsystem Reset Occurred.
func (c CSTS) NSSRO() bool { return c.bits(4, 1) != 0 }

// setNSSRO sets NSSRO.
func (c *CSTS) setNSSRO(v bool) { c.setBits(4, 1, uint32(b2u(v))) }

// PP reports Processing Paused.
func (c CSTS) PP() bool { return c.bits(5, 1) != 0 }

// setPP sets Processing Paused.
func (c *CSTS) setPP(v bool) { c.setBits(5, 1, uint32(b2u(v))) }

// String formats the fields for logs.
func (c CSTS) String() string {
	return fmt.Sprintf("CSTS(%#x: RDY %t, CFS %t, SHST %d, NSSRO %t, PP %t)",
		uint32(c), c.RDY(), c.CFS(), c.SHST(), c.NSSRO(), c.PP())
}

// CRTO is the Controller Ready Timeouts property (offset 0x68, 4 bytes):
// CRWMT bits 15..0 and CRIMT bits 31..16, both in 500 ms units.
type CRTO uint32

// CRWMT returns the Controller Ready With Media Timeout (500 ms units).
func (c CRTO) CRWMT() uint16 { return uint16(c) }

// setCRWMT sets CRWMT.
func (c *CRTO) setCRWMT(v uint16) { *c = *c&0xFFFF0000 | CRTO(v) }

// CRIMT returns the Controller Ready Independent of Media Timeout (500 ms units).
func (c CRTO) CRIMT() uint16 { return uint16(c >> 16) }

// setCRIMT sets CRIMT.
func (c *CRTO) setCRIMT(v uint16) { *c = *c&0xFFFF | CRTO(v)<<16 }

func b2u(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}
