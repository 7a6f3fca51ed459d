package backend

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// FileOptions configures [OpenFile]. See [Config] for the meaning of each
// field.
type FileOptions struct {
	// Size in bytes: 0 uses the existing file's size; otherwise a missing
	// file is created sparse at Size, a smaller file is grown sparse to
	// Size (unless ReadOnly), and a larger file is refused: OpenFile never
	// shrinks a file.
	Size       int64
	BlockSize  uint32 // 512 (default when 0) or 4096
	ReadOnly   bool   // open O_RDONLY; never creates or grows
	Direct     bool   // O_DIRECT; fails if the file system does not support it
	CreateDirs bool   // create missing parent directories, mode 0700
	MustExist  bool   // do not create a missing file
	NoLock     bool   // skip the flock (exclusive, or shared when ReadOnly)
}

// File is a backend on a regular file.
//
// Reads and writes are pread and pwrite on the caller's buffer; FUA writes
// use pwritev2 with RWF_DSYNC (or, where the kernel refuses that, an
// O_DSYNC descriptor); Flush is fdatasync. WriteZeroes uses
// fallocate(FALLOC_FL_ZERO_RANGE), or with deallocate
// FALLOC_FL_PUNCH_HOLE; if the file system refuses one it tries the other
// (a punched hole is re-allocated when deallocation was not asked for),
// then writes zeroes. Discard punches a hole, so discarded ranges read as
// zeroes; on file systems without hole punching Discard returns
// ErrNotSupported.
//
// Unless NoLock is set, the file is flock'ed (exclusively, or shared when
// read-only) for as long as it is open, so two nvmetd processes cannot
// export one file read-write; the lock is advisory and does not stop other
// programs.
type File struct {
	io   *fdio
	size int64
	bs   uint32
	info Info

	noPunch     atomic.Bool // FALLOC_FL_PUNCH_HOLE refused
	noZeroRange atomic.Bool // FALLOC_FL_ZERO_RANGE refused

	// deferredLock is set when Open deferred the flock (Config.DeferClaim).
	deferredLock bool
}

var _ Backend = (*File)(nil)

