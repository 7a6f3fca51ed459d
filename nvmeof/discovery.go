package nvmeof

import (
	"fmt"
)

// Transport types (TRTYPE; NVMe-oF 1.1 Figure 38; Linux NVMF_TRTYPE_*).
const (
	TrTypeRDMA = 1
	TrTypeFC   = 2
	TrTypeTCP  = 3
	TrTypeLoop = 254 // reserved for host usage
)

// Address families (ADRFAM; Linux NVMF_ADDR_FAMILY_*).
const (
	AdrFamIPv4 = 1
	AdrFamIPv6 = 2
	AdrFamIB   = 3
	AdrFamFC   = 4
	AdrFamLoop = 254
)

// Subsystem types of discovery log entries (SUBTYPE; Linux enum nvme_subsys_type).
const (
	SubTypeReferral         = 1 // referral to another discovery subsystem
	SubTypeNVMe             = 2 // NVM subsystem
	SubTypeCurrentDiscovery = 3 // the discovery subsystem being queried
)

// Transport requirements (TREQ; Linux NVMF_TREQ_*).
const (
	TREQNotSpecified  = 0      // secure channel not specified
	TREQRequired      = 1      // secure channel required
	TREQNotRequired   = 2      // secure channel not required
	TREQSecureMask    = 3      // bits 1..0: the secure channel requirement
	TREQDisableSQFlow = 1 << 2 // SQ flow control disable supported (nvmet sets it)
)

// Entry flags (EFLAGS; Linux NVME_DISC_EFLAGS_*).
const (
	EFLAGSDupRetInfo = 1 << 0 // duplicate returned information
	EFLAGSEPCSD      = 1 << 1 // explicit persistent connection support for discovery
	EFLAGSNCC        = 1 << 2 // no CDC connectivity
)

// RDMA transport specific address subtype values (TSAS; Linux
// NVMF_RDMA_QPTYPE_*, NVMF_RDMA_PRTYPE_*, NVMF_RDMA_CMS_*).
const (
	RDMAQPTypeRC     = 1 // RDMA_QPTYPE: reliable connected
	RDMAQPTypeRD     = 2 // RDMA_QPTYPE: reliable datagram
	RDMAPRTypeNone   = 1 // RDMA_PRTYPE: no provider specified (what nvmet reports)
	RDMAPRTypeIB     = 2 // RDMA_PRTYPE: InfiniBand
	RDMAPRTypeRoCE   = 3 // RDMA_PRTYPE: RoCE
	RDMAPRTypeRoCEv2 = 4 // RDMA_PRTYPE: RoCE v2
	RDMAPRTypeIWARP  = 5 // RDMA_PRTYPE: iWARP
	RDMACMSRDMACM    = 1 // RDMA_CMS: RDMA_CM, sockets based endpoint addressing
)

// Discovery log header values.
const (
	// DiscoveryRecFmt is the RECFMT of the discovery log header.
	DiscoveryRecFmt = 0
	// DiscoveryASQSZ is the ASQSZ nvmet reports in entries: the admin queue depth.
	DiscoveryASQSZ = AdminQueueDepth
	// DiscoveryHeaderMin is the number of header bytes a header read needs:
	// GENCTR, NUMREC and RECFMT.
	DiscoveryHeaderMin = 18
)

// DiscoveryLogHeader is the 1024-byte discovery log page header (LID 0x70;
// NVMe-oF 1.1 §5.3 Figure 37; protocol.md §10.3): GENCTR 0..7, NUMREC 8..15,
// RECFMT 16..17. Entries follow at 1024 + 1024*i.
type DiscoveryLogHeader [DiscoveryLogHeaderSize]byte

// genctr returns the generation counter, bumped on every change of the log.
func (h *DiscoveryLogHeader) genctr() uint64 { return le.Uint64(h[0:]) }

// SetGENCTR sets the generation counter.
func (h *DiscoveryLogHeader) SetGENCTR(v uint64) { le.PutUint64(h[0:], v) }

// numrec returns the number of records (entries) in the whole log.
func (h *DiscoveryLogHeader) numrec() uint64 { return le.Uint64(h[8:]) }

// SetNUMREC sets the number of records.
func (h *DiscoveryLogHeader) SetNUMREC(v uint64) { le.PutUint64(h[8:], v) }

// recfmt returns the record format (0).
func (h *DiscoveryLogHeader) recfmt() uint16 { return le.Uint16(h[16:]) }

// SetRECFMT sets the record format.
func (h *DiscoveryLogHeader) SetRECFMT(v uint16) { le.PutUint16(h[16:], v) }

