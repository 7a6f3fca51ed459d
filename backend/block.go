package backend

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BlockOptions configures [OpenBlock]. See [Config] for the meaning of each
// field.
type BlockOptions struct {
	// Size in bytes: 0 exports the whole device (rounded down to BlockSize);
	// otherwise at most the device size, exporting the first Size bytes.
	Size int64
	// BlockSize: 0 uses the device's logical block size (which must then be
	// 512 or 4096); otherwise 512 or 4096 and a multiple of the device's.
	BlockSize uint32
	ReadOnly  bool   // open O_RDONLY
	Exclusive bool   // open O_EXCL: fail with ErrBusy if mounted or held exclusively
	DriveDB   string // drivedb.yaml for HealthReport's ATA attribute names; "" for built-in
}

// Block is a backend on a block device, always opened O_DIRECT.
//
// Buffers aligned to Info().BufferAlign (the device's DMA alignment as
// statx STATX_DIOALIGN reports it, else its logical block size) are used
// directly; others are copied through page-aligned bounce buffers from a
// pool, counted in Stats. FUA writes use pwritev2 with RWF_DSYNC, which the
// kernel turns into a FUA write (or write plus flush); Flush is fdatasync,
// a cache flush.
//
// WriteZeroes with deallocate uses fallocate(FALLOC_FL_PUNCH_HOLE), the
// kernel's write-zeroes-with-unmap (NVMe Write Zeroes with DEAC, SCSI WRITE
// SAME with UNMAP); without deallocate, or where the device lacks write
// zeroes, BLKZEROOUT; where that fails, zero-filled writes. Discard is
// BLKDISCARD, and since devices need not return zeroes for discarded
// blocks, Info().DiscardZeroes is false.
//
// Health reads the NVMe SMART log (Get Log Page 02h through
// NVME_IOCTL_ADMIN_CMD) or ATA SMART data (through SCSI ATA Translation,
// SG_IO). Loop, virtio, device-mapper, md and zram devices report no
// health. HealthReport gives a text report from github.com/dswarbrick/smart.
type Block struct {
	io   *fdio
	size int64
	bs   uint32
	info Info
	dev  *sysDev

	noPunch   atomic.Bool // FALLOC_FL_PUNCH_HOLE (write zeroes with unmap) refused
	noZeroOut atomic.Bool // BLKZEROOUT refused

	driveDB  string
	healthMu sync.Mutex // one device query at a time

	// deferredExcl is set when Open deferred O_EXCL (Config.DeferClaim);
	// claimFD is the O_EXCL descriptor Claim opened, closed with the
	// backend.
	claimMu      sync.Mutex
	deferredExcl bool
	claimFD      int
}

var _ Backend = (*Block)(nil)

