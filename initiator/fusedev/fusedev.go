// Package fusedev is the host tool's block device: a FUSE directory with
// one regular file per namespace (n1, n2, ...), the size of the
// namespace, whose reads and writes are NVMe Reads and Writes and whose
// fsync is an NVMe Flush, through an initiator.Head (all its paths). A
// loop device over such a file is the namespace as a block device; the
// connection daemon (initiator/connd) mounts it under its instance
// directory.
package fusedev

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/nvmetd/nvmetd/initiator"
)

// Access (issue 22.1): the directory is mounted allow_other (a loop
// device, udev's probes and the tools run as root must open the files),
// so it is also mounted default_permissions: the kernel checks every open
// against the files' real mode, 0600 owned by the daemon's user (the user
// who connected). Open checks the caller again (defense in depth, and the
// only check if the mount option were lost): the owner or root, nobody
// else. The mount is nosuid,nodev,noexec: device files, not programs.

// Root is the FUSE root directory: the device directory.
type Root struct {
	fs.Inode
	directIO bool
	// uid and gid own the namespace files (the daemon's user).
	uid, gid uint32
}

var _ = (fs.NodeOnAdder)((*Root)(nil))

// OnAdd is called once the root is mounted.
func (r *Root) OnAdd(ctx context.Context) {}

// nsFile is the file of one namespace.
type nsFile struct {
	fs.Inode
	ns       *initiator.Head
	directIO bool
	uid, gid uint32 // the file's owner (mode 0600)
	// rmw serialises the read-modify-write of unaligned writes against
	// every other write.
	rmw sync.RWMutex
	// opens counts the file's open handles (a loop device, a program):
	// bench refuses a namespace whose file is open.
	opens atomic.Int32
	// wrote is set by the first write: disconnect flushes only a
	// namespace written through this host.
	wrote atomic.Bool
}

var (
	_ = (fs.NodeOpener)((*nsFile)(nil))
	_ = (fs.NodeGetattrer)((*nsFile)(nil))
	_ = (fs.NodeSetattrer)((*nsFile)(nil))
	_ = (fs.NodeReader)((*nsFile)(nil))
	_ = (fs.NodeWriter)((*nsFile)(nil))
	_ = (fs.NodeFsyncer)((*nsFile)(nil))
	_ = (fs.NodeFlusher)((*nsFile)(nil))
	_ = (fs.NodeReleaser)((*nsFile)(nil))
)

// Name is the file name of namespace nsid in the directory.
func Name(nsid uint32) string { return "n" + strconv.FormatUint(uint64(nsid), 10) }

// AddNamespace puts a namespace's file in the directory.
func (r *Root) AddNamespace(ns *initiator.Head) {
	f := &nsFile{ns: ns, directIO: r.directIO, uid: r.uid, gid: r.gid}
	ch := r.NewPersistentInode(context.Background(), f, fs.StableAttr{Mode: syscall.S_IFREG, Ino: uint64(ns.NSID()) + 1})
	r.AddChild(Name(ns.NSID()), ch, true)
}

// RemoveNamespace takes a namespace's file out of the directory.
func (r *Root) RemoveNamespace(nsid uint32) {
	r.RmChild(Name(nsid))
	_ = r.NotifyEntry(Name(nsid))
}

// Open opens the device file; with directIO the kernel keeps no page cache
// of it (FOPEN_DIRECT_IO), so every read and write reaches the namespace.
func (f *nsFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if c, ok := fuse.FromContext(ctx); !ok || (c.Uid != 0 && c.Uid != f.uid) {
		return nil, 0, syscall.EACCES
	}
	if f.ns.Gone() {
		return nil, 0, syscall.ENODEV
	}
	var out uint32
	if f.directIO {
		out = fuse.FOPEN_DIRECT_IO | fuse.FOPEN_PARALLEL_DIRECT_WRITES
	}
	f.opens.Add(1)
	return nil, out, 0
}

// Release is the last close of an open handle.
func (f *nsFile) Release(ctx context.Context, fh fs.FileHandle) syscall.Errno {
	f.opens.Add(-1)
	return 0
}

// OpenCount returns how many handles of namespace nsid's file are open.
func (r *Root) OpenCount(nsid uint32) int {
	ch := r.GetChild(Name(nsid))
	if ch == nil {
		return 0
	}
	if f, ok := ch.Operations().(*nsFile); ok {
		return int(f.opens.Load())
	}
	return 0
}

// Written reports whether namespace nsid's file was ever written.
func (r *Root) Written(nsid uint32) bool {
	if ch := r.GetChild(Name(nsid)); ch != nil {
		if f, ok := ch.Operations().(*nsFile); ok {
			return f.wrote.Load()
		}
	}
	return false
}

