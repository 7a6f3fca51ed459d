package initiator

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/target"
)

func TestConnectReadWriteClose(t *testing.T) {
	tg := startTarget(t)
	c := connect(t, testConfig(t, tg.Addr()))
	if c.State() != StateLive {
		t.Fatalf("state %v", c.State())
	}
	if n, size := c.QueueCount(); n != 2 || size != 32 {
		t.Fatalf("queues %d × %d, want 2 × 32", n, size)
	}
	if c.MaxTransferSize() != 1<<20 || c.InlineDataSize() != 4096 {
		t.Fatalf("max transfer %d inline %d", c.MaxTransferSize(), c.InlineDataSize())
	}
	nss := c.Namespaces()
	if len(nss) != 1 || nss[0].NSID() != 1 || nss[0].Size() != 64<<20 || nss[0].BlockSize() != 512 {
		t.Fatalf("namespaces %v", nss)
	}
	ns := nss[0]
	// Sizes: in-capsule (≤ 4 KiB), keyed, and split above MDTS (3 MiB).
	for _, n := range []int{512, 4096, 64 << 10, 3 << 20} {
		buf := make([]byte, n)
		rand.Read(buf)
		off := int64(n) * 3
		if _, err := ns.WriteAt(buf, off); err != nil {
			t.Fatalf("write %d: %v", n, err)
		}
		got := make([]byte, n)
		if _, err := ns.ReadAt(got, off); err != nil {
			t.Fatalf("read %d: %v", n, err)
		}
		if !bytes.Equal(got, buf) {
			t.Fatalf("read back %d bytes differ", n)
		}
		onTarget := make([]byte, n)
		if err := tg.ReadNamespace(1, onTarget, off); err != nil || !bytes.Equal(onTarget, buf) {
			t.Fatalf("target holds other data (%v)", err)
		}
	}
	if n := tg.IOCommands(nvmeof.NVMWrite); n < 3+3 {
		t.Fatalf("writes %d: the 3 MiB write should be split", n)
	}
	ctx := context.Background()
	if err := ns.WriteZeroes(ctx, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := ns.Discard(ctx, 1<<20, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := ns.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// End of the namespace: io.ReaderAt semantics.
	tail := make([]byte, 4096)
	if n, err := ns.ReadAt(tail, ns.Size()-1024); n != 1024 || err != io.EOF {
		t.Fatalf("read at the end: %d %v", n, err)
	}
	var ae *AlignmentError
	if _, err := ns.WriteAt(make([]byte, 100), 0); !errors.As(err, &ae) {
		t.Fatalf("unaligned write: %v", err)
	}
	var re *RangeError
	if _, err := ns.WriteAt(make([]byte, 1024), ns.Size()-512); !errors.As(err, &re) {
		t.Fatalf("write past the end: %v", err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if cc := tg.LastCC(); cc.SHN() != nvmeof.CCSHNNormal {
		t.Fatalf("last CC %v: want a normal shutdown notification", cc)
	}
	if _, err := ns.ReadAt(tail, 0); !errors.Is(err, ErrControllerClosed) {
		t.Fatalf("read after close: %v", err)
	}
	if n := tg.IOCommands(nvmeof.NVMFlush); n < 2 {
		t.Fatalf("close should have flushed (flushes: %d)", n)
	}
}

// TestConcurrentIO runs many goroutines of random I/O, more than the queue
// depth, each on its own region, and verifies every block; also with the
// host's receive loops busy polling (nvmeof --busy-poll).
func TestConcurrentIO(t *testing.T) {
	for _, bp := range []time.Duration{0, 50 * time.Microsecond} {
		t.Run(fmt.Sprintf("busypoll=%v", bp), func(t *testing.T) { testConcurrentIO(t, bp) })
	}
}

func testConcurrentIO(t *testing.T, busyPoll time.Duration) {
	tg := startTarget(t)
	cfg := testConfig(t, tg.Addr())
	cfg.Transport.BusyPoll = busyPoll
	c := connect(t, cfg)
	ns := c.Namespace(1)
	const workers, region = 96, 256 << 10
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			base := int64(w) * region
			buf := make([]byte, region)
			rand.Read(buf)
			for i := 0; i < 4; i++ {
				n := 4096 << i
				if _, err := ns.WriteAt(buf[:n], base); err != nil {
					errs <- err
					return
				}
				got := make([]byte, n)
				if _, err := ns.ReadAt(got, base); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got, buf[:n]) {
					errs <- errors.New("data mismatch")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// discoveryEntries returns the entries of l by subtype.
func discoveryEntries(l *nvmeof.DiscoveryLog, st uint8) []nvmeof.DiscoveryEntry {
	var out []nvmeof.DiscoveryEntry
	for _, e := range l.Entries {
		if e.SubType == st {
			out = append(out, e)
		}
	}
	return out
}

func TestDiscovery(t *testing.T) {
	tg := startTarget(t, withConfig(func(c *target.Config) {
		c.Ports[0].Referrals = []target.ReferralConfig{{Address: "10.9.9.9", ServiceID: 4420, PortID: 2}}
	}))
	ctx := context.Background()
	l, err := Discover(ctx, discoveryConfig(t, tg.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	// The target lists itself (the current discovery subsystem), the
	// subsystem and the referral.
	subs, refs := discoveryEntries(l, nvmeof.SubTypeNVMe), discoveryEntries(l, nvmeof.SubTypeReferral)
	if int(l.NumRec) != len(l.Entries) || len(subs) != 1 || subs[0].SubNQN != testSubNQN || len(refs) != 1 || refs[0].TrAddr != "10.9.9.9" || refs[0].PortID != 2 {
		t.Fatalf("log %+v", l)
	}
	// libnvme's sequence: header (1024, RAE), entries (RAE), header.
	if n := tg.AdminCommands(nvmeof.AdminGetLogPage); n != 3 {
		t.Fatalf("%d Get Log Page commands, want 3", n)
	}
	for deadline := time.Now().Add(5 * time.Second); tg.Controllers() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("discovery controller not deleted")
		}
	}
}

func TestDiscoveryLargeLogChunks(t *testing.T) {
	var refs []target.ReferralConfig
	for i := 0; i < 9; i++ {
		refs = append(refs, target.ReferralConfig{Address: "10.9.9." + itoa(uint64(i+1)), ServiceID: 4420, PortID: uint16(i + 2)})
	}
	tg := startTarget(t, withConfig(func(c *target.Config) { c.Ports[0].Referrals = refs }))
	l, err := Discover(context.Background(), discoveryConfig(t, tg.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	got := discoveryEntries(l, nvmeof.SubTypeReferral)
	if len(l.Entries) < 10 || len(got) != 9 || got[8].TrAddr != "10.9.9.9" {
		t.Fatalf("entries %d, referrals %d", len(l.Entries), len(got))
	}
	// 10 or 11 entries = 10–11 KiB in 4 KiB commands: 3, plus two header
	// reads.
	if n := tg.AdminCommands(nvmeof.AdminGetLogPage); n != 5 {
		t.Fatalf("%d Get Log Page commands for %d entries, want 5", n, len(l.Entries))
	}
}

func TestDiscoveryReferrals(t *testing.T) {
	const second = "nqn.2024-01.io.nvmetd.test:second"
	tg2 := startTarget(t, withConfig(func(c *target.Config) {
		c.Subsystems[0].NQN = second
		c.Ports[0].Subsystems = []string{second}
	}))
	host, port, _ := splitHostPort(tg2.Addr())
	svc, _ := strconv.Atoi(port)
	first := startTarget(t, withConfig(func(c *target.Config) {
		c.Ports[0].Referrals = []target.ReferralConfig{{Address: host, ServiceID: svc, PortID: 1}}
	}))
	res, err := DiscoverReferrals(context.Background(), discoveryConfig(t, first.Addr()), 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[1].Err != nil {
		t.Fatalf("results %+v", res)
	}
	if subs := discoveryEntries(res[1].Log, nvmeof.SubTypeNVMe); len(subs) != 1 || subs[0].SubNQN != second {
		t.Fatalf("the referral's log: %+v", res[1].Log)
	}
}

func TestConnectRefused(t *testing.T) {
	tg := startTarget(t, withConfig(func(c *target.Config) {
		c.Subsystems[0].AllowAnyHost = false
		c.Subsystems[0].AllowedHosts = []string{"nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000001"}
	}))
	ctx := context.Background()
	cfg := testConfig(t, tg.Addr())
	_, err := Connect(ctx, cfg)
	var ce *ConnectError
	if !errors.As(err, &ce) || !ce.HostNotAllowed() {
		t.Fatalf("host not allowed: %v", err)
	}
	t.Log(err)
	cfg.SubNQN = "nqn.2024-01.io.nvmetd.test:nope"
	_, err = Connect(ctx, cfg)
	if !errors.As(err, &ce) || !ce.UnknownSubsystem() {
		t.Fatalf("unknown subsystem: %v", err)
	}
	t.Log(err)
	// Nothing listens: the dial error.
	cfg.Address = "127.0.0.1:1"
	if _, err = Connect(ctx, cfg); err == nil {
		t.Fatal("connected to nothing")
	}
	t.Log(err)
}

func TestQueueSizeClamp(t *testing.T) {
	tg := startTarget(t, withConfig(func(c *target.Config) { c.Ports[0].MaxQueueSize = 64 }))
	cfg := testConfig(t, tg.Addr())
	cfg.QueueSize = 1024
	c := connect(t, cfg)
	if _, size := c.QueueCount(); size != 64 {
		t.Fatalf("queue size %d, want MQES+1 = 64", size)
	}
}

func TestSetFeaturesNumQueues(t *testing.T) {
	tg := startTarget(t, withConfig(func(c *target.Config) { c.Tuning.MaxIOQueues = 3 }))
	cfg := testConfig(t, tg.Addr())
	cfg.NrIOQueues = 8
	c := connect(t, cfg)
	if n, _ := c.QueueCount(); n != 3 {
		t.Fatalf("%d I/O queues, want the 3 granted", n)
	}
}

func TestNamespaceEvents(t *testing.T) {
	tg := startTarget(t)
	events := make(chan Event, 16)
	cfg := testConfig(t, tg.Addr())
	cfg.OnEvent = func(e Event) { events <- e }
	c := connect(t, cfg)
	<-events // the first scan
	tg.Reload(func(c *target.Config) {
		c.Subsystems[0].Namespaces = append(c.Subsystems[0].Namespaces, memNS(3, "8MiB"))
	})
	e := waitEvent(t, events, EventNamespacesChanged)
	if len(e.NSIDs) != 1 || e.NSIDs[0] != 3 || c.Namespace(3) == nil || c.Namespace(3).Size() != 8<<20 {
		t.Fatalf("event %+v", e)
	}
	tg.Reload(func(c *target.Config) { c.Subsystems[0].Namespaces[1].Backend.Size = "16MiB" })
	waitEvent(t, events, EventNamespacesChanged)
	if c.Namespace(3).Size() != 16<<20 {
		t.Fatalf("size %d after resize", c.Namespace(3).Size())
	}
	ns3 := c.Namespace(3)
	tg.Reload(func(c *target.Config) { c.Subsystems[0].Namespaces = c.Subsystems[0].Namespaces[:1] })
	waitEvent(t, events, EventNamespacesChanged)
	if c.Namespace(3) != nil || !ns3.Gone() {
		t.Fatal("namespace 3 still there")
	}
	if _, err := ns3.ReadAt(make([]byte, 512), 0); !errors.Is(err, ErrNamespaceGone) {
		t.Fatalf("read of a removed namespace: %v", err)
	}
}

func waitEvent(t *testing.T, ch <-chan Event, k EventKind) Event {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case e := <-ch:
			if e.Kind == k {
				return e
			}
		case <-timeout:
			t.Fatalf("no %v event", k)
		}
	}
}

func TestInCapsuleWrites(t *testing.T) {
	tg := startTarget(t)
	c := connect(t, testConfig(t, tg.Addr()))
	ns := c.Namespace(1)
	before := inCapsule(c)
	if _, err := ns.WriteAt(make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.WriteAt(make([]byte, 8192), 0); err != nil {
		t.Fatal(err)
	}
	if d := inCapsule(c) - before; d != 1 {
		t.Fatalf("%d in-capsule writes, want 1 (4 KiB in, 8 KiB keyed)", d)
	}
}

func inCapsule(c *Controller) uint64 {
	var n uint64
	for _, s := range c.QueueStats() {
		n += s.InCapsule
	}
	return n
}

// TestDiscoveryChangeEvent: a discovery controller that reports a log
// change (AER, Discovery Log Page Change) gives EventDiscoveryChanged, and
// the log read afterwards shows the change.
func TestDiscoveryChangeEvent(t *testing.T) {
	tg := startTarget(t)
	events := make(chan Event, 16)
	cfg := discoveryConfig(t, tg.Addr())
	cfg.OnEvent = func(e Event) { events <- e }
	c := connect(t, cfg)
	ctx := context.Background()
	l, err := c.DiscoveryLog(ctx)
	if err != nil || len(discoveryEntries(l, nvmeof.SubTypeNVMe)) != 1 {
		t.Fatalf("%+v %v", l, err)
	}
	tg.Reload(func(c *target.Config) {
		c.Ports[0].Referrals = []target.ReferralConfig{{Address: "10.1.2.3", ServiceID: 4420, PortID: 2}}
	})
	e := waitEvent(t, events, EventDiscoveryChanged)
	if e.AEN != nvmeof.AENDiscoveryChanged {
		t.Fatalf("AEN %#x", uint32(e.AEN))
	}
	l2, err := c.DiscoveryLog(ctx)
	if err != nil || len(l2.Entries) != len(l.Entries)+1 || len(discoveryEntries(l2, nvmeof.SubTypeReferral)) != 1 || l2.GenCtr == l.GenCtr {
		t.Fatalf("after the change: %+v %v", l2, err)
	}
}
