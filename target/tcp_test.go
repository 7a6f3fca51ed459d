package target

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"runtime"
	"testing"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/internal/testing/rawtcp"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/tcp/wire"
)

// tcpConfig is testConfig with a second port, NVMe/TCP, serving the
// same subsystem.
func tcpConfig(t testing.TB) *Config {
	cfg := testConfig(t, memNS(1, "16MiB"))
	cfg.Ports = append(cfg.Ports, PortConfig{ID: 2, Address: "127.0.0.1", ServiceID: freePort(t), Transport: TransportTCP, Subsystems: []string{testSubNQN}})
	return cfg
}

// TestTCPDiscovery: the discovery log read over a TCP port lists the
// subsystem with TRTYPE tcp, the port's address and a TSAS of no
// security; an RDMA port's log still says rdma.
func TestTCPDiscovery(t *testing.T) {
	s := startServer(t, tcpConfig(t))
	h := rawtcp.Dial(t, portAddr(s, 2), wire.Digests{})
	h.Connect(0, nvmeof.AdminQueueDepth, nvmeof.DiscoveryNQN, nvmeof.CNTLIDDynamic, testKATO)
	h.Enable()
	page := make([]byte, 3*1024)
	var sqe nvmeof.SQE
	sqe.BuildGetLogPage(nvmeof.LIDDiscovery, 0, 0, uint32(len(page)))
	if st, _ := h.Do(&sqe, nil, false, page); st != nvmeof.StatusSuccess {
		t.Fatalf("get discovery log: %v", st)
	}
	var found bool
	for i := 1; i < 3; i++ {
		e, _ := nvmeof.ParseDiscoveryLogEntry(page[i*1024:])
		d := e.Decode()
		if d.TrType != nvmeof.TrTypeTCP || d.AdrFam != nvmeof.AdrFamIPv4 || d.PortID != 2 || d.RDMAQPType != 0 || d.RDMACMS != 0 {
			t.Errorf("entry %d: %+v, want TRTYPE tcp, IPv4, port 2, TSAS zero (SECTYPE none)", i, d)
		}
		if d.SubNQN == testSubNQN {
			found = true
			if _, port, _ := net.SplitHostPort(portAddr(s, 2)); d.TrSvcID != port || d.TrAddr != "127.0.0.1" {
				t.Errorf("entry %+v: want 127.0.0.1:%s", d, port)
			}
		}
	}
	if !found {
		t.Fatal("the subsystem is not in the TCP port's discovery log")
	}
}

// TestTCPIO: over the TCP port of a subsystem also served on RDMA, a host
// connects an admin and an I/O queue, identifies the controller, writes in
// the capsule and through R2T, and reads back, with and without digests.
func TestTCPIO(t *testing.T) {
	s := startServer(t, tcpConfig(t))
	for _, d := range []wire.Digests{{}, {Header: true, Data: true}} {
		t.Run(map[bool]string{false: "no-digests", true: "digests"}[d.Header], func(t *testing.T) {
			adm := rawtcp.Dial(t, portAddr(s, 2), d)
			cntlid := adm.Connect(0, nvmeof.AdminQueueDepth, testSubNQN, nvmeof.CNTLIDDynamic, testKATO)
			adm.Enable()
			id := make([]byte, nvmeof.IdentifyDataSize)
			var sqe nvmeof.SQE
			sqe.BuildIdentify(nvmeof.CNSController, 0, 0, 0)
			if st, _ := adm.Do(&sqe, nil, false, id); st != nvmeof.StatusSuccess {
				t.Fatalf("identify: %v", st)
			}
			ic := (*nvmeof.IdentifyController)(id)
			if ic.SUBNQN() != testSubNQN || ic.IOCCSZ() != (64+DefaultInlineDataSize)/16 {
				t.Fatalf("identify: SUBNQN %q IOCCSZ %d", ic.SUBNQN(), ic.IOCCSZ())
			}
			io := rawtcp.Dial(t, portAddr(s, 2), d)
			io.Connect(1, 32, testSubNQN, cntlid, testKATO)
			small := pattern(4096, 3)
			sqe = nvmeof.SQE{}
			sqe.BuildWrite(1, 0, 8)
			if st, _ := io.Do(&sqe, small, true, nil); st != nvmeof.StatusSuccess {
				t.Fatalf("in-capsule write: %v", st)
			}
			big := pattern(256<<10, 4)
			sqe = nvmeof.SQE{}
			sqe.BuildWrite(1, 8, uint32(len(big)/512))
			if st, _ := io.Do(&sqe, big, false, nil); st != nvmeof.StatusSuccess {
				t.Fatalf("R2T write: %v", st)
			}
			got := make([]byte, len(small)+len(big))
			sqe = nvmeof.SQE{}
			sqe.BuildRead(1, 0, uint32(len(got)/512))
			if st, _ := io.Do(&sqe, nil, false, got); st != nvmeof.StatusSuccess {
				t.Fatalf("read: %v", st)
			}
			if !bytes.Equal(got[:4096], small) || !bytes.Equal(got[4096:], big) {
				t.Fatal("read back differs from what was written")
			}
			// The same data through the RDMA port of the subsystem.
			rh := mustConnect(t, portAddr(s, 1), testSubNQN)
			defer rh.close()
			rh.setup(1)
			rbuf := make([]byte, len(got))
			if err := do(t, rh.io[0], rw(false, 1, 0, rbuf, 512)); err != nil {
				t.Fatalf("RDMA read: %v", err)
			}
			if !bytes.Equal(rbuf, got) {
				t.Fatal("the RDMA path reads other data than the TCP path wrote")
			}
		})
	}
}

