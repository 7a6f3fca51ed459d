package initiator

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/nvmetd/nvmetd/internal/testing/testnode"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/target"
)

// The initiator's tests run against the real target (package target,
// through its public API) on loopback. The cases a correct controller never
// produces come from the target's TestHooks (NVMe level: a rewritten CID,
// status or result, a held command, a dropped queue) and from a raw peer
// between the two (internal/testing/rawpeer.Proxy: wire level).

const (
	testSubNQN  = "nqn.2024-01.io.nvmetd.test:sub1"
	testHostNQN = "nqn.2014-08.org.nvmexpress:uuid:6e766d65-7464-4c61-9b00-00000000abcd"
)

var testHostID = [16]byte{0x6e, 0x76, 0x6d, 0x65, 0x74, 0x64, 0x4c, 0x61, 0x9b, 0, 0, 0, 0, 0, 0xab, 0xcd}

// testTarget is a running target and what its test hooks saw.
type testTarget struct {
	t    testing.TB
	tg   *target.Target
	cfg  *target.Config
	addr string
	dir  string

	// command and response are the test's own hooks, run after the
	// bookkeeping below (nil: proceed).
	command  func(q target.HookQueue, sqe *nvmeof.SQE) target.Verdict
	response func(q target.HookQueue, sqe *nvmeof.SQE, rsp target.HookResponse) target.HookResponse

	mu     sync.Mutex
	queues map[target.HookQueue]bool
	paused bool
	// counts of commands seen: [0] fabrics by FCTYPE, [1] admin and [2]
	// I/O by opcode.
	counts [3][256]atomic.Int64
	lastCC atomic.Uint32
	closed bool
}

// targetOption changes a test target before it starts.
type targetOption func(*testTarget)

// withConfig changes the target's configuration.
func withConfig(f func(*target.Config)) targetOption {
	return func(tt *testTarget) { f(tt.cfg) }
}

// withCommandHook makes the target pass every command through f first.
func withCommandHook(f func(q target.HookQueue, sqe *nvmeof.SQE) target.Verdict) targetOption {
	return func(tt *testTarget) { tt.command = f }
}

// withResponseHook makes the target pass every completion through f.
func withResponseHook(f func(q target.HookQueue, sqe *nvmeof.SQE, rsp target.HookResponse) target.HookResponse) targetOption {
	return func(tt *testTarget) { tt.response = f }
}

// startTarget runs a target on loopback with one subsystem (testSubNQN, any
// host) whose namespace 1 is a 64 MiB file in a temporary directory, and
// shuts it down when the test ends.
func startTarget(t testing.TB, opts ...targetOption) *testTarget {
	t.Helper()
	dir := t.TempDir()
	tt := &testTarget{t: t, dir: dir, queues: map[target.HookQueue]bool{}}
	tt.cfg = &target.Config{
		Ports: []target.PortConfig{{ID: 1, Address: "127.0.0.1", ServiceID: freePort(t), Subsystems: []string{testSubNQN}}},
		Subsystems: []target.SubsystemConfig{{
			NQN: testSubNQN, AllowAnyHost: true,
			Namespaces: []target.NamespaceConfig{fileNS(dir, 1, "64MiB")},
		}},
		Tuning: target.TuningConfig{IOWorkers: 8, HealthInterval: time.Hour},
	}
	for _, o := range opts {
		o(tt)
	}
	tt.start()
	return tt
}

// fileNS is namespace nsid as a file of size in dir.
func fileNS(dir string, nsid uint32, size string) target.NamespaceConfig {
	return target.NamespaceConfig{NSID: nsid, Backend: target.BackendConfig{Kind: "file", Path: filepath.Join(dir, "ns"+strconv.Itoa(int(nsid))+".img"), Size: size}}
}

// memNS is namespace nsid in memory.
func memNS(nsid uint32, size string) target.NamespaceConfig {
	return target.NamespaceConfig{NSID: nsid, Backend: target.BackendConfig{Kind: "memory", Size: size}}
}

