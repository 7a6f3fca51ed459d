package nvmeof

// IdentifyNamespace is the 4096-byte Identify Namespace data structure of
// the NVM command set (CNS 0x00; NVM Command Set 1.0 §4.1.5.1 Figure 97;
// protocol.md §10.2), viewed in place. An inactive NSID gets an all-zero
// structure; NCAP must be non-zero for the Linux host to use the namespace.
type IdentifyNamespace [IdentifyDataSize]byte

// ParseIdentifyNamespace returns a view of the first 4096 bytes of b as
// Identify Namespace data; the view aliases b.
func ParseIdentifyNamespace(b []byte) (*IdentifyNamespace, error) {
	if len(b) < IdentifyDataSize {
		return nil, truncated("identify namespace", len(b), IdentifyDataSize)
	}
	return (*IdentifyNamespace)(b[:IdentifyDataSize]), nil
}

// NSFEAT bits (Linux NVME_NS_FEAT_*).
const (
	NSFEATThin        = 1 << 0 // thin provisioning (NUSE meaningful)
	NSFEATAtomics     = 1 << 1 // NAWUN, NAWUPF, NACWU valid
	NSFEATDeallocErr  = 1 << 2 // deallocated or unwritten block error
	NSFEATUIDReuse    = 1 << 3
	NSFEATOptimalIO   = 1 << 4 // NPWG, NPWA, NPDG, NPDA, NOWS valid
	NSFEATMultiAtomic = 1 << 5
)

// NMIC bits.
const NMICShared = 1 << 0 // namespace may be attached to several controllers; set it (protocol.md §12.9)

// NSATTR bits.
const NSATTRWriteProtected = 1 << 0

// FLBAS bits.
const FLBASExtendedMetadata = 1 << 4

// DLFEAT read values (bits 2..0).
const (
	DLFEATReadNotReported = 0
	DLFEATReadZeroes      = 1 // deallocated blocks read as zeroes
	DLFEATReadOnes        = 2
	DLFEATWriteZeroesDeac = 1 << 3 // Write Zeroes supports DEAC
	DLFEATGuardCRC        = 1 << 4
)

// MaxLBAFormats is the number of LBA format descriptors (LBAF0..LBAF63).
const MaxLBAFormats = 64

// LBAFormat is an LBA format descriptor.
type LBAFormat struct {
	// MS is the number of metadata bytes per logical block.
	MS uint16
	// LBADS is the LBA data size as a power of two (9: 512 bytes, 12: 4 KiB).
	LBADS uint8
	// RP is the relative performance (0 best .. 3 degraded).
	RP uint8
}

// BlockSize returns the logical block size in bytes (1<<LBADS), or 0 if
// LBADS is not a sensible power (below 9 or above 31).
func (f LBAFormat) BlockSize() int {
	if f.LBADS < 9 || f.LBADS > 31 {
		return 0
	}
	return 1 << f.LBADS
}

// LBAF returns LBA format descriptor i (0..63) at 128+4i; out of range
// indexes give the zero LBAFormat.
func (n *IdentifyNamespace) LBAF(i int) LBAFormat {
	if i < 0 || i >= MaxLBAFormats {
		return LBAFormat{}
	}
	o := 128 + 4*i
	return LBAFormat{MS: le.Uint16(n[o:]), LBADS: n[o+2], RP: n[o+3] & 3}
}

// SetLBAF sets LBA format descriptor i (0..63); other i are ignored.
func (n *IdentifyNamespace) SetLBAF(i int, f LBAFormat) {
	if i < 0 || i >= MaxLBAFormats {
		return
	}
	o := 128 + 4*i
	le.PutUint16(n[o:], f.MS)
	n[o+2], n[o+3] = f.LBADS, f.RP&3
}

