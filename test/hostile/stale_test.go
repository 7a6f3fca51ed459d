package hostile

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nvmetd/nvmetd/internal/testing/rawpeer"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// gatedFile is a FUSE file held in the test's memory whose writes of data
// starting with gateMarker wait until the test opens the gate: a backend
// whose writes the test can hold in the kernel's write path, with no
// change to the daemon. (dm-delay over a loop device would be the other
// real-kernel way; this machine's kernel has no device-mapper.) The file is
// opened with FOPEN_DIRECT_IO|FOPEN_PARALLEL_DIRECT_WRITES, so that the
// kernel neither caches it nor serialises writes to it: the order in which
// writes reach the file is the order in which the daemon issues them.
type gatedFile struct {
	fs.Inode
	mu      sync.Mutex
	data    []byte
	gate    chan struct{} // closed: gated writes go through
	arrived chan struct{} // closed when the first gated write arrives
	applied chan struct{} // closed when the first gated write is applied
	once    sync.Once
	// seen is called for every write (after it is applied).
	seen func(data []byte, off int64)
}

var (
	_ = (fs.NodeOpener)((*gatedFile)(nil))
	_ = (fs.NodeGetattrer)((*gatedFile)(nil))
	_ = (fs.NodeReader)((*gatedFile)(nil))
	_ = (fs.NodeWriter)((*gatedFile)(nil))
	_ = (fs.NodeFsyncer)((*gatedFile)(nil))
	_ = (fs.NodeFlusher)((*gatedFile)(nil))
)

var gateMarker = []byte("OLD-DATA")

func (f *gatedFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return nil, fuse.FOPEN_DIRECT_IO | fuse.FOPEN_PARALLEL_DIRECT_WRITES, 0
}

func (f *gatedFile) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f.mu.Lock()
	defer f.mu.Unlock()
	out.Mode = fuse.S_IFREG | 0o600
	out.Size = uint64(len(f.data))
	return 0
}

func (f *gatedFile) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if off >= int64(len(f.data)) {
		return fuse.ReadResultData(nil), 0
	}
	n := copy(dest, f.data[off:])
	return fuse.ReadResultData(dest[:n]), 0
}

func (f *gatedFile) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	gated := bytes.HasPrefix(data, gateMarker)
	if gated {
		f.once.Do(func() { close(f.arrived) })
		<-f.gate
	}
	f.mu.Lock()
	if off < 0 || off+int64(len(data)) > int64(len(f.data)) {
		f.mu.Unlock()
		return 0, syscall.ENOSPC
	}
	copy(f.data[off:], data)
	seen := f.seen
	if gated {
		select {
		case <-f.applied:
		default:
			close(f.applied)
		}
	}
	f.mu.Unlock()
	if seen != nil {
		seen(data, off)
	}
	return uint32(len(data)), 0
}

func (f *gatedFile) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	return 0
}
func (f *gatedFile) Flush(ctx context.Context, fh fs.FileHandle) syscall.Errno { return 0 }

// gatedRoot is the FUSE root directory holding the file "disk".
type gatedRoot struct {
	fs.Inode
	file *gatedFile
}

func (r *gatedRoot) OnAdd(ctx context.Context) {
	r.AddChild("disk", r.NewPersistentInode(ctx, r.file, fs.StableAttr{Mode: fuse.S_IFREG}), false)
}

// mountGated mounts a gated file of size bytes and returns it and its path.
func mountGated(t *testing.T, size int) (*gatedFile, string) {
	t.Helper()
	dir := t.TempDir()
	f := &gatedFile{data: make([]byte, size), gate: make(chan struct{}), arrived: make(chan struct{}), applied: make(chan struct{})}
	srv, err := fs.Mount(dir, &gatedRoot{file: f}, &fs.Options{
		MountOptions: fuse.MountOptions{
			FsName: "hostile-gated", Name: "hostile", DirectMount: true, DirectMountStrict: true,
			MaxWrite: 1 << 20, DisableSplice: true,
			ExtraCapabilities: fuse.CAP_ASYNC_DIO,
		},
	})
	if err != nil {
		t.Fatalf("FUSE mount (needs root and /dev/fuse): %v", err)
	}
	t.Cleanup(func() {
		f.openGate()
		// The daemon has exited, but the kernel releases its file
		// asynchronously (a FUSE RELEASE that this process answers): the
		// mount is busy until then, which takes a while on a loaded
		// machine.
		var err error
		if _, ok := waitFor(guard(time.Second), func() bool {
			err = srv.Unmount()
			return !errors.Is(err, syscall.EBUSY)
		}); !ok || err != nil {
			t.Errorf("FUSE unmount: %v", err)
		}
	})
	return f, filepath.Join(dir, "disk")
}

func (f *gatedFile) openGate() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.gate:
	default:
		close(f.gate)
	}
}

