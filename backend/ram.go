package backend

import "sync/atomic"

// ram is what the backends without storage (memory, null) share: their
// geometry, the read-only and closed flags, and the checks and methods that
// need nothing else.
type ram struct {
	size   int64
	bs     uint32
	ro     bool
	closed atomic.Bool
}

// init checks and sets the geometry (BlockSize 0 means 512).
func (r *ram) init(size int64, blockSize uint32, ro bool) error {
	if err := checkBlockSize(blockSize); err != nil {
		return err
	}
	if blockSize == 0 {
		blockSize = 512
	}
	if err := checkSize(size, blockSize, true); err != nil {
		return err
	}
	r.size, r.bs, r.ro = size, blockSize, ro
	return nil
}

// checkRead checks a read of length bytes at off.
func (r *ram) checkRead(off, length int64) error {
	if r.closed.Load() {
		return ErrClosed
	}
	return CheckRange(OpRead, off, length, r.size, r.bs)
}

// check checks an operation that changes data.
func (r *ram) check(op Op, off, length int64) error {
	if r.closed.Load() {
		return ErrClosed
	}
	if r.ro {
		return ErrReadOnly
	}
	return CheckRange(op, off, length, r.size, r.bs)
}

// Flush does nothing: RAM has no stable media to flush to. See [Backend].
func (r *ram) Flush() error {
	if r.closed.Load() {
		return ErrClosed
	}
	return nil
}

// Size returns the capacity in bytes.
func (r *ram) Size() int64 { return r.size }

// BlockSize returns the logical block size.
func (r *ram) BlockSize() uint32 { return r.bs }
