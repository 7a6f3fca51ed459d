package backend

import (
	"io"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// tryRW tries a positioned read (write false) or write of all of p at off
// with RWF_NOWAIT, on a buffered descriptor only: O_DIRECT I/O waits for
// the device whatever the flag says. It reports done false, having
// reported nothing, when the transfer would have had to wait.
func (f *fdio) tryRW(p []byte, off int64, write bool) (bool, error) {
	kind := 0
	if write {
		kind = 1
	}
	if f.direct || f.noNowait[kind].Load() || f.misaligned(p) {
		return false, nil
	}
	var err error
	if write {
		err = f.acquireWrite()
	} else {
		err = f.acquire()
	}
	if err != nil {
		return true, err
	}
	defer f.release()
	nr := uintptr(unix.SYS_PREADV2)
	op := OpRead
	if write {
		nr, op = unix.SYS_PWRITEV2, OpWrite
	}
	for q, o := p, off; len(q) > 0; {
		iov := unix.Iovec{Base: &q[0]}
		iov.SetLen(len(q))
		// RawSyscall6: RWF_NOWAIT makes the call return EAGAIN rather
		// than sleep, so the runtime's entersyscall (which wakes an idle
		// sysmon: iwarp/rawsys.go) buys nothing here; the queue's receive loop,
		// which issues these, keeps sysmon awake while the queue is busy.
		n, _, e := syscall.RawSyscall6(nr, uintptr(f.fd), uintptr(unsafe.Pointer(&iov)), 1, uintptr(o), 0, unix.RWF_NOWAIT)
		switch {
		case e == unix.EINTR:
			continue
		case e == unix.EAGAIN:
			f.nowaitMissed.Add(1)
			return false, nil
		case e == unix.EOPNOTSUPP || e == unix.ENOSYS || e == unix.EINVAL:
			// No RWF_NOWAIT for this kind of transfer here (EINVAL: a
			// kernel that does not know the flag): never again on this
			// file.
			f.noNowait[kind].Store(true)
			return false, nil
		case e != 0:
			f.nowaitDone.Add(1)
			return true, f.ioErr(op, off, int64(len(p)), e)
		case n == 0 && !write:
			f.nowaitDone.Add(1)
			return true, f.ioErr(op, off, int64(len(p)), io.ErrUnexpectedEOF)
		case n == 0:
			return false, nil
		}
		q, o = q[n:], o+int64(n)
	}
	f.nowaitDone.Add(1)
	return true, nil
}

// TryReadAt reads p at off if the page cache has it. See [NowaitIO].
func (f *File) TryReadAt(p []byte, off int64) (bool, error) {
	if err := CheckRange(OpRead, off, int64(len(p)), f.size, f.bs); err != nil {
		return true, err
	}
	if len(p) == 0 {
		return true, nil
	}
	return f.io.tryRW(p, off, false)
}

// TryWriteAt writes p at off into the page cache if it can do so without
// waiting; never with fua. See [NowaitIO].
func (f *File) TryWriteAt(p []byte, off int64, fua bool) (bool, error) {
	if fua {
		return false, nil
	}
	if err := CheckRange(OpWrite, off, int64(len(p)), f.size, f.bs); err != nil {
		return true, err
	}
	if len(p) == 0 {
		return true, nil
	}
	return f.io.tryRW(p, off, true)
}

var _ NowaitIO = (*File)(nil)
