package nvmeof

import (
	"fmt"
)

// IdentifyController is the 4096-byte Identify Controller data structure
// (CNS 0x01; NVMe Base 2.0 §5.17.2.1 Figure 275; NVMe-oF 1.1 §4.1 for the
// fabrics fields at 1792..2047; protocol.md §10.2 and §8.7), viewed in place.
// A target fills one with the setters; an initiator decodes the one it
// receives with ParseIdentifyController and checks it with CheckFabrics.
type IdentifyController [IdentifyDataSize]byte

// ParseIdentifyController returns a view of the first 4096 bytes of b as
// Identify Controller data; the view aliases b.
func ParseIdentifyController(b []byte) (*IdentifyController, error) {
	if len(b) < IdentifyDataSize {
		return nil, truncated("identify controller", len(b), IdentifyDataSize)
	}
	return (*IdentifyController)(b[:IdentifyDataSize]), nil
}

// CMIC bits (Linux NVME_CTRL_CMIC_*).
const (
	CMICMultiPort = 1 << 0 // more than one port
	CMICMultiCtrl = 1 << 1 // more than one controller in the subsystem; Linux requires it for a second controller
	CMICSRIOV     = 1 << 2
	CMICANA       = 1 << 3 // asymmetric namespace access reporting: the host will read the ANA log
)

// CTRATT bits (Linux NVME_CTRL_ATTR_*).
const (
	CTRATTHostID128  = 1 << 0  // 128-bit host identifier
	CTRATTNOPSPMode  = 1 << 1  // non-operational power state permissive mode
	CTRATTNVMSets    = 1 << 2  // NVM sets
	CTRATTReadRecov  = 1 << 3  // read recovery levels
	CTRATTEndurGrps  = 1 << 4  // endurance groups
	CTRATTPredLat    = 1 << 5  // predictable latency mode
	CTRATTTBKAS      = 1 << 6  // traffic based keep alive: any command resets the keep-alive timer
	CTRATTNSGran     = 1 << 7  // namespace granularity
	CTRATTUUIDList   = 1 << 9  // UUID list
	CTRATTELBAS      = 1 << 15 // extended LBA formats (makes Linux send Host Behavior)
	CTRATTHDISNS     = 1 << 19
	CTRATTNSAttrLock = 1 << 20
)

// Controller types (CNTRLTYPE; Linux enum nvme_ctrl_type).
const (
	CntrlTypeIO        = 1
	CntrlTypeDiscovery = 2
	CntrlTypeAdmin     = 3
)

// Discovery controller types (DCTYPE; Linux enum nvme_dctype).
const (
	DCTypeNotReported = 0
	DCTypeDDC         = 1 // direct discovery controller
	DCTypeCDC         = 2 // central discovery controller
)

// LPA bits (log page attributes).
const (
	LPASMARTPerNS      = 1 << 0 // SMART log per namespace
	LPACommandEffects  = 1 << 1 // commands supported and effects log: the Linux host then reads it
	LPAExtendedData    = 1 << 2 // extended Get Log Page data (NUMDU, LPO)
	LPATelemetry       = 1 << 3
	LPAPersistentEvent = 1 << 4
)

// ONCS bits (optional NVM command support; Linux NVME_CTRL_ONCS_*).
const (
	ONCSCompare            = 1 << 0
	ONCSWriteUncorrectable = 1 << 1
	ONCSDSM                = 1 << 2 // Dataset Management
	ONCSWriteZeroes        = 1 << 3
	ONCSSaveSelect         = 1 << 4 // save field in Set Features, select field in Get Features
	ONCSReservations       = 1 << 5
	ONCSTimestamp          = 1 << 6 // makes the Linux host set the Timestamp feature
	ONCSVerify             = 1 << 7
	ONCSCopy               = 1 << 8
)

// VWC bits.
const (
	VWCPresent = 1 << 0 // a volatile write cache is present: Flush is meaningful
	// VWCFlushNSIDAllSupported (bits 2..1 = 11b) says Flush with NSID
	// 0xFFFFFFFF is supported; 10b says it is not (NVMe 1.4+).
	VWCFlushNSIDAllSupported = 3 << 1
	VWCFlushNSIDAllNotSupp   = 2 << 1
)