// DiscoveryLogEntry is a 1024-byte discovery log page entry (NVMe-oF 1.1
// Figure 38; Linux struct nvmf_disc_rsp_page_entry; protocol.md §10.3),
// viewed in place. Bytes 768..1023 are the transport specific address subtype
// (TSAS), here the RDMA layout.
type DiscoveryLogEntry [DiscoveryLogEntrySize]byte

// ParseDiscoveryLogEntry returns a view of the first 1024 bytes of b as a
// discovery log entry; the view aliases b.
func ParseDiscoveryLogEntry(b []byte) (*DiscoveryLogEntry, error) {
	if len(b) < DiscoveryLogEntrySize {
		return nil, truncated("discovery log entry", len(b), DiscoveryLogEntrySize)
	}
	return (*DiscoveryLogEntry)(b[:DiscoveryLogEntrySize]), nil
}

// DiscoveryEntry is a decoded discovery log entry.
type DiscoveryEntry struct {
	TrType  uint8  // TrType*
	AdrFam  uint8  // AdrFam*
	SubType uint8  // SubType*
	TReq    uint8  // TREQ*
	PortID  uint16 // port ID
	CntlID  uint16 // CNTLIDDynamic for the dynamic model
	ASQSZ   uint16 // admin SQ size (32)
	EFlags  uint16 // EFLAGS*
	TrSvcID string // e.g. "4420"
	SubNQN  string
	TrAddr  string // e.g. "10.0.2.15"; never a wildcard address
	// RDMA transport specific address subtype.
	RDMAQPType uint8
	RDMAPRType uint8
	RDMACMS    uint8
	RDMAPKey   uint16
	// TCPSecType is the TCP transport specific address subtype's SECTYPE
	// (TSAS byte 0 of a TRTYPE 3 entry: 0 none, 1 TLS 1.2, 2 TLS 1.3).
	TCPSecType uint8
}

// Decode returns the fields of e.
func (e *DiscoveryLogEntry) Decode() DiscoveryEntry {
	d := DiscoveryEntry{
		TrType: e.TRTYPE(), AdrFam: e.ADRFAM(), SubType: e.SUBTYPE(), TReq: e.TREQ(),
		PortID: e.PORTID(), CntlID: e.CNTLID(), ASQSZ: e.ASQSZ(), EFlags: e.EFLAGS(),
		TrSvcID: e.TRSVCID(), SubNQN: e.SUBNQN(), TrAddr: e.TRADDR(),
		RDMAQPType: e.RDMAQPType(), RDMAPRType: e.RDMAPRType(), RDMACMS: e.RDMACMS(), RDMAPKey: e.RDMAPKey(),
	}
	if d.TrType == TrTypeTCP {
		// The TSAS is the transport's: SECTYPE for NVMe/TCP.
		d.TCPSecType = e.TCPSecType()
	}
	return d
}

// Encode zeroes e and writes d into it. The strings are NUL-padded; it
// returns an error if TrSvcID is longer than 31 bytes, or SubNQN or TrAddr
// longer than 255 (so every field stays NUL-terminated).
func (e *DiscoveryLogEntry) Encode(d DiscoveryEntry) error {
	if len(d.TrSvcID) >= TRSVCIDSize || len(d.SubNQN) >= NQNFieldSize || len(d.TrAddr) >= TRADDRSize {
		return fmt.Errorf("nvmeof: discovery entry: TRSVCID %d, SUBNQN %d or TRADDR %d bytes too long: %w",
			len(d.TrSvcID), len(d.SubNQN), len(d.TrAddr), ErrMalformed)
	}
	*e = DiscoveryLogEntry{}
	e.SetTRTYPE(d.TrType)
	e.SetADRFAM(d.AdrFam)
	e.SetSUBTYPE(d.SubType)
	e.SetTREQ(d.TReq)
	e.SetPORTID(d.PortID)
	e.SetCNTLID(d.CntlID)
	e.SetASQSZ(d.ASQSZ)
	e.SetEFLAGS(d.EFlags)
	e.SetTRSVCID(d.TrSvcID)
	e.SetSUBNQN(d.SubNQN)
	e.SetTRADDR(d.TrAddr)
	e.SetRDMAQPType(d.RDMAQPType)
	e.SetRDMAPRType(d.RDMAPRType)
	e.SetRDMACMS(d.RDMACMS)
	e.SetRDMAPKey(d.RDMAPKey)
	return nil
}

// DiscoveryLog is a decoded discovery log page.
type DiscoveryLog struct {
	GenCtr  uint64
	NumRec  uint64
	RecFmt  uint16
	Entries []DiscoveryEntry
}

// DiscoveryLogSize returns the size of a discovery log page with n entries.
func DiscoveryLogSize(n int) int { return DiscoveryLogHeaderSize + n*DiscoveryLogEntrySize }