// Getattr reports the namespace's size.
func (f *nsFile) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f.fill(&out.Attr)
	out.SetTimeout(time.Second)
	return 0
}

func (f *nsFile) fill(a *fuse.Attr) {
	a.Mode = syscall.S_IFREG | 0o600
	a.Uid, a.Gid = f.uid, f.gid
	a.Size = uint64(f.ns.Size())
	a.Blksize = uint32(f.ns.BlockSize())
	a.Blocks = a.Size / 512
	a.Nlink = 1
}

// Setattr accepts only what does not change the device: a truncate to the
// current size (open with O_TRUNC never happens for a block device file,
// but tools may try) and mode/time changes, which are ignored: the mode
// stays 0600 and the owner the daemon's user, whatever chmod or chown says.
func (f *nsFile) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok && int64(sz) != f.ns.Size() {
		return syscall.EINVAL
	}
	f.fill(&out.Attr)
	return 0
}

// errno maps an initiator error to what the kernel passes on.
func errno(err error) syscall.Errno {
	var re *initiator.RangeError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &re):
		return syscall.ENOSPC
	case errors.Is(err, initiator.ErrNamespaceGone), errors.Is(err, initiator.ErrControllerClosed):
		return syscall.ENODEV
	}
	return syscall.EIO
}

// Read reads at off into the kernel's buffer (the FUSE request's memory is
// the RDMA target: no copy). Unaligned ranges go through a bounce buffer.
func (f *nsFile) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	size := f.ns.Size()
	if off >= size {
		return fuse.ReadResultData(dest[:0]), 0
	}
	if off+int64(len(dest)) > size {
		dest = dest[:size-off]
	}
	bs := int64(f.ns.BlockSize())
	if off%bs == 0 && int64(len(dest))%bs == 0 {
		if _, err := f.ns.ReadAtContext(ctx, dest, off); err != nil {
			return nil, errno(err)
		}
		return fuse.ReadResultData(dest), 0
	}
	start := off &^ (bs - 1)
	end := (off + int64(len(dest)) + bs - 1) &^ (bs - 1)
	buf := make([]byte, end-start)
	if _, err := f.ns.ReadAtContext(ctx, buf, start); err != nil {
		return nil, errno(err)
	}
	n := copy(dest, buf[off-start:])
	return fuse.ReadResultData(dest[:n]), 0
}

// Write writes data at off; an unaligned write reads the partial blocks
// first (read-modify-write, excluded against other writes).
func (f *nsFile) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if f.ns.ReadOnly() {
		return 0, syscall.EROFS
	}
	if !f.wrote.Load() { // a load per write, not a store to a shared cache line
		f.wrote.Store(true)
	}
	size := f.ns.Size()
	if off+int64(len(data)) > size {
		return 0, syscall.ENOSPC
	}
	bs := int64(f.ns.BlockSize())
	if off%bs == 0 && int64(len(data))%bs == 0 {
		f.rmw.RLock()
		_, err := f.ns.WriteAtContext(ctx, data, off)
		f.rmw.RUnlock()
		if err != nil {
			return 0, errno(err)
		}
		return uint32(len(data)), 0
	}
	f.rmw.Lock()
	defer f.rmw.Unlock()
	start := off &^ (bs - 1)
	end := (off + int64(len(data)) + bs - 1) &^ (bs - 1)
	buf := make([]byte, end-start)
	if _, err := f.ns.ReadAtContext(ctx, buf[:bs], start); err != nil {
		return 0, errno(err)
	}
	if end-start > bs {
		if _, err := f.ns.ReadAtContext(ctx, buf[len(buf)-int(bs):], end-bs); err != nil {
			return 0, errno(err)
		}
	}
	copy(buf[off-start:], data)
	if _, err := f.ns.WriteAtContext(ctx, buf, start); err != nil {
		return 0, errno(err)
	}
	return uint32(len(data)), 0
}

// Fsync is an NVMe Flush: what fsync(2) on the file, and a loop device's
// flush (REQ_PREFLUSH, i.e. a filesystem's barrier), come down to.
func (f *nsFile) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	return errno(f.ns.Flush(ctx))
}

// Flush is close(2) on a file descriptor: nothing to do (data is not
// cached here; durability is Fsync's).
func (f *nsFile) Flush(ctx context.Context, fh fs.FileHandle) syscall.Errno { return 0 }