// SGLS bits (SGL support; NVMe Base 2.0 Figure 275).
const (
	SGLSSupported       = 1 << 0  // bits 1..0 = 01b: SGLs supported, no alignment requirement
	SGLSDwordAligned    = 2 << 0  // bits 1..0 = 10b: SGLs supported, dword alignment required
	SGLSKeyed           = 1 << 2  // keyed SGL data block descriptor: the Linux RDMA host requires it
	SGLSBitBucket       = 1 << 16 // bit bucket descriptor
	SGLSByteAligned     = 1 << 17 // byte aligned contiguous physical buffer of metadata
	SGLSLongerThanData  = 1 << 18 // SGL longer than the data transferred
	SGLSMPTRSingleDesc  = 1 << 19 // MPTR containing an SGL descriptor
	SGLSOffset          = 1 << 20 // address field as offset: in-capsule data (Linux uses it on I/O queues)
	SGLSTransportDBlock = 1 << 21 // transport SGL data block descriptor
	// SGLSNvmet is what nvmet-rdma reports (0x00100005).
	SGLSNvmet = SGLSSupported | SGLSKeyed | SGLSOffset
)

// FCATT bits.
const FCATTStatic = 1 << 0 // static controller model (0: dynamic, as nvmet)

// OFCS bits.
const OFCSDisconnect = 1 << 0 // the Disconnect command is supported

// IEEE returns the IEEE OUI identifier (bytes 73..75, 24-bit little-endian).
func (c *IdentifyController) IEEE() uint32 {
	return uint32(c[73]) | uint32(c[74])<<8 | uint32(c[75])<<16
}

// SetIEEE sets the IEEE OUI identifier (low 24 bits of v).
func (c *IdentifyController) SetIEEE(v uint32) {
	c[73], c[74], c[75] = byte(v), byte(v>>8), byte(v>>16)
}

// NumPowerStates is the number of power state descriptors (PSD0..PSD31).
const NumPowerStates = 32

// PSD returns a view of power state descriptor i (0..31) at 2048+32i, or nil
// for i out of range.
func (c *IdentifyController) PSD(i int) *PowerState {
	if i < 0 || i >= NumPowerStates {
		return nil
	}
	return (*PowerState)(c[2048+32*i : 2048+32*(i+1)])
}

// VendorSpecific returns the 1024 vendor specific bytes (3072..4095) as a
// slice aliasing c.
func (c *IdentifyController) VendorSpecific() []byte { return c[3072:4096] }

// PowerState is a 32-byte power state descriptor of Identify Controller.
// nvmet reports PSD0 with MP 0x9C4 (25 W), ENLAT 16 and EXLAT 4.
type PowerState [32]byte

// CheckFabrics applies the checks the Linux host makes on the Identify
// Controller of a fabrics controller before using it (protocol.md §8.7,
// drivers/nvme/host/core.c and rdma.c): CNTLID equals the Connect result
// cntlid; for a discovery connect, CNTRLTYPE is 2 or SUBNQN is the
// discovery NQN; for an I/O controller KAS is non-zero, IOCCSZ >= 4 and
// IORCSZ >= 1; ICDOFF is 0 and SGLS has keyed SGL support (bit 2).
func (c *IdentifyController) CheckFabrics(cntlid uint16, discovery bool) error {
	if got := c.CNTLID(); got != cntlid {
		return malformed("identify controller", "CNTLID %#x, connect returned %#x", got, cntlid)
	}
	isDisc := c.CNTRLTYPE() == CntrlTypeDiscovery || c.SUBNQN() == DiscoveryNQN
	if discovery && !isDisc {
		return malformed("identify controller", "discovery connect to a controller that is not a discovery controller (CNTRLTYPE %d, SUBNQN %q)", c.CNTRLTYPE(), c.SUBNQN())
	}
	if !isDisc {
		if c.KAS() == 0 {
			return malformed("identify controller", "KAS 0: keep-alive support is mandatory for fabrics")
		}
		if c.IOCCSZ() < 4 {
			return malformed("identify controller", "IOCCSZ %d < 4", c.IOCCSZ())
		}
		if c.IORCSZ() < 1 {
			return malformed("identify controller", "IORCSZ %d < 1", c.IORCSZ())
		}
	}
	if c.ICDOFF() != 0 {
		return malformed("identify controller", "ICDOFF %d, the RDMA transport needs 0", c.ICDOFF())
	}
	if c.SGLS()&SGLSKeyed == 0 {
		return malformed("identify controller", "SGLS %#x without keyed SGL data block support", c.SGLS())
	}
	return nil
}

