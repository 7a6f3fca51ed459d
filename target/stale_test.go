package target

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
)

// gatedBackend holds writes whose first byte is mark at the gate until the
// test opens it: a backend that is slow exactly when the test says, with
// no timing involved.
type gatedBackend struct {
	backend.Backend
	mark    byte
	entered chan struct{}
	open    chan struct{}
	once    sync.Once
}

func (g *gatedBackend) WriteAt(p []byte, off int64, fua bool) error {
	if len(p) > 0 && p[0] == g.mark {
		g.entered <- struct{}{}
		<-g.open
	}
	return g.Backend.WriteAt(p, off, fua)
}

// gate wraps namespace nsid's backend of a started server (before any I/O).
func gate(t *testing.T, s *server, nsid uint32, mark byte) *gatedBackend {
	t.Helper()
	ns := s.subsystems[testSubNQN].ns.Load().byID[nsid]
	g := &gatedBackend{Backend: ns.be, mark: mark, entered: make(chan struct{}, 16), open: make(chan struct{})}
	ns.be = g
	// A failing test must not leave a write stuck at the gate: shutdown
	// would wait for it.
	t.Cleanup(g.release)
	return g
}

// release opens the gate (once).
func (g *gatedBackend) release() { g.once.Do(func() { close(g.open) }) }

// submit sends r on q and returns a channel that gets its result.
func submit(t *testing.T, q *rdma.HostQueue, r *rdma.HostRequest) <-chan error {
	t.Helper()
	ch := make(chan error, 1)
	r.Done = func(r *rdma.HostRequest) { ch <- r.Status() }
	if err := q.Submit(r); err != nil {
		t.Fatal(err)
	}
	return ch
}

// kill drops a host's connections as a crash or network loss would, and
// waits until the target has torn its controller down.
func kill(t *testing.T, s *server, h *host) {
	t.Helper()
	for _, q := range h.io {
		q.Abort(errors.New("test: host gone"))
	}
	h.admin.Abort(errors.New("test: host gone"))
	waitFor(t, "the target to tear the controller down", hang, func() bool { return len(s.allControllers()) == 0 })
}

func gatedFileNS(t *testing.T, workers int) NamespaceConfig {
	return NamespaceConfig{NSID: 1, IOWorkers: workers, Backend: BackendConfig{Kind: "file", Path: filepath.Join(t.TempDir(), "ns1"), Size: "4MiB"}}
}

// TestStaleWriteAfterReconnect: a write of the host's previous association
// that is still running at the backend when the host reconnects must land
// before the new association can write the same blocks; otherwise the old
// data would overwrite the new (issue "Hostile hosts", item 7). The new
// admin Connect waits until the old association's commands are done.
func TestStaleWriteAfterReconnect(t *testing.T) {
	s := startServer(t, testConfig(t, gatedFileNS(t, 4)))
	g := gate(t, s, 1, 0xEE)
	addr := portAddr(s, 1)

	h1 := mustConnect(t, addr, testSubNQN)
	h1.setup(1)
	old := bytes.Repeat([]byte{0xEE}, 4096)
	oldDone := submit(t, h1.io[0], rw(true, 1, 0, old, 512))
	<-g.entered // the old write is at the backend
	kill(t, s, h1)
	if err := <-oldDone; err == nil {
		t.Fatal("the old write was acknowledged although its connection died")
	}

	// The host comes back and writes the same blocks.
	newData := pattern(4096, 3)
	var wg sync.WaitGroup
	newDone := make(chan error, 1)
	var h2 *host
	wg.Add(1)
	go func() {
		defer wg.Done()
		var err error
		h2, err = connectHost(t, addr, testSubNQN, testHostNQN, testKATO)
		if err != nil {
			newDone <- err
			return
		}
		h2.setup(1)
		newDone <- do(t, h2.io[0], rw(true, 1, 0, newData, 512))
	}()
	// Either the new association is held back (right), or its write
	// completes while the old one still runs at the backend (wrong).
	waiting := make(chan struct{})
	go func() {
		for s.drainWaits.Load() == 0 {
			time.Sleep(time.Millisecond)
			select {
			case <-newDone:
				newDone <- errors.New("completed early")
				return
			default:
			}
		}
		close(waiting)
	}()
	select {
	case <-waiting:
	case err := <-newDone:
		t.Fatalf("the new association's write finished (%v) while the old association's write was still running at the backend", err)
	}
	g.release() // the old write lands now
	if err := <-newDone; err != nil {
		t.Fatalf("new write: %v", err)
	}
	wg.Wait()
	got := make([]byte, 4096)
	if err := do(t, h2.io[0], rw(false, 1, 0, got, 512)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, newData) {
		t.Fatalf("blocks hold %x..., want the new association's data %x...", got[:8], newData[:8])
	}
}