// DiscoveryLogEntryOffset returns the log page offset (LPO) of entry i, for
// reading entries with separate Get Log Page commands.
func DiscoveryLogEntryOffset(i uint64) uint64 {
	return DiscoveryLogHeaderSize + i*DiscoveryLogEntrySize
}

// AppendDiscoveryLog appends a complete discovery log page (header with
// GENCTR genctr, NUMREC len(entries), RECFMT 0, then the entries) to dst. A
// controller serves reads of it with CopyLogPage.
func AppendDiscoveryLog(dst []byte, genctr uint64, entries []DiscoveryEntry) ([]byte, error) {
	start := len(dst)
	dst = append(dst, make([]byte, DiscoveryLogSize(len(entries)))...)
	h := (*DiscoveryLogHeader)(dst[start : start+DiscoveryLogHeaderSize])
	h.SetGENCTR(genctr)
	h.SetNUMREC(uint64(len(entries)))
	h.SetRECFMT(DiscoveryRecFmt)
	for i, d := range entries {
		o := start + DiscoveryLogHeaderSize + i*DiscoveryLogEntrySize
		if err := (*DiscoveryLogEntry)(dst[o : o+DiscoveryLogEntrySize]).Encode(d); err != nil {
			return dst[:start], fmt.Errorf("nvmeof: discovery log entry %d: %w", i, err)
		}
	}
	return dst, nil
}

// ParseDiscoveryLogHeader decodes GENCTR, NUMREC and RECFMT from the start
// of a discovery log page. b may be a partial read: it needs only the first
// 18 bytes (current libnvme reads 20 bytes at LPO 0, older versions 1024).
// A RECFMT other than 0 is an error: the entries could not be interpreted.
func ParseDiscoveryLogHeader(b []byte) (genctr, numrec uint64, err error) {
	if len(b) < DiscoveryHeaderMin {
		return 0, 0, truncated("discovery log header", len(b), DiscoveryHeaderMin)
	}
	if f := le.Uint16(b[16:]); f != DiscoveryRecFmt {
		return 0, 0, malformed("discovery log header", "RECFMT %d", f)
	}
	return le.Uint64(b), le.Uint64(b[8:]), nil
}

// ParseDiscoveryLogEntries decodes the entries in b, a read of the log at an
// entry boundary (LPO = DiscoveryLogEntryOffset(i)): len(b) must be a
// non-zero multiple of 1024. It appends them to dst.
func ParseDiscoveryLogEntries(b []byte, dst []DiscoveryEntry) ([]DiscoveryEntry, error) {
	if len(b) == 0 || len(b)%DiscoveryLogEntrySize != 0 {
		return dst, fmt.Errorf("nvmeof: discovery log entries: %d bytes is not a multiple of %d: %w",
			len(b), DiscoveryLogEntrySize, ErrTruncated)
	}
	for o := 0; o < len(b); o += DiscoveryLogEntrySize {
		dst = append(dst, (*DiscoveryLogEntry)(b[o:o+DiscoveryLogEntrySize]).Decode())
	}
	return dst, nil
}

// ParseDiscoveryLog decodes a whole discovery log page: the 1024-byte
// header and all NUMREC entries must be in b (bytes after them are ignored).
// Use ParseDiscoveryLogHeader and ParseDiscoveryLogEntries for logs read in
// pieces.
func ParseDiscoveryLog(b []byte) (DiscoveryLog, error) {
	var l DiscoveryLog
	if len(b) < DiscoveryLogHeaderSize {
		return l, truncated("discovery log", len(b), DiscoveryLogHeaderSize)
	}
	genctr, numrec, err := ParseDiscoveryLogHeader(b)
	if err != nil {
		return l, err
	}
	avail := uint64(len(b)-DiscoveryLogHeaderSize) / DiscoveryLogEntrySize
	if numrec > avail {
		need := DiscoveryLogSize(int(min(numrec, 1<<20)))
		return l, fmt.Errorf("nvmeof: discovery log: NUMREC %d needs %d bytes, have %d: %w", numrec, need, len(b), ErrTruncated)
	}
	l.GenCtr, l.NumRec, l.RecFmt = genctr, numrec, DiscoveryRecFmt
	if numrec == 0 {
		return l, nil
	}
	l.Entries, err = ParseDiscoveryLogEntries(b[DiscoveryLogHeaderSize:DiscoveryLogSize(int(numrec))], make([]DiscoveryEntry, 0, numrec))
	return l, err
}

// TRTYPE returns the transport type (TrType*).
func (e *DiscoveryLogEntry) TRTYPE() uint8 { return e[0] }

// SetTRTYPE sets TRTYPE.
func (e *DiscoveryLogEntry) SetTRTYPE(x uint8) { e[0] = x }

// ADRFAM returns the address family (AdrFam*).
func (e *DiscoveryLogEntry) ADRFAM() uint8 { return e[1] }