// OpenFile opens (and if needed creates) the file at path as a backend.
func OpenFile(path string, opts FileOptions) (_ *File, err error) {
	if path == "" {
		return nil, cfgErr("path", "required for kind file")
	}
	if err := checkBlockSize(opts.BlockSize); err != nil {
		return nil, err
	}
	bs := opts.BlockSize
	if bs == 0 {
		bs = 512
	}
	if err := checkSize(opts.Size, bs, false); err != nil {
		return nil, err
	}
	if opts.MustExist && opts.CreateDirs {
		return nil, cfgErr("create_dirs", "contradicts must_exist")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("backend file %s: %w", path, err)
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("backend file %s: "+format, append([]any{abs}, args...)...)
	}

	flags := unix.O_CLOEXEC | unix.O_RDWR
	if opts.ReadOnly {
		flags = unix.O_CLOEXEC | unix.O_RDONLY
	}
	if opts.Direct {
		flags |= unix.O_DIRECT
	}
	created := false
	fd, err := unix.Open(abs, flags, 0)
	if err == unix.ENOENT && !opts.ReadOnly && !opts.MustExist {
		if opts.Size == 0 {
			return nil, fail("does not exist, and no size is configured to create it: %w", fs.ErrNotExist)
		}
		if opts.CreateDirs {
			if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
				return nil, fail("create parent directories: %w", err)
			}
		}
		fd, err = unix.Open(abs, flags|unix.O_CREAT|unix.O_EXCL, 0o600)
		created = err == nil
		if err == unix.EEXIST { // created by someone else meanwhile
			fd, err = unix.Open(abs, flags, 0)
		}
	}
	if err != nil {
		if opts.Direct && err == unix.EINVAL {
			return nil, fail("open: the file system does not support direct I/O (O_DIRECT): %w", err)
		}
		return nil, fail("open: %w", err)
	}
	defer func() {
		if err != nil {
			unix.Close(fd)
			if created {
				os.Remove(abs)
			}
		}
	}()

	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fail("stat: %w", err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFBLK:
		return nil, fail("is a block device; use kind block")
	default:
		return nil, fail("not a regular file")
	}
	// No access-time updates: a namespace's reads are not accesses of
	// the file that anyone looks at, and with relatime the first read
	// after a write would dirty the inode (a journal transaction). Only
	// the owner or CAP_FOWNER may set O_NOATIME; anyone else keeps atime.
	if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err == nil {
		_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl|unix.O_NOATIME)
	}

	if !opts.NoLock {
		how := unix.LOCK_EX
		if opts.ReadOnly {
			how = unix.LOCK_SH
		}
		if err := unix.Flock(fd, how|unix.LOCK_NB); err != nil {
			if err == unix.EWOULDBLOCK {
				return nil, fail("locked by another opener (flock): %w", ErrBusy)
			}
			return nil, fail("flock: %w", err)
		}
	}

	size, cur := opts.Size, st.Size
	switch {
	case size == 0 && cur == 0:
		return nil, fail("the file is empty and no size is configured")
	case size == 0 && cur%int64(bs) != 0:
		return nil, fail("its size %d is not a multiple of block size %d; configure a size", cur, bs)
	case size == 0:
		size = cur
	case size > cur && opts.ReadOnly:
		return nil, fail("it has %d bytes (%s), less than the configured size %d (%s), and a read-only open does not grow it",
			cur, FormatSize(cur), size, FormatSize(size))
	case size > cur:
		if err := unix.Ftruncate(fd, size); err != nil {
			return nil, fail("grow from %d to %d bytes: %w", cur, size, err)
		}
	case size < cur:
		return nil, fail("it has %d bytes (%s), more than the configured size %d (%s); refusing to shrink it (configure size %d, or 0 to use the file's size)",
			cur, FormatSize(cur), size, FormatSize(size), cur)
	}

	align := uintptr(1)
	if opts.Direct {
		mem, offAlign, ok := dioAlign(fd)
		switch {
		case ok && offAlign == 0:
			return nil, fail("the file system does not support direct I/O (O_DIRECT)")
		case ok && bs%offAlign != 0:
			return nil, fail("block size %d is smaller than the %d-byte alignment direct I/O needs here", bs, offAlign)
		case ok:
			align = uintptr(max(mem, 1))
		default:
			align = pageSize // unknown: assume the strictest common case
		}
	}

	f := &File{
		io:   newFDIO(KindFile, abs, fd, opts.ReadOnly, opts.Direct, align),
		size: size,
		bs:   bs,
	}
	if !opts.ReadOnly {
		// Probe hole punching past the end of the file, where it changes
		// nothing; file systems without it fail with EOPNOTSUPP.
		if err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, size, int64(bs)); err != nil {
			f.noPunch.Store(true)
		}
	}

	id := abs
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		id = real
	}
	f.info = Info{
		Kind:               KindFile,
		Path:               abs,
		ID:                 "file:" + id,
		Size:               size,
		BlockSize:          bs,
		PhysicalBlockSize:  bs,
		OptimalIOSize:      uint32(st.Blksize),
		BufferAlign:        uint32(align),
		ReadOnly:           opts.ReadOnly,
		Direct:             opts.Direct,
		VolatileCache:      true,
		Discard:            !opts.ReadOnly && !f.noPunch.Load(),
		DiscardZeroes:      !opts.ReadOnly && !f.noPunch.Load(),
		WriteZeroesOffload: !f.noPunch.Load(),
	}
	if d, err := sysfsDevice(st.Dev); err == nil {
		f.info.Rotational = d.queueAttr("rotational") == "1"
		if pbs := d.queueUint("physical_block_size"); pbs > uint64(bs) {
			f.info.PhysicalBlockSize = uint32(pbs)
		}
	}
	return f, nil
}

// ReadAt reads len(p) bytes at off with pread. See [Backend].
func (f *File) ReadAt(p []byte, off int64) error {
	if err := CheckRange(OpRead, off, int64(len(p)), f.size, f.bs); err != nil {
		return err
	}
	return f.io.readAt(p, off)
}

