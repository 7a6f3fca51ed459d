package backend

import (
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Check inspects the storage that [Open] would open for c, without
// creating, writing, growing or locking anything, and returns the first
// problem Open would meet as a *ConfigError naming the field (path, size,
// block_size, must_exist, create_dirs, read_only). It runs [Config.Validate]
// first.
//
// Kind file: an existing path must be a regular file (a directory, a
// device node, a socket or a symlink loop is refused) that this process may
// open as configured (read-write unless read_only), whose size fits the
// configured one (never shrunk; an empty file needs a size). A missing file
// needs a size, must not be read_only or must_exist, and its parent must be
// a writable directory, or with create_dirs the nearest existing ancestor
// must be one.
//
// Kind block: the path must be a block device that this process may open
// as configured; it is opened read-only (no O_EXCL, so a device this
// process already holds checks the same) for its size and logical block
// size, which the configured size and block size must fit.
//
// Kinds null and memory: Validate only; [PhysicalMemory] bounds memory
// backends, a check the caller makes over all of them together.
//
// What Check cannot see: a file lock or an O_EXCL holder (Open reports
// those), and space to grow a file into (files grow sparse).
func (c *Config) Check() error {
	if err := c.Validate(); err != nil {
		return err
	}
	switch c.Kind {
	case KindFile:
		return c.checkFile()
	case KindBlock:
		return c.checkBlock()
	}
	return nil
}

// checkFile is Check for kind file.
func (c *Config) checkFile() error {
	bs := int64(c.BlockSize)
	if bs == 0 {
		bs = 512
	}
	path, err := filepath.Abs(c.Path)
	if err != nil {
		return cfgErr("path", "%q: %v", c.Path, err)
	}
	var st unix.Stat_t
	err = unix.Stat(path, &st)
	switch {
	case err == unix.ENOENT:
		return c.checkCreate(path)
	case err == unix.ELOOP:
		return cfgErr("path", "%s: too many levels of symbolic links (a symlink loop)", path)
	case err == unix.ENOTDIR:
		return cfgErr("path", "%s: a component of the path is not a directory", path)
	case err != nil:
		return cfgErr("path", "%s: %v", path, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		return cfgErr("path", "%s is a directory, not a file (name the image file inside it)", path)
	case unix.S_IFBLK:
		return cfgErr("path", "%s is a block device; use kind block", path)
	case unix.S_IFCHR:
		return cfgErr("path", "%s is a character device, not a regular file", path)
	default:
		return cfgErr("path", "%s is not a regular file", path)
	}
	mode := uint32(unix.R_OK | unix.W_OK)
	if c.ReadOnly {
		mode = unix.R_OK
	}
	if err := unix.Faccessat(unix.AT_FDCWD, path, mode, unix.AT_EACCESS); err != nil {
		how := "read-write"
		if c.ReadOnly {
			how = "read-only"
		}
		return cfgErr("path", "%s cannot be opened %s: %v", path, how, err)
	}
	cur := st.Size
	switch {
	case c.Size == 0 && cur == 0:
		return cfgErr("size", "%s is empty and no size is configured", path)
	case c.Size == 0 && cur%bs != 0:
		return cfgErr("size", "%s has %d bytes, not a multiple of block size %d; configure a size", path, cur, bs)
	case c.Size > cur && c.ReadOnly:
		return cfgErr("size", "%d (%s) is more than the %d bytes (%s) of %s, and a read-only namespace does not grow its file",
			c.Size, FormatSize(c.Size), cur, FormatSize(cur), path)
	case c.Size != 0 && c.Size < cur:
		return cfgErr("size", "%d (%s) is less than the %d bytes (%s) of %s; the file is never shrunk (configure %d, or leave size out to use the file's)",
			c.Size, FormatSize(c.Size), cur, FormatSize(cur), path, cur)
	}
	return nil
}

// checkCreate is checkFile for a file that does not exist yet.
func (c *Config) checkCreate(path string) error {
	switch {
	case c.MustExist:
		return cfgErr("path", "%s does not exist, and must_exist is set", path)
	case c.ReadOnly:
		return cfgErr("path", "%s does not exist, and a read_only namespace does not create its file", path)
	case c.Size == 0:
		return cfgErr("size", "%s does not exist, and no size is configured to create it", path)
	}
	dir := filepath.Dir(path)
	for {
		var st unix.Stat_t
		err := unix.Stat(dir, &st)
		switch {
		case err == unix.ENOENT && c.CreateDirs:
			parent := filepath.Dir(dir)
			if parent == dir {
				return cfgErr("path", "%s: no existing parent directory", path)
			}
			dir = parent
			continue
		case err == unix.ENOENT:
			return cfgErr("path", "%s does not exist, nor does its directory %s (create it, or set create_dirs)", path, dir)
		case err == unix.ELOOP:
			return cfgErr("path", "%s: too many levels of symbolic links (a symlink loop)", dir)
		case err != nil:
			return cfgErr("path", "%s: %v", dir, err)
		case st.Mode&unix.S_IFMT != unix.S_IFDIR:
			return cfgErr("path", "%s is not a directory, so %s cannot be created", dir, path)
		}
		if err := unix.Faccessat(unix.AT_FDCWD, dir, unix.W_OK|unix.X_OK, unix.AT_EACCESS); err != nil {
			return cfgErr("path", "%s does not exist and cannot be created in %s: %v", path, dir, err)
		}
		return nil
	}
}

// checkBlock is Check for kind block.
func (c *Config) checkBlock() error {
	path, err := filepath.Abs(c.Path)
	if err != nil {
		return cfgErr("path", "%q: %v", c.Path, err)
	}
	var st unix.Stat_t
	switch err := unix.Stat(path, &st); {
	case err == unix.ENOENT:
		return cfgErr("path", "%s does not exist", path)
	case err == unix.ELOOP:
		return cfgErr("path", "%s: too many levels of symbolic links (a symlink loop)", path)
	case err != nil:
		return cfgErr("path", "%s: %v", path, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFBLK:
	case unix.S_IFREG:
		return cfgErr("path", "%s is a regular file; use kind file", path)
	case unix.S_IFDIR:
		return cfgErr("path", "%s is a directory, not a block device", path)
	default:
		return cfgErr("path", "%s is not a block device", path)
	}
	mode := uint32(unix.R_OK | unix.W_OK)
	if c.ReadOnly {
		mode = unix.R_OK
	}
	if err := unix.Faccessat(unix.AT_FDCWD, path, mode, unix.AT_EACCESS); err != nil {
		return cfgErr("path", "%s cannot be opened: %v", path, err)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ENXIO) || errors.Is(err, unix.ENODEV) {
			return cfgErr("path", "%s: no such device (%v)", path, err)
		}
		return cfgErr("path", "%s: open: %v", path, err)
	}
	defer unix.Close(fd)
	var devSize uint64
	if err := ioctlPtr(fd, unix.BLKGETSIZE64, unsafe.Pointer(&devSize)); err != nil {
		return cfgErr("path", "%s: BLKGETSIZE64: %v", path, err)
	}
	lbs, err := unix.IoctlGetInt(fd, unix.BLKSSZGET)
	if err != nil {
		return cfgErr("path", "%s: BLKSSZGET: %v", path, err)
	}
	bs := c.BlockSize
	switch {
	case bs == 0 && lbs != 512 && lbs != 4096:
		return cfgErr("block_size", "the logical block size %d of %s is not 512 or 4096", lbs, path)
	case bs == 0:
		bs = uint32(lbs)
	case bs%uint32(lbs) != 0:
		return cfgErr("block_size", "%d is smaller than the logical block size %d of %s", bs, lbs, path)
	}
	switch {
	case devSize < uint64(bs):
		return cfgErr("path", "%s has %d bytes, less than one block", path, devSize)
	case c.Size > int64(devSize):
		return cfgErr("size", "%d (%s) is larger than %s, which has %d bytes (%s)",
			c.Size, FormatSize(c.Size), path, devSize, FormatSize(int64(devSize)))
	case c.Size%int64(bs) != 0:
		return cfgErr("size", "%d is not a multiple of block size %d", c.Size, bs)
	}
	return nil
}

// PhysicalMemory returns the machine's physical memory in bytes (sysinfo
// totalram), or 0 if it cannot tell.
func PhysicalMemory() int64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}

// MemoryFootprint is the most memory a memory backend of size bytes can
// take once hosts have written all of it: its chunks plus the chunk table.
func MemoryFootprint(size int64) int64 {
	chunks := (size + MemoryChunkSize - 1) / MemoryChunkSize
	return size + chunks*memoryChunkOverhead
}

// memoryChunkOverhead is the per-chunk table cost of Memory: an atomic
// pointer and a sync.RWMutex.
var memoryChunkOverhead = int64(unsafe.Sizeof(atomic.Pointer[memChunk]{}) + unsafe.Sizeof(sync.RWMutex{}))
