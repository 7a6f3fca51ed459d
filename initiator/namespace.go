package initiator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/nvmetd/nvmetd/internal/perfcount"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// Op is the operation of a Request.
type Op uint8

// Operations.
const (
	OpRead        Op = iota // Read into Data
	OpWrite                 // Write from Data
	OpFlush                 // Flush the volatile write cache
	OpWriteZeroes           // Write Zeroes over Length bytes
	OpDiscard               // Dataset Management, deallocate Length bytes
)

// String names the operation.
func (o Op) String() string {
	switch o {
	case OpRead:
		return "read"
	case OpWrite:
		return "write"
	case OpFlush:
		return "flush"
	case OpWriteZeroes:
		return "write-zeroes"
	case OpDiscard:
		return "discard"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Request is an asynchronous I/O on a namespace (Namespace.Submit). Reuse
// it: nothing in it is allocated per submission. It must not be changed
// between Submit and Done.
type Request struct {
	// Op is the operation.
	Op Op
	// Offset is the byte offset in the namespace, a multiple of the block
	// size.
	Offset int64
	// Data is the buffer of a read or write, a multiple of the block size,
	// used in place: read data lands in it, write data is taken from it.
	Data []byte
	// Length is the number of bytes of a Write Zeroes or Discard.
	Length int64
	// FUA asks a write to reach non-volatile media before it completes.
	FUA bool
	// Done is called once when the whole request has completed, on a
	// goroutine of the initiator: it must not block (it may Submit).
	Done func(*Request)
	// Err is the result (valid in Done): nil, an *IOError (wrapping the
	// nvmeof.Status), or the reason the request could not be sent
	// (ErrControllerLost, ErrControllerClosed, a canceled context).
	Err error
	// PathFailed, if set, is called for a request submitted through a
	// Head each time its commands on path p ended with a path error
	// (err) and the head sends it again (nvme_failover_req): the host
	// gave it up on p. A transport error (the path went down, the keep
	// alive timed out) leaves its fate on p unknown: p's target may still
	// execute it. On a goroutine of the initiator: it must not block.
	PathFailed func(r *Request, p *Path, err error)

	mu      perfcount.Mutex
	err     error
	pending atomic.Int32

	// Multipath (Head.Submit): failover makes a path error come back to
	// the head instead of being retried on the same controller
	// (REQ_NVME_MPATH); the head saves the caller's Done and the path.
	failover bool
	mpDone   func(*Request)
	mpHead   *Head
	mpPath   *Path
	lastPath *Path
}

// Path returns the path whose completion ended a request submitted
// through a Head (valid in Done; nil for a Namespace's request).
func (r *Request) Path() *Path { return r.lastPath }

// chunkDone records the result of one command of r; the last one calls
// Done.
func (r *Request) chunkDone(err error) {
	if err != nil {
		r.mu.Lock()
		if r.err == nil {
			r.err = err
		}
		r.mu.Unlock()
	}
	if r.pending.Add(-1) == 0 {
		// Every other chunk wrote r.err before its own Add: the last Add
		// sees those writes without the lock (sync/atomic is sequentially
		// consistent).
		r.Err = r.err
		r.Done(r)
	}
}

// Namespace is an active namespace of a controller. Its methods are safe
// for concurrent use.
type Namespace struct {
	c        *Controller
	nsid     uint32
	bs       int   // logical block size
	lbaShift uint8 // log2(bs)
	size     atomic.Int64
	gone     atomic.Bool
	readOnly atomic.Bool

	mu  perfcount.Mutex
	ids nvmeof.NSIdentifiers
	id  nvmeof.IdentifyNamespace

	pool sync.Pool // *syncReq
}

// NSID returns the namespace identifier.
func (ns *Namespace) NSID() uint32 { return ns.nsid }

// Controller returns the namespace's controller.
func (ns *Namespace) Controller() *Controller { return ns.c }

// Size returns the namespace size in bytes (NSZE × block size).
func (ns *Namespace) Size() int64 { return ns.size.Load() }

// BlockSize returns the logical block size in bytes.
func (ns *Namespace) BlockSize() int { return ns.bs }

// Blocks returns the namespace size in logical blocks (NSZE).
func (ns *Namespace) Blocks() uint64 { return uint64(ns.size.Load()) >> ns.lbaShift }

// ReadOnly reports whether the namespace is write protected (NSATTR bit 0).
func (ns *Namespace) ReadOnly() bool { return ns.readOnly.Load() }

// Gone reports whether a rescan found the namespace no longer active.
func (ns *Namespace) Gone() bool { return ns.gone.Load() }

// Identifiers returns the namespace's identifiers (EUI-64, NGUID, UUID).
func (ns *Namespace) Identifiers() nvmeof.NSIdentifiers {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return ns.ids
}

// IdentifyNamespace returns a copy of the namespace's Identify Namespace
// data.
func (ns *Namespace) IdentifyNamespace() *nvmeof.IdentifyNamespace {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	id := ns.id
	return &id
}

// Submit starts r. It waits while every command slot is taken (or until
// ctx ends). If it returns an error, nothing was started and Done will not
// be called; otherwise Done is called exactly once, possibly before Submit
// returns.
func (ns *Namespace) Submit(ctx context.Context, r *Request) error {
	if ctx == nil {
		ctx = context.Background()
	}
	return ns.submit(ctx, r, false)
}

// TrySubmit starts r like Submit, but only if a command slot is free now:
// it never waits, so a Done function may call it. r must fit in one
// command (a read or write of at most MaxTransferSize bytes, or a flush).
// It returns ErrNoSlot (and starts nothing) when no slot is free.
func (ns *Namespace) TrySubmit(r *Request) error {
	if (r.Op == OpRead || r.Op == OpWrite) && len(r.Data) > int(ns.c.maxXfer.Load()) ||
		r.Op != OpRead && r.Op != OpWrite && r.Op != OpFlush {
		return errors.New("initiator: TrySubmit of a request that needs more than one command")
	}
	return ns.submit(nil, r, false)
}

// ErrNoSlot is returned by TrySubmit when no command slot is free.
var ErrNoSlot = errors.New("initiator: no free command slot")

func (ns *Namespace) submit(ctx context.Context, r *Request, internal bool) error {
	if r.Done == nil {
		return errors.New("initiator: request without Done")
	}
	c := ns.c
	if err := c.ioErr(); err != nil && !(internal && errors.Is(err, ErrControllerClosed)) {
		return err
	}
	if ns.gone.Load() {
		return ErrNamespaceGone
	}
	var length int64
	switch r.Op {
	case OpRead, OpWrite:
		length = int64(len(r.Data))
	case OpWriteZeroes, OpDiscard:
		length = r.Length
	case OpFlush:
	default:
		return fmt.Errorf("initiator: unknown operation %v", r.Op)
	}
	bs := int64(ns.bs)
	if r.Offset%bs != 0 || length%bs != 0 || length < 0 {
		return &AlignmentError{Offset: r.Offset, Length: length, BlockSize: ns.bs}
	}
	if size := ns.size.Load(); r.Offset < 0 || r.Offset+length > size {
		return &RangeError{Offset: r.Offset, Length: length, Size: size}
	}
	if r.Op == OpWrite && ns.readOnly.Load() {
		return &IOError{Op: "write", NSID: ns.nsid, Err: nvmeof.StatusNamespaceWriteProtected}
	}
	r.err = nil
	r.Err = nil
	if length == 0 && r.Op != OpFlush {
		r.pending.Store(1)
		r.chunkDone(nil)
		return nil
	}
	var chunk int64
	switch r.Op {
	case OpRead, OpWrite:
		chunk = min(c.maxXfer.Load(), nvmeof.MaxBlocksPerCommand<<ns.lbaShift)
	case OpWriteZeroes:
		chunk = nvmeof.MaxBlocksPerCommand << ns.lbaShift
	case OpDiscard:
		chunk = 0xFFFFFFFF << ns.lbaShift
	}
	chunk &^= bs - 1
	var done <-chan struct{}
	if ctx != nil {
		done = ctx.Done()
	}
	r.pending.Store(1) // held until every command is out
	started := false
	for off := int64(0); off < length || (r.Op == OpFlush && !started); {
		n := min(length-off, chunk)
		var m *cmd
		if ctx == nil {
			if m = c.tryGetCmd(); m == nil {
				if !started {
					return ErrNoSlot
				}
				r.chunkDone(ErrNoSlot)
				return nil
			}
		} else {
			var err error
			if m, err = c.getCmd(done); err != nil {
				if errors.Is(err, errCanceled) {
					err = ctx.Err()
				}
				if !started {
					return err
				}
				r.chunkDone(err)
				return nil
			}
		}
		started = true
		r.pending.Add(1)
		m.req = r
		ns.build(m, r, r.Offset+off, n)
		c.submit(m)
		off += n
	}
	r.chunkDone(nil)
	return nil
}

// build fills m's command for bytes [off, off+n) of r.
func (ns *Namespace) build(m *cmd, r *Request, off, n int64) {
	s := &m.hr.SQE
	slba := uint64(off) >> ns.lbaShift
	blocks := uint32(n >> ns.lbaShift)
	m.hr.Data = nil
	m.hr.Write = false
	switch r.Op {
	case OpRead:
		s.BuildRead(ns.nsid, slba, blocks)
		m.hr.Data = r.Data[off-r.Offset : off-r.Offset+n]
	case OpWrite:
		s.BuildWrite(ns.nsid, slba, blocks).SetFUA(r.FUA)
		m.hr.Data = r.Data[off-r.Offset : off-r.Offset+n]
		m.hr.Write = true
	case OpFlush:
		s.BuildFlush(ns.nsid)
	case OpWriteZeroes:
		s.BuildWriteZeroes(ns.nsid, slba, blocks).SetFUA(r.FUA)
	case OpDiscard:
		s.BuildDSM(ns.nsid, 1, nvmeof.DSMAD)
		m.dsm = nvmeof.DSMRange{}
		m.dsm.SetSLBA(slba)
		m.dsm.SetNLB(blocks)
		m.hr.Data = m.dsm[:]
		m.hr.Write = true
	}
}

// syncReq is a Request with a completion signal, for the blocking methods.
type syncReq struct {
	Request
	ch chan struct{}
}

func (s *syncReq) signal(*Request) { s.ch <- struct{}{} }

func (ns *Namespace) getSync() *syncReq {
	if v := ns.pool.Get(); v != nil {
		return v.(*syncReq)
	}
	s := &syncReq{ch: make(chan struct{}, 1)}
	s.Done = s.signal
	return s
}

// do runs a request and waits for it.
func (ns *Namespace) do(ctx context.Context, op Op, off int64, p []byte, length int64, internal bool) error {
	if ctx == nil {
		ctx = context.Background()
	}
	s := ns.getSync()
	s.Op, s.Offset, s.Data, s.Length, s.FUA = op, off, p, length, false
	err := ns.submit(ctx, &s.Request, internal)
	if err == nil {
		<-s.ch
		err = s.Err
	}
	s.Data = nil
	s.Err = nil
	ns.pool.Put(s)
	return err
}

// ReadAt reads len(p) bytes at byte offset off (io.ReaderAt). off and
// len(p) must be multiples of the block size. A read reaching past the end
// of the namespace reads what there is and returns io.EOF.
func (ns *Namespace) ReadAt(p []byte, off int64) (int, error) {
	return ns.ReadAtContext(context.Background(), p, off)
}

// ReadAtContext is ReadAt with a context that bounds the wait for command
// slots.
func (ns *Namespace) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	size := ns.size.Load()
	if off >= size && off >= 0 {
		return 0, io.EOF
	}
	var eof error
	if off >= 0 && off+int64(len(p)) > size {
		p, eof = p[:size-off], io.EOF
	}
	if err := ns.do(ctx, OpRead, off, p, 0, false); err != nil {
		return 0, err
	}
	return len(p), eof
}

// WriteAt writes p at byte offset off (io.WriterAt). off and len(p) must be
// multiples of the block size and the write must end within the namespace.
func (ns *Namespace) WriteAt(p []byte, off int64) (int, error) {
	return ns.WriteAtContext(context.Background(), p, off)
}

// WriteAtContext is WriteAt with a context that bounds the wait for
// command slots.
func (ns *Namespace) WriteAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if err := ns.do(ctx, OpWrite, off, p, 0, false); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush commits the controller's volatile write cache to non-volatile
// media (NVMe Flush).
func (ns *Namespace) Flush(ctx context.Context) error {
	return ns.do(ctx, OpFlush, 0, nil, 0, false)
}

// flushClosing is the Flush that Close sends after refusing new I/O.
func (ns *Namespace) flushClosing(ctx context.Context) error {
	return ns.do(ctx, OpFlush, 0, nil, 0, true)
}

// WriteZeroes zeroes n bytes at byte offset off (NVMe Write Zeroes).
func (ns *Namespace) WriteZeroes(ctx context.Context, off, n int64) error {
	return ns.do(ctx, OpWriteZeroes, off, nil, n, false)
}

// Discard deallocates n bytes at byte offset off (NVMe Dataset Management
// with the Deallocate attribute), like blkdiscard.
func (ns *Namespace) Discard(ctx context.Context, off, n int64) error {
	return ns.do(ctx, OpDiscard, off, nil, n, false)
}