// FormatIndex returns the index of the LBA format in use, from FLBAS bits
// 3..0 and, for more than 16 formats, bits 6..5 (Linux nvme_lbaf_index).
func (n *IdentifyNamespace) FormatIndex() int {
	f := n.FLBAS()
	idx := int(f & 0xF)
	if n.NLBAF() > 15 {
		idx |= int(f&0x60) >> 1
	}
	return idx
}

// SetFormatIndex sets the FLBAS format index bits, keeping bit 4.
func (n *IdentifyNamespace) SetFormatIndex(i int) {
	n.SetFLBAS(n.FLBAS()&FLBASExtendedMetadata | uint8(i&0xF) | uint8(i&0x30)<<1)
}

// BlockSize returns the logical block size of the format in use, or 0 if
// the format is unset or nonsensical.
func (n *IdentifyNamespace) BlockSize() int { return n.LBAF(n.FormatIndex()).BlockSize() }

// IdentifyNSIndependent is the 4096-byte I/O Command Set Independent Identify
// Namespace data structure (CNS 0x08; NVMe Base 2.0 Figure 280; protocol.md
// §10.2). Newer Linux hosts read it first; NSTAT bit 0 must be set.
type IdentifyNSIndependent [IdentifyDataSize]byte

// ParseIdentifyNSIndependent returns a view of the first 4096 bytes of b;
// the view aliases b.
func ParseIdentifyNSIndependent(b []byte) (*IdentifyNSIndependent, error) {
	if len(b) < IdentifyDataSize {
		return nil, truncated("identify namespace (command set independent)", len(b), IdentifyDataSize)
	}
	return (*IdentifyNSIndependent)(b[:IdentifyDataSize]), nil
}

// NSTATReady is NSTAT bit 0: the namespace is ready (Linux NVME_NSTAT_NRDY).
const NSTATReady = 1 << 0

// IdentifyControllerNVM is the 4096-byte I/O command set specific Identify
// Controller data structure for the NVM command set (CNS 0x06, CSI 0; NVM
// Command Set 1.0 Figure 101). nvmet answers all zeros (no limits).
type IdentifyControllerNVM [IdentifyDataSize]byte

// ParseIdentifyControllerNVM returns a view of the first 4096 bytes of b;
// the view aliases b.
func ParseIdentifyControllerNVM(b []byte) (*IdentifyControllerNVM, error) {
	if len(b) < IdentifyDataSize {
		return nil, truncated("identify controller (NVM)", len(b), IdentifyDataSize)
	}
	return (*IdentifyControllerNVM)(b[:IdentifyDataSize]), nil
}

// IdentifyNamespaceNVM is the 4096-byte I/O command set specific Identify
// Namespace data structure for the NVM command set (CNS 0x05, CSI 0; NVM
// Command Set 1.0 Figure 100): storage tag mask, protection capabilities
// and the extended LBA formats.
type IdentifyNamespaceNVM [IdentifyDataSize]byte

// ParseIdentifyNamespaceNVM returns a view of the first 4096 bytes of b;
// the view aliases b.
func ParseIdentifyNamespaceNVM(b []byte) (*IdentifyNamespaceNVM, error) {
	if len(b) < IdentifyDataSize {
		return nil, truncated("identify namespace (NVM)", len(b), IdentifyDataSize)
	}
	return (*IdentifyNamespaceNVM)(b[:IdentifyDataSize]), nil
}

// ELBAF returns extended LBA format i (0..63) at 12+4i, or 0 out of range.
func (n *IdentifyNamespaceNVM) ELBAF(i int) uint32 {
	if i < 0 || i >= MaxLBAFormats {
		return 0
	}
	return le.Uint32(n[12+4*i:])
}

// SetELBAF sets extended LBA format i; other i are ignored.
func (n *IdentifyNamespaceNVM) SetELBAF(i int, v uint32) {
	if i < 0 || i >= MaxLBAFormats {
		return
	}
	le.PutUint32(n[12+4*i:], v)
}

// NSZE returns the namespace size in logical blocks.
func (n *IdentifyNamespace) NSZE() uint64 { return le.Uint64(n[0:]) }