// InlineDataSize returns the in-capsule data size the controller accepts on
// I/O queues: IOCCSZ*16-64 if SGLS offset support (bit 20) is set, else 0.
func (c *IdentifyController) InlineDataSize() int {
	if c.SGLS()&SGLSOffset == 0 {
		return 0
	}
	return InlineDataSize(c.IOCCSZ())
}

// MaxTransferSize returns the largest data transfer in bytes for a memory
// page size of 4 KiB (CAP.MPSMIN 0): 4096<<MDTS, or 0 for no limit.
func (c *IdentifyController) MaxTransferSize() int {
	if c.MDTS() == 0 {
		return 0
	}
	if c.MDTS() > 30 {
		return 1 << 42
	}
	return 4096 << c.MDTS()
}

// String summarises the controller for logs.
func (c *IdentifyController) String() string {
	return fmt.Sprintf("IdentifyController(CNTLID %#x, VER %v, type %d, MN %q, SN %q, SUBNQN %q)",
		c.CNTLID(), c.VER(), c.CNTRLTYPE(), c.MN(), c.SN(), c.SUBNQN())
}

// VID returns the PCI vendor ID (0 on fabrics).
func (c *IdentifyController) VID() uint16 { return le.Uint16(c[0:]) }

// SetVID sets VID.
func (c *IdentifyController) SetVID(x uint16) { le.PutUint16(c[0:], x) }

// SSVID returns the PCI subsystem vendor ID.
func (c *IdentifyController) SSVID() uint16 { return le.Uint16(c[2:]) }

// SetSSVID sets SSVID.
func (c *IdentifyController) SetSSVID(x uint16) { le.PutUint16(c[2:], x) }

// SN returns the serial number (ASCII), without the trailing padding.
func (c *IdentifyController) SN() string { return paddedString(c[4:24]) }

// SetSN sets SN, space-padded and truncated to 20 bytes.
func (c *IdentifyController) SetSN(s string) { putPadded(c[4:24], s, ' ') }

// MN returns the model number (ASCII; nvmet "Linux"), without the trailing padding.
func (c *IdentifyController) MN() string { return paddedString(c[24:64]) }

// SetMN sets MN, space-padded and truncated to 40 bytes.
func (c *IdentifyController) SetMN(s string) { putPadded(c[24:64], s, ' ') }

// FR returns the firmware revision (ASCII), without the trailing padding.
func (c *IdentifyController) FR() string { return paddedString(c[64:72]) }

// SetFR sets FR, space-padded and truncated to 8 bytes.
func (c *IdentifyController) SetFR(s string) { putPadded(c[64:72], s, ' ') }

// RAB returns the recommended arbitration burst (nvmet 6).
func (c *IdentifyController) RAB() uint8 { return c[72] }

// SetRAB sets RAB.
func (c *IdentifyController) SetRAB(x uint8) { c[72] = x }

// CMIC returns the controller multi-path I/O and namespace sharing capabilities (CMIC* bits).
func (c *IdentifyController) CMIC() uint8 { return c[76] }

// SetCMIC sets CMIC.
func (c *IdentifyController) SetCMIC(x uint8) { c[76] = x }

// MDTS returns the maximum data transfer size as a power of two of CAP.MPSMIN pages (0: no limit; nvmet 8).
func (c *IdentifyController) MDTS() uint8 { return c[77] }

// SetMDTS sets MDTS.
func (c *IdentifyController) SetMDTS(x uint8) { c[77] = x }

// CNTLID returns the controller ID; the Linux host requires it to equal the Connect result.
func (c *IdentifyController) CNTLID() uint16 { return le.Uint16(c[78:]) }

// SetCNTLID sets CNTLID.
func (c *IdentifyController) SetCNTLID(x uint16) { le.PutUint16(c[78:], x) }

// VER returns the version the controller complies with (same layout as the VS property).
func (c *IdentifyController) VER() VS { return VS(le.Uint32(c[80:])) }

// SetVER sets VER.
func (c *IdentifyController) SetVER(x VS) { le.PutUint32(c[80:], uint32(x)) }

// RTD3R returns the RTD3 resume latency in microseconds.
func (c *IdentifyController) RTD3R() uint32 { return le.Uint32(c[84:]) }

// SetRTD3R sets RTD3R.
func (c *IdentifyController) SetRTD3R(x uint32) { le.PutUint32(c[84:], x) }

// RTD3E returns the RTD3 entry latency in microseconds.
func (c *IdentifyController) RTD3E() uint32 { return le.Uint32(c[88:]) }

