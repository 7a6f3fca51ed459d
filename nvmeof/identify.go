package nvmeof

import (
	"fmt"
)

// Identify CNS values (NVMe Base 2.0 Figure 273; Linux NVME_ID_CNS_*;
// protocol.md §10.2). The Linux host sends 0x00, 0x01, 0x02, 0x03, 0x05,
// 0x06 and 0x08.
const (
	CNSNamespace      = 0x00 // Identify Namespace (NVM command set)
	CNSController     = 0x01 // Identify Controller
	CNSActiveNSList   = 0x02 // active namespace ID list
	CNSNSDescList     = 0x03 // namespace identification descriptor list
	CNSCSNamespace    = 0x05 // I/O command set specific Identify Namespace (by CSI)
	CNSCSController   = 0x06 // I/O command set specific Identify Controller (by CSI)
	CNSCSActiveNSList = 0x07 // active namespace ID list for a CSI
	CNSNSIndependent  = 0x08 // I/O command set independent Identify Namespace
	cnsControllerList = 0x13
)

// Command set identifiers (CSI; NVMe Base 2.0 Figure 286; Linux NVME_CSI_*).
const (
	CSINVM = 0x00
	CSIZNS = 0x02
)

// IdentifyCmd is a view of an Identify command (admin 0x06; protocol.md
// §10.2): CDW10 CNS 7..0 and CNTID 31..16, CDW11 CNSSID 15..0 and CSI
// 31..24, CDW14 UUID index 6..0; NSID in bytes 4..7. The data is always 4096
// bytes (nvmet requires that exact SGL length).
type IdentifyCmd struct{ *SQE }

// IdentifyCmd returns the Identify view of s.
func (s *SQE) IdentifyCmd() IdentifyCmd { return IdentifyCmd{s} }

// BuildIdentify fills s with an Identify command for cns, namespace nsid,
// controller cntid and command set csi. Set SGL1 to 4096 bytes.
func (s *SQE) BuildIdentify(cns uint8, nsid uint32, cntid uint16, csi uint8) IdentifyCmd {
	s.init(AdminIdentify)
	c := IdentifyCmd{s}
	c.SetNSID(nsid)
	c.SetCNS(cns)
	c.SetCNTID(cntid)
	c.SetCSI(csi)
	return c
}

// CNS returns the Controller or Namespace Structure selector.
func (c IdentifyCmd) CNS() uint8 { return c.SQE[40] }

// SetCNS sets the CNS.
func (c IdentifyCmd) SetCNS(v uint8) { c.SQE[40] = v }

// cntid returns the controller identifier (for controller lists).
func (c IdentifyCmd) cntid() uint16 { return le.Uint16(c.SQE[42:]) }

// SetCNTID sets the controller identifier.
func (c IdentifyCmd) SetCNTID(v uint16) { le.PutUint16(c.SQE[42:], v) }

// setCNSSID sets the CNS specific identifier.
func (c IdentifyCmd) setCNSSID(v uint16) { le.PutUint16(c.SQE[44:], v) }

// CSI returns the command set identifier (CDW11 bits 31..24).
func (c IdentifyCmd) CSI() uint8 { return c.SQE[47] }

// SetCSI sets the command set identifier.
func (c IdentifyCmd) SetCSI(v uint8) { c.SQE[47] = v }

// setUUIDIndex sets the UUID index.
func (c IdentifyCmd) setUUIDIndex(v uint8) { c.SQE[56] = c.SQE[56]&0x80 | v&0x7F }

// EncodeNSList writes an Identify active namespace ID list (CNS 0x02) into
// dst: the NSIDs of nsids greater than after, in the order given (which must
// be ascending), at most 1024 or as many as fit in dst, followed by zeros to
// the end of dst (NVMe Base 2.0 §5.17.2.2; protocol.md §10.2). It returns the
// number of NSIDs written.
func EncodeNSList(dst []byte, nsids []uint32, after uint32) int {
	n := 0
	max := min(len(dst)/4, MaxNSListEntries)
	for _, id := range nsids {
		if n == max {
			break
		}
		if id <= after || id == 0 || id == NSIDAll {
			continue
		}
		le.PutUint32(dst[4*n:], id)
		n++
	}
	clear(dst[4*n:])
	return n
}

// ParseNSList decodes an Identify active namespace ID list (CNS 0x02) and
// appends the NSIDs to dst. b must hold the whole 4096-byte structure; the
// list ends at the first zero entry. NSIDs must be strictly ascending and
// not 0xFFFFFFFF. A full list (1024 entries) means the host should ask again
// from the last NSID.
func ParseNSList(b []byte, dst []uint32) ([]uint32, error) {
	if len(b) < IdentifyDataSize {
		return dst, truncated("active namespace list", len(b), IdentifyDataSize)
	}
	var prev uint32
	for i := 0; i < MaxNSListEntries; i++ {
		id := le.Uint32(b[4*i:])
		if id == 0 {
			break
		}
		if id <= prev || id == NSIDAll {
			return dst, malformed("active namespace list", "entry %d: NSID %#x after %#x", i, id, prev)
		}
		dst = append(dst, id)
		prev = id
	}
	return dst, nil
}

