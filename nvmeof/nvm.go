package nvmeof

import "fmt"

// RWCmd is a view of the NVM Read (0x02), Write (0x01), Compare and Verify
// commands (NVM Command Set 1.0 §3.3; protocol.md §10.5): CDW10..11 SLBA,
// CDW12 NLB 15..0 (0's based), DTYPE 23..20, PRINFO 29..26, FUA 30, LR 31;
// CDW13 DSM 7..0 and DSPEC 31..16; CDW14 reference tag; CDW15 application
// tag 15..0 and mask 31..16. The data length is (NLB+1) * block size and
// must equal the SGL length.
type RWCmd struct{ *SQE }

// RWCmd returns the Read/Write view of s.
func (s *SQE) RWCmd() RWCmd { return RWCmd{s} }

// BuildRead fills s with a Read of blocks logical blocks (1..65536) at slba
// of namespace nsid. Set SGL1 to blocks * block size bytes.
func (s *SQE) BuildRead(nsid uint32, slba uint64, blocks uint32) RWCmd {
	return s.buildRW(NVMRead, nsid, slba, blocks)
}

// BuildWrite fills s with a Write of blocks logical blocks (1..65536) at
// slba of namespace nsid. Set SGL1 to blocks * block size bytes (in-capsule
// on I/O queues when it fits the controller's inline size).
func (s *SQE) BuildWrite(nsid uint32, slba uint64, blocks uint32) RWCmd {
	return s.buildRW(NVMWrite, nsid, slba, blocks)
}

func (s *SQE) buildRW(op uint8, nsid uint32, slba uint64, blocks uint32) RWCmd {
	s.init(op)
	c := RWCmd{s}
	c.SetNSID(nsid)
	c.SetSLBA(slba)
	c.SetBlocks(blocks)
	return c
}

// MaxBlocksPerCommand is the largest number of logical blocks in one Read,
// Write or Write Zeroes: NLB is 16 bits, 0's based.
const MaxBlocksPerCommand = 1 << 16

// SLBA returns the starting LBA (CDW10..11).
func (c RWCmd) SLBA() uint64 { return le.Uint64(c.SQE[40:]) }

// SetSLBA sets the starting LBA.
func (c RWCmd) SetSLBA(v uint64) { le.PutUint64(c.SQE[40:], v) }

// NLB returns the raw, 0's based number of logical blocks (CDW12 15..0).
func (c RWCmd) NLB() uint16 { return le.Uint16(c.SQE[48:]) }

// SetNLB sets the raw, 0's based number of logical blocks.
func (c RWCmd) SetNLB(v uint16) { le.PutUint16(c.SQE[48:], v) }

// Blocks returns the number of logical blocks, 1's based (NLB+1).
func (c RWCmd) Blocks() uint32 { return uint32(c.NLB()) + 1 }

// SetBlocks sets NLB from a 1's based block count (1..65536).
func (c RWCmd) SetBlocks(n uint32) { c.SetNLB(uint16(n - 1)) }

// dataLength returns the data length in bytes for a block size of 1<<lbaShift.
func (c RWCmd) dataLength(lbaShift uint8) uint64 { return uint64(c.Blocks()) << lbaShift }

// LastLBA returns the last LBA the command touches (SLBA+NLB) and false if
// that overflows 64 bits.
func (c RWCmd) LastLBA() (uint64, bool) {
	last := c.SLBA() + uint64(c.NLB())
	return last, last >= c.SLBA()
}

// RW control bits in CDW12 (Linux NVME_RW_*, shifted into CDW12).
const (
	RWFUA = 1 << 30 // force unit access
	RWLR  = 1 << 31 // limited retry
)

// FUA reports Force Unit Access (CDW12 bit 30): the data must be on
// non-volatile media before completion.
func (c RWCmd) FUA() bool { return c.CDW12()&RWFUA != 0 }

// SetFUA sets Force Unit Access.
func (c RWCmd) SetFUA(v bool) { setBit32(c.SQE, 12, RWFUA, v) }

// lr reports Limited Retry (CDW12 bit 31).
func (c RWCmd) lr() bool { return c.CDW12()&RWLR != 0 }

