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
	NSFEATThin      = 1 << 0 // thin provisioning (NUSE meaningful)
	nsfeatAtomics   = 1 << 1 // NAWUN, NAWUPF, NACWU valid
	NSFEATOptimalIO = 1 << 4 // NPWG, NPWA, NPDG, NPDA, NOWS valid
)

// NMIC bits.
const NMICShared = 1 << 0 // namespace may be attached to several controllers; set it (protocol.md §12.9)

// NSATTR bits.
const NSATTRWriteProtected = 1 << 0

// FLBAS bits.
const FLBASExtendedMetadata = 1 << 4

// DLFEAT read values (bits 2..0).
const (
	DLFEATReadZeroes      = 1      // deallocated blocks read as zeroes
	DLFEATWriteZeroesDeac = 1 << 3 // Write Zeroes supports DEAC
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

// setFormatIndex sets the FLBAS format index bits, keeping bit 4.
func (n *IdentifyNamespace) setFormatIndex(i int) {
	n.SetFLBAS(n.FLBAS()&FLBASExtendedMetadata | uint8(i&0xF) | uint8(i&0x30)<<1)
}

// blockSize returns the logical block size of the format in use, or 0 if
// the format is unset or nonsensical.
func (n *IdentifyNamespace) blockSize() int { return n.LBAF(n.FormatIndex()).BlockSize() }

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

// elbaf returns extended LBA format i (0..63) at 12+4i, or 0 out of range.
func (n *IdentifyNamespaceNVM) elbaf(i int) uint32 {
	if i < 0 || i >= MaxLBAFormats {
		return 0
	}
	return le.Uint32(n[12+4*i:])
}

// setELBAF sets extended LBA format i; other i are ignored.
func (n *IdentifyNamespaceNVM) setELBAF(i int, v uint32) {
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

// nuse returns the namespace utilization in logical blocks.
func (n *IdentifyNamespace) nuse() uint64 { return le.Uint64(n[16:]) }

// SetNUSE sets NUSE.
func (n *IdentifyNamespace) SetNUSE(x uint64) { le.PutUint64(n[16:], x) }

// nsfeat returns the namespace features (NSFEAT* bits).
func (n *IdentifyNamespace) nsfeat() uint8 { return n[24] }

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

// dps returns the end-to-end data protection type settings (0: none).
func (n *IdentifyNamespace) dps() uint8 { return n[29] }

// NMIC returns the namespace multi-path I/O and sharing capabilities (bit 0 shared).
func (n *IdentifyNamespace) NMIC() uint8 { return n[30] }

// SetNMIC sets NMIC.
func (n *IdentifyNamespace) SetNMIC(x uint8) { n[30] = x }

// DLFEAT returns the deallocate logical block features (bits 2..0: value read from deallocated blocks).
func (n *IdentifyNamespace) DLFEAT() uint8 { return n[33] }

// SetDLFEAT sets DLFEAT.
func (n *IdentifyNamespace) SetDLFEAT(x uint8) { n[33] = x }

// nvmcap returns the NVM capacity in bytes.
func (n *IdentifyNamespace) nvmcap() Uint128 { return getU128(n[48:]) }

// setNVMCAP sets NVMCAP.
func (n *IdentifyNamespace) setNVMCAP(x Uint128) { putU128(n[48:], x) }

// SetNPWG sets NPWG.
func (n *IdentifyNamespace) SetNPWG(x uint16) { le.PutUint16(n[64:], x) }

// SetNPWA sets NPWA.
func (n *IdentifyNamespace) SetNPWA(x uint16) { le.PutUint16(n[66:], x) }

// SetNPDG sets NPDG.
func (n *IdentifyNamespace) SetNPDG(x uint16) { le.PutUint16(n[68:], x) }

// SetNPDA sets NPDA.
func (n *IdentifyNamespace) SetNPDA(x uint16) { le.PutUint16(n[70:], x) }

// SetNOWS sets NOWS.
func (n *IdentifyNamespace) SetNOWS(x uint16) { le.PutUint16(n[72:], x) }

// ANAGRPID returns the ANA group identifier.
func (n *IdentifyNamespace) ANAGRPID() uint32 { return le.Uint32(n[92:]) }

// SetANAGRPID sets ANAGRPID.
func (n *IdentifyNamespace) SetANAGRPID(x uint32) { le.PutUint32(n[92:], x) }

// NSATTR returns the namespace attributes (bit 0 write protected / read only).
func (n *IdentifyNamespace) NSATTR() uint8 { return n[99] }

// SetNSATTR sets NSATTR.
func (n *IdentifyNamespace) SetNSATTR(x uint8) { n[99] = x }

// NGUID returns the namespace globally unique identifier.
func (n *IdentifyNamespace) NGUID() [16]byte { return [16]byte(n[104:120]) }

// SetNGUID sets NGUID.
func (n *IdentifyNamespace) SetNGUID(x [16]byte) { copy(n[104:120], x[:]) }

// EUI64 returns the IEEE extended unique identifier.
func (n *IdentifyNamespace) EUI64() [8]byte { return [8]byte(n[120:128]) }

// SetEUI64 sets EUI64.
func (n *IdentifyNamespace) SetEUI64(x [8]byte) { copy(n[120:128], x[:]) }

// SetNSFEAT sets NSFEAT.
func (n *IdentifyNSIndependent) SetNSFEAT(x uint8) { n[0] = x }

// NMIC returns the namespace multi-path I/O and sharing capabilities (bit 0 shared).
func (n *IdentifyNSIndependent) NMIC() uint8 { return n[1] }

// SetNMIC sets NMIC.
func (n *IdentifyNSIndependent) SetNMIC(x uint8) { n[1] = x }

// ANAGRPID returns the ANA group identifier.
func (n *IdentifyNSIndependent) ANAGRPID() uint32 { return le.Uint32(n[4:]) }

// SetANAGRPID sets ANAGRPID.
func (n *IdentifyNSIndependent) SetANAGRPID(x uint32) { le.PutUint32(n[4:], x) }

// SetNSATTR sets NSATTR.
func (n *IdentifyNSIndependent) SetNSATTR(x uint8) { n[8] = x }

// setNVMSETID sets NVMSETID.
func (n *IdentifyNSIndependent) setNVMSETID(x uint16) { le.PutUint16(n[10:], x) }

// setENDGID sets ENDGID.
func (n *IdentifyNSIndependent) setENDGID(x uint16) { le.PutUint16(n[12:], x) }

// NSTAT returns the namespace status (bit 0 ready; the Linux host ignores a namespace that is not ready).
func (n *IdentifyNSIndependent) NSTAT() uint8 { return n[14] }

// SetNSTAT sets NSTAT.
func (n *IdentifyNSIndependent) SetNSTAT(x uint8) { n[14] = x }

// setWZSL sets WZSL.
func (c *IdentifyControllerNVM) setWZSL(x uint8) { c[1] = x }

// setDMRSL sets DMRSL.
func (c *IdentifyControllerNVM) setDMRSL(x uint32) { le.PutUint32(c[4:], x) }

// setDMSL sets DMSL.
func (c *IdentifyControllerNVM) setDMSL(x uint64) { le.PutUint64(c[8:], x) }

// setLBSTM sets LBSTM.
func (n *IdentifyNamespaceNVM) setLBSTM(x uint64) { le.PutUint64(n[0:], x) }

// setPIC sets PIC.
func (n *IdentifyNamespaceNVM) setPIC(x uint8) { n[8] = x }