// SetNSZE sets NSZE.
func (n *IdentifyNamespace) SetNSZE(x uint64) { le.PutUint64(n[0:], x) }

// NCAP returns the namespace capacity in logical blocks; the Linux host treats 0 as an absent namespace.
func (n *IdentifyNamespace) NCAP() uint64 { return le.Uint64(n[8:]) }

// SetNCAP sets NCAP.
func (n *IdentifyNamespace) SetNCAP(x uint64) { le.PutUint64(n[8:], x) }

// NUSE returns the namespace utilization in logical blocks.
func (n *IdentifyNamespace) NUSE() uint64 { return le.Uint64(n[16:]) }

// SetNUSE sets NUSE.
func (n *IdentifyNamespace) SetNUSE(x uint64) { le.PutUint64(n[16:], x) }

// NSFEAT returns the namespace features (NSFEAT* bits).
func (n *IdentifyNamespace) NSFEAT() uint8 { return n[24] }

// SetNSFEAT sets NSFEAT.
func (n *IdentifyNamespace) SetNSFEAT(x uint8) { n[24] = x }

// NLBAF returns the number of LBA formats (0's based).
func (n *IdentifyNamespace) NLBAF() uint8 { return n[25] }

// SetNLBAF sets NLBAF.
func (n *IdentifyNamespace) SetNLBAF(x uint8) { n[25] = x }

// FLBAS returns the formatted LBA size: format index bits 3..0 (low) and 6..5 (high), bit 4 extended metadata.
func (n *IdentifyNamespace) FLBAS() uint8 { return n[26] }

// SetFLBAS sets FLBAS.
func (n *IdentifyNamespace) SetFLBAS(x uint8) { n[26] = x }

// MC returns the metadata capabilities.
func (n *IdentifyNamespace) MC() uint8 { return n[27] }

// SetMC sets MC.
func (n *IdentifyNamespace) SetMC(x uint8) { n[27] = x }

// DPC returns the end-to-end data protection capabilities.
func (n *IdentifyNamespace) DPC() uint8 { return n[28] }

// SetDPC sets DPC.
func (n *IdentifyNamespace) SetDPC(x uint8) { n[28] = x }

// DPS returns the end-to-end data protection type settings (0: none).
func (n *IdentifyNamespace) DPS() uint8 { return n[29] }

// SetDPS sets DPS.
func (n *IdentifyNamespace) SetDPS(x uint8) { n[29] = x }

// NMIC returns the namespace multi-path I/O and sharing capabilities (bit 0 shared).
func (n *IdentifyNamespace) NMIC() uint8 { return n[30] }

// SetNMIC sets NMIC.
func (n *IdentifyNamespace) SetNMIC(x uint8) { n[30] = x }

// RESCAP returns the reservation capabilities.
func (n *IdentifyNamespace) RESCAP() uint8 { return n[31] }

// SetRESCAP sets RESCAP.
func (n *IdentifyNamespace) SetRESCAP(x uint8) { n[31] = x }

// FPI returns the format progress indicator.
func (n *IdentifyNamespace) FPI() uint8 { return n[32] }

// SetFPI sets FPI.
func (n *IdentifyNamespace) SetFPI(x uint8) { n[32] = x }

// DLFEAT returns the deallocate logical block features (bits 2..0: value read from deallocated blocks).
func (n *IdentifyNamespace) DLFEAT() uint8 { return n[33] }

// SetDLFEAT sets DLFEAT.
func (n *IdentifyNamespace) SetDLFEAT(x uint8) { n[33] = x }

// NAWUN returns the namespace atomic write unit normal (0's based blocks).
func (n *IdentifyNamespace) NAWUN() uint16 { return le.Uint16(n[34:]) }

// SetNAWUN sets NAWUN.
func (n *IdentifyNamespace) SetNAWUN(x uint16) { le.PutUint16(n[34:], x) }

