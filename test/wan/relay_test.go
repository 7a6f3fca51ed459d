// Package wan tests nvmetd across what a wide-area path does to a TCP
// stream. The loopback part (go test, part of make test): a re-segmenting
// middlebox (internal/testing/relay) between the Go host and the target,
// over iWARP and NVMe/TCP, with the versioned workload and a full sweep,
// and the relay losing its state (every connection cut) in the middle of
// the iWARP run. The emulated paths (delay, loss, reordering, an outage)
// need sch_netem, which runs in the lab guest: test/wan/wan.sh (make wan).
package wan

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/internal/testing/relay"
	"github.com/nvmetd/nvmetd/internal/testing/verify"
	"github.com/nvmetd/nvmetd/target"
	"github.com/nvmetd/nvmetd/test/interop/lab"
)

// TestMain stops the WAN lab's VM (if a test booted one) and then checks
// that no goroutine leaked.
func TestMain(m *testing.M) {
	code := lab.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

const (
	subNQN  = "nqn.2024-01.io.nvmetd.wan:relay"
	hostNQN = "nqn.2014-08.org.nvmexpress:uuid:6e766d65-7464-4c61-9b00-0000000077a0"
	// hang bounds every wait: a generous bound, not a speed requirement
	// (the suite runs on a loaded two-CPU machine).
	hang = 2 * time.Minute
	// devSize is the namespace: small, so that the sweep reads it whole.
	devSize = 8 << 20
)

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startTarget runs a target on loopback with one memory namespace, an
// iWARP port and an NVMe/TCP port; it returns their addresses.
func startTarget(t *testing.T) (rdmaAddr, tcpAddr string) {
	t.Helper()
	p1, p2 := freePort(t), freePort(t)
	cfg := &target.Config{
		Ports: []target.PortConfig{
			{ID: 1, Address: "127.0.0.1", ServiceID: p1, Subsystems: []string{subNQN}},
			{ID: 2, Address: "127.0.0.1", ServiceID: p2, Transport: target.TransportTCP, Subsystems: []string{subNQN}},
		},
		Subsystems: []target.SubsystemConfig{{
			NQN: subNQN, AllowAnyHost: true,
			Namespaces: []target.NamespaceConfig{{NSID: 1, Backend: target.BackendConfig{Kind: "memory", Size: strconv.Itoa(devSize)}}},
		}},
		Tuning: target.TuningConfig{IOWorkers: 4, HealthInterval: time.Hour},
	}
	tg, err := target.New(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		defer cancel()
		if err := tg.Shutdown(ctx); err != nil {
			t.Errorf("target shutdown: %v", err)
		}
	})
	return "127.0.0.1:" + strconv.Itoa(p1), "127.0.0.1:" + strconv.Itoa(p2)
}