// SetRTD3E sets RTD3E.
func (c *IdentifyController) SetRTD3E(x uint32) { le.PutUint32(c[88:], x) }

// OAES returns the optional asynchronous events supported (AEC* bits).
func (c *IdentifyController) OAES() uint32 { return le.Uint32(c[92:]) }

// SetOAES sets OAES.
func (c *IdentifyController) SetOAES(x uint32) { le.PutUint32(c[92:], x) }

// CTRATT returns the controller attributes (CTRATT* bits).
func (c *IdentifyController) CTRATT() uint32 { return le.Uint32(c[96:]) }

// SetCTRATT sets CTRATT.
func (c *IdentifyController) SetCTRATT(x uint32) { le.PutUint32(c[96:], x) }

// RRLS returns the read recovery levels supported.
func (c *IdentifyController) RRLS() uint16 { return le.Uint16(c[100:]) }

// SetRRLS sets RRLS.
func (c *IdentifyController) SetRRLS(x uint16) { le.PutUint16(c[100:], x) }

// CNTRLTYPE returns the controller type (CntrlType*).
func (c *IdentifyController) CNTRLTYPE() uint8 { return c[111] }

// SetCNTRLTYPE sets CNTRLTYPE.
func (c *IdentifyController) SetCNTRLTYPE(x uint8) { c[111] = x }

// FGUID returns the FRU globally unique identifier.
func (c *IdentifyController) FGUID() [16]byte { return [16]byte(c[112:128]) }

// SetFGUID sets FGUID.
func (c *IdentifyController) SetFGUID(x [16]byte) { copy(c[112:128], x[:]) }

// CRDT1 returns command retry delay time 1 in 100 ms units.
func (c *IdentifyController) CRDT1() uint16 { return le.Uint16(c[128:]) }

// SetCRDT1 sets CRDT1.
func (c *IdentifyController) SetCRDT1(x uint16) { le.PutUint16(c[128:], x) }

// CRDT2 returns command retry delay time 2 in 100 ms units.
func (c *IdentifyController) CRDT2() uint16 { return le.Uint16(c[130:]) }

// SetCRDT2 sets CRDT2.
func (c *IdentifyController) SetCRDT2(x uint16) { le.PutUint16(c[130:], x) }

// CRDT3 returns command retry delay time 3 in 100 ms units.
func (c *IdentifyController) CRDT3() uint16 { return le.Uint16(c[132:]) }

// SetCRDT3 sets CRDT3.
func (c *IdentifyController) SetCRDT3(x uint16) { le.PutUint16(c[132:], x) }

// OACS returns the optional admin command support bits.
func (c *IdentifyController) OACS() uint16 { return le.Uint16(c[256:]) }

// SetOACS sets OACS.
func (c *IdentifyController) SetOACS(x uint16) { le.PutUint16(c[256:], x) }

// ACL returns the abort command limit (0's based).
func (c *IdentifyController) ACL() uint8 { return c[258] }

// SetACL sets ACL.
func (c *IdentifyController) SetACL(x uint8) { c[258] = x }

// AERL returns the asynchronous event request limit (0's based).
func (c *IdentifyController) AERL() uint8 { return c[259] }

// SetAERL sets AERL.
func (c *IdentifyController) SetAERL(x uint8) { c[259] = x }

// FRMW returns the firmware updates bits.
func (c *IdentifyController) FRMW() uint8 { return c[260] }

// SetFRMW sets FRMW.
func (c *IdentifyController) SetFRMW(x uint8) { c[260] = x }

// LPA returns the log page attributes (LPA* bits).
func (c *IdentifyController) LPA() uint8 { return c[261] }

// SetLPA sets LPA.
func (c *IdentifyController) SetLPA(x uint8) { c[261] = x }

// ELPE returns the error log page entries (0's based).
func (c *IdentifyController) ELPE() uint8 { return c[262] }

// SetELPE sets ELPE.
func (c *IdentifyController) SetELPE(x uint8) { c[262] = x }

// NPSS returns the number of power states supported (0's based).
func (c *IdentifyController) NPSS() uint8 { return c[263] }

// SetNPSS sets NPSS.
func (c *IdentifyController) SetNPSS(x uint8) { c[263] = x }

// AVSCC returns the admin vendor specific command configuration.
func (c *IdentifyController) AVSCC() uint8 { return c[264] }

// SetAVSCC sets AVSCC.
func (c *IdentifyController) SetAVSCC(x uint8) { c[264] = x }