// SetADRFAM sets ADRFAM.
func (e *DiscoveryLogEntry) SetADRFAM(x uint8) { e[1] = x }

// SUBTYPE returns the subsystem type (SubType*).
func (e *DiscoveryLogEntry) SUBTYPE() uint8 { return e[2] }

// SetSUBTYPE sets SUBTYPE.
func (e *DiscoveryLogEntry) SetSUBTYPE(x uint8) { e[2] = x }

// TREQ returns the transport requirements (TREQ*).
func (e *DiscoveryLogEntry) TREQ() uint8 { return e[3] }

// SetTREQ sets TREQ.
func (e *DiscoveryLogEntry) SetTREQ(x uint8) { e[3] = x }

// PORTID returns the NVM subsystem port ID.
func (e *DiscoveryLogEntry) PORTID() uint16 { return le.Uint16(e[4:]) }

// SetPORTID sets PORTID.
func (e *DiscoveryLogEntry) SetPORTID(x uint16) { le.PutUint16(e[4:], x) }

// CNTLID returns the controller ID (0xFFFF: dynamic model).
func (e *DiscoveryLogEntry) CNTLID() uint16 { return le.Uint16(e[6:]) }

// SetCNTLID sets CNTLID.
func (e *DiscoveryLogEntry) SetCNTLID(x uint16) { le.PutUint16(e[6:], x) }

// ASQSZ returns the maximum admin submission queue size (32).
func (e *DiscoveryLogEntry) ASQSZ() uint16 { return le.Uint16(e[8:]) }

// SetASQSZ sets ASQSZ.
func (e *DiscoveryLogEntry) SetASQSZ(x uint16) { le.PutUint16(e[8:], x) }

// EFLAGS returns the entry flags (EFLAGS*).
func (e *DiscoveryLogEntry) EFLAGS() uint16 { return le.Uint16(e[10:]) }

// SetEFLAGS sets EFLAGS.
func (e *DiscoveryLogEntry) SetEFLAGS(x uint16) { le.PutUint16(e[10:], x) }

// TRSVCID returns the transport service identifier (the port, e.g. "4420"), up to the first NUL, trailing spaces removed.
func (e *DiscoveryLogEntry) TRSVCID() string { return paddedString(e[32:64]) }

// SetTRSVCID sets TRSVCID, NUL-padded and truncated to 31 bytes.
func (e *DiscoveryLogEntry) SetTRSVCID(s string) { putCString(e[32:64], s) }

// SUBNQN returns the subsystem NQN, up to the first NUL.
func (e *DiscoveryLogEntry) SUBNQN() string { return cString(e[256:512]) }

// SetSUBNQN sets SUBNQN, NUL-padded and truncated to 255 bytes.
func (e *DiscoveryLogEntry) SetSUBNQN(s string) { putCString(e[256:512], s) }

// TRADDR returns the transport address (an IP address string), up to the first NUL, trailing spaces removed.
func (e *DiscoveryLogEntry) TRADDR() string { return paddedString(e[512:768]) }

// SetTRADDR sets TRADDR, NUL-padded and truncated to 255 bytes.
func (e *DiscoveryLogEntry) SetTRADDR(s string) { putCString(e[512:768], s) }

// RDMAQPType returns the RDMA queue pair service type (RDMAQPType*).
func (e *DiscoveryLogEntry) RDMAQPType() uint8 { return e[768] }

// TCPSecType returns SECTYPE, the first TSAS byte of an NVMe/TCP entry
// (NVMe/TCP 1.0 §3.5, Figure 13; the byte RDMAQPType reads on RDMA).
func (e *DiscoveryLogEntry) TCPSecType() uint8 { return e[768] }

// SetRDMAQPType sets RDMAQPType.
func (e *DiscoveryLogEntry) SetRDMAQPType(x uint8) { e[768] = x }

// RDMAPRType returns the RDMA provider type (RDMAPRType*).
func (e *DiscoveryLogEntry) RDMAPRType() uint8 { return e[769] }

// SetRDMAPRType sets RDMAPRType.
func (e *DiscoveryLogEntry) SetRDMAPRType(x uint8) { e[769] = x }

// RDMACMS returns the RDMA connection management service (RDMACMS*).
func (e *DiscoveryLogEntry) RDMACMS() uint8 { return e[770] }

// SetRDMACMS sets RDMACMS.
func (e *DiscoveryLogEntry) SetRDMACMS(x uint8) { e[770] = x }

// RDMAPKey returns the RDMA partition key (0).
func (e *DiscoveryLogEntry) RDMAPKey() uint16 { return le.Uint16(e[776:]) }

// SetRDMAPKey sets RDMAPKey.
func (e *DiscoveryLogEntry) SetRDMAPKey(x uint16) { le.PutUint16(e[776:], x) }
