package nvmeof

import (
	"encoding/binary"
	"fmt"
)

// SGLType is an SGL descriptor type: bits 7..4 of the identifier byte (NVMe
// Base 2.0 §4.3.2 Figure 37; Linux NVME_SGL_FMT_*_DESC).
type SGLType uint8

// SGL descriptor types.
const (
	SGLTypeDataBlock          SGLType = 0x0
	SGLTypeBitBucket          SGLType = 0x1
	SGLTypeSegment            SGLType = 0x2
	SGLTypeLastSegment        SGLType = 0x3
	SGLTypeKeyedDataBlock     SGLType = 0x4
	SGLTypeTransportDataBlock SGLType = 0x5
	SGLTypeVendor             SGLType = 0xF
)

// String returns the type's name.
func (t SGLType) String() string {
	switch t {
	case SGLTypeDataBlock:
		return "data block"
	case SGLTypeBitBucket:
		return "bit bucket"
	case SGLTypeSegment:
		return "segment"
	case SGLTypeLastSegment:
		return "last segment"
	case SGLTypeKeyedDataBlock:
		return "keyed data block"
	case SGLTypeTransportDataBlock:
		return "transport data block"
	case SGLTypeVendor:
		return "vendor specific"
	}
	return fmt.Sprintf("reserved type %#x", uint8(t))
}

// SGL descriptor subtypes: bits 3..0 of the identifier byte (Linux NVME_SGL_FMT_*).
const (
	SGLSubtypeAddress    = 0x0 // address field is an address (keyed: the RDMA TO)
	SGLSubtypeOffset     = 0x1 // address field is an offset into the in-capsule data
	SGLSubtypeInvalidate = 0xF // NVMe/RDMA: address, and invalidate the key (Send with Invalidate)
)

// Identifier bytes of the descriptors NVMe/RDMA uses (protocol.md §8.3).
const (
	// SGLIDKeyed is a keyed data block, address subtype: host memory read or
	// written by RDMA at (key, address). With length 0 it is the "null"
	// descriptor of a command without data.
	SGLIDKeyed = uint8(SGLTypeKeyedDataBlock)<<4 | SGLSubtypeAddress // 0x40
	// SGLIDKeyedInvalidate is a keyed data block that asks the target to
	// answer with Send with Invalidate of the key (what Linux hosts send).
	SGLIDKeyedInvalidate = uint8(SGLTypeKeyedDataBlock)<<4 | SGLSubtypeInvalidate // 0x4F
	// SGLIDInCapsule is a data block, offset subtype: the data follows the
	// SQE in the command capsule.
	SGLIDInCapsule = uint8(SGLTypeDataBlock)<<4 | SGLSubtypeOffset // 0x01
)

// MaxKeyedSGLLength is the largest length of a keyed SGL data block: the
// length field is 24 bits.
const MaxKeyedSGLLength = 1<<24 - 1

// SGL is a 16-byte SGL descriptor viewed in place (protocol.md §8.3).
//
// Keyed data block (type 4): 0..7 address, 8..10 length (24-bit LE),
// 11..14 key (LE), 15 identifier. Data block (type 0): 0..7 address or
// offset, 8..11 length (32-bit LE), 12..14 reserved, 15 identifier.
type SGL [SGLDescSize]byte

// Identifier returns the SGL identifier byte (type << 4 | subtype).
func (s *SGL) Identifier() uint8 { return s[15] }

// SetIdentifier sets the identifier byte.
func (s *SGL) SetIdentifier(id uint8) { s[15] = id }

// Type returns the descriptor type (identifier bits 7..4).
func (s *SGL) Type() SGLType { return SGLType(s[15] >> 4) }

// Subtype returns the descriptor subtype (identifier bits 3..0).
func (s *SGL) Subtype() uint8 { return s[15] & 0xF }

// Address returns the address field (bytes 0..7): the RDMA target offset of
// a keyed descriptor, or the in-capsule offset of an offset descriptor.
func (s *SGL) Address() uint64 { return binary.LittleEndian.Uint64(s[0:]) }

