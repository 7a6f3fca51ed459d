package backend

import (
	"errors"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/nvmetd/nvmetd/internal/perfcount"
	"golang.org/x/sys/unix"
)

// fdio is the data path shared by the file and block backends: positioned
// reads and writes on one descriptor, FUA, flush, the aligned bounce path
// for O_DIRECT, and a guard that keeps Close from reusing a descriptor
// number under a call in progress.
type fdio struct {
	kind Kind
	path string

	// mu is read-held by every call that uses fd and write-held by close,
	// so fd is never closed (and its number never reused by another open)
	// while a call is using it.
	mu     perfcount.RWMutex
	closed bool
	fd     int

	ro     bool
	direct bool
	align  uintptr // buffer alignment that O_DIRECT needs; 1 without O_DIRECT

	// noRWF is set once pwritev2(RWF_DSYNC) has failed as unsupported; FUA
	// writes then go to dsyncFD, the same file reopened O_DSYNC.
	noRWF   atomic.Bool
	dsyncMu perfcount.Mutex
	dsyncFD atomic.Int64 // -1 until opened

	// noNowait[write] is set once RWF_NOWAIT has failed as unsupported for
	// reads or writes (ext4 on Linux 6.18 takes NOWAIT reads but refuses
	// buffered NOWAIT writes): no more tries of that kind.
	noNowait     [2]atomic.Bool
	nowaitDone   atomic.Uint64
	nowaitMissed atomic.Uint64

	bounceReads   atomic.Uint64
	bounceWrites  atomic.Uint64
	zeroFallbacks atomic.Uint64
}

func newFDIO(kind Kind, path string, fd int, ro, direct bool, align uintptr) *fdio {
	f := &fdio{kind: kind, path: path, fd: fd, ro: ro, direct: direct, align: max(align, 1)}
	f.dsyncFD.Store(-1)
	return f
}

