package initiator

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"testing"

	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/tcp/wire"
	"github.com/nvmetd/nvmetd/target"
)

// tcpPort makes the target's first port an NVMe/TCP port.
func tcpPort(c *target.Config) { c.Ports[0].Transport = target.TransportTCP }

// TestTCPConnectReadWriteClose: the host controller over NVMe/TCP against
// the target's TCP port, with and without header and data digests:
// in-capsule writes, R2T writes, reads, a write split above MDTS, Write
// Zeroes, Flush and a clean shutdown.
func TestTCPConnectReadWriteClose(t *testing.T) {
	for _, d := range []wire.Digests{{}, {Header: true, Data: true}} {
		t.Run(fmt.Sprintf("hdgst=%v,ddgst=%v", d.Header, d.Data), func(t *testing.T) {
			tg := startTarget(t, withConfig(tcpPort))
			cfg := testConfig(t, tg.Addr())
			cfg.TrType = nvmeof.TrTypeTCP
			cfg.TCPTransport.Digests = d
			c := connect(t, cfg)
			if c.State() != StateLive {
				t.Fatalf("state %v", c.State())
			}
			if n, _ := c.QueueCount(); n != 2 {
				t.Fatalf("%d I/O queues", n)
			}
			if c.InlineDataSize() == 0 {
				t.Fatal("no in-capsule data on NVMe/TCP I/O queues")
			}
			ns := c.Namespace(1)
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
			ctx := context.Background()
			if err := ns.WriteZeroes(ctx, 0, 1<<20); err != nil {
				t.Fatal(err)
			}
			if err := ns.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if inCapsule(c) == 0 {
				t.Error("no write went in the capsule")
			}
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if cc := tg.LastCC(); cc.SHN() != nvmeof.CCSHNNormal {
				t.Fatalf("last CC %v: want a normal shutdown notification", cc)
			}
		})
	}
}

// TestTCPDiscovery: the discovery controller over NVMe/TCP lists the TCP
// port with TRTYPE 3.
func TestTCPDiscovery(t *testing.T) {
	tg := startTarget(t, withConfig(tcpPort))
	cfg := discoveryConfig(t, tg.Addr())
	cfg.TrType = nvmeof.TrTypeTCP
	l, err := Discover(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	es := discoveryEntries(l, nvmeof.SubTypeNVMe)
	if len(es) != 1 || es[0].TrType != nvmeof.TrTypeTCP || es[0].SubNQN != testSubNQN {
		t.Fatalf("entries %+v", es)
	}
}

// TestNoAllocPerIOTCP: the host controller's I/O over NVMe/TCP allocates
// nothing in steady state (the target in this process included): reads,
// in-capsule writes and R2T writes, with and without digests.
func TestNoAllocPerIOTCP(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode: allocation counts need a warmed-up run of hundreds of I/Os")
	}
	for _, d := range []wire.Digests{{}, {Header: true, Data: true}} {
		tg := startTarget(t, memoryOnly, withConfig(tcpPort))
		cfg := testConfig(t, tg.Addr())
		cfg.TrType = nvmeof.TrTypeTCP
		cfg.TCPTransport.Digests = d
		c := connect(t, cfg)
		ns := c.Namespace(1)
		small := make([]byte, 4096)  // in-capsule write
		large := make([]byte, 65536) // R2T
		for range 300 {              // warm up pools and the target's request contexts
			ns.WriteAt(small, 0)
			ns.ReadAt(large, 0)
			ns.WriteAt(large, 0)
		}
		for _, tc := range []struct {
			name string
			f    func()
		}{
			{"read 4k", func() { ns.ReadAt(small, 4096) }},
			{"read 64k", func() { ns.ReadAt(large, 65536) }},
			{"write 4k in-capsule", func() { ns.WriteAt(small, 8192) }},
			{"write 64k R2T", func() { ns.WriteAt(large, 65536) }},
		} {
			if a := testing.AllocsPerRun(500, tc.f); a > 0.05 {
				t.Errorf("digests %+v: %s: %.2f allocations per I/O", d, tc.name, a)
			}
		}
	}
}