// APSTA returns the autonomous power state transition attributes.
func (c *IdentifyController) APSTA() uint8 { return c[265] }

// SetAPSTA sets APSTA.
func (c *IdentifyController) SetAPSTA(x uint8) { c[265] = x }

// WCTEMP returns the warning composite temperature threshold in kelvin.
func (c *IdentifyController) WCTEMP() uint16 { return le.Uint16(c[266:]) }

// SetWCTEMP sets WCTEMP.
func (c *IdentifyController) SetWCTEMP(x uint16) { le.PutUint16(c[266:], x) }

// CCTEMP returns the critical composite temperature threshold in kelvin.
func (c *IdentifyController) CCTEMP() uint16 { return le.Uint16(c[268:]) }

// SetCCTEMP sets CCTEMP.
func (c *IdentifyController) SetCCTEMP(x uint16) { le.PutUint16(c[268:], x) }

// MTFA returns the maximum time for firmware activation in 100 ms units.
func (c *IdentifyController) MTFA() uint16 { return le.Uint16(c[270:]) }

// SetMTFA sets MTFA.
func (c *IdentifyController) SetMTFA(x uint16) { le.PutUint16(c[270:], x) }

// HMPRE returns the host memory buffer preferred size in 4 KiB units.
func (c *IdentifyController) HMPRE() uint32 { return le.Uint32(c[272:]) }

// SetHMPRE sets HMPRE.
func (c *IdentifyController) SetHMPRE(x uint32) { le.PutUint32(c[272:], x) }

// HMMIN returns the host memory buffer minimum size in 4 KiB units.
func (c *IdentifyController) HMMIN() uint32 { return le.Uint32(c[276:]) }

// SetHMMIN sets HMMIN.
func (c *IdentifyController) SetHMMIN(x uint32) { le.PutUint32(c[276:], x) }

// TNVMCAP returns the total NVM capacity in bytes.
func (c *IdentifyController) TNVMCAP() Uint128 { return getU128(c[280:]) }

// SetTNVMCAP sets TNVMCAP.
func (c *IdentifyController) SetTNVMCAP(x Uint128) { putU128(c[280:], x) }

// UNVMCAP returns the unallocated NVM capacity in bytes.
func (c *IdentifyController) UNVMCAP() Uint128 { return getU128(c[296:]) }

// SetUNVMCAP sets UNVMCAP.
func (c *IdentifyController) SetUNVMCAP(x Uint128) { putU128(c[296:], x) }

// RPMBS returns the replay protected memory block support.
func (c *IdentifyController) RPMBS() uint32 { return le.Uint32(c[312:]) }

// SetRPMBS sets RPMBS.
func (c *IdentifyController) SetRPMBS(x uint32) { le.PutUint32(c[312:], x) }

// EDSTT returns the extended device self-test time in minutes.
func (c *IdentifyController) EDSTT() uint16 { return le.Uint16(c[316:]) }

// SetEDSTT sets EDSTT.
func (c *IdentifyController) SetEDSTT(x uint16) { le.PutUint16(c[316:], x) }

// DSTO returns the device self-test options.
func (c *IdentifyController) DSTO() uint8 { return c[318] }

// SetDSTO sets DSTO.
func (c *IdentifyController) SetDSTO(x uint8) { c[318] = x }

// FWUG returns the firmware update granularity in 4 KiB units.
func (c *IdentifyController) FWUG() uint8 { return c[319] }

// SetFWUG sets FWUG.
func (c *IdentifyController) SetFWUG(x uint8) { c[319] = x }

// KAS returns the keep alive support granularity in 100 ms units; the Linux host requires it non-zero for I/O controllers.
func (c *IdentifyController) KAS() uint16 { return le.Uint16(c[320:]) }

// SetKAS sets KAS.
func (c *IdentifyController) SetKAS(x uint16) { le.PutUint16(c[320:], x) }

// HCTMA returns the host controlled thermal management attributes.
func (c *IdentifyController) HCTMA() uint16 { return le.Uint16(c[322:]) }

// SetHCTMA sets HCTMA.
func (c *IdentifyController) SetHCTMA(x uint16) { le.PutUint16(c[322:], x) }

// MNTMT returns the minimum thermal management temperature in kelvin.
func (c *IdentifyController) MNTMT() uint16 { return le.Uint16(c[324:]) }

// SetMNTMT sets MNTMT.
func (c *IdentifyController) SetMNTMT(x uint16) { le.PutUint16(c[324:], x) }