// Namespace identifier types and lengths of the namespace identification
// descriptor list (CNS 0x03; NVMe Base 2.0 Figure 281; Linux NVME_NIDT_*).
const (
	NIDTEUI64 = 0x01
	NIDTNGUID = 0x02
	NIDTUUID  = 0x03
	NIDTCSI   = 0x04

	NIDLEUI64 = 8
	NIDLNGUID = 16
	NIDLUUID  = 16
	NIDLCSI   = 1
)

// NSIdentifiers are the identifiers of a namespace as carried by the
// namespace identification descriptor list. The Has fields say which
// descriptors are present. Identifiers must be unique in the subsystem and
// stable: the Linux host drops a namespace whose identifiers change.
type NSIdentifiers struct {
	EUI64    [8]byte
	NGUID    [16]byte
	UUID     [16]byte
	CSI      uint8
	HasEUI64 bool
	HasNGUID bool
	HasUUID  bool
	HasCSI   bool
}

// EncodeNSDescriptors writes the namespace identification descriptor list
// (CNS 0x03) for ids into dst, in the order EUI64, NGUID, UUID, CSI, each as
// {NIDT, NIDL, 2 reserved, NID}, and zeros the rest of dst, which ends the
// list (an entry with NIDL 0). dst should be the 4096-byte Identify buffer;
// it returns an error if the descriptors do not fit.
func EncodeNSDescriptors(dst []byte, ids NSIdentifiers) (int, error) {
	off := 0
	put := func(nidt uint8, id []byte) error {
		if len(dst)-off < 4+len(id) {
			return fmt.Errorf("nvmeof: namespace descriptors: %d bytes do not fit %d: %w", off+4+len(id), len(dst), ErrTruncated)
		}
		dst[off], dst[off+1], dst[off+2], dst[off+3] = nidt, uint8(len(id)), 0, 0
		copy(dst[off+4:], id)
		off += 4 + len(id)
		return nil
	}
	var err error
	if ids.HasEUI64 {
		err = put(NIDTEUI64, ids.EUI64[:])
	}
	if err == nil && ids.HasNGUID {
		err = put(NIDTNGUID, ids.NGUID[:])
	}
	if err == nil && ids.HasUUID {
		err = put(NIDTUUID, ids.UUID[:])
	}
	if err == nil && ids.HasCSI {
		err = put(NIDTCSI, []byte{ids.CSI})
	}
	if err != nil {
		return off, err
	}
	clear(dst[off:])
	return off, nil
}

// ParseNSDescriptors decodes a namespace identification descriptor list.
// b must hold the whole 4096-byte structure. Parsing stops at the first
// descriptor with NIDL 0 or at the end of the structure; a known type with a
// wrong NIDL, or a descriptor running past the end, is an error (the Linux
// host stops parsing there; nvme_process_ns_desc). Unknown types are skipped.
// A later descriptor of a type seen before replaces the earlier one.
func ParseNSDescriptors(b []byte) (NSIdentifiers, error) {
	var ids NSIdentifiers
	if len(b) < IdentifyDataSize {
		return ids, truncated("namespace descriptors", len(b), IdentifyDataSize)
	}
	b = b[:IdentifyDataSize]
	for pos := 0; pos < len(b); {
		if len(b)-pos < 4 {
			// Fewer bytes than a descriptor header left: only the zero
			// padding of a full buffer may remain.
			for _, c := range b[pos:] {
				if c != 0 {
					return ids, malformed("namespace descriptors", "partial descriptor at offset %d", pos)
				}
			}
			break
		}
		nidt, nidl := b[pos], int(b[pos+1])
		if nidl == 0 {
			break
		}
		if len(b)-pos-4 < nidl {
			return ids, malformed("namespace descriptors", "descriptor type %#x at offset %d: NIDL %d runs past the end", nidt, pos, nidl)
		}
		id := b[pos+4 : pos+4+nidl]
		want := 0
		switch nidt {
		case NIDTEUI64:
			want = NIDLEUI64
			ids.HasEUI64 = nidl == want && copy(ids.EUI64[:], id) == want
		case NIDTNGUID:
			want = NIDLNGUID
			ids.HasNGUID = nidl == want && copy(ids.NGUID[:], id) == want
		case NIDTUUID:
			want = NIDLUUID
			ids.HasUUID = nidl == want && copy(ids.UUID[:], id) == want
		case NIDTCSI:
			want = NIDLCSI
			if nidl == want {
				ids.CSI, ids.HasCSI = id[0], true
			}
		}
		if want != 0 && nidl != want {
			return ids, malformed("namespace descriptors", "descriptor type %#x at offset %d: NIDL %d, want %d", nidt, pos, nidl, want)
		}
		pos += 4 + nidl
	}
	return ids, nil
}