// SetAddress sets the address field.
func (s *SGL) SetAddress(v uint64) { binary.LittleEndian.PutUint64(s[0:], v) }

// Length returns the length field: 24 bits for a keyed data block (type 4),
// 32 bits for every other type.
func (s *SGL) Length() uint32 {
	if s.Type() == SGLTypeKeyedDataBlock {
		return uint32(s[8]) | uint32(s[9])<<8 | uint32(s[10])<<16
	}
	return binary.LittleEndian.Uint32(s[8:])
}

// SetLength sets the length field according to the current type (set the
// identifier first): keyed descriptors keep the low 24 bits of v.
func (s *SGL) SetLength(v uint32) {
	if s.Type() == SGLTypeKeyedDataBlock {
		s[8], s[9], s[10] = byte(v), byte(v>>8), byte(v>>16)
		return
	}
	binary.LittleEndian.PutUint32(s[8:], v)
}

// Key returns the key (RDMA STag) of a keyed descriptor (bytes 11..14).
func (s *SGL) Key() uint32 { return binary.LittleEndian.Uint32(s[11:]) }

// SetKey sets the key of a keyed descriptor.
func (s *SGL) SetKey(k uint32) { binary.LittleEndian.PutUint32(s[11:], k) }

// SetKeyed makes s a keyed data block for host memory (key, addr, length).
// With invalidate the subtype is 0xF, asking the target to answer with Send
// with Invalidate of key. length must fit 24 bits (MaxKeyedSGLLength).
func (s *SGL) SetKeyed(addr uint64, length, key uint32, invalidate bool) {
	*s = SGL{}
	id := SGLIDKeyed
	if invalidate {
		id = SGLIDKeyedInvalidate
	}
	s[15] = id
	s.SetAddress(addr)
	s.SetLength(length)
	s.SetKey(key)
}

// SetInCapsule makes s a data block descriptor with offset subtype for
// length bytes of in-capsule data at offset (Linux: offset 0).
func (s *SGL) SetInCapsule(offset uint64, length uint32) {
	*s = SGL{}
	s[15] = SGLIDInCapsule
	s.SetAddress(offset)
	s.SetLength(length)
}

// SetNull makes s the descriptor of a command without data, as the Linux
// host sends it: keyed, address 0, length 0, key 0 (identifier 0x40).
func (s *SGL) SetNull() {
	*s = SGL{}
	s[15] = SGLIDKeyed
}

// SGLKind classifies a decoded descriptor.
type SGLKind uint8

// Descriptor kinds accepted on NVMe/RDMA.
const (
	// SGLKeyed is host memory accessed by RDMA (keyed data block, subtype 0 or 0xF).
	SGLKeyed SGLKind = iota + 1
	// SGLInCapsule is data carried in the command capsule (data block, offset subtype).
	SGLInCapsule
)

// SGLDesc is a decoded SGL descriptor.
type SGLDesc struct {
	Kind SGLKind
	// Addr is the RDMA address (keyed) or the offset into the in-capsule data.
	Addr uint64
	// Length is the number of data bytes; 0 means the command has no data.
	Length uint32
	// Key is the RDMA STag of a keyed descriptor.
	Key uint32
	// Invalidate is set for subtype 0xF: the response should be a Send with
	// Invalidate of Key.
	Invalidate bool
}

// Null reports whether the descriptor describes no data (length 0).
func (d SGLDesc) Null() bool { return d.Length == 0 }

// SGLError is the error of a descriptor the NVMe/RDMA transport does not
// accept. Status is what nvmet answers: SGL Descriptor Type Invalid for an
// unsupported type, Invalid Field for an unsupported subtype, SGL Offset
// Invalid for in-capsule data outside the capsule; always with DNR.
type SGLError struct {
	Identifier uint8
	Status     Status
	Reason     string
}