// NAWUPF returns the namespace atomic write unit power fail (0's based blocks).
func (n *IdentifyNamespace) NAWUPF() uint16 { return le.Uint16(n[36:]) }

// SetNAWUPF sets NAWUPF.
func (n *IdentifyNamespace) SetNAWUPF(x uint16) { le.PutUint16(n[36:], x) }

// NACWU returns the namespace atomic compare and write unit (0's based blocks).
func (n *IdentifyNamespace) NACWU() uint16 { return le.Uint16(n[38:]) }

// SetNACWU sets NACWU.
func (n *IdentifyNamespace) SetNACWU(x uint16) { le.PutUint16(n[38:], x) }

// NABSN returns the namespace atomic boundary size normal.
func (n *IdentifyNamespace) NABSN() uint16 { return le.Uint16(n[40:]) }

// SetNABSN sets NABSN.
func (n *IdentifyNamespace) SetNABSN(x uint16) { le.PutUint16(n[40:], x) }

// NABO returns the namespace atomic boundary offset.
func (n *IdentifyNamespace) NABO() uint16 { return le.Uint16(n[42:]) }

// SetNABO sets NABO.
func (n *IdentifyNamespace) SetNABO(x uint16) { le.PutUint16(n[42:], x) }

// NABSPF returns the namespace atomic boundary size power fail.
func (n *IdentifyNamespace) NABSPF() uint16 { return le.Uint16(n[44:]) }

// SetNABSPF sets NABSPF.
func (n *IdentifyNamespace) SetNABSPF(x uint16) { le.PutUint16(n[44:], x) }

// NOIOB returns the namespace optimal I/O boundary in logical blocks.
func (n *IdentifyNamespace) NOIOB() uint16 { return le.Uint16(n[46:]) }

// SetNOIOB sets NOIOB.
func (n *IdentifyNamespace) SetNOIOB(x uint16) { le.PutUint16(n[46:], x) }

// NVMCAP returns the NVM capacity in bytes.
func (n *IdentifyNamespace) NVMCAP() Uint128 { return getU128(n[48:]) }

// SetNVMCAP sets NVMCAP.
func (n *IdentifyNamespace) SetNVMCAP(x Uint128) { putU128(n[48:], x) }

// NPWG returns the preferred write granularity (0's based blocks; valid with NSFEAT bit 4).
func (n *IdentifyNamespace) NPWG() uint16 { return le.Uint16(n[64:]) }

// SetNPWG sets NPWG.
func (n *IdentifyNamespace) SetNPWG(x uint16) { le.PutUint16(n[64:], x) }

// NPWA returns the preferred write alignment (0's based blocks).
func (n *IdentifyNamespace) NPWA() uint16 { return le.Uint16(n[66:]) }

// SetNPWA sets NPWA.
func (n *IdentifyNamespace) SetNPWA(x uint16) { le.PutUint16(n[66:], x) }

// NPDG returns the preferred deallocate granularity (0's based blocks).
func (n *IdentifyNamespace) NPDG() uint16 { return le.Uint16(n[68:]) }

// SetNPDG sets NPDG.
func (n *IdentifyNamespace) SetNPDG(x uint16) { le.PutUint16(n[68:], x) }

// NPDA returns the preferred deallocate alignment (0's based blocks).
func (n *IdentifyNamespace) NPDA() uint16 { return le.Uint16(n[70:]) }

// SetNPDA sets NPDA.
func (n *IdentifyNamespace) SetNPDA(x uint16) { le.PutUint16(n[70:], x) }

// NOWS returns the optimal write size (0's based blocks).
func (n *IdentifyNamespace) NOWS() uint16 { return le.Uint16(n[72:]) }

// SetNOWS sets NOWS.
func (n *IdentifyNamespace) SetNOWS(x uint16) { le.PutUint16(n[72:], x) }