// TestTCPTransportConfig: ports[].transport is rdma (the default) or tcp.
func TestTCPTransportConfig(t *testing.T) {
	cfg := tcpConfig(t)
	cfg.Ports[0].Transport = ""
	cfg.ApplyDefaults()
	if cfg.Ports[0].Transport != TransportRDMA {
		t.Fatalf("default transport %q, want rdma", cfg.Ports[0].Transport)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("rdma and tcp ports of one subsystem: %v", err)
	}
	cfg.Ports[1].Transport = "udp"
	if err := cfg.Validate(); err == nil || !bytes.Contains([]byte(err.Error()), []byte("ports[1].transport")) {
		t.Fatalf("transport udp: %v, want an error naming ports[1].transport", err)
	}
}

// TestTCPNvmetcli: a TCP port exports as trtype tcp and imports back as a
// TCP port.
func TestTCPNvmetcli(t *testing.T) {
	cfg := tcpConfig(t)
	cfg.Subsystems[0].Namespaces = []NamespaceConfig{{NSID: 1, Backend: BackendConfig{Kind: "file", Path: "/srv/ns1.img"}}}
	cfg.ApplyDefaults()
	nc, err := ExportNvmetcli(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := nc.Ports[1].Addr["trtype"]; got != TransportTCP {
		t.Fatalf("exported trtype %v, want tcp", got)
	}
	if got := nc.Ports[0].Addr["trtype"]; got != TransportRDMA {
		t.Fatalf("exported trtype %v, want rdma", got)
	}
	data, err := json.Marshal(nc)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ImportNvmetcli(data, nil)
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	if !back.Ports[1].IsTCP() || back.Ports[0].IsTCP() {
		t.Fatalf("imported transports %q %q, want rdma tcp", back.Ports[0].Transport, back.Ports[1].Transport)
	}
}

// TestTCPIOAllocations: an NVMe/TCP I/O command (read, in-capsule write,
// write through R2T; with and without digests) allocates nothing in steady
// state, target and raw host together.
func TestTCPIOAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode: it measures allocations over thousands of commands")
	}
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, kind := range []string{"null", "memory"} {
		for _, d := range []wire.Digests{{}, {Header: true, Data: true}} {
			t.Run(fmt.Sprintf("%s/digests=%v", kind, d.Header), func(t *testing.T) {
				cfg := tcpConfig(t)
				cfg.Subsystems[0].Namespaces[0].Backend.Kind = kind
				c := cfg.Clone()
				c.ApplyDefaults()
				s := newServer(c, zap.NewNop())
				if err := s.start(context.Background()); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.shutdown(context.Background()) })
				adm := rawtcp.Dial(t, portAddr(s, 2), d)
				cntlid := adm.Connect(0, nvmeof.AdminQueueDepth, testSubNQN, nvmeof.CNTLIDDynamic, testKATO)
				adm.Enable()
				io := rawtcp.Dial(t, portAddr(s, 2), d)
				io.Connect(1, 32, testSubNQN, cntlid, testKATO)
				for _, tc := range []struct {
					name  string
					size  int
					write bool
					inCap bool
				}{{"read 4KiB", 4096, false, false}, {"write 4KiB in-capsule", 4096, true, true}, {"write 128KiB R2T", 128 << 10, true, false}, {"read 128KiB", 128 << 10, false, false}} {
					var sqe nvmeof.SQE
					if tc.write {
						sqe.BuildWrite(1, 0, uint32(tc.size/512))
					} else {
						sqe.BuildRead(1, 0, uint32(tc.size/512))
					}
					cmd := io.Prepare(&sqe, tc.size, tc.inCap)
					data := make([]byte, tc.size)
					h2c := io.PDU(wire.TypeH2CData, wire.FlagLastPDU, make([]byte, wire.DataHLen-wire.CommonHeaderSize), data)
					once := func() { io.Run(cmd, h2c, data) }
					for range 200 {
						once()
					}
					const n = 2000
					var before, after runtime.MemStats
					runtime.GC()
					runtime.ReadMemStats(&before)
					for range n {
						once()
					}
					runtime.ReadMemStats(&after)
					per := float64(after.Mallocs-before.Mallocs) / n
					t.Logf("%s: %.3f allocations per command (both sides, all goroutines)", tc.name, per)
					if per > 0.05 {
						t.Errorf("%s: %.3f allocations per command", tc.name, per)
					}
				}
			})
		}
	}
}