// Error describes the descriptor and the status.
func (e *SGLError) Error() string {
	return fmt.Sprintf("nvmeof: SGL descriptor %#02x: %s: %v", e.Identifier, e.Reason, e.Status)
}

// Unwrap returns the Status, so StatusFromError finds it.
func (e *SGLError) Unwrap() error { return e.Status }

// Decode classifies the descriptor as nvmet-rdma does (nvmet_rdma_map_sgl):
// a keyed data block with subtype address (0x40) or invalidate (0x4F), or a
// data block with offset subtype (0x01). Segment, last segment, bit bucket,
// transport and reserved types return an *SGLError with
// StatusSGLInvalidType|DNR; other subtypes of the accepted types return one
// with StatusInvalidField|DNR.
func (s *SGL) Decode() (SGLDesc, error) {
	id := s.Identifier()
	switch s.Type() {
	case SGLTypeKeyedDataBlock:
		switch s.Subtype() {
		case SGLSubtypeAddress, SGLSubtypeInvalidate:
			return SGLDesc{
				Kind:       SGLKeyed,
				Addr:       s.Address(),
				Length:     s.Length(),
				Key:        s.Key(),
				Invalidate: s.Subtype() == SGLSubtypeInvalidate,
			}, nil
		}
		return SGLDesc{}, &SGLError{Identifier: id, Status: StatusInvalidField | StatusDNR,
			Reason: fmt.Sprintf("unsupported keyed data block subtype %#x", s.Subtype())}
	case SGLTypeDataBlock:
		if s.Subtype() == SGLSubtypeOffset {
			return SGLDesc{Kind: SGLInCapsule, Addr: s.Address(), Length: s.Length()}, nil
		}
		return SGLDesc{}, &SGLError{Identifier: id, Status: StatusInvalidField | StatusDNR,
			Reason: fmt.Sprintf("unsupported data block subtype %#x", s.Subtype())}
	}
	return SGLDesc{}, &SGLError{Identifier: id, Status: StatusSGLInvalidType | StatusDNR,
		Reason: "unsupported type " + s.Type().String()}
}

// ParseSGL decodes the first 16 bytes of b as an SGL descriptor (see
// SGL.Decode).
func ParseSGL(b []byte) (SGLDesc, error) {
	if len(b) < SGLDescSize {
		return SGLDesc{}, truncated("SGL descriptor", len(b), SGLDescSize)
	}
	return (*SGL)(b[:SGLDescSize]).Decode()
}

// CheckInCapsule checks an in-capsule descriptor against the in-capsule data
// the controller received (capsuleData bytes after the SQE): offset+length
// must lie inside it, else SGL Offset Invalid with DNR, as nvmet answers
// (nvmet_rdma_map_sgl_inline). It accepts every other kind.
func (d SGLDesc) CheckInCapsule(capsuleData int) error {
	if d.Kind != SGLInCapsule {
		return nil
	}
	if capsuleData < 0 || d.Addr > uint64(capsuleData) || uint64(d.Length) > uint64(capsuleData)-d.Addr {
		return &SGLError{Identifier: SGLIDInCapsule, Status: StatusSGLInvalidOffset | StatusDNR,
			Reason: fmt.Sprintf("in-capsule offset %d + length %d beyond %d bytes of capsule data", d.Addr, d.Length, capsuleData)}
	}
	return nil
}

// DecodeSGL1 decodes the command's data pointer and applies the transport
// rule that only write-direction commands may carry in-capsule data (else
// Invalid Field with DNR, as nvmet_rdma_map_sgl_inline answers).
func (s *SQE) DecodeSGL1() (SGLDesc, error) {
	d, err := s.SGL1().Decode()
	if err != nil {
		return d, err
	}
	if d.Kind == SGLInCapsule && !s.IsWrite() {
		return SGLDesc{}, &SGLError{Identifier: SGLIDInCapsule, Status: StatusInvalidField | StatusDNR,
			Reason: "in-capsule data on a command that is not a write"}
	}
	return d, nil
}