// MSSRL returns the maximum single source range length (Copy).
func (n *IdentifyNamespace) MSSRL() uint16 { return le.Uint16(n[74:]) }

// SetMSSRL sets MSSRL.
func (n *IdentifyNamespace) SetMSSRL(x uint16) { le.PutUint16(n[74:], x) }

// MCL returns the maximum copy length.
func (n *IdentifyNamespace) MCL() uint32 { return le.Uint32(n[76:]) }

// SetMCL sets MCL.
func (n *IdentifyNamespace) SetMCL(x uint32) { le.PutUint32(n[76:], x) }

// MSRC returns the maximum source range count (0's based).
func (n *IdentifyNamespace) MSRC() uint8 { return n[80] }

// SetMSRC sets MSRC.
func (n *IdentifyNamespace) SetMSRC(x uint8) { n[80] = x }

// ANAGRPID returns the ANA group identifier.
func (n *IdentifyNamespace) ANAGRPID() uint32 { return le.Uint32(n[92:]) }

// SetANAGRPID sets ANAGRPID.
func (n *IdentifyNamespace) SetANAGRPID(x uint32) { le.PutUint32(n[92:], x) }

// NSATTR returns the namespace attributes (bit 0 write protected / read only).
func (n *IdentifyNamespace) NSATTR() uint8 { return n[99] }

// SetNSATTR sets NSATTR.
func (n *IdentifyNamespace) SetNSATTR(x uint8) { n[99] = x }

// NVMSETID returns the NVM set identifier.
func (n *IdentifyNamespace) NVMSETID() uint16 { return le.Uint16(n[100:]) }

// SetNVMSETID sets NVMSETID.
func (n *IdentifyNamespace) SetNVMSETID(x uint16) { le.PutUint16(n[100:], x) }

// ENDGID returns the endurance group identifier.
func (n *IdentifyNamespace) ENDGID() uint16 { return le.Uint16(n[102:]) }

// SetENDGID sets ENDGID.
func (n *IdentifyNamespace) SetENDGID(x uint16) { le.PutUint16(n[102:], x) }

// NGUID returns the namespace globally unique identifier.
func (n *IdentifyNamespace) NGUID() [16]byte { return [16]byte(n[104:120]) }

// SetNGUID sets NGUID.
func (n *IdentifyNamespace) SetNGUID(x [16]byte) { copy(n[104:120], x[:]) }

// EUI64 returns the IEEE extended unique identifier.
func (n *IdentifyNamespace) EUI64() [8]byte { return [8]byte(n[120:128]) }

// SetEUI64 sets EUI64.
func (n *IdentifyNamespace) SetEUI64(x [8]byte) { copy(n[120:128], x[:]) }

// NSFEAT returns the namespace features.
func (n *IdentifyNSIndependent) NSFEAT() uint8 { return n[0] }

// SetNSFEAT sets NSFEAT.
func (n *IdentifyNSIndependent) SetNSFEAT(x uint8) { n[0] = x }

// NMIC returns the namespace multi-path I/O and sharing capabilities (bit 0 shared).
func (n *IdentifyNSIndependent) NMIC() uint8 { return n[1] }

// SetNMIC sets NMIC.
func (n *IdentifyNSIndependent) SetNMIC(x uint8) { n[1] = x }

// RESCAP returns the reservation capabilities.
func (n *IdentifyNSIndependent) RESCAP() uint8 { return n[2] }

// SetRESCAP sets RESCAP.
func (n *IdentifyNSIndependent) SetRESCAP(x uint8) { n[2] = x }

// FPI returns the format progress indicator.
func (n *IdentifyNSIndependent) FPI() uint8 { return n[3] }

// SetFPI sets FPI.
func (n *IdentifyNSIndependent) SetFPI(x uint8) { n[3] = x }

// ANAGRPID returns the ANA group identifier.
func (n *IdentifyNSIndependent) ANAGRPID() uint32 { return le.Uint32(n[4:]) }

