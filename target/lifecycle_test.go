package target

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
)

// TestShutdownKeepsAcknowledgedWrites: writes flow on several queues while
// the target shuts down; every write the host saw acknowledged is in the
// file afterwards.
func TestShutdownKeepsAcknowledgedWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ns.img")
	const nsBlocks = 1 << 30 / 512
	cfg := testConfig(t, NamespaceConfig{NSID: 1, Backend: BackendConfig{Kind: "file", Path: path, Size: "1GiB"}})
	c := cfg.Clone()
	c.ApplyDefaults()
	tgt, err := New(c, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := tgt.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	h := mustConnect(t, portAddr(tgt.s, 1), testSubNQN)
	h.setup(3)

	type ack struct {
		lba  uint64
		data []byte
	}
	var mu sync.Mutex
	var acked []ack
	var nvmeErrs []error
	var next uint64
	stop := make(chan struct{})
	// enough is closed at the 100th acknowledged write: the shutdown comes
	// in the middle of the load whatever the machine's speed.
	enough := make(chan struct{})
	var wg sync.WaitGroup
	for qi, q := range h.io {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan *rdma.HostRequest, 16)
			inflight := 0
			for i := 0; ; i++ {
				select {
				case <-stop:
				default:
					mu.Lock()
					lba := next
					room := lba+16 <= nsBlocks
					if room && inflight < 16 {
						next += 16
					}
					mu.Unlock()
					if room && inflight < 16 {
						r := rw(true, 1, lba, pattern(8192, qi*100000+i), 512)
						r.Done = func(r *rdma.HostRequest) { done <- r }
						if q.Submit(r) == nil {
							inflight++
							continue
						}
					}
				}
				if inflight == 0 {
					return
				}
				r := <-done
				inflight--
				switch err := r.Status(); {
				case err == nil:
					mu.Lock()
					acked = append(acked, ack{r.SQE.RWCmd().SLBA(), r.Data})
					if len(acked) == 100 {
						close(enough)
					}
					mu.Unlock()
				case errors.Is(err, rdma.ErrQueueClosed):
					// Never acknowledged: the host would retry it.
				default:
					mu.Lock()
					nvmeErrs = append(nvmeErrs, err)
					mu.Unlock()
				}
			}
		}()
	}
	// Shut down while writes flow, once some have been acknowledged
	// (waiting for a count, not a time: on a loaded machine 300 ms may not
	// see any).
	waitFor(t, "100 acknowledged writes", hang, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 100 || len(nvmeErrs) > 0
	})
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	if err := tgt.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	close(stop)
	wg.Wait()
	if len(nvmeErrs) > 0 {
		t.Fatalf("%d writes failed with an NVMe status during shutdown, first %v", len(nvmeErrs), nvmeErrs[0])
	}
	for _, q := range append(h.io, h.admin) {
		select {
		case <-q.Done():
		case <-time.After(hang):
			t.Fatal("queue still connected after shutdown")
		}
	}
	if err := tgt.Shutdown(ctx); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}
	if st := tgt.Status(); len(st.Controllers) != 0 || st.Ports[0].Listening {
		t.Fatalf("status after shutdown %+v", st)
	}
	// The backend is closed (its lock released): open it again and check.
	if len(acked) < 100 {
		t.Fatalf("only %d writes acknowledged", len(acked))
	}
	be, err := backend.Open(backend.Config{Kind: backend.KindFile, Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	for _, a := range acked {
		got := make([]byte, len(a.data))
		if err := be.ReadAt(got, int64(a.lba)*512); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, a.data) {
			t.Fatalf("acknowledged write at LBA %d lost", a.lba)
		}
	}
	t.Logf("%d acknowledged writes verified after shutdown", len(acked))
}

func TestLifecycle(t *testing.T) {
	if _, err := New(nil, zap.NewNop()); err == nil {
		t.Fatal("nil config accepted")
	}
	if _, err := New(&Config{Ports: []PortConfig{{Address: "nowhere"}}}, zap.NewNop()); err == nil {
		t.Fatal("invalid config accepted")
	}
	cfg := testConfig(t, memNS(1, "1MiB"), NamespaceConfig{NSID: 2, Backend: BackendConfig{Kind: "file", Path: "/nonexistent/dir/x.img", Size: "1MiB", MustExist: true}})
	tgt, err := New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	// Before Start: the configuration, nothing running.
	if err := tgt.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := tgt.Healthy(); err == nil {
		t.Fatal("healthy before start")
	}
	st := tgt.Status()
	if !st.StartedAt.IsZero() || st.Ports[0].Listening || st.Subsystems[0].Namespaces[0].State != NamespaceStopped {
		t.Fatalf("status before start %+v", st)
	}
	if err := tgt.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer tgt.Shutdown(context.Background())
	if err := tgt.Start(context.Background()); err == nil {
		t.Fatal("second start")
	}
	if err := tgt.Healthy(); err != nil {
		t.Fatal(err)
	}
	st = tgt.Status()
	ns := st.Subsystems[0].Namespaces
	if st.StartedAt.IsZero() || !st.Ports[0].Listening || ns[0].State != NamespaceOnline || ns[1].State != NamespaceFailed || ns[1].Error == "" {
		t.Fatalf("status %+v", st)
	}
	if ns[0].NGUID == "" || ns[0].UUID == "" || ns[0].EUI64 == "" || !ns[0].Backend.Health.CheckedAt.After(time.Time{}) || ns[0].Backend.Health.Summary() == "not checked" {
		t.Fatalf("namespace status %+v", ns[0])
	}
	if _, err := tgt.HealthReport(testSubNQN, 1); !errors.Is(err, backend.ErrNotSupported) {
		t.Fatalf("health report of a memory namespace: %v", err)
	}
	if _, err := tgt.HealthReport(testSubNQN, 9); err == nil {
		t.Fatal("health report of a missing namespace")
	}
	// The failed namespace is invisible; the other works.
	h := mustConnect(t, portAddr(tgt.s, 1), testSubNQN)
	h.setup(1)
	if ids := h.activeNS(); len(ids) != 1 || ids[0] != 1 {
		t.Fatalf("active %v", ids)
	}
}

// TestStartFails: a port that cannot listen fails Start, which closes what
// it opened.
func TestStartFails(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	path := filepath.Join(t.TempDir(), "a.img")
	cfg := testConfig(t, NamespaceConfig{NSID: 1, Backend: BackendConfig{Kind: "file", Path: path, Size: "1MiB"}})
	cfg.Ports = append(cfg.Ports, PortConfig{ID: 2, Address: "127.0.0.1", ServiceID: ln.Addr().(*net.TCPAddr).Port})
	tgt, err := New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := tgt.Start(context.Background()); err == nil {
		t.Fatal("start with a busy port")
	}
	// The file's lock was released.
	be, err := backend.Open(backend.Config{Kind: backend.KindFile, Path: path})
	if err != nil {
		t.Fatalf("backend still held after a failed start: %v", err)
	}
	be.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
}