// setLR sets Limited Retry.
func (c RWCmd) setLR(v bool) { setBit32(c.SQE, 12, RWLR, v) }

// prinfo returns the protection information field (CDW12 29..26).
func (c RWCmd) prinfo() uint8 { return uint8(c.CDW12()>>26) & 0xF }

// setPRINFO sets the protection information field.
func (c RWCmd) setPRINFO(v uint8) { c.SetCDW12(c.CDW12()&^(0xF<<26) | uint32(v&0xF)<<26) }

// dtype returns the directive type (CDW12 23..20).
func (c RWCmd) dtype() uint8 { return uint8(c.CDW12()>>20) & 0xF }

// setDTYPE sets the directive type.
func (c RWCmd) setDTYPE(v uint8) { c.SetCDW12(c.CDW12()&^(0xF<<20) | uint32(v&0xF)<<20) }

// setDSM sets the dataset management hints.
func (c RWCmd) setDSM(v uint8) { c.SQE[52] = v }

// setDSPEC sets the directive specific value.
func (c RWCmd) setDSPEC(v uint16) { le.PutUint16(c.SQE[54:], v) }

// WriteZeroesCmd is a view of a Write Zeroes command (NVM 0x08;
// protocol.md §10.5): SLBA, NLB as for RWCmd; CDW12 DEAC bit 25, FUA 30,
// LR 31. It carries no data (null SGL).
type WriteZeroesCmd struct{ RWCmd }

// WriteZeroesCmd returns the Write Zeroes view of s.
func (s *SQE) WriteZeroesCmd() WriteZeroesCmd { return WriteZeroesCmd{RWCmd{s}} }

// BuildWriteZeroes fills s with a Write Zeroes of blocks logical blocks at
// slba of namespace nsid, with a null SGL.
func (s *SQE) BuildWriteZeroes(nsid uint32, slba uint64, blocks uint32) WriteZeroesCmd {
	c := WriteZeroesCmd{s.buildRW(NVMWriteZeroes, nsid, slba, blocks)}
	s.SGL1().SetNull()
	return c
}

// WZDEAC is the Write Zeroes Deallocate bit (CDW12 bit 25).
const WZDEAC = 1 << 25

// deac reports Deallocate: the blocks may be deallocated rather than written.
func (c WriteZeroesCmd) deac() bool { return c.CDW12()&WZDEAC != 0 }

// setDEAC sets Deallocate.
func (c WriteZeroesCmd) setDEAC(v bool) { setBit32(c.SQE, 12, WZDEAC, v) }

// DSMCmd is a view of a Dataset Management command (NVM 0x09; protocol.md
// §10.5): CDW10 NR 7..0 (0's based number of ranges), CDW11 attributes IDR
// bit 0, IDW bit 1, AD bit 2. Its data is NR+1 16-byte DSMRanges.
type DSMCmd struct{ *SQE }

// DSMCmd returns the Dataset Management view of s.
func (s *SQE) DSMCmd() DSMCmd { return DSMCmd{s} }

// Dataset Management attributes (CDW11; Linux NVME_DSMGMT_*).
const (
	dsmidr = 1 << 0 // integral dataset for read
	dsmidw = 1 << 1 // integral dataset for write
	DSMAD  = 1 << 2 // deallocate (discard / TRIM)
)

// BuildDSM fills s with a Dataset Management of ranges ranges (1..256) on
// namespace nsid with attributes attrs (DSMAD for a discard). Set SGL1 to
// ranges*16 bytes.
func (s *SQE) BuildDSM(nsid uint32, ranges int, attrs uint32) DSMCmd {
	s.init(NVMDatasetManagement)
	c := DSMCmd{s}
	c.SetNSID(nsid)
	c.SetNumRanges(ranges)
	c.SetAttributes(attrs)
	return c
}

// NR returns the raw, 0's based number of ranges.
func (c DSMCmd) NR() uint8 { return c.SQE[40] }

// SetNR sets the raw, 0's based number of ranges.
func (c DSMCmd) SetNR(v uint8) { c.SQE[40] = v }