// SetANAGRPID sets ANAGRPID.
func (n *IdentifyNSIndependent) SetANAGRPID(x uint32) { le.PutUint32(n[4:], x) }

// NSATTR returns the namespace attributes (bit 0 write protected).
func (n *IdentifyNSIndependent) NSATTR() uint8 { return n[8] }

// SetNSATTR sets NSATTR.
func (n *IdentifyNSIndependent) SetNSATTR(x uint8) { n[8] = x }

// NVMSETID returns the NVM set identifier.
func (n *IdentifyNSIndependent) NVMSETID() uint16 { return le.Uint16(n[10:]) }

// SetNVMSETID sets NVMSETID.
func (n *IdentifyNSIndependent) SetNVMSETID(x uint16) { le.PutUint16(n[10:], x) }

// ENDGID returns the endurance group identifier.
func (n *IdentifyNSIndependent) ENDGID() uint16 { return le.Uint16(n[12:]) }

// SetENDGID sets ENDGID.
func (n *IdentifyNSIndependent) SetENDGID(x uint16) { le.PutUint16(n[12:], x) }

// NSTAT returns the namespace status (bit 0 ready; the Linux host ignores a namespace that is not ready).
func (n *IdentifyNSIndependent) NSTAT() uint8 { return n[14] }

// SetNSTAT sets NSTAT.
func (n *IdentifyNSIndependent) SetNSTAT(x uint8) { n[14] = x }

// VSL returns the verify size limit as a power of two of CAP.MPSMIN pages (0: no limit).
func (c *IdentifyControllerNVM) VSL() uint8 { return c[0] }

// SetVSL sets VSL.
func (c *IdentifyControllerNVM) SetVSL(x uint8) { c[0] = x }

// WZSL returns the write zeroes size limit as a power of two of CAP.MPSMIN pages (0: no limit).
func (c *IdentifyControllerNVM) WZSL() uint8 { return c[1] }

// SetWZSL sets WZSL.
func (c *IdentifyControllerNVM) SetWZSL(x uint8) { c[1] = x }

// WUSL returns the write uncorrectable size limit as a power of two of CAP.MPSMIN pages (0: no limit).
func (c *IdentifyControllerNVM) WUSL() uint8 { return c[2] }

// SetWUSL sets WUSL.
func (c *IdentifyControllerNVM) SetWUSL(x uint8) { c[2] = x }

// DMRL returns the dataset management ranges limit (0: no limit beyond 256).
func (c *IdentifyControllerNVM) DMRL() uint8 { return c[3] }

// SetDMRL sets DMRL.
func (c *IdentifyControllerNVM) SetDMRL(x uint8) { c[3] = x }

// DMRSL returns the dataset management range size limit in logical blocks (0: no limit).
func (c *IdentifyControllerNVM) DMRSL() uint32 { return le.Uint32(c[4:]) }

// SetDMRSL sets DMRSL.
func (c *IdentifyControllerNVM) SetDMRSL(x uint32) { le.PutUint32(c[4:], x) }

// DMSL returns the dataset management size limit in logical blocks (0: no limit).
func (c *IdentifyControllerNVM) DMSL() uint64 { return le.Uint64(c[8:]) }

// SetDMSL sets DMSL.
func (c *IdentifyControllerNVM) SetDMSL(x uint64) { le.PutUint64(c[8:], x) }

// LBSTM returns the logical block storage tag mask.
func (n *IdentifyNamespaceNVM) LBSTM() uint64 { return le.Uint64(n[0:]) }

// SetLBSTM sets LBSTM.
func (n *IdentifyNamespaceNVM) SetLBSTM(x uint64) { le.PutUint64(n[0:], x) }

// PIC returns the protection information capabilities.
func (n *IdentifyNamespaceNVM) PIC() uint8 { return n[8] }

// SetPIC sets PIC.
func (n *IdentifyNamespaceNVM) SetPIC(x uint8) { n[8] = x }
