package nvmecli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/nvmetd/nvmetd/nvmeof"
)

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
	WriteDiscovery(&b, l)
	if b.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	WriteDiscoveryJSON(&b, l)
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
	WriteDiscovery(&b, l)
	if b.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	WriteDiscoveryJSON(&b, l)
	if !strings.Contains(b.String(), `"rdma_pkey": 0`) || !strings.Contains(b.String(), `"subtype": "nvme subsystem"`) {
		t.Fatalf("json:\n%s", b.String())
	}
}
