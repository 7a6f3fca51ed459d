package nvmeof

import "encoding/binary"

// CQE is a 16-byte NVMe completion queue entry, viewed in place
// (protocol.md §8.2):
//
//	0..3 DW0 (command specific result)   4..7 DW1   8..9 SQHD   10..11 SQID
//	12..13 CID   14..15 status (bit 0 phase, bits 15..1 Status)
//
// On NVMe/RDMA the response capsule is exactly one CQE; the phase tag is
// meaningless on fabrics and Linux ignores it.
type CQE [CQESize]byte

// ParseCQE returns a view of the first 16 bytes of b as a CQE; the view
// aliases b.
func ParseCQE(b []byte) (*CQE, error) {
	if len(b) < CQESize {
		return nil, truncated("CQE", len(b), CQESize)
	}
	return (*CQE)(b[:CQESize]), nil
}

// Reset zeroes the whole entry.
func (c *CQE) Reset() { *c = CQE{} }

// Result returns DW0, the command specific result (e.g. the CNTLID of a
// Connect, the allocated queues of Set Features Number of Queues).
func (c *CQE) Result() uint32 { return binary.LittleEndian.Uint32(c[0:]) }

// SetResult sets DW0.
func (c *CQE) SetResult(v uint32) { binary.LittleEndian.PutUint32(c[0:], v) }

// dw1 returns command specific dword 1.
func (c *CQE) dw1() uint32 { return binary.LittleEndian.Uint32(c[4:]) }

// SetDW1 sets command specific dword 1.
func (c *CQE) SetDW1(v uint32) { binary.LittleEndian.PutUint32(c[4:], v) }

// Result64 returns DW0..DW1 as one little-endian 64-bit value, as used by
// Property Get for 8-byte properties (CAP).
func (c *CQE) Result64() uint64 { return binary.LittleEndian.Uint64(c[0:]) }

// setResult64 sets DW0..DW1 to a 64-bit value.
func (c *CQE) setResult64(v uint64) { binary.LittleEndian.PutUint64(c[0:], v) }

// SQHead returns the submission queue head pointer (SQHD). nvmet advances it
// modulo the queue size; 0xFFFF when SQ flow control is disabled.
func (c *CQE) SQHead() uint16 { return binary.LittleEndian.Uint16(c[8:]) }

// SetSQHead sets the submission queue head pointer.
func (c *CQE) SetSQHead(v uint16) { binary.LittleEndian.PutUint16(c[8:], v) }

// SQID returns the submission queue identifier.
func (c *CQE) SQID() uint16 { return binary.LittleEndian.Uint16(c[10:]) }

// SetSQID sets the submission queue identifier.
func (c *CQE) SetSQID(v uint16) { binary.LittleEndian.PutUint16(c[10:], v) }

// CID returns the identifier of the completed command.
func (c *CQE) CID() uint16 { return binary.LittleEndian.Uint16(c[12:]) }

// SetCID sets the identifier of the completed command.
func (c *CQE) SetCID(v uint16) { binary.LittleEndian.PutUint16(c[12:], v) }

// RawStatus returns the status field as on the wire (Status<<1 | phase).
func (c *CQE) RawStatus() uint16 { return binary.LittleEndian.Uint16(c[14:]) }

// SetRawStatus sets the status field as on the wire.
func (c *CQE) SetRawStatus(v uint16) { binary.LittleEndian.PutUint16(c[14:], v) }

// Status returns the completion status (the status field without the phase bit).
func (c *CQE) Status() Status { return StatusFromWire(c.RawStatus()) }

// SetStatus sets the completion status, keeping the phase bit.
func (c *CQE) SetStatus(s Status) { c.SetRawStatus(s.Wire() | c.RawStatus()&1) }

// phase returns the phase tag (bit 0 of the status field).
func (c *CQE) phase() bool { return c[14]&1 != 0 }

// setPhase sets the phase tag.
func (c *CQE) setPhase(p bool) {
	if p {
		c[14] |= 1
	} else {
		c[14] &^= 1
	}
}

// err returns nil if the completion succeeded and its Status otherwise.
func (c *CQE) err() error { return c.Status().Err() }

// Complete fills c as the completion of the command sqe received on
// submission queue sqid with head pointer sqhd: it zeroes c, echoes the CID
// and sets SQID, SQHD, the result DW0 and the status.
func (c *CQE) Complete(sqe *SQE, sqid, sqhd uint16, result uint32, st Status) {
	*c = CQE{}
	c.SetResult(result)
	c.SetSQHead(sqhd)
	c.SetSQID(sqid)
	c.SetCID(sqe.CID())
	c.SetStatus(st)
}