// MXTMT returns the maximum thermal management temperature in kelvin.
func (c *IdentifyController) MXTMT() uint16 { return le.Uint16(c[326:]) }

// SetMXTMT sets MXTMT.
func (c *IdentifyController) SetMXTMT(x uint16) { le.PutUint16(c[326:], x) }

// SANICAP returns the sanitize capabilities.
func (c *IdentifyController) SANICAP() uint32 { return le.Uint32(c[328:]) }

// SetSANICAP sets SANICAP.
func (c *IdentifyController) SetSANICAP(x uint32) { le.PutUint32(c[328:], x) }

// HMMINDS returns the host memory buffer minimum descriptor entry size in 4 KiB units.
func (c *IdentifyController) HMMINDS() uint32 { return le.Uint32(c[332:]) }

// SetHMMINDS sets HMMINDS.
func (c *IdentifyController) SetHMMINDS(x uint32) { le.PutUint32(c[332:], x) }

// HMMAXD returns the host memory maximum descriptors entries.
func (c *IdentifyController) HMMAXD() uint16 { return le.Uint16(c[336:]) }

// SetHMMAXD sets HMMAXD.
func (c *IdentifyController) SetHMMAXD(x uint16) { le.PutUint16(c[336:], x) }

// NSETIDMAX returns the NVM set identifier maximum.
func (c *IdentifyController) NSETIDMAX() uint16 { return le.Uint16(c[338:]) }

// SetNSETIDMAX sets NSETIDMAX.
func (c *IdentifyController) SetNSETIDMAX(x uint16) { le.PutUint16(c[338:], x) }

// ENDGIDMAX returns the endurance group identifier maximum.
func (c *IdentifyController) ENDGIDMAX() uint16 { return le.Uint16(c[340:]) }

// SetENDGIDMAX sets ENDGIDMAX.
func (c *IdentifyController) SetENDGIDMAX(x uint16) { le.PutUint16(c[340:], x) }

// ANATT returns the ANA transition time in seconds.
func (c *IdentifyController) ANATT() uint8 { return c[342] }

// SetANATT sets ANATT.
func (c *IdentifyController) SetANATT(x uint8) { c[342] = x }

// ANACAP returns the asymmetric namespace access capabilities.
func (c *IdentifyController) ANACAP() uint8 { return c[343] }

// SetANACAP sets ANACAP.
func (c *IdentifyController) SetANACAP(x uint8) { c[343] = x }

// ANAGRPMAX returns the ANA group identifier maximum.
func (c *IdentifyController) ANAGRPMAX() uint32 { return le.Uint32(c[344:]) }

// SetANAGRPMAX sets ANAGRPMAX.
func (c *IdentifyController) SetANAGRPMAX(x uint32) { le.PutUint32(c[344:], x) }

// NANAGRPID returns the number of ANA group identifiers.
func (c *IdentifyController) NANAGRPID() uint32 { return le.Uint32(c[348:]) }

// SetNANAGRPID sets NANAGRPID.
func (c *IdentifyController) SetNANAGRPID(x uint32) { le.PutUint32(c[348:], x) }

// PELS returns the persistent event log size in 64 KiB units.
func (c *IdentifyController) PELS() uint32 { return le.Uint32(c[352:]) }

// SetPELS sets PELS.
func (c *IdentifyController) SetPELS(x uint32) { le.PutUint32(c[352:], x) }

// SQES returns the submission queue entry sizes (required 6 in bits 3..0, maximum in 7..4; 0x66).
func (c *IdentifyController) SQES() uint8 { return c[512] }

// SetSQES sets SQES.
func (c *IdentifyController) SetSQES(x uint8) { c[512] = x }

// CQES returns the completion queue entry sizes (0x44).
func (c *IdentifyController) CQES() uint8 { return c[513] }

// SetCQES sets CQES.
func (c *IdentifyController) SetCQES(x uint8) { c[513] = x }

// MAXCMD returns the maximum outstanding commands per queue (nvmet: MQES+1).
func (c *IdentifyController) MAXCMD() uint16 { return le.Uint16(c[514:]) }

// SetMAXCMD sets MAXCMD.
func (c *IdentifyController) SetMAXCMD(x uint16) { le.PutUint16(c[514:], x) }

// NN returns the number of namespaces: the highest valid NSID.
func (c *IdentifyController) NN() uint32 { return le.Uint32(c[516:]) }

// SetNN sets NN.
func (c *IdentifyController) SetNN(x uint32) { le.PutUint32(c[516:], x) }

