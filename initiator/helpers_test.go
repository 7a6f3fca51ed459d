package initiator

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/nvmetd/nvmetd/initiator/internal/testctl"
	"github.com/nvmetd/nvmetd/nvmeof"
)

const (
	testSubNQN  = "nqn.2024-01.io.nvmetd.test:sub1"
	testHostNQN = "nqn.2014-08.org.nvmexpress:uuid:6e766d65-7464-4c61-9b00-00000000abcd"
)

var testHostID = [16]byte{0x6e, 0x76, 0x6d, 0x65, 0x74, 0x64, 0x4c, 0x61, 0x9b, 0, 0, 0, 0, 0, 0xab, 0xcd}

// startTarget runs a test controller with one 64 MiB namespace (or what
// mod sets) and stops it when the test ends.
func startTarget(t testing.TB, mod func(*testctl.Config)) *testctl.Target {
	t.Helper()
	cfg := testctl.Config{
		SubNQN:     testSubNQN,
		Namespaces: []testctl.NamespaceConfig{{NSID: 1, Size: 64 << 20, BlockSize: 512}},
	}
	if mod != nil {
		mod(&cfg)
	}
	tg, err := testctl.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tg.Close)
	return tg
}

func fileNS(t testing.TB, nsid uint32, size int64) testctl.NamespaceConfig {
	return testctl.NamespaceConfig{NSID: nsid, Size: size, BlockSize: 512, Path: filepath.Join(t.TempDir(), "ns.img")}
}

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
