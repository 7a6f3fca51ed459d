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
	CMICANA       = 1 << 3 // asymmetric namespace access reporting: the host will read the ANA log
)

// CTRATT bits (Linux NVME_CTRL_ATTR_*).
const (
	CTRATTHostID128 = 1 << 0 // 128-bit host identifier
	CTRATTTBKAS     = 1 << 6 // traffic based keep alive: any command resets the keep-alive timer
)

// Controller types (CNTRLTYPE; Linux enum nvme_ctrl_type).
const (
	CntrlTypeIO        = 1
	CntrlTypeDiscovery = 2
)

// Discovery controller types (DCTYPE; Linux enum nvme_dctype).
const (
	dcTypeNotReported = 0
	dcTypeCDC         = 2 // central discovery controller
)

// LPA bits (log page attributes).
const (
	LPASMARTPerNS     = 1 << 0 // SMART log per namespace
	LPACommandEffects = 1 << 1 // commands supported and effects log: the Linux host then reads it
	LPAExtendedData   = 1 << 2 // extended Get Log Page data (NUMDU, LPO)
)

// ONCS bits (optional NVM command support; Linux NVME_CTRL_ONCS_*).
const (
	ONCSDSM         = 1 << 2 // Dataset Management
	ONCSWriteZeroes = 1 << 3
)

// VWC bits.
const (
	VWCPresent = 1 << 0 // a volatile write cache is present: Flush is meaningful
	// VWCFlushNSIDAllSupported (bits 2..1 = 11b) says Flush with NSID
	// 0xFFFFFFFF is supported; 10b says it is not (NVMe 1.4+).
	VWCFlushNSIDAllSupported = 3 << 1
)

// SGLS bits (SGL support; NVMe Base 2.0 Figure 275).
const (
	SGLSSupported = 1 << 0  // bits 1..0 = 01b: SGLs supported, no alignment requirement
	SGLSKeyed     = 1 << 2  // keyed SGL data block descriptor: the Linux RDMA host requires it
	SGLSOffset    = 1 << 20 // address field as offset: in-capsule data (Linux uses it on I/O queues)
	// sglsNvmet is what nvmet-rdma reports (0x00100005).
	sglsNvmet = SGLSSupported | SGLSKeyed | SGLSOffset
)

// FCATT bits.
const fcattStatic = 1 << 0 // static controller model (0: dynamic, as nvmet)

// OFCS bits.
const ofcsDisconnect = 1 << 0 // the Disconnect command is supported

// ieee returns the IEEE OUI identifier (bytes 73..75, 24-bit little-endian).
func (c *IdentifyController) ieee() uint32 {
	return uint32(c[73]) | uint32(c[74])<<8 | uint32(c[75])<<16
}

