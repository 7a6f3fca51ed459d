package iwarp

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/nvmetd/nvmetd/internal/perfcount"
	"github.com/nvmetd/nvmetd/iwarp/wire"
)

// STag layout (as siw): the upper 24 bits index the region, the low 8 bits
// are a key that the owner changes on re-registration, so a stale STag of a
// re-used region does not match.
const (
	stagKeyBits  = 8
	stagKeyMask  = 1<<stagKeyBits - 1
	maxSTagIndex = 1<<24 - 1
)

// PD is a protection domain: a namespace of memory regions. A QP may only
// touch regions of its own PD, locally and on the peer's behalf.
type PD struct {
	mu    perfcount.Mutex
	table atomic.Pointer[[]*MR] // slot → region; copy on write
	free  []uint32              // free slots
	// mask scrambles slot numbers into STag indices so that indices are
	// not guessable from registration order.
	mask uint32
}

// NewPD returns an empty protection domain.
func NewPD() *PD {
	pd := &PD{}
	var r [4]byte
	_, _ = rand.Read(r[:])
	pd.mask = binary.LittleEndian.Uint32(r[:]) & maxSTagIndex
	empty := make([]*MR, 0)
	pd.table.Store(&empty)
	return pd
}

// MR is a registered memory region: caller-owned memory that the engine
// places data into and sends from without copies, named on the wire by its
// STag. Its tagged offsets (TO) run from IOVA to IOVA+len(Buf).
type MR struct {
	pd   *PD
	slot uint32

	mu     perfcount.Mutex
	stag   uint32
	buf    []byte
	iova   uint64
	access Access
	valid  bool
	dereg  bool
}

// RegisterMemory registers buf with the given access rights. The region's
// TOs start at the address of buf, as libibverbs does (IOVA = address), so
// peers see the same kind of values as from Linux.
func (pd *PD) RegisterMemory(buf []byte, access Access) (*MR, error) {
	var iova uint64
	if len(buf) > 0 {
		iova = uint64(uintptr(unsafe.Pointer(&buf[0])))
	}
	return pd.RegisterMemoryAt(buf, iova, access)
}

// RegisterMemoryAt registers buf with the given access rights and tagged
// offsets starting at iova.
func (pd *PD) RegisterMemoryAt(buf []byte, iova uint64, access Access) (*MR, error) {
	if iova+uint64(len(buf)) < iova {
		return nil, fmt.Errorf("iwarp: register %d bytes at TO %#x: TO wraps", len(buf), iova)
	}
	mr := &MR{pd: pd, buf: buf, iova: iova, access: access, valid: true}
	var k [1]byte
	_, _ = rand.Read(k[:])
	pd.mu.Lock()
	defer pd.mu.Unlock()
	old := *pd.table.Load()
	if n := len(pd.free); n > 0 {
		mr.slot = pd.free[n-1]
		pd.free = pd.free[:n-1]
	} else {
		mr.slot = uint32(len(old))
		if pd.index(mr.slot) == 0 {
			// Index 0 would make STags that look like "no STag"; the
			// slot stays unused.
			mr.slot++
		}
		if mr.slot >= maxSTagIndex {
			return nil, fmt.Errorf("iwarp: register: %d regions, STag space exhausted", len(old))
		}
	}
	mr.stag = pd.index(mr.slot)<<stagKeyBits | uint32(k[0])
	tbl := make([]*MR, max(len(old), int(mr.slot)+1))
	copy(tbl, old)
	tbl[mr.slot] = mr
	pd.table.Store(&tbl)
	return mr, nil
}

// Regions is the number of memory regions registered in the PD.
func (pd *PD) Regions() int {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	n := 0
	for _, mr := range *pd.table.Load() {
		if mr != nil {
			n++
		}
	}
	return n
}

// index maps a table slot to the STag index it is known by on the wire (a
// bijection on 24 bits).
func (pd *PD) index(slot uint32) uint32 { return (slot + 1) ^ pd.mask }

// lookup finds the region named by an STag. The caller checks validity,
// rights and bounds with MR.check.
func (pd *PD) lookup(stag uint32) *MR {
	slot := (stag>>stagKeyBits ^ pd.mask) - 1 // inverse of index
	tbl := *pd.table.Load()
	if slot >= uint32(len(tbl)) {
		return nil
	}
	return tbl[slot]
}

// STag is the region's current STag.
func (mr *MR) STag() uint32 {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	return mr.stag
}

// Buf is the registered memory.
func (mr *MR) Buf() []byte {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	return mr.buf
}

// IOVA is the tagged offset of Buf()[0].
func (mr *MR) IOVA() uint64 {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	return mr.iova
}

// Access is the region's access rights.
func (mr *MR) Access() Access {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	return mr.access
}

// PD is the region's protection domain.
func (mr *MR) PD() *PD { return mr.pd }

