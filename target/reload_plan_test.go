package target

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
)

func fileNS(nsid uint32, path, size string) NamespaceConfig {
	return NamespaceConfig{NSID: nsid, Backend: BackendConfig{Kind: "file", Path: path, Size: size}}
}

// tryReload is reload that returns the error.
func tryReload(t testing.TB, s *server, cfg *Config) error {
	t.Helper()
	c := cfg.Clone()
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return s.reload(c)
}

// verifier writes a block and reads it back on one I/O queue, over and
// over, counting commands that fail and reads that differ.
type verifier struct {
	ops, errs, corrupt int
	firstErr           error
}

func (v *verifier) round(t testing.TB, q *rdma.HostQueue, nsid uint32, i int) {
	lba := uint64(i % 64 * 8)
	data := pattern(4096, i)
	if err := do(t, q, rw(true, nsid, lba, data, 512)); err != nil {
		v.errs++
		v.firstErr = cmpOr(v.firstErr, err)
		return
	}
	got := make([]byte, 4096)
	if err := do(t, q, rw(false, nsid, lba, got, 512)); err != nil {
		v.errs++
		v.firstErr = cmpOr(v.firstErr, err)
		return
	}
	if !bytes.Equal(got, data) {
		v.corrupt++
	}
	v.ops++
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// TestReloadRefusedKeepsServing reproduces issue 11's first item: a reload
// whose namespace path points at a directory used to be applied (the live
// namespace closed, hosts got Internal Path Error). Now it is refused
// naming the field, and a host running verified I/O throughout sees no
// error.
func TestReloadRefusedKeepsServing(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "ns1.img")
	cfg := testConfig(t, fileNS(1, img, "4MiB"))
	s := startServer(t, cfg)
	h := mustConnect(t, portAddr(s, 1), testSubNQN)
	h.setup(1)

	bad := []struct {
		name  string
		mod   func(c *Config)
		field string
	}{
		{"directory", func(c *Config) { c.Subsystems[0].Namespaces[0].Backend.Path = dir }, "subsystems[0].namespaces[0].backend.path"},
		{"/dev/zero", func(c *Config) { c.Subsystems[0].Namespaces[0].Backend.Path = "/dev/zero" }, "subsystems[0].namespaces[0].backend.path"},
		{"missing parent", func(c *Config) {
			c.Subsystems[0].Namespaces[0].Backend.Path = filepath.Join(dir, "nodir", "x.img")
		}, "subsystems[0].namespaces[0].backend.path"},
		{"added namespace on a directory", func(c *Config) {
			c.Subsystems[0].Namespaces = append(c.Subsystems[0].Namespaces, fileNS(2, dir, "1MiB"))
		}, "subsystems[0].namespaces[1].backend.path"},
		{"new subsystem on a directory", func(c *Config) {
			c.Subsystems = append(c.Subsystems, SubsystemConfig{NQN: testSubNQN2, AllowAnyHost: true, Namespaces: []NamespaceConfig{fileNS(1, dir, "1MiB")}})
		}, "subsystems[1].namespaces[0].backend.path"},
		{"port on a taken address", func(c *Config) {
			c.Ports = append(c.Ports, PortConfig{ID: 2, Address: "127.0.0.1", ServiceID: takenPort(t), Subsystems: []string{testSubNQN}})
		}, "ports[1].address"},
	}
	var v verifier
	for i := range 20 {
		v.round(t, h.io[0], 1, i)
	}
	for _, b := range bad {
		nc := cfg.Clone()
		b.mod(nc)
		// The host's verified I/O runs while the reload is tried.
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := 0; ; i++ {
				v.round(t, h.io[0], 1, i)
				select {
				case <-done:
					if i > 20 {
						return
					}
				default:
				}
			}
		})
		err := tryReload(t, s, nc)
		close(done)
		wg.Wait()
		var ve *ValidationError
		if !errors.Is(err, ErrReloadRefused) || !errors.As(err, &ve) || ve.Problems[0].Field != b.field {
			t.Fatalf("%s: reload error %v, want it refused naming %s", b.name, err, b.field)
		}
		st := s.status()
		if got := st.Subsystems[0].Namespaces[0]; got.State != NamespaceOnline || got.Backend.Path != img {
			t.Fatalf("%s: namespace 1 after the refused reload: %+v", b.name, got)
		}
		if len(st.Subsystems) != 1 || len(st.Ports) != 1 || len(st.Subsystems[0].Namespaces) != 1 {
			t.Fatalf("%s: the refused reload changed the configuration of record: %+v", b.name, st)
		}
	}
	if v.errs != 0 || v.corrupt != 0 {
		t.Fatalf("verified I/O across refused reloads: %d rounds, %d errors (first: %v), %d corrupt reads", v.ops, v.errs, v.firstErr, v.corrupt)
	}
	t.Logf("%d verified write+read rounds, no errors", v.ops)
	// Nothing was created by the refused reloads.
	if _, err := os.Stat(filepath.Join(dir, "nodir")); err == nil {
		t.Fatal("a refused reload created a directory")
	}
	h.alive("after the refused reloads")
}