// NumRanges returns the number of ranges, 1's based (NR+1).
func (c DSMCmd) NumRanges() int { return int(c.NR()) + 1 }

// SetNumRanges sets NR from a 1's based count (1..256).
func (c DSMCmd) SetNumRanges(n int) { c.SetNR(uint8(n - 1)) }

// attributes returns CDW11 (DSMIDR, DSMIDW, DSMAD).
func (c DSMCmd) attributes() uint32 { return c.CDW11() }

// SetAttributes sets CDW11.
func (c DSMCmd) SetAttributes(v uint32) { c.SetCDW11(v) }

// AD reports the Deallocate attribute.
func (c DSMCmd) AD() bool { return c.CDW11()&DSMAD != 0 }

// setAD sets the Deallocate attribute.
func (c DSMCmd) setAD(v bool) { setBit32(c.SQE, 11, DSMAD, v) }

// DataLength returns the data length the command implies: NumRanges*16.
func (c DSMCmd) DataLength() int { return c.NumRanges() * DSMRangeSize }

// DSMRange is a 16-byte Dataset Management range (NVM Command Set 1.0
// Figure 39; Linux struct nvme_dsm_range): context attributes 0..3, length
// in logical blocks 4..7 (1's based), starting LBA 8..15.
type DSMRange [DSMRangeSize]byte

// contextAttributes returns the context attributes.
func (r *DSMRange) contextAttributes() uint32 { return le.Uint32(r[0:]) }

// setContextAttributes sets the context attributes.
func (r *DSMRange) setContextAttributes(v uint32) { le.PutUint32(r[0:], v) }

// NLB returns the length in logical blocks (1's based; 0 is an empty range).
func (r *DSMRange) NLB() uint32 { return le.Uint32(r[4:]) }

// SetNLB sets the length in logical blocks.
func (r *DSMRange) SetNLB(v uint32) { le.PutUint32(r[4:], v) }

// SLBA returns the starting LBA.
func (r *DSMRange) SLBA() uint64 { return le.Uint64(r[8:]) }

// SetSLBA sets the starting LBA.
func (r *DSMRange) SetSLBA(v uint64) { le.PutUint64(r[8:], v) }

// DSMRanges is a list of Dataset Management ranges viewed in place in the
// command's data buffer.
type DSMRanges []byte

// ParseDSMRanges returns a view of the first n ranges (n = DSMCmd.NumRanges)
// in b. A b shorter than n*16 bytes is an error wrapping
// StatusSGLInvalidData|DNR (the data length does not match the command).
func ParseDSMRanges(b []byte, n int) (DSMRanges, error) {
	if n < 1 || n > MaxDSMRanges {
		return nil, fmt.Errorf("nvmeof: dataset management: %d ranges: %w (%w)", n, ErrMalformed, StatusInvalidField|StatusDNR)
	}
	if len(b) < n*DSMRangeSize {
		return nil, fmt.Errorf("%w (%w)", truncated("dataset management ranges", len(b), n*DSMRangeSize), StatusSGLInvalidData|StatusDNR)
	}
	return DSMRanges(b[:n*DSMRangeSize]), nil
}

// Len returns the number of ranges.
func (l DSMRanges) Len() int { return len(l) / DSMRangeSize }

// At returns a view of range i (0 <= i < Len()); it panics for i out of
// range, like a slice index.
func (l DSMRanges) At(i int) *DSMRange { return (*DSMRange)(l[i*DSMRangeSize : (i+1)*DSMRangeSize]) }

// BuildFlush fills s with a Flush of namespace nsid (NSIDAll flushes all
// namespaces if Identify Controller VWC allows it). It carries no data.
func (s *SQE) BuildFlush(nsid uint32) {
	s.init(NVMFlush)
	s.SetNSID(nsid)
	s.SGL1().SetNull()
}

// setBit32 sets or clears mask in command dword n of s.
func setBit32(s *SQE, n int, mask uint32, v bool) {
	d := s.CDW(n)
	if v {
		d |= mask
	} else {
		d &^= mask
	}
	s.SetCDW(n, d)
}
