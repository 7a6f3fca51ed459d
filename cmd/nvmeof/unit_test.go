package main

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/nvmeof"
)

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
	o.fabrics.transport = "tcp"
	if _, err := o.fabrics.config(o.fabrics.nqn, nil); err == nil {
		t.Fatal("tcp transport accepted")
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