// TestQueuedCommandsOfAGoneHostAreDropped: a write that waited for a
// backend worker when its connection died is never executed (nobody could
// get its answer; it would land after the host's next writes).
func TestQueuedCommandsOfAGoneHostAreDropped(t *testing.T) {
	s := startServer(t, testConfig(t, gatedFileNS(t, 1)))
	g := gate(t, s, 1, 0xEE)
	addr := portAddr(s, 1)
	ns := s.subsystems[testSubNQN].ns.Load().byID[1]

	h1 := mustConnect(t, addr, testSubNQN)
	h1.setup(1)
	first := submit(t, h1.io[0], rw(true, 1, 0, bytes.Repeat([]byte{0xEE}, 4096), 512))
	<-g.entered // the only worker is busy
	second := submit(t, h1.io[0], rw(true, 1, 8, bytes.Repeat([]byte{0xDD}, 4096), 512))
	waitFor(t, "the second write to wait for a worker", hang, func() bool { return ns.pool.queued() == 1 })
	kill(t, s, h1)
	g.release()
	<-first
	<-second
	waitFor(t, "the worker queue to empty", hang, func() bool { return ns.pool.queued() == 0 })

	h2 := mustConnect(t, addr, testSubNQN)
	h2.setup(1)
	got := make([]byte, 4096)
	if err := do(t, h2.io[0], rw(false, 1, 8, got, 512)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, make([]byte, 4096)) {
		t.Fatalf("LBA 8 holds %x...: the queued write of the dead connection was executed", got[:8])
	}
}

// growable is a file backend whose size follows the file (as an RBD image
// resized with rbd resize): Size stats the file, and the test says when it
// changed.
type growable struct {
	backend.Backend
	path    string
	changed chan struct{}
}

func (g *growable) Size() int64 {
	fi, err := os.Stat(g.path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func (g *growable) SizeChanged() <-chan struct{} { return g.changed }

// TestNamespaceResizedByBackend: a backend resized from outside changes the
// namespace's size; hosts get a Namespace Attribute Changed notice and read
// the new size.
func TestNamespaceResizedByBackend(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ns1")
	s := startServer(t, testConfig(t, NamespaceConfig{NSID: 1, Backend: BackendConfig{Kind: "file", Path: path, Size: "1MiB"}}))
	ns := s.subsystems[testSubNQN].ns.Load().byID[1]
	g := &growable{Backend: ns.be, path: path, changed: make(chan struct{}, 1)}
	ns.be = g
	s.bg.Add(1)
	go s.watchSize(ns, g)
	t.Cleanup(func() { close(g.changed) })

	h := mustConnect(t, portAddr(s, 1), testSubNQN)
	h.setup(1)
	if _, err := h.setFeature(nvmeof.FeatAsyncEventConfig, nvmeof.AECNSAttr); err != nil {
		t.Fatal(err)
	}
	ev := h.aer()
	data := pattern(4096, 9)
	wantStatus(t, "write past the end before the resize", do(t, h.io[0], rw(true, 1, 4096, data, 512)), nvmeof.StatusLBAOutOfRange|nvmeof.StatusDNR)
	if err := os.Truncate(path, 4<<20); err != nil {
		t.Fatal(err)
	}
	g.changed <- struct{}{}
	waitAEN(t, ev, nvmeof.AENNSAttrChanged)
	b, err := h.identify(nvmeof.CNSNamespace, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := nvmeof.ParseIdentifyNamespace(b); id.NSZE() != 8192 || id.NCAP() != 8192 {
		t.Fatalf("NSZE %d NCAP %d after growing to 4 MiB, want 8192", id.NSZE(), id.NCAP())
	}
	// The I/O checks use the new size: the write now passes the LBA
	// check and reaches the backend (this file backend keeps its opening
	// size and refuses it; the rbd backend follows the image and serves
	// it: backend's TestRBDResize).
	if n := ns.nsze.Load(); n != 8192 {
		t.Fatalf("namespace size %d blocks, want 8192", n)
	}
}