func (tt *testTarget) start() {
	t := tt.t
	t.Helper()
	log := zap.NewNop()
	if testing.Verbose() {
		log = zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
	}
	tg, err := target.New(tt.cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.SetTestHooks(&target.TestHooks{Command: tt.onCommand, Response: tt.onResponse}); err != nil {
		t.Fatal(err)
	}
	if err := tg.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	tt.tg = tg
	pc := tt.cfg.Ports[0]
	tt.addr = net.JoinHostPort(pc.Address, strconv.Itoa(pc.ServiceID))
	t.Cleanup(tt.Close)
}

// Addr is the target's listen address.
func (tt *testTarget) Addr() string { return tt.addr }

// Close shuts the target down (once).
func (tt *testTarget) Close() {
	tt.mu.Lock()
	closed := tt.closed
	tt.closed = true
	tt.mu.Unlock()
	if closed {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tt.tg.Shutdown(ctx); err != nil {
		tt.t.Errorf("target shutdown: %v", err)
	}
}

func (tt *testTarget) onCommand(q target.HookQueue, sqe *nvmeof.SQE) target.Verdict {
	switch {
	case sqe.IsFabrics():
		tt.counts[0][sqe.FCType()].Add(1)
		if sqe.FCType() == nvmeof.FCTypePropertySet && sqe.PropertySetCmd().Offset() == nvmeof.PropCC {
			tt.lastCC.Store(uint32(sqe.PropertySetCmd().Value()))
		}
	case q.QID() == 0:
		tt.counts[1][sqe.Opcode()].Add(1)
	default:
		tt.counts[2][sqe.Opcode()].Add(1)
	}
	tt.mu.Lock()
	tt.queues[q] = true
	paused := tt.paused
	tt.mu.Unlock()
	if paused {
		return target.Verdict{Action: target.HookHold}
	}
	if tt.command != nil {
		return tt.command(q, sqe)
	}
	return target.Verdict{}
}

func (tt *testTarget) onResponse(q target.HookQueue, sqe *nvmeof.SQE, rsp target.HookResponse) target.HookResponse {
	if tt.response != nil {
		return tt.response(q, sqe, rsp)
	}
	return rsp
}

// Commands is the number of commands of one kind that arrived: admin and
// I/O commands by opcode, Fabrics commands by FCTYPE.
func (tt *testTarget) AdminCommands(op uint8) int   { return int(tt.counts[1][op].Load()) }
func (tt *testTarget) IOCommands(op uint8) int      { return int(tt.counts[2][op].Load()) }
func (tt *testTarget) FabricsCommands(fc uint8) int { return int(tt.counts[0][fc].Load()) }

// LastCC is the last CC a host wrote.
func (tt *testTarget) LastCC() nvmeof.CC { return nvmeof.CC(tt.lastCC.Load()) }

// DropConnections closes every queue the target has seen a command on (all
// of them: a queue's first command is its Connect), as if the target had
// dropped them.
func (tt *testTarget) DropConnections() {
	tt.mu.Lock()
	qs := make([]target.HookQueue, 0, len(tt.queues))
	for q := range tt.queues {
		qs = append(qs, q)
	}
	clear(tt.queues)
	tt.mu.Unlock()
	for _, q := range qs {
		q.Disconnect()
	}
}

// Pause makes the target hold every command it receives from now on
// without answering (a silent controller); Resume answers again. Held
// commands stay unanswered until their queues close.
func (tt *testTarget) Pause() {
	tt.mu.Lock()
	tt.paused = true
	tt.mu.Unlock()
}

// Resume ends Pause.
func (tt *testTarget) Resume() {
	tt.mu.Lock()
	tt.paused = false
	tt.mu.Unlock()
}

// Controllers is the number of live controllers, discovery ones included.
func (tt *testTarget) Controllers() int { return len(tt.tg.Status().Controllers) }

// ReadNamespace reads file namespace nsid's data at off into p, from the
// file (what the target wrote through its backend).
func (tt *testTarget) ReadNamespace(nsid uint32, p []byte, off int64) error {
	f, err := os.Open(filepath.Join(tt.dir, "ns"+strconv.Itoa(int(nsid))+".img"))
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.ReadAt(p, off)
	return err
}

// Reload applies a change to the target's configuration.
func (tt *testTarget) Reload(f func(*target.Config)) {
	tt.t.Helper()
	f(tt.cfg)
	if err := tt.tg.Reload(tt.cfg); err != nil {
		tt.t.Fatalf("reload: %v", err)
	}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
var freePort = testnode.FreePort

func testConfig(t testing.TB, addr string) Config {
	var log *zap.Logger
	if testing.Verbose() {
		log = zaptest.NewLogger(t)
	}
	return Config{
		Address: addr, SubNQN: testSubNQN, HostNQN: testHostNQN, HostID: testHostID,
		NrIOQueues: 2, QueueSize: 32, Logger: log,
	}
}

func connect(t testing.TB, cfg Config) *Controller {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Connect(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

func discoveryConfig(t testing.TB, addr string) Config {
	cfg := testConfig(t, addr)
	cfg.SubNQN = nvmeof.DiscoveryNQN
	return cfg
}

func splitHostPort(a string) (string, string, error) { return net.SplitHostPort(a) }

// eventSink makes cfg's OnEvent deliver events to the returned channel of
// n entries, dropping events when it is full (OnEvent must not block).
func eventSink(cfg *Config, n int) chan Event {
	events := make(chan Event, n)
	cfg.OnEvent = func(e Event) {
		select {
		case events <- e:
		default:
		}
	}
	return events
}