// ONCS returns the optional NVM command support bits (ONCS*).
func (c *IdentifyController) ONCS() uint16 { return le.Uint16(c[520:]) }

// SetONCS sets ONCS.
func (c *IdentifyController) SetONCS(x uint16) { le.PutUint16(c[520:], x) }

// FUSES returns the fused operation support bits.
func (c *IdentifyController) FUSES() uint16 { return le.Uint16(c[522:]) }

// SetFUSES sets FUSES.
func (c *IdentifyController) SetFUSES(x uint16) { le.PutUint16(c[522:], x) }

// FNA returns the format NVM attributes.
func (c *IdentifyController) FNA() uint8 { return c[524] }

// SetFNA sets FNA.
func (c *IdentifyController) SetFNA(x uint8) { c[524] = x }

// VWC returns the volatile write cache bits (bit 0 present: enables Flush).
func (c *IdentifyController) VWC() uint8 { return c[525] }

// SetVWC sets VWC.
func (c *IdentifyController) SetVWC(x uint8) { c[525] = x }

// AWUN returns the atomic write unit normal (0's based blocks).
func (c *IdentifyController) AWUN() uint16 { return le.Uint16(c[526:]) }

// SetAWUN sets AWUN.
func (c *IdentifyController) SetAWUN(x uint16) { le.PutUint16(c[526:], x) }

// AWUPF returns the atomic write unit power fail (0's based blocks).
func (c *IdentifyController) AWUPF() uint16 { return le.Uint16(c[528:]) }

// SetAWUPF sets AWUPF.
func (c *IdentifyController) SetAWUPF(x uint16) { le.PutUint16(c[528:], x) }

// ICSVSCC returns the I/O command set vendor specific command configuration (NVSCC).
func (c *IdentifyController) ICSVSCC() uint8 { return c[530] }

// SetICSVSCC sets ICSVSCC.
func (c *IdentifyController) SetICSVSCC(x uint8) { c[530] = x }

// NWPC returns the namespace write protection capabilities.
func (c *IdentifyController) NWPC() uint8 { return c[531] }

// SetNWPC sets NWPC.
func (c *IdentifyController) SetNWPC(x uint8) { c[531] = x }

// ACWU returns the atomic compare and write unit (0's based blocks).
func (c *IdentifyController) ACWU() uint16 { return le.Uint16(c[532:]) }

// SetACWU sets ACWU.
func (c *IdentifyController) SetACWU(x uint16) { le.PutUint16(c[532:], x) }

// OCFS returns the optional copy formats supported.
func (c *IdentifyController) OCFS() uint16 { return le.Uint16(c[534:]) }

// SetOCFS sets OCFS.
func (c *IdentifyController) SetOCFS(x uint16) { le.PutUint16(c[534:], x) }

// SGLS returns the SGL support bits (SGLS*; nvmet 0x100005).
func (c *IdentifyController) SGLS() uint32 { return le.Uint32(c[536:]) }

// SetSGLS sets SGLS.
func (c *IdentifyController) SetSGLS(x uint32) { le.PutUint32(c[536:], x) }

// MNAN returns the maximum number of allowed namespaces.
func (c *IdentifyController) MNAN() uint32 { return le.Uint32(c[540:]) }

// SetMNAN sets MNAN.
func (c *IdentifyController) SetMNAN(x uint32) { le.PutUint32(c[540:], x) }

// SUBNQN returns the NVM subsystem NQN, up to the first NUL.
func (c *IdentifyController) SUBNQN() string { return cString(c[768:1024]) }

// SetSUBNQN sets SUBNQN, NUL-padded and truncated to 255 bytes.
func (c *IdentifyController) SetSUBNQN(s string) { putCString(c[768:1024], s) }

// IOCCSZ returns the I/O queue command capsule size in 16-byte units (see IOCCSZ; Linux requires >= 4).
func (c *IdentifyController) IOCCSZ() uint32 { return le.Uint32(c[1792:]) }

// SetIOCCSZ sets IOCCSZ.
func (c *IdentifyController) SetIOCCSZ(x uint32) { le.PutUint32(c[1792:], x) }

// IORCSZ returns the I/O queue response capsule size in 16-byte units (Linux requires >= 1).
func (c *IdentifyController) IORCSZ() uint32 { return le.Uint32(c[1796:]) }

// SetIORCSZ sets IORCSZ.
func (c *IdentifyController) SetIORCSZ(x uint32) { le.PutUint32(c[1796:], x) }