// Valid reports whether the STag is usable (not invalidated).
func (mr *MR) Valid() bool {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	return mr.valid
}

// Invalidate invalidates the STag locally: further remote accesses with it
// fail until the region is re-registered.
func (mr *MR) Invalidate() {
	mr.mu.Lock()
	mr.valid = false
	mr.mu.Unlock()
}

// Reregister gives the region new memory, TOs, rights and key and makes it
// valid again, like a fast-register work request: the same index with a new
// key, so the previous STag no longer matches. key is the new low byte of the
// STag. It returns the new STag.
func (mr *MR) Reregister(buf []byte, iova uint64, access Access, key uint8) (uint32, error) {
	if iova+uint64(len(buf)) < iova {
		return 0, fmt.Errorf("iwarp: reregister %d bytes at TO %#x: TO wraps", len(buf), iova)
	}
	mr.mu.Lock()
	defer mr.mu.Unlock()
	if mr.dereg {
		return 0, ErrClosed
	}
	mr.stag = mr.stag&^stagKeyMask | uint32(key)
	mr.buf, mr.iova, mr.access, mr.valid = buf, iova, access, true
	return mr.stag, nil
}

// Deregister removes the region from its PD. Its STag stops working at once.
func (mr *MR) Deregister() error {
	mr.mu.Lock()
	if mr.dereg {
		mr.mu.Unlock()
		return ErrClosed
	}
	mr.dereg, mr.valid = true, false
	mr.mu.Unlock()
	pd := mr.pd
	pd.mu.Lock()
	defer pd.mu.Unlock()
	old := *pd.table.Load()
	tbl := make([]*MR, len(old))
	copy(tbl, old)
	tbl[mr.slot] = nil
	pd.table.Store(&tbl)
	pd.free = append(pd.free, mr.slot)
	return nil
}

// accessErr classifies a failed memory check (as siw's siw_access_state).
type accessErr uint8

const (
	accessOK accessErr = iota
	accessInvalidSTag
	accessBaseBounds
	accessPDMismatch
	accessRights
)

// region is a snapshot of an MR taken under its lock for one access.
type region struct {
	mr   *MR
	stag uint32
	buf  []byte
	iova uint64
}

// resolve checks an access of n bytes at TO to the region named by stag on
// behalf of a QP of pd, needing the given rights, and returns the target
// bytes.
func (pd *PD) resolve(stag uint32, to uint64, n uint64, need Access) ([]byte, region, accessErr) {
	mr := pd.lookup(stag)
	if mr == nil {
		return nil, region{}, accessInvalidSTag
	}
	mr.mu.Lock()
	r := region{mr: mr, stag: mr.stag, buf: mr.buf, iova: mr.iova}
	valid, acc := mr.valid, mr.access
	mr.mu.Unlock()
	switch {
	case r.stag != stag || !valid:
		return nil, r, accessInvalidSTag
	case mr.pd != pd:
		return nil, r, accessPDMismatch
	case acc&need != need:
		return nil, r, accessRights
	}
	b, ok := r.slice(to, n)
	if !ok {
		return nil, r, accessBaseBounds
	}
	return b, r, accessOK
}

// slice returns the n bytes at TO within the region snapshot.
func (r *region) slice(to, n uint64) ([]byte, bool) {
	if to < r.iova || to+n < to {
		return nil, false
	}
	off := to - r.iova
	if off > uint64(len(r.buf)) || n > uint64(len(r.buf))-off {
		return nil, false
	}
	return r.buf[off : off+n : off+n], true
}

// taggedCause maps a failed check of a tagged sink (RDMA Write, Read
// Response) to its DDP Terminate cause, as siw's siw_tagged_error: RFC 5041
// has no code for access rights, so those report an invalid STag.
func (e accessErr) taggedCause() wire.Cause {
	switch e {
	case accessBaseBounds:
		return wire.CauseDDPTaggedBaseBounds
	case accessPDMismatch:
		return wire.CauseDDPTaggedNotAssociated
	default:
		return wire.CauseDDPTaggedInvalidSTag
	}
}

// rdmapCause maps a failed check of a Read Request's source to its RDMAP
// remote protection cause, as siw's siw_rdmap_error.
func (e accessErr) rdmapCause() wire.Cause {
	switch e {
	case accessInvalidSTag:
		return wire.CauseRDMAPInvalidSTag
	case accessBaseBounds:
		return wire.CauseRDMAPBaseBounds
	case accessPDMismatch:
		return wire.CauseRDMAPSTagNotAssociated
	case accessRights:
		return wire.CauseRDMAPAccessRights
	}
	return wire.CauseRDMAPProtUnspecified
}

func (e accessErr) String() string {
	return [...]string{"ok", "invalid STag", "base or bounds violation", "STag of another PD", "access rights violation"}[e]
}