// setIEEE sets the IEEE OUI identifier (low 24 bits of v).
func (c *IdentifyController) setIEEE(v uint32) {
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

// vendorSpecific returns the 1024 vendor specific bytes (3072..4095) as a
// slice aliasing c.
func (c *IdentifyController) vendorSpecific() []byte { return c[3072:4096] }

// PowerState is a 32-byte power state descriptor of Identify Controller.
// nvmet reports PSD0 with MP 0x9C4 (25 W), ENLAT 16 and EXLAT 4.
type PowerState [32]byte

// CheckFabrics applies the checks the Linux host makes on the Identify
// Controller of a fabrics controller before using it (protocol.md §8.7,
// drivers/nvme/host/core.c and rdma.c): CNTLID equals the Connect result
// cntlid; for a discovery connect, CNTRLTYPE is 2 or SUBNQN is the
// discovery NQN; for an I/O controller KAS is non-zero, IOCCSZ >= 4 and
// IORCSZ >= 1; ICDOFF is 0 and SGLS has keyed SGL support (bit 2). It is
// CheckFabricsTransport for NVMe/RDMA.
func (c *IdentifyController) CheckFabrics(cntlid uint16, discovery bool) error {
	return c.CheckFabricsTransport(cntlid, discovery, TrTypeRDMA)
}

// CheckFabricsTransport is CheckFabrics for a controller reached over
// transport trtype (TrTypeRDMA, TrTypeTCP): keyed SGL support is NVMe/RDMA's
// requirement only (nvme-rdma); over NVMe/TCP data moves by transport SGL
// data blocks, which nvmet-tcp does not advertise in SGLS (it reports
// 0x100001), and nvme-tcp checks only ICDOFF (nvme_tcp_setup_ctrl).
func (c *IdentifyController) CheckFabricsTransport(cntlid uint16, discovery bool, trtype uint8) error {
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
		return malformed("identify controller", "ICDOFF %d, the host needs 0", c.ICDOFF())
	}
	if trtype == TrTypeRDMA && c.SGLS()&SGLSKeyed == 0 {
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

// vid returns the PCI vendor ID (0 on fabrics).
func (c *IdentifyController) vid() uint16 { return le.Uint16(c[0:]) }

// setVID sets VID.
func (c *IdentifyController) setVID(x uint16) { le.PutUint16(c[0:], x) }

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

// rab returns the recommended arbitration burst (nvmet 6).
func (c *IdentifyController) rab() uint8 { return c[72] }

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

// OAES returns the optional asynchronous events supported (AEC* bits).
func (c *IdentifyController) OAES() uint32 { return le.Uint32(c[92:]) }

// SetOAES sets OAES.
func (c *IdentifyController) SetOAES(x uint32) { le.PutUint32(c[92:], x) }

// CTRATT returns the controller attributes (CTRATT* bits).
func (c *IdentifyController) CTRATT() uint32 { return le.Uint32(c[96:]) }

// SetCTRATT sets CTRATT.
func (c *IdentifyController) SetCTRATT(x uint32) { le.PutUint32(c[96:], x) }

// CNTRLTYPE returns the controller type (CntrlType*).
func (c *IdentifyController) CNTRLTYPE() uint8 { return c[111] }

// SetCNTRLTYPE sets CNTRLTYPE.
func (c *IdentifyController) SetCNTRLTYPE(x uint8) { c[111] = x }

// setFGUID sets FGUID.
func (c *IdentifyController) setFGUID(x [16]byte) { copy(c[112:128], x[:]) }

// setCRDT1 sets CRDT1.
func (c *IdentifyController) setCRDT1(x uint16) { le.PutUint16(c[128:], x) }

// setCRDT3 sets CRDT3.
func (c *IdentifyController) setCRDT3(x uint16) { le.PutUint16(c[132:], x) }

// setOACS sets OACS.
func (c *IdentifyController) setOACS(x uint16) { le.PutUint16(c[256:], x) }

// acl returns the abort command limit (0's based).
func (c *IdentifyController) acl() uint8 { return c[258] }

// SetACL sets ACL.
func (c *IdentifyController) SetACL(x uint8) { c[258] = x }

// AERL returns the asynchronous event request limit (0's based).
func (c *IdentifyController) AERL() uint8 { return c[259] }

// SetAERL sets AERL.
func (c *IdentifyController) SetAERL(x uint8) { c[259] = x }

// frmw returns the firmware updates bits.
func (c *IdentifyController) frmw() uint8 { return c[260] }

// SetFRMW sets FRMW.
func (c *IdentifyController) SetFRMW(x uint8) { c[260] = x }

// LPA returns the log page attributes (LPA* bits).
func (c *IdentifyController) LPA() uint8 { return c[261] }

// SetLPA sets LPA.
func (c *IdentifyController) SetLPA(x uint8) { c[261] = x }

// elpe returns the error log page entries (0's based).
func (c *IdentifyController) elpe() uint8 { return c[262] }

// SetELPE sets ELPE.
func (c *IdentifyController) SetELPE(x uint8) { c[262] = x }

// tnvmcap returns the total NVM capacity in bytes.
func (c *IdentifyController) tnvmcap() Uint128 { return getU128(c[280:]) }

// setTNVMCAP sets TNVMCAP.
func (c *IdentifyController) setTNVMCAP(x Uint128) { putU128(c[280:], x) }

// KAS returns the keep alive support granularity in 100 ms units; the Linux host requires it non-zero for I/O controllers.
func (c *IdentifyController) KAS() uint16 { return le.Uint16(c[320:]) }

// SetKAS sets KAS.
func (c *IdentifyController) SetKAS(x uint16) { le.PutUint16(c[320:], x) }

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

// VWC returns the volatile write cache bits (bit 0 present: enables Flush).
func (c *IdentifyController) VWC() uint8 { return c[525] }

// SetVWC sets VWC.
func (c *IdentifyController) SetVWC(x uint8) { c[525] = x }

// nwpc returns the namespace write protection capabilities.
func (c *IdentifyController) nwpc() uint8 { return c[531] }

// setNWPC sets NWPC.
func (c *IdentifyController) setNWPC(x uint8) { c[531] = x }

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

// fcatt returns the fabrics controller attributes (bit 0: static controller model).
func (c *IdentifyController) fcatt() uint8 { return c[1802] }

// setFCATT sets FCATT.
func (c *IdentifyController) setFCATT(x uint8) { c[1802] = x }

// MSDBD returns the maximum SGL data block descriptors per command.
func (c *IdentifyController) MSDBD() uint8 { return c[1803] }

// SetMSDBD sets MSDBD.
func (c *IdentifyController) SetMSDBD(x uint8) { c[1803] = x }

// ofcs returns the optional fabric commands support (bit 0: Disconnect).
func (c *IdentifyController) ofcs() uint16 { return le.Uint16(c[1804:]) }

// setOFCS sets OFCS.
func (c *IdentifyController) setOFCS(x uint16) { le.PutUint16(c[1804:], x) }

// dctype returns the discovery controller type (DCType*).
func (c *IdentifyController) dctype() uint8 { return c[1806] }

// setDCTYPE sets DCTYPE.
func (c *IdentifyController) setDCTYPE(x uint8) { c[1806] = x }

// mp returns the maximum power (centiwatts, or 0.0001 W units with MXPS).
func (p *PowerState) mp() uint16 { return le.Uint16(p[0:]) }

// SetMP sets MP.
func (p *PowerState) SetMP(x uint16) { le.PutUint16(p[0:], x) }

// enlat returns the entry latency in microseconds.
func (p *PowerState) enlat() uint32 { return le.Uint32(p[4:]) }

// SetENLAT sets ENLAT.
func (p *PowerState) SetENLAT(x uint32) { le.PutUint32(p[4:], x) }

// exlat returns the exit latency in microseconds.
func (p *PowerState) exlat() uint32 { return le.Uint32(p[8:]) }

// SetEXLAT sets EXLAT.
func (p *PowerState) SetEXLAT(x uint32) { le.PutUint32(p[8:], x) }

// setACTP sets ACTP.
func (p *PowerState) setACTP(x uint16) { le.PutUint16(p[20:], x) }