// ICDOFF returns the in-capsule data offset in 16-byte units (the Linux RDMA host requires 0).
func (c *IdentifyController) ICDOFF() uint16 { return le.Uint16(c[1800:]) }

// SetICDOFF sets ICDOFF.
func (c *IdentifyController) SetICDOFF(x uint16) { le.PutUint16(c[1800:], x) }

// FCATT returns the fabrics controller attributes (bit 0: static controller model).
func (c *IdentifyController) FCATT() uint8 { return c[1802] }

// SetFCATT sets FCATT.
func (c *IdentifyController) SetFCATT(x uint8) { c[1802] = x }

// MSDBD returns the maximum SGL data block descriptors per command.
func (c *IdentifyController) MSDBD() uint8 { return c[1803] }

// SetMSDBD sets MSDBD.
func (c *IdentifyController) SetMSDBD(x uint8) { c[1803] = x }

// OFCS returns the optional fabric commands support (bit 0: Disconnect).
func (c *IdentifyController) OFCS() uint16 { return le.Uint16(c[1804:]) }

// SetOFCS sets OFCS.
func (c *IdentifyController) SetOFCS(x uint16) { le.PutUint16(c[1804:], x) }

// DCTYPE returns the discovery controller type (DCType*).
func (c *IdentifyController) DCTYPE() uint8 { return c[1806] }

// SetDCTYPE sets DCTYPE.
func (c *IdentifyController) SetDCTYPE(x uint8) { c[1806] = x }

// MP returns the maximum power (centiwatts, or 0.0001 W units with MXPS).
func (p *PowerState) MP() uint16 { return le.Uint16(p[0:]) }

// SetMP sets MP.
func (p *PowerState) SetMP(x uint16) { le.PutUint16(p[0:], x) }

// Flags returns the flags byte (bit 0 MXPS max power scale, bit 1 NOPS non-operational state).
func (p *PowerState) Flags() uint8 { return p[3] }

// SetFlags sets Flags.
func (p *PowerState) SetFlags(x uint8) { p[3] = x }

// ENLAT returns the entry latency in microseconds.
func (p *PowerState) ENLAT() uint32 { return le.Uint32(p[4:]) }

// SetENLAT sets ENLAT.
func (p *PowerState) SetENLAT(x uint32) { le.PutUint32(p[4:], x) }

// EXLAT returns the exit latency in microseconds.
func (p *PowerState) EXLAT() uint32 { return le.Uint32(p[8:]) }

// SetEXLAT sets EXLAT.
func (p *PowerState) SetEXLAT(x uint32) { le.PutUint32(p[8:], x) }

// RRT returns the relative read throughput.
func (p *PowerState) RRT() uint8 { return p[12] }

// SetRRT sets RRT.
func (p *PowerState) SetRRT(x uint8) { p[12] = x }

// RRL returns the relative read latency.
func (p *PowerState) RRL() uint8 { return p[13] }

// SetRRL sets RRL.
func (p *PowerState) SetRRL(x uint8) { p[13] = x }

// RWT returns the relative write throughput.
func (p *PowerState) RWT() uint8 { return p[14] }

// SetRWT sets RWT.
func (p *PowerState) SetRWT(x uint8) { p[14] = x }

// RWL returns the relative write latency.
func (p *PowerState) RWL() uint8 { return p[15] }

// SetRWL sets RWL.
func (p *PowerState) SetRWL(x uint8) { p[15] = x }

// IDLP returns the idle power.
func (p *PowerState) IDLP() uint16 { return le.Uint16(p[16:]) }

// SetIDLP sets IDLP.
func (p *PowerState) SetIDLP(x uint16) { le.PutUint16(p[16:], x) }

// IPS returns the idle power scale (bits 7..6).
func (p *PowerState) IPS() uint8 { return p[18] }

// SetIPS sets IPS.
func (p *PowerState) SetIPS(x uint8) { p[18] = x }

// ACTP returns the active power.
func (p *PowerState) ACTP() uint16 { return le.Uint16(p[20:]) }

// SetACTP sets ACTP.
func (p *PowerState) SetACTP(x uint16) { le.PutUint16(p[20:], x) }

// APWAPS returns the active power workload (bits 2..0) and active power scale (bits 7..6).
func (p *PowerState) APWAPS() uint8 { return p[22] }

// SetAPWAPS sets APWAPS.
func (p *PowerState) SetAPWAPS(x uint8) { p[22] = x }
