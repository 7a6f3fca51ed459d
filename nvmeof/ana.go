package nvmeof

import "fmt"

// ANAState is an asymmetric namespace access state (NVMe Base 2.0 §8.1.3;
// Linux enum nvme_ana_state).
type ANAState uint8

// ANA states.
const (
	ANAOptimized      ANAState = 0x01
	ANANonOptimized   ANAState = 0x02
	ANAInaccessible   ANAState = 0x03
	ANAPersistentLoss ANAState = 0x04
	ANAChange         ANAState = 0x0F
)

// String returns the state's name as nvme-cli prints it.
func (s ANAState) String() string {
	switch s {
	case ANAOptimized:
		return "optimized"
	case ANANonOptimized:
		return "non-optimized"
	case ANAInaccessible:
		return "inaccessible"
	case ANAPersistentLoss:
		return "persistent-loss"
	case ANAChange:
		return "change"
	}
	return fmt.Sprintf("invalid state %#x", uint8(s))
}

// Valid reports whether s is one of the defined states.
func (s ANAState) Valid() bool {
	switch s {
	case ANAOptimized, ANANonOptimized, ANAInaccessible, ANAPersistentLoss, ANAChange:
		return true
	}
	return false
}

// ANA log layout (NVMe Base 2.0 Figures 220..221; Linux struct
// nvme_ana_rsp_hdr and nvme_ana_group_desc).
const (
	ANALogHeaderSize = 16 // CHGCNT(8) NGRPS(2) reserved(6)
	ANAGroupDescSize = 32 // ANAGRPID(4) NNSIDS(4) CHGCNT(8) state(1) reserved(15), then NSIDs
	// ANALSPRGO is the Get Log Page LSP bit "Return Groups Only": the
	// descriptors carry no NSIDs (NNSIDS 0).
	ANALSPRGO = 1 << 0
)

// ANAGroup is one ANA group descriptor.
type ANAGroup struct {
	ID          uint32
	ChangeCount uint64
	State       ANAState
	NSIDs       []uint32
}

// ANALog is a decoded Asymmetric Namespace Access log page (LID 0x0C).
type ANALog struct {
	ChangeCount uint64
	Groups      []ANAGroup
}

// ANALogSize returns the encoded size of an ANA log with groups (with
// their NSIDs unless rgo).
func ANALogSize(groups []ANAGroup, rgo bool) int {
	n := ANALogHeaderSize + len(groups)*ANAGroupDescSize
	if !rgo {
		for _, g := range groups {
			n += 4 * len(g.NSIDs)
		}
	}
	return n
}

// AppendANALog appends the ANA log page for chgcnt and groups to dst
// (protocol.md §8.7 ties CMIC bit 3 to serving it). With rgo (LSP bit 0,
// Return Groups Only) the descriptors carry no NSIDs. It returns an error if
// there are more than 65535 groups.
func AppendANALog(dst []byte, chgcnt uint64, groups []ANAGroup, rgo bool) ([]byte, error) {
	if len(groups) > 0xFFFF {
		return dst, fmt.Errorf("nvmeof: ANA log: %d groups, at most 65535: %w", len(groups), ErrMalformed)
	}
	var h [ANALogHeaderSize]byte
	le.PutUint64(h[0:], chgcnt)
	le.PutUint16(h[8:], uint16(len(groups)))
	dst = append(dst, h[:]...)
	for _, g := range groups {
		var d [ANAGroupDescSize]byte
		le.PutUint32(d[0:], g.ID)
		if !rgo {
			le.PutUint32(d[4:], uint32(len(g.NSIDs)))
		}
		le.PutUint64(d[8:], g.ChangeCount)
		d[16] = uint8(g.State)
		dst = append(dst, d[:]...)
		if !rgo {
			for _, id := range g.NSIDs {
				dst = le.AppendUint32(dst, id)
			}
		}
	}
	return dst, nil
}

// ParseANALog decodes an ANA log page. b must hold the header, NGRPS group
// descriptors and their NSIDs; bytes after the last descriptor (the rest of
// a larger read buffer) are ignored. Group descriptors with an undefined
// state are errors.
func ParseANALog(b []byte) (ANALog, error) {
	var l ANALog
	if len(b) < ANALogHeaderSize {
		return l, truncated("ANA log header", len(b), ANALogHeaderSize)
	}
	l.ChangeCount = le.Uint64(b)
	ngrps := int(le.Uint16(b[8:]))
	off := ANALogHeaderSize
	// Each group needs at least a descriptor: bound the allocation by the input.
	if ngrps > (len(b)-off)/ANAGroupDescSize {
		return l, truncated("ANA log", len(b), off+ngrps*ANAGroupDescSize)
	}
	l.Groups = make([]ANAGroup, 0, ngrps)
	for i := 0; i < ngrps; i++ {
		if len(b)-off < ANAGroupDescSize {
			return l, truncated(fmt.Sprintf("ANA log group %d", i), len(b), off+ANAGroupDescSize)
		}
		d := b[off : off+ANAGroupDescSize]
		g := ANAGroup{ID: le.Uint32(d), ChangeCount: le.Uint64(d[8:]), State: ANAState(d[16])}
		nn := uint64(le.Uint32(d[4:]))
		off += ANAGroupDescSize
		if !g.State.Valid() {
			return l, malformed("ANA log", "group %d (ANAGRPID %d): state %#x", i, g.ID, d[16])
		}
		if nn > uint64(len(b)-off)/4 {
			return l, truncated(fmt.Sprintf("ANA log group %d NSIDs", i), len(b), off+int(min(nn, 1<<30))*4)
		}
		if nn > 0 {
			g.NSIDs = make([]uint32, nn)
			for j := range g.NSIDs {
				g.NSIDs[j] = le.Uint32(b[off:])
				off += 4
			}
		}
		l.Groups = append(l.Groups, g)
	}
	return l, nil
}