// TestStaleWriteAfterReconnect is issue 8 defect 7: a Write of a host is
// held in the backend (its FUSE write waits at the gate); the host's
// connections die; the same host (same NQN and host ID) connects again and
// writes other data to the same block. The old association's write must
// finish before the new association's write reaches the backend (or be
// dropped before it executes), as nvmet waits for the old submission
// queue's references: once the new write is acknowledged, the block must
// never change back. The gate opens as soon as the new write reaches the
// file, or 3 s after it was sent if it does not (a correct target holds it
// back); then the new write must complete and the block must hold the new
// data, in the file and for a reader.
//
// Bound: the new write completes within guard(2s) of the gate opening.
func TestStaleWriteAfterReconnect(t *testing.T) {
	t.Parallel()
	file, path := mountGated(t, 16<<20)
	newMarker := []byte("NEW-DATA")
	newArrived := make(chan struct{})
	var newOnce sync.Once
	file.mu.Lock()
	file.seen = func(data []byte, off int64) {
		if bytes.HasPrefix(data, newMarker) {
			newOnce.Do(func() { close(newArrived) })
		}
	}
	file.mu.Unlock()
	d := startDaemon(t, config{
		Backend: "{kind: file, path: " + path + ", no_lock: true}",
	})
	// Cleanups run last first: open the gate before the daemon is stopped,
	// so that its shutdown does not wait for a held write.
	t.Cleanup(file.openGate)
	block := func(marker []byte) []byte {
		b := bytes.Repeat([]byte{'.'}, 4096)
		copy(b, marker)
		return b
	}

	// The old association: its Write waits in the backend.
	old := evilHost(t, d, evilNQN, evilID, 60000, rawpeer.Options{})
	oq := ioQueue(t, d, old, 1, 16, rawpeer.Options{})
	src := oq.Register(block(gateMarker), true, false)
	sqe := rwSQE(true, 0, 4096, src, 0)
	sqe.SetCID(1)
	if err := oq.Command(sqe, nil); err != nil {
		t.Fatal(err)
	}
	go func() { // answer the target's Read Request for the data
		for {
			if _, err := oq.Next(time.Time{}); err != nil {
				return
			}
		}
	}()
	select {
	case <-file.arrived:
	case <-time.After(guard(2 * time.Second)):
		t.Fatal("the old Write never reached the backend")
	}
	// The old association dies with its Write in the backend: both
	// connections reset (the test waits until the kernel has taken the
	// RSTs; the daemon's receive loops, blocked in read, see them at once,
	// long before the new association has connected).
	ports := []int{oq.LocalAddr().Port, old.Admin.LocalAddr().Port}
	_ = oq.Abort()
	_ = old.Admin.Abort()
	for _, p := range ports {
		if _, ok := waitFor(guard(2*time.Second), func() bool {
			_, _, _, theirsOK := tcpPair(d.port, p)
			return !theirsOK
		}); !ok {
			t.Fatal("the RST did not reach the daemon's socket")
		}
	}

	// The same host again, writing new data to the same block.
	type result struct {
		cqe nvmeof.CQE
		err error
	}
	newAssoc := func() result {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		h, err := rawpeer.ConnectHost(ctx, d.addr, subNQN, evilNQN, evilID, 60000, rawpeer.Options{})
		if err != nil {
			return result{err: err}
		}
		defer h.Close()
		if err := h.Enable(deadline(2 * time.Minute)); err != nil {
			return result{err: err}
		}
		q, err := h.ConnectIO(ctx, 1, 16, rawpeer.Options{})
		if err != nil {
			return result{err: err}
		}
		src := q.Register(block(newMarker), true, false)
		cqe, err := q.Do(rwSQE(true, 0, 4096, src, 0), nil, deadline(2*time.Minute))
		return result{cqe, err}
	}
	done := make(chan result, 1)
	sent := time.Now()
	go func() { done <- newAssoc() }()
	var res *result
	select {
	case <-newArrived:
		t.Logf("the new association's write reached the backend %v after it was sent, while the old one was still held", time.Since(sent).Round(time.Millisecond))
	case r := <-done:
		res = &r
		t.Logf("the new association's write ended while the old one was held: %v %v", r.cqe.Status(), r.err)
	case <-time.After(3 * time.Second):
		t.Logf("the new association's write did not reach the backend in 3 s while the old one was held")
	}
	file.openGate()
	gateOpened := time.Now()
	if res == nil {
		select {
		case r := <-done:
			res = &r
		case <-time.After(guard(2 * time.Second)):
			t.Fatalf("the new association's write did not complete %v after the old one was released", guard(2*time.Second))
		}
	}
	d.alive(t, "after the reconnect")
	// The old write is in the backend: it completes once the gate is open.
	select {
	case <-file.applied:
	case <-time.After(guard(2 * time.Second)):
		t.Fatal("the old association's write did not complete after the gate opened")
	}
	if res.err != nil || res.cqe.Status() != nvmeof.StatusSuccess {
		// Refused while the old write was held (a target may make the
		// host retry): once it is done, the host gets in and writes.
		t.Logf("the new association was refused (%v, %v) %v after the gate opened; trying again", res.cqe.Status(), res.err, time.Since(gateOpened).Round(time.Millisecond))
		r := newAssoc()
		if r.err != nil || r.cqe.Status() != nvmeof.StatusSuccess {
			t.Fatalf("the host cannot write after its old association's write completed: %v %v", r.cqe.Status(), r.err)
		}
	}
	file.mu.Lock()
	got := append([]byte(nil), file.data[:8]...)
	file.mu.Unlock()
	if !bytes.Equal(got, newMarker) {
		t.Errorf("the acknowledged new write was overwritten by the old association's write: the block holds %q, want %q", got, newMarker)
	}
	d.healthy(t, "after the stale write")
}