// startRelay puts a re-segmenting relay in front of addr: writes of 1 to
// 3000 bytes (FPDUs and PDUs cut anywhere, several in one segment),
// reads coalesced for up to 2 ms, pauses of up to 200 µs.
func startRelay(t *testing.T, addr string) *relay.Relay {
	t.Helper()
	r, err := relay.Start(relay.Config{Target: addr, MinWrite: 1, MaxWrite: 3000, Coalesce: 2 * time.Millisecond, MaxDelay: 200 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	t.Logf("relay %s → %s, seed %#x", r.Addr(), addr, r.Seed())
	return r
}

// workloads runs two versioned workloads on dev (disjoint ranges): 4 KiB
// blocks (in-capsule/inline writes, one FPDU or PDU) and 128 KiB blocks
// (many FPDUs, R2T and H2CData), each write read back.
type workloads struct{ small, large *verify.Workload }

func startWorkloads(t *testing.T, dev verify.Device, workers int) *workloads {
	t.Helper()
	const split = devSize / 2
	small, err := verify.Start(dev, verify.Config{BlockSize: 4096, Blocks: split / 4096, Workers: workers, ReadBack: true, Writer: 1})
	if err != nil {
		t.Fatal(err)
	}
	large, err := verify.Start(dev, verify.Config{BlockSize: 128 << 10, First: split / (128 << 10), Workers: workers / 2, ReadBack: true, Writer: 2})
	if err != nil {
		small.Stop()
		t.Fatal(err)
	}
	w := &workloads{small, large}
	t.Cleanup(w.stop)
	return w
}

func (w *workloads) stop() { w.small.Stop(); w.large.Stop() }

// waitWrites waits until each workload has n more acknowledged writes
// than it had, or fails the test after hang.
func (w *workloads) waitWrites(t *testing.T, n int64) {
	t.Helper()
	s0, l0 := w.small.Stats().Writes, w.large.Stats().Writes
	deadline := time.Now().Add(hang)
	for w.small.Stats().Writes < s0+n || w.large.Stats().Writes < l0+n {
		if err := w.small.Stats().Err(); err != nil {
			t.Fatalf("4 KiB workload: %v", err)
		}
		if err := w.large.Stats().Err(); err != nil {
			t.Fatalf("128 KiB workload: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no progress: %d/%d writes of 4 KiB, %d/%d of 128 KiB", w.small.Stats().Writes-s0, n, w.large.Stats().Writes-l0, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// finish stops both workloads and sweeps the whole device through dev:
// no I/O error, every block its last acknowledged write or a later one.
func (w *workloads) finish(t *testing.T, dev verify.Device) {
	t.Helper()
	w.stop()
	for name, wl := range map[string]*verify.Workload{"4 KiB": w.small, "128 KiB": w.large} {
		s := wl.Stats()
		if err := s.Err(); err != nil {
			t.Errorf("%s workload: %v", name, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		r := wl.Sweep(ctx, dev)
		cancel()
		if err := r.Err(); err != nil {
			t.Errorf("%s sweep: %v\n%s", name, err, r)
			continue
		}
		t.Logf("%s: %d writes, %d reads back; sweep: %s", name, s.Writes, s.Reads, r)
	}
}

func checkResegmented(t *testing.T, r *relay.Relay) {
	t.Helper()
	s := r.Stats()
	t.Logf("relay: %d connections, %d bytes in %d writes from %d reads; %d reads split, %d writes joined",
		s.Conns, s.Bytes, s.Writes, s.Reads, s.Split, s.Joined)
	if s.Split == 0 || s.Joined == 0 {
		t.Errorf("the relay did not re-segment: %d reads split, %d writes joined", s.Split, s.Joined)
	}
}

// TestRelayIWARP: nvmeof's host (initiator) ⇄ nvmetd over iWARP through
// the re-segmenting relay, then the relay cuts every connection (a
// middlebox that lost its state) in the middle of the load: the host
// reconnects, its I/O resumes with no error, and the sweep finds every
// acknowledged write.
func TestRelayIWARP(t *testing.T) {
	rdmaAddr, _ := startTarget(t)
	r := startRelay(t, rdmaAddr)
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	c, err := initiator.Connect(ctx, initiator.Config{
		Address: r.Addr(), SubNQN: subNQN, HostNQN: hostNQN, HostID: [16]byte{0x77, 0xa0},
		NrIOQueues: 2, QueueSize: 32, ReconnectDelay: 100 * time.Millisecond, CtrlLossTimeout: hang,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		defer cancel()
		_ = c.Close(ctx)
	})
	ns := c.Namespace(1)
	if ns == nil {
		t.Fatal("no namespace 1")
	}
	w := startWorkloads(t, ns, 8)
	w.waitWrites(t, 50)
	r.Cut()
	// Through the cut: every I/O parked on the lost queues is sent again
	// on the new association; none fails.
	deadline := time.Now().Add(hang)
	for c.Reconnects() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the host never reconnected after the relay cut its connections")
		}
		time.Sleep(20 * time.Millisecond)
	}
	w.waitWrites(t, 50)
	w.finish(t, ns)
	checkResegmented(t, r)
	t.Logf("host reconnects: %d", c.Reconnects())
}

// TestRelayNVMeTCP: a Go NVMe/TCP host (tcphost_test.go; four I/O queues,
// each its own connection) ⇄ nvmetd's NVMe/TCP port through the relay:
// PDUs split across segments and several in one.
func TestRelayNVMeTCP(t *testing.T) {
	_, tcpAddr := startTarget(t)
	r := startRelay(t, tcpAddr)
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	h, err := connectTCPHost(ctx, r.Addr(), subNQN, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if h.Size() != devSize {
		t.Fatalf("namespace of %d bytes, want %d", h.Size(), devSize)
	}
	w := startWorkloads(t, h, 8)
	w.waitWrites(t, 100)
	w.finish(t, h)
	checkResegmented(t, r)
}