// takenPort returns a loopback port that stays taken until the test ends.
func takenPort(t testing.TB) int {
	port := freePort(t)
	ln, err := net.Listen("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return port
}

// TestReloadSameStorage: a namespace changed on the same file (grown) is
// opened before the old one closes, keeps its data, and holds the file lock
// afterwards; the host sees no error.
func TestReloadSameStorage(t *testing.T) {
	img := filepath.Join(t.TempDir(), "ns1.img")
	cfg := testConfig(t, fileNS(1, img, "4MiB"))
	s := startServer(t, cfg)
	h := mustConnect(t, portAddr(s, 1), testSubNQN)
	h.setup(1)
	data := pattern(4096, 9)
	if err := do(t, h.io[0], rw(true, 1, 0, data, 512)); err != nil {
		t.Fatal(err)
	}
	aen := h.aer()
	cfg.Subsystems[0].Namespaces[0].Backend.Size = "8MiB"
	if err := tryReload(t, s, cfg); err != nil {
		t.Fatalf("reload: %v", err)
	}
	waitAEN(t, aen, nvmeof.AENNSAttrChanged)
	got := make([]byte, 4096)
	if err := do(t, h.io[0], rw(false, 1, 0, got, 512)); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read after the change: %v (equal %v)", err, bytes.Equal(got, data))
	}
	if st := s.status(); st.Subsystems[0].Namespaces[0].Backend.Size != 8<<20 {
		t.Fatalf("size after the change: %d", st.Subsystems[0].Namespaces[0].Backend.Size)
	}
	// The new backend took the lock once the old one closed.
	if b, err := backend.Open(backend.Config{Kind: "file", Path: img}); !errors.Is(err, backend.ErrBusy) {
		if b != nil {
			b.Close()
		}
		t.Fatalf("open of the namespace's file by another opener: %v, want ErrBusy", err)
	}
}

// TestFailedNamespaceRetried: a namespace that fails at start is visible
// (failed, with the field) and retried on every reload, even one with no
// changes (issue 11: after the file was created, SIGHUP said "no changes").
func TestFailedNamespaceRetried(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "later.img")
	ns := fileNS(2, img, "")
	ns.Backend.MustExist = true
	cfg := testConfig(t, memNS(1, "1MiB"), ns)
	s := startServer(t, cfg)
	h := mustConnect(t, portAddr(s, 1), testSubNQN)
	h.setup(1)
	st := s.status().Subsystems[0].Namespaces[1]
	if st.State != NamespaceFailed || st.Field != "subsystems[0].namespaces[1].backend.path" || !strings.Contains(st.Error, "must_exist") {
		t.Fatalf("namespace 2 at start: %+v", st)
	}
	// Still missing: the retry fails, the reload is not refused.
	if err := tryReload(t, s, cfg); err != nil {
		t.Fatalf("reload with the namespace still missing: %v", err)
	}
	if st := s.status().Subsystems[0].Namespaces[1]; st.State != NamespaceFailed {
		t.Fatalf("namespace 2 after a failed retry: %+v", st)
	}
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	aen := h.aer()
	if err := tryReload(t, s, cfg); err != nil {
		t.Fatalf("reload: %v", err)
	}
	waitAEN(t, aen, nvmeof.AENNSAttrChanged)
	if ids := h.changedNS(); !slices.Equal(ids, []uint32{2}) {
		t.Fatalf("changed namespaces %v", ids)
	}
	if ids := h.activeNS(); !slices.Equal(ids, []uint32{1, 2}) {
		t.Fatalf("active namespaces %v", ids)
	}
	if err := do(t, h.io[0], rw(true, 2, 0, pattern(4096, 1), 512)); err != nil {
		t.Fatalf("write to the retried namespace: %v", err)
	}
}

// TestReloadDrainBounded (issue 8): a reload waits for a removed
// namespace's commands in flight for at most its drain timeout, and
// Shutdown, which needs the lock the reload holds, is never stuck behind
// that wait.
func TestReloadDrainBounded(t *testing.T) {
	cfg := testConfig(t, memNS(1, "1MiB"), memNS(2, "1MiB"))
	s := startServer(t, cfg)

	// A command that never completes: a reference on namespace 2.
	stuck := func() *namespace {
		ns, st := s.subsystems[testSubNQN].ns.Load().lookup(2)
		if st != nvmeof.StatusSuccess {
			t.Fatalf("lookup: %v", st)
		}
		return ns
	}

	// 1. The drain timeout ends the wait; the reload says so.
	ns := stuck()
	s.drainTimeout = time.Millisecond
	cfg.Subsystems[0].Namespaces = cfg.Subsystems[0].Namespaces[:1]
	err := tryReload(t, s, cfg)
	if err == nil || !strings.Contains(err.Error(), "still in flight") {
		t.Fatalf("reload with a stuck command: %v", err)
	}
	ns.put() // the command ends: the backend closes in the background
	waitFor(t, "the retired namespace to close", hang, func() bool {
		return errors.Is(ns.be.ReadAt(make([]byte, 512), 0), backend.ErrClosed)
	})

	// 2. Shutdown during a reload's drain: the drain gives up at once.
	cfg.Subsystems[0].Namespaces = append(cfg.Subsystems[0].Namespaces, memNS(3, "1MiB"))
	if err := tryReload(t, s, cfg); err != nil {
		t.Fatal(err)
	}
	ns3, _ := s.subsystems[testSubNQN].ns.Load().lookup(3)
	s.drainTimeout = time.Hour
	cfg.Subsystems[0].Namespaces = cfg.Subsystems[0].Namespaces[:1]
	reloaded := make(chan error, 1)
	go func() { reloaded <- tryReload(t, s, cfg) }()
	waitFor(t, "the reload to wait for namespace 3", hang, func() bool { return ns3.ref.Load()&refClosing != 0 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- s.shutdown(ctx) }()
	// Hang guards, not timings: without the fix both wait for an hour.
	select {
	case err := <-reloaded:
		if err == nil {
			t.Fatal("reload interrupted by shutdown returned nil")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the reload's drain did not end when shutdown began")
	}
	select {
	case <-shut:
	case <-time.After(90 * time.Second):
		t.Fatal("shutdown stuck behind the reload")
	}
	ns3.put()
}
