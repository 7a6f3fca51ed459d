package main

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/internal/testnode"
	"github.com/nvmetd/nvmetd/nvmeof"
)

func TestHistogram(t *testing.T) {
	prev := -1
	for v := uint64(0); v < 1<<20; v += 1 + v/97 {
		i := histIndex(v)
		if i < prev {
			t.Fatalf("index not monotonic at %d", v)
		}
		prev = i
		got := histValue(i)
		if diff := float64(got) - float64(v); diff*diff > (0.01*float64(v)+1)*(0.01*float64(v)+1) {
			t.Fatalf("value %d comes back as %d", v, got)
		}
	}
	if i := histIndex(^uint64(0)); i >= len(hist{}.counts) {
		t.Fatalf("index %d out of the array", i)
	}
	var h hist
	for i := 1; i <= 1000; i++ {
		h.record(uint64(i) * 1000)
	}
	for _, c := range []struct {
		p    float64
		want uint64
	}{{50, 500000}, {99, 990000}, {99.9, 999000}} {
		got := h.percentile(c.p)
		if d := float64(got)/float64(c.want) - 1; d > 0.01 || d < -0.01 {
			t.Errorf("p%v = %d, want about %d", c.p, got, c.want)
		}
	}
	if h.minimum() != 1000 || h.max.Load() != 1000000 || h.mean() != 500500 {
		t.Errorf("min %d max %d mean %v", h.minimum(), h.max.Load(), h.mean())
	}
	if a := testing.AllocsPerRun(1000, func() { h.record(12345) }); a != 0 {
		t.Errorf("record allocates %v", a)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"4096": 4096, "4k": 4096, "128K": 131072, "1m": 1 << 20, "2G": 2 << 30, "64KiB": 65536, "0": 0} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("%q: %d %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "k", "-1", "1x"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestConnectOptsRoundTrip(t *testing.T) {
	o := connectOpts{fabrics: fabricsOpts{transport: "rdma", traddr: "10.0.0.1", trsvcid: "4421", nqn: "nqn.2024-01.x:y",
		hostnqn: "nqn.2014-08.org.nvmexpress:uuid:6e766d65-7464-4c61-9b00-0000000000aa", nrIOQueues: 3, queueSize: 64,
		keepAliveTmo: 7, reconnDelay: 2, ctrlLossTmo: -1, crc: "required", maxFPDU: 1448, connTimeout: time.Second, busyPoll: 50 * time.Microsecond},
		mount: "/mnt/x", loop: true, mountNSID: 2, fstype: "xfs", mkfs: true, mountOpts: "noatime", loopDirectIO: true, fuseDirectIO: false}
	if got := o.toJSON().opts(); !reflect.DeepEqual(got, o) {
		t.Fatalf("round trip:\n%+v\n%+v", got, o)
	}
	cfg, err := o.fabrics.config(o.fabrics.nqn, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Address != "10.0.0.1:4421" || cfg.CtrlLossTimeout >= 0 || cfg.KeepAliveTimeout != 7*time.Second ||
		cfg.HostID != [16]byte{0x6e, 0x76, 0x6d, 0x65, 0x74, 0x64, 0x4c, 0x61, 0x9b, 0, 0, 0, 0, 0, 0, 0xaa} || cfg.Transport.MaxFPDU != 1448 ||
		cfg.Transport.BusyPoll != 50*time.Microsecond {
		t.Fatalf("config %+v", cfg)
	}
	o.fabrics.busyPoll = 2 * time.Second
	if _, err := o.fabrics.config(o.fabrics.nqn, nil); err == nil || !strings.Contains(err.Error(), "--busy-poll") {
		t.Fatalf("busy-poll 2s: %v", err)
	}
	o.fabrics.busyPoll = 0
	o.fabrics.ctrlLossTmo = 0
	if cfg, _ := o.fabrics.config(o.fabrics.nqn, nil); !cfg.NoReconnect {
		t.Fatal("ctrl-loss-tmo 0 should mean no reconnect")
	}
	o.fabrics.transport, o.fabrics.hdrDigest = "tcp", true
	if cfg, err := o.fabrics.config(o.fabrics.nqn, nil); err != nil || cfg.TrType != nvmeof.TrTypeTCP || !cfg.TCPTransport.Digests.Header || cfg.TCPTransport.Digests.Data {
		t.Fatalf("tcp transport with a header digest: %+v %v", cfg.TCPTransport, err)
	}
	if j := o.toJSON(); j.opts().fabrics != o.fabrics {
		t.Fatal("the digests do not survive the round trip to the daemon")
	}
	o.fabrics.transport = "fc"
	if _, err := o.fabrics.config(o.fabrics.nqn, nil); err == nil {
		t.Fatal("fc transport accepted")
	}
}

// TestDiscoveryOutputTCP: a TRTYPE 3 entry as nvme-cli 2.3 prints Linux
// 6.1's nvmet-tcp port (in the lab guest): its SECTYPE after eflags.
func TestDiscoveryOutputTCP(t *testing.T) {
	l := &nvmeof.DiscoveryLog{GenCtr: 2, NumRec: 1, Entries: []nvmeof.DiscoveryEntry{{
		TrType: nvmeof.TrTypeTCP, AdrFam: nvmeof.AdrFamIPv4, SubType: nvmeof.SubTypeNVMe, TReq: nvmeof.TREQNotSpecified,
		PortID: 1, CntlID: 0xffff, ASQSZ: 32, TrSvcID: "4420", SubNQN: "nqn.2024-01.io.nvmetd-lab:kernel-target", TrAddr: "10.0.2.15"}}}
	want := `
Discovery Log Number of Records 1, Generation counter 2
=====Discovery Log Entry 0======
trtype:  tcp
adrfam:  ipv4
subtype: nvme subsystem
treq:    not specified
portid:  1
trsvcid: 4420
subnqn:  nqn.2024-01.io.nvmetd-lab:kernel-target
traddr:  10.0.2.15
eflags:  none
sectype: none
`
	var b bytes.Buffer
	writeDiscovery(&b, l)
	if b.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	writeDiscoveryJSON(&b, l)
	if !strings.Contains(b.String(), `"sectype": "none"`) || strings.Contains(b.String(), "rdma_") {
		t.Fatalf("json:\n%s", b.String())
	}
}

// TestDiscoveryOutput checks the normal format against what nvme-cli 2.3
// prints for the kernel target of the lab (from the guest).
func TestDiscoveryOutput(t *testing.T) {
	l := &nvmeof.DiscoveryLog{GenCtr: 2, NumRec: 1, Entries: []nvmeof.DiscoveryEntry{{
		TrType: nvmeof.TrTypeRDMA, AdrFam: nvmeof.AdrFamIPv4, SubType: nvmeof.SubTypeNVMe, TReq: nvmeof.TREQNotSpecified,
		PortID: 1, CntlID: 0xffff, ASQSZ: 32, TrSvcID: "4420", SubNQN: "nqn.2024-01.io.nvmetd-lab:kernel-target", TrAddr: "10.0.2.15",
		RDMAQPType: nvmeof.RDMAQPTypeRC, RDMAPRType: nvmeof.RDMAPRTypeNone, RDMACMS: nvmeof.RDMACMSRDMACM}}}
	want := `
Discovery Log Number of Records 1, Generation counter 2
=====Discovery Log Entry 0======
trtype:  rdma
adrfam:  ipv4
subtype: nvme subsystem
treq:    not specified
portid:  1
trsvcid: 4420
subnqn:  nqn.2024-01.io.nvmetd-lab:kernel-target
traddr:  10.0.2.15
eflags:  none
rdma_prtype: not specified
rdma_qptype: connected
rdma_cms:    rdma-cm
rdma_pkey: 0x0000
`
	var b bytes.Buffer
	writeDiscovery(&b, l)
	if b.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	writeDiscoveryJSON(&b, l)
	if !strings.Contains(b.String(), `"rdma_pkey": 0`) || !strings.Contains(b.String(), `"subtype": "nvme subsystem"`) {
		t.Fatalf("json:\n%s", b.String())
	}
}

// TestBenchVerify runs the load generator with verification against the
// target (in this process, a memory namespace), for every pattern.
func TestBenchVerify(t *testing.T) {
	const nqn = "nqn.2024-01.io.nvmetd.test:bench"
	_, addr := testnode.MemoryTarget(t, nqn, "16MiB")
	ctx := context.Background()
	sub := initiator.NewSubsystem("nqn.2024-01.io.nvmetd.test:bench", initiator.MultipathConfig{})
	defer sub.Close(ctx)
	_, err := sub.AddPath(ctx, initiator.Config{Address: addr, SubNQN: "nqn.2024-01.io.nvmetd.test:bench",
		HostNQN: "nqn.2014-08.org.nvmexpress:uuid:6e766d65-7464-4c61-9b00-0000000000aa", HostID: [16]byte{1}, NrIOQueues: 2, QueueSize: 32})
	if err != nil {
		t.Fatal(err)
	}
	ns := sub.Namespace(1)
	for _, rw := range []string{"read", "write", "randread", "randwrite", "rw", "randrw"} {
		p := benchParams{RW: rw, BS: 4096 << rand.IntN(4), IODepth: 16, RWMixRead: 70, Runtime: 300 * time.Millisecond, Size: 8 << 20, Verify: true}
		var lines int
		res, err := runBenchmark(ctx, ns, p, func(string) { lines++ })
		if err != nil {
			t.Fatal(err)
		}
		if res.Errors != 0 || res.VerifyErrors != 0 || res.Total.IOs == 0 || res.Verified == 0 {
			t.Fatalf("%s: %+v", rw, res)
		}
		if (res.Read == nil) != (rw == "write" || rw == "randwrite") || (res.Write == nil) != (rw == "read" || rw == "randread") {
			t.Fatalf("%s: read %v write %v", rw, res.Read, res.Write)
		}
		var b bytes.Buffer
		report(&b, res)
		t.Logf("%s bs %d: %s", rw, p.BS, strings.ReplaceAll(strings.TrimSpace(b.String()), "\n", " |"))
	}
	// A corrupted block is found.
	p := benchParams{RW: "randread", BS: 4096, IODepth: 4, Runtime: 300 * time.Millisecond, Size: 1 << 20, Verify: true, Seed: 9}
	if _, err := runBenchmark(ctx, ns, p, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.WriteAt(make([]byte, 4096), 8192); err != nil {
		t.Fatal(err)
	}
	// A sequential read from offset 0 reaches the block within its first
	// I/Os, however slow the machine (a random read of a few hundred
	// milliseconds may miss it: 48 I/Os of 256 blocks under -race and load).
	p.Prefilled = true
	p.RW = "read"
	res, err := runBenchmark(ctx, ns, p, nil)
	if err != nil || res.VerifyErrors == 0 {
		t.Fatalf("the zeroed block was not noticed: %+v %v", res, err)
	}
}

// TestWriteStateConcurrent: the daemon's start and its controller events
// save state at the same time; no save may rename another's file away
// (seen in CI: "rename .state.json.tmp state.json: no such file").
func TestWriteStateConcurrent(t *testing.T) {
	old := stateDirFlag
	stateDirFlag = t.TempDir()
	t.Cleanup(func() { stateDirFlag = old })
	if err := os.Mkdir(instanceDir("nvme0"), 0o755); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 800)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				errs <- writeState(&ctrlState{Device: "nvme0", PID: g*1000 + i})
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := readState("nvme0"); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(instanceDir("nvme0"))
	if len(ents) != 1 {
		t.Fatalf("instance directory holds %d files, want state.json alone", len(ents))
	}
}