// OpenBlock opens the block device at path (a device node, or a symbolic
// link to one such as /dev/disk/by-id/...).
func OpenBlock(path string, opts BlockOptions) (_ *Block, err error) {
	if path == "" {
		return nil, cfgErr("path", "required for kind block")
	}
	if err := checkBlockSize(opts.BlockSize); err != nil {
		return nil, err
	}
	if err := checkSize(opts.Size, max(opts.BlockSize, 512), false); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("backend block %s: %w", path, err)
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("backend block %s: "+format, append([]any{abs}, args...)...)
	}

	flags := unix.O_RDWR | unix.O_DIRECT | unix.O_CLOEXEC
	if opts.ReadOnly {
		flags = unix.O_RDONLY | unix.O_DIRECT | unix.O_CLOEXEC
	}
	if opts.Exclusive {
		flags |= unix.O_EXCL
	}
	fd, err := unix.Open(abs, flags, 0)
	switch {
	case err == unix.EBUSY && opts.Exclusive:
		return nil, fail("open exclusively: mounted or in use (%v): %w", err, ErrBusy)
	case (err == unix.EROFS || err == unix.EACCES) && !opts.ReadOnly:
		return nil, fail("open read-write: %w (configure read_only for a read-only device)", err)
	case err != nil:
		return nil, fail("open: %w", err)
	}
	defer func() {
		if err != nil {
			unix.Close(fd)
		}
	}()

	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fail("stat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return nil, fail("not a block device; use kind file for regular files")
	}

	var devSize uint64
	if err := ioctlPtr(fd, unix.BLKGETSIZE64, unsafe.Pointer(&devSize)); err != nil {
		return nil, fail("BLKGETSIZE64: %w", err)
	}
	lbs, err := unix.IoctlGetInt(fd, unix.BLKSSZGET)
	if err != nil {
		return nil, fail("BLKSSZGET: %w", err)
	}
	pbs, err := unix.IoctlGetUint32(fd, unix.BLKPBSZGET)
	if err != nil {
		pbs = uint32(lbs)
	}
	opt, _ := unix.IoctlGetUint32(fd, unix.BLKIOOPT)

	bs := opts.BlockSize
	switch {
	case bs == 0 && lbs != 512 && lbs != 4096:
		return nil, fail("the device's logical block size %d is not 512 or 4096", lbs)
	case bs == 0:
		bs = uint32(lbs)
	case bs%uint32(lbs) != 0:
		return nil, &ConfigError{Field: "block_size", Reason: fmt.Sprintf(
			"%d is smaller than the logical block size %d of %s", bs, lbs, abs)}
	}
	size := int64(devSize) &^ int64(bs-1)
	switch {
	case opts.Size == 0 && size == 0:
		return nil, fail("the device is smaller than one block (%d bytes)", devSize)
	case opts.Size == 0:
	case opts.Size%int64(bs) != 0:
		return nil, &ConfigError{Field: "size", Reason: fmt.Sprintf("%d is not a positive multiple of block size %d", opts.Size, bs)}
	case opts.Size > int64(devSize):
		return nil, &ConfigError{Field: "size", Reason: fmt.Sprintf("%d (%s) is larger than %s, which has %d bytes (%s)",
			opts.Size, FormatSize(opts.Size), abs, devSize, FormatSize(int64(devSize)))}
	default:
		size = opts.Size
	}

	align := uintptr(lbs)
	if mem, _, ok := dioAlign(fd); ok && mem > 0 {
		align = uintptr(mem)
	}

	b := &Block{
		io:      newFDIO(KindBlock, abs, fd, opts.ReadOnly, true, align),
		size:    size,
		bs:      bs,
		driveDB: opts.DriveDB,
	}
	b.info = Info{
		Kind:              KindBlock,
		Path:              abs,
		Size:              size,
		BlockSize:         bs,
		PhysicalBlockSize: max(pbs, bs),
		OptimalIOSize:     opt,
		BufferAlign:       uint32(align),
		ReadOnly:          opts.ReadOnly,
		Direct:            true,
		VolatileCache:     true,
	}
	if d, err := sysfsDevice(st.Rdev); err == nil {
		b.dev = d
		d.identity(&b.info)
		b.info.Rotational = d.queueAttr("rotational") == "1"
		b.info.VolatileCache = d.queueAttr("write_cache") != "write through"
		b.info.Discard = !opts.ReadOnly && d.queueUint("discard_max_bytes") > 0
		b.info.WriteZeroesOffload = d.queueUint("write_zeroes_max_bytes") > 0
	} else {
		// No sysfs (unusual containers): assume discard works and let the
		// ioctl say otherwise.
		b.info.Bus = "other"
		b.info.ID = "path:" + abs
		b.info.Discard = !opts.ReadOnly
	}
	return b, nil
}

// ReadAt reads len(p) bytes at off, directly into p when it is aligned.
// See [Backend].
func (b *Block) ReadAt(p []byte, off int64) error {
	if err := CheckRange(OpRead, off, int64(len(p)), b.size, b.bs); err != nil {
		return err
	}
	return b.io.readAt(p, off)
}

// WriteAt writes p at off, directly from p when it is aligned, as a FUA
// write if fua. See [Backend].
func (b *Block) WriteAt(p []byte, off int64, fua bool) error {
	if err := CheckRange(OpWrite, off, int64(len(p)), b.size, b.bs); err != nil {
		return err
	}
	return b.io.writeAt(p, off, fua)
}