// Mount mounts the device directory on dir. mount(2) is used directly
// (there may be no fusermount), which needs root.
func Mount(dir, name string, directIO bool, nss []*initiator.Head) (*fuse.Server, *Root, error) {
	root := &Root{directIO: directIO, uid: uint32(os.Geteuid()), gid: uint32(os.Getegid())}
	one := time.Second
	srv, err := fs.Mount(dir, root, &fs.Options{
		EntryTimeout: &one,
		AttrTimeout:  &one,
		MountOptions: fuse.MountOptions{
			FsName:            "nvmeof:" + name,
			Name:              "nvmeof",
			DirectMount:       true,
			DirectMountStrict: true,
			AllowOther:        true,
			// The kernel checks the files' modes (0600, the daemon's
			// user); no device or set-user-ID file is honoured.
			Options:       []string{"default_permissions", "nosuid", "nodev", "noexec"},
			MaxWrite:      1 << 20,
			MaxBackground: 128,
			// The read data is in our buffer already: write it to
			// /dev/fuse (a splice of a 1 MiB read does not fit a pipe).
			DisableSplice: true,
			// Let the kernel keep several direct I/O requests of one
			// file in flight (a loop device with direct I/O on).
			ExtraCapabilities: fuse.CAP_ASYNC_DIO | fuse.CAP_PARALLEL_DIROPS,
		},
	})
	if err != nil {
		return nil, nil, err
	}
	closeOnExecFUSE()
	for _, ns := range nss {
		root.AddNamespace(ns)
	}
	return srv, root, nil
}

// closeOnExecFUSE marks this process's /dev/fuse descriptors close-on-exec.
// go-fuse's direct mount opens /dev/fuse without O_CLOEXEC, so every tool
// the daemon runs (umount, losetup, mkfs) inherited the FUSE connection: an
// "umount -l" stuck on the loop device's filesystem then kept the
// connection alive after the daemon was gone, its requests never answered
// nor aborted, and every later losetup -a hung on the loop device's
// backing file (seen on the test machine).
func closeOnExecFUSE() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && l == "/dev/fuse" {
			_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
		}
	}
}

// FUSE teardown bounds: how long an unmount is retried while something
// still holds a namespace file (a loop device whose detach the kernel
// completes asynchronously, after its last opener has closed it), and how
// long the FUSE server may take to see the connection end.
const (
	UnmountRetry = 15 * time.Second
	ServeEnd     = 10 * time.Second
)

// Unmount unmounts the device directory dir served by srv and waits
// for srv to end, never forever. losetup --detach only marks a busy loop
// device for autoclear: it keeps the namespace file open until its last
// opener (a udev probe, a late writeback) lets go, and until then umount
// fails with EBUSY. The unmount is retried for UnmountRetry (the whole
// of srv.Unmount, which also waits for the server's loops), then done
// lazily (MNT_DETACH); if the server has still not ended ServeEnd
// later, the FUSE connection is aborted through fusectl
// (/sys/fs/fuse/connections/N/abort), which fails whatever still holds the
// file with ENOTCONN rather than leaving this process unable to exit.
func Unmount(srv *fuse.Server, dir string, log *zap.Logger) {
	// The connection's number in fusectl is the minor of the mount's
	// device; read it while dir is still mounted.
	var st unix.Stat_t
	conn := -1
	if unix.Stat(dir, &st) == nil {
		conn = int(unix.Minor(st.Dev))
	}
	// srv.Unmount unmounts, then waits for the server's loops to end; they
	// do not while a copy of the mount lives in another mount namespace
	// (a process started with unshare or ip netns exec took one), so it is
	// run aside and never waited for beyond the bounds.
	start := time.Now()
	unmounted := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(unmounted)
		for {
			err := srv.Unmount()
			if err == nil {
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	select {
	case <-unmounted:
		if time.Since(start) > time.Second {
			log.Info("FUSE unmounted after retries", zap.Duration("waited", time.Since(start).Round(time.Millisecond)))
		}
		return
	case <-time.After(UnmountRetry):
		close(stop)
	}
	log.Warn("FUSE unmount did not complete: detaching it lazily", zap.String("dir", dir))
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		log.Warn("lazy FUSE unmount", zap.Error(err))
	}
	ended := make(chan struct{})
	go func() { srv.Wait(); close(ended) }()
	select {
	case <-ended:
		return
	case <-time.After(ServeEnd):
	}
	log.Warn("FUSE connection still in use (another mount namespace may hold the mount): aborting it", zap.Int("fusectl_connection", conn))
	if conn >= 0 {
		if err := abortFUSEConnection(conn); err != nil {
			log.Warn("abort FUSE connection", zap.Error(err))
		}
	}
	select {
	case <-ended:
	case <-time.After(ServeEnd):
		log.Error("FUSE server did not end; exiting anyway")
	}
}

// abortFUSEConnection writes to fusectl's abort file of connection n,
// mounting fusectl first if it is not.
func abortFUSEConnection(n int) error {
	const ctl = "/sys/fs/fuse/connections"
	p := filepath.Join(ctl, strconv.Itoa(n), "abort")
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		if err := unix.Mount("fusectl", ctl, "fusectl", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mount fusectl on %s: %w", ctl, err)
		}
	}
	return os.WriteFile(p, []byte("1"), 0)
}