// acquire read-locks the descriptor for one call; release undoes it.
func (f *fdio) acquire() error {
	f.mu.RLock()
	if f.closed {
		f.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

func (f *fdio) release() { f.mu.RUnlock() }

// acquireWrite is acquire for calls that modify data.
func (f *fdio) acquireWrite() error {
	if err := f.acquire(); err != nil {
		return err
	}
	if f.ro {
		f.release()
		return ErrReadOnly
	}
	return nil
}

func (f *fdio) ioErr(op Op, off, length int64, err error) error {
	return &IOError{Kind: f.kind, Path: f.path, Op: op, Off: off, Len: length, Err: err}
}

func (f *fdio) misaligned(p []byte) bool {
	return uintptr(unsafe.Pointer(unsafe.SliceData(p)))&(f.align-1) != 0
}

// readAt implements Backend.ReadAt after the range check.
func (f *fdio) readAt(p []byte, off int64) error {
	if err := f.acquire(); err != nil {
		return err
	}
	defer f.release()
	if len(p) == 0 {
		return nil
	}
	var err error
	if f.misaligned(p) {
		err = f.bounceRead(p, off)
	} else {
		err = preadFull(f.fd, p, off)
	}
	if err != nil {
		return f.ioErr(OpRead, off, int64(len(p)), err)
	}
	return nil
}

// writeAt implements Backend.WriteAt after the range check.
func (f *fdio) writeAt(p []byte, off int64, fua bool) error {
	if err := f.acquireWrite(); err != nil {
		return err
	}
	defer f.release()
	if len(p) == 0 {
		return nil
	}
	var err error
	if f.misaligned(p) {
		err = f.bounceWrite(p, off, fua)
	} else {
		err = f.pwrite(p, off, fua)
	}
	if err != nil {
		return f.ioErr(OpWrite, off, int64(len(p)), err)
	}
	return nil
}

// flush implements Backend.Flush.
func (f *fdio) flush() error {
	if err := f.acquire(); err != nil {
		return err
	}
	defer f.release()
	if f.ro {
		return nil
	}
	if err := ignoringEINTR(func() error { return unix.Fdatasync(f.fd) }); err != nil {
		return f.ioErr(OpFlush, 0, 0, err)
	}
	return nil
}

// pwrite writes all of p at off, durably if fua. The caller holds the
// guard.
func (f *fdio) pwrite(p []byte, off int64, fua bool) error {
	if !fua {
		return pwriteFull(f.fd, p, off)
	}
	if !f.noRWF.Load() {
		err := pwritev2Full(f.fd, p, off, unix.RWF_DSYNC)
		if err == nil || !unsupported(err) {
			return err
		}
		// Kernels before 4.7 (or file systems refusing the flag) fail
		// before writing anything; use an O_DSYNC descriptor from now on.
		f.noRWF.Store(true)
	}
	fd, err := f.openDsync()
	if err != nil {
		return err
	}
	return pwriteFull(fd, p, off)
}

// openDsync returns a descriptor of the same open file with O_DSYNC set,
// opening it on first use through /proc/self/fd so that it names the same
// inode even if the path was renamed.
func (f *fdio) openDsync() (int, error) {
	if fd := f.dsyncFD.Load(); fd >= 0 {
		return int(fd), nil
	}
	f.dsyncMu.Lock()
	defer f.dsyncMu.Unlock()
	if fd := f.dsyncFD.Load(); fd >= 0 {
		return int(fd), nil
	}
	flags := unix.O_WRONLY | unix.O_DSYNC | unix.O_CLOEXEC
	if f.direct {
		flags |= unix.O_DIRECT
	}
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(f.fd), flags, 0)
	if err != nil {
		return -1, err
	}
	f.dsyncFD.Store(int64(fd))
	return fd, nil
}

// bounceSize is the size of the aligned buffers that carry I/O for
// misaligned caller buffers; larger requests go through in pieces.
const bounceSize = 256 << 10

var bouncePool = sync.Pool{New: func() any {
	b := alignedBuffer(bounceSize, pageSize)
	return &b
}}

const pageSize = 4096

// alignedBuffer returns n bytes whose address is a multiple of align (a
// power of two). Go heap memory does not move, so it is usable for
// O_DIRECT.
func alignedBuffer(n, align int) []byte {
	b := make([]byte, n+align)
	skip := int(-uintptr(unsafe.Pointer(unsafe.SliceData(b))) & uintptr(align-1))
	return b[skip : skip+n : skip+n]
}

func (f *fdio) bounceRead(p []byte, off int64) error {
	f.bounceReads.Add(1)
	bp := bouncePool.Get().(*[]byte)
	defer bouncePool.Put(bp)
	for b := *bp; len(p) > 0; {
		n := min(len(p), len(b))
		if err := preadFull(f.fd, b[:n], off); err != nil {
			return err
		}
		copy(p, b[:n])
		p, off = p[n:], off+int64(n)
	}
	return nil
}

func (f *fdio) bounceWrite(p []byte, off int64, fua bool) error {
	f.bounceWrites.Add(1)
	bp := bouncePool.Get().(*[]byte)
	defer bouncePool.Put(bp)
	for b := *bp; len(p) > 0; {
		n := copy(b, p)
		if err := f.pwrite(b[:n], off, fua); err != nil {
			return err
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

// zeroBuffer is a page-aligned buffer of zeroes, only ever written from.
var zeroBuffer = sync.OnceValue(func() []byte { return alignedBuffer(1<<20, pageSize) })

// writeZeroBuffers zeroes a range by writing zero-filled buffers, the last
// resort of WriteZeroes. The caller holds the guard.
func (f *fdio) writeZeroBuffers(off, length int64) error {
	f.zeroFallbacks.Add(1)
	z := zeroBuffer()
	for length > 0 {
		n := min(length, int64(len(z)))
		if err := pwriteFull(f.fd, z[:n], off); err != nil {
			return err
		}
		off, length = off+n, length-n
	}
	return nil
}

func (f *fdio) stats() Stats {
	return Stats{
		BounceReads:   f.bounceReads.Load(),
		BounceWrites:  f.bounceWrites.Load(),
		ZeroFallbacks: f.zeroFallbacks.Load(),
		NowaitDone:    f.nowaitDone.Load(),
		NowaitMissed:  f.nowaitMissed.Load(),
	}
}

// close waits for calls in progress and closes the descriptors.
func (f *fdio) close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	if fd := f.dsyncFD.Load(); fd >= 0 {
		unix.Close(int(fd))
	}
	if err := unix.Close(f.fd); err != nil {
		return &IOError{Kind: f.kind, Path: f.path, Op: OpClose, Err: err}
	}
	return nil
}

// preadFull reads len(p) bytes at off. Reaching the end of the file early
// is io.ErrUnexpectedEOF (the file shrank under us).
func preadFull(fd int, p []byte, off int64) error {
	return full(p, off, io.ErrUnexpectedEOF, func(b []byte, o int64) (int, error) { return unix.Pread(fd, b, o) })
}

// pwriteFull writes all of p at off.
func pwriteFull(fd int, p []byte, off int64) error {
	return full(p, off, io.ErrShortWrite, func(b []byte, o int64) (int, error) { return unix.Pwrite(fd, b, o) })
}

// pwritev2Full writes all of p at off with pwritev2 flags.
func pwritev2Full(fd int, p []byte, off int64, flags int) error {
	return full(p, off, io.ErrShortWrite, func(b []byte, o int64) (int, error) { return unix.Pwritev2(fd, [][]byte{b}, o, flags) })
}

// full repeats one positioned read or write until all of p is done: a
// short count goes on where it stopped, EINTR retries, and a call that
// moves nothing fails with short. op does not escape: nothing is
// allocated.
func full(p []byte, off int64, short error, op func([]byte, int64) (int, error)) error {
	for len(p) > 0 {
		n, err := op(p, off)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return err
		case n == 0:
			return short
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

// unsupported reports errors meaning "this kernel, file system or device
// cannot do that operation", as opposed to a failure doing it.
func unsupported(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.ENOTTY)
}

func ignoringEINTR(fn func() error) error {
	for {
		if err := fn(); err != unix.EINTR {
			return err
		}
	}
}

// ioctlPtr issues an ioctl whose argument is a pointer.
func ioctlPtr(fd int, req uint, arg unsafe.Pointer) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg))
	if e != 0 {
		return e
	}
	return nil
}

// dioAlign returns the memory and file-offset alignment O_DIRECT needs on
// fd, from statx(STATX_DIOALIGN) (Linux 6.1+). ok is false if the kernel
// does not say; offset 0 means the file does not support O_DIRECT.
func dioAlign(fd int) (mem, offset uint32, ok bool) {
	var st unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_DIOALIGN, &st); err != nil {
		return 0, 0, false
	}
	if st.Mask&unix.STATX_DIOALIGN == 0 {
		return 0, 0, false
	}
	return st.Dio_mem_align, st.Dio_offset_align, true
}