// Flush flushes the device's volatile cache (fdatasync). See [Backend].
func (b *Block) Flush() error { return b.io.flush() }

// WriteZeroes zeroes a range: see [Block] for the methods tried.
func (b *Block) WriteZeroes(off, length int64, deallocate bool) error {
	if err := CheckRange(OpWriteZeroes, off, length, b.size, b.bs); err != nil {
		return err
	}
	if err := b.io.acquireWrite(); err != nil {
		return err
	}
	defer b.io.release()
	if length == 0 {
		return nil
	}
	if err := b.zero(off, length, deallocate); err != nil {
		return b.io.ioErr(OpWriteZeroes, off, length, err)
	}
	return nil
}

func (b *Block) zero(off, length int64, deallocate bool) error {
	fd := b.io.fd
	if deallocate && !b.noPunch.Load() {
		// Block device fallocate: PUNCH_HOLE is REQ_OP_WRITE_ZEROES that
		// may unmap, without the kernel's fallback to writing zero pages.
		err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, length)
		if err == nil || !unsupported(err) {
			return err
		}
		b.noPunch.Store(true)
	}
	if !b.noZeroOut.Load() {
		r := [2]uint64{uint64(off), uint64(length)}
		err := ioctlPtr(fd, unix.BLKZEROOUT, unsafe.Pointer(&r))
		if err == nil || !(unsupported(err) || err == unix.EINVAL) {
			return err
		}
		b.noZeroOut.Store(true)
	}
	return b.io.writeZeroBuffers(off, length)
}

// Discard issues BLKDISCARD. Discarded ranges have unspecified contents
// afterwards. See [Backend].
func (b *Block) Discard(off, length int64) error {
	if err := CheckRange(OpDiscard, off, length, b.size, b.bs); err != nil {
		return err
	}
	if err := b.io.acquireWrite(); err != nil {
		return err
	}
	defer b.io.release()
	if length == 0 {
		return nil
	}
	if !b.info.Discard {
		return fmt.Errorf("backend block %s: discard: the device does not support it: %w", b.io.path, ErrNotSupported)
	}
	r := [2]uint64{uint64(off), uint64(length)}
	if err := ioctlPtr(b.io.fd, unix.BLKDISCARD, unsafe.Pointer(&r)); err != nil {
		if unsupported(err) {
			return fmt.Errorf("backend block %s: discard: %v: %w", b.io.path, err, ErrNotSupported)
		}
		return b.io.ioErr(OpDiscard, off, length, err)
	}
	return nil
}

// Size returns the capacity in bytes.
func (b *Block) Size() int64 { return b.size }

// BlockSize returns the logical block size.
func (b *Block) BlockSize() uint32 { return b.bs }

// Info describes the device.
func (b *Block) Info() Info { return b.info }

// Stats counts the slow paths taken.
func (b *Block) Stats() Stats { return b.io.stats() }

// Close closes the device after calls in progress.
func (b *Block) Close() error {
	b.claimMu.Lock()
	if b.claimFD > 0 {
		unix.Close(b.claimFD)
		b.claimFD = 0
	}
	b.claimMu.Unlock()
	return b.io.close()
}

// Claim takes the exclusive claim that Open deferred (Config.DeferClaim
// with Exclusive): an O_EXCL descriptor of the device, held until Close.
// See [Claimer].
func (b *Block) Claim() error {
	b.claimMu.Lock()
	defer b.claimMu.Unlock()
	if !b.deferredExcl || b.claimFD > 0 {
		return nil
	}
	fd, err := unix.Open(b.info.Path, unix.O_RDONLY|unix.O_EXCL|unix.O_CLOEXEC, 0)
	switch {
	case err == unix.EBUSY:
		return fmt.Errorf("backend block %s: open exclusively: mounted or in use (%v): %w", b.info.Path, err, ErrBusy)
	case err != nil:
		return fmt.Errorf("backend block %s: open exclusively: %w", b.info.Path, err)
	}
	b.claimFD = fd
	return nil
}