// WriteAt writes p at off with pwrite, or with RWF_DSYNC if fua. See
// [Backend].
func (f *File) WriteAt(p []byte, off int64, fua bool) error {
	if err := CheckRange(OpWrite, off, int64(len(p)), f.size, f.bs); err != nil {
		return err
	}
	return f.io.writeAt(p, off, fua)
}

// Flush calls fdatasync. See [Backend].
func (f *File) Flush() error { return f.io.flush() }

// WriteZeroes zeroes a range with fallocate, or by writing zeroes where the
// file system cannot. See [File] and [Backend].
func (f *File) WriteZeroes(off, length int64, deallocate bool) error {
	if err := CheckRange(OpWriteZeroes, off, length, f.size, f.bs); err != nil {
		return err
	}
	if err := f.io.acquireWrite(); err != nil {
		return err
	}
	defer f.io.release()
	if length == 0 {
		return nil
	}
	if err := f.zero(off, length, deallocate); err != nil {
		return f.io.ioErr(OpWriteZeroes, off, length, err)
	}
	return nil
}

func (f *File) zero(off, length int64, deallocate bool) error {
	fd := f.io.fd
	if deallocate {
		if done, err := f.punch(off, length); done || err != nil {
			return err
		}
	}
	if !f.noZeroRange.Load() {
		err := unix.Fallocate(fd, unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, off, length)
		if err == nil || !unsupported(err) {
			return err
		}
		f.noZeroRange.Store(true)
	}
	if !deallocate {
		// tmpfs, for one, punches holes but has no ZERO_RANGE: punch, then
		// allocate the range again so that later writes cannot hit ENOSPC.
		if done, err := f.punch(off, length); err != nil {
			return err
		} else if done {
			err := unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, off, length)
			if err != nil && !unsupported(err) {
				return err
			}
			return nil
		}
	}
	return f.io.writeZeroBuffers(off, length)
}

// punch deallocates a range; done is false if the file system cannot.
func (f *File) punch(off, length int64) (done bool, err error) {
	if f.noPunch.Load() {
		return false, nil
	}
	err = unix.Fallocate(f.io.fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, length)
	if err != nil && unsupported(err) {
		f.noPunch.Store(true)
		return false, nil
	}
	return err == nil, err
}

// Discard punches a hole: the range is freed and reads as zeroes. See
// [Backend].
func (f *File) Discard(off, length int64) error {
	if err := CheckRange(OpDiscard, off, length, f.size, f.bs); err != nil {
		return err
	}
	if err := f.io.acquireWrite(); err != nil {
		return err
	}
	defer f.io.release()
	if length == 0 {
		return nil
	}
	done, err := f.punch(off, length)
	if err != nil {
		return f.io.ioErr(OpDiscard, off, length, err)
	}
	if !done {
		return fmt.Errorf("backend file %s: discard: the file system cannot punch holes: %w", f.io.path, ErrNotSupported)
	}
	return nil
}

// Size returns the capacity in bytes.
func (f *File) Size() int64 { return f.size }

// BlockSize returns the logical block size.
func (f *File) BlockSize() uint32 { return f.bs }

// Info describes the file.
func (f *File) Info() Info { return f.info }

// Health reports that a file has no device health of its own.
func (f *File) Health() (Health, error) {
	return Health{Reason: "file backend: no device-reported health"}, nil
}

// Stats counts the slow paths taken.
func (f *File) Stats() Stats { return f.io.stats() }

// Close closes the file (releasing its lock) after calls in progress.
func (f *File) Close() error { return f.io.close() }

// Claim takes the flock that Open deferred (Config.DeferClaim): exclusive,
// or shared when read-only. See [Claimer].
func (f *File) Claim() error {
	if !f.deferredLock {
		return nil
	}
	if err := f.io.acquire(); err != nil {
		return err
	}
	defer f.io.release()
	how := unix.LOCK_EX
	if f.io.ro {
		how = unix.LOCK_SH
	}
	if err := unix.Flock(f.io.fd, how|unix.LOCK_NB); err != nil {
		if err == unix.EWOULDBLOCK {
			return fmt.Errorf("backend file %s: locked by another opener (flock): %w", f.info.Path, ErrBusy)
		}
		return fmt.Errorf("backend file %s: flock: %w", f.info.Path, err)
	}
	f.deferredLock = false
	return nil
}
