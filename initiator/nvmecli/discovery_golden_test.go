package nvmecli

import (
	"bytes"
	"io"
	"os"
	"testing"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// goldenDiscoveryLog: one entry of each shape the printers treat apart (an
// RDMA port, a TCP port, an entry with no transport address, a referral to
// another discovery controller with explicit flags, a string that JSON
// escapes).
func goldenDiscoveryLog() *nvmeof.DiscoveryLog {
	return &nvmeof.DiscoveryLog{GenCtr: 7, NumRec: 4, Entries: []nvmeof.DiscoveryEntry{
		{TrType: nvmeof.TrTypeRDMA, AdrFam: nvmeof.AdrFamIPv4, SubType: nvmeof.SubTypeNVMe, TReq: nvmeof.TREQNotSpecified,
			PortID: 1, CntlID: 0xffff, ASQSZ: 32, TrSvcID: "4420", SubNQN: "nqn.2024-01.io.nvmetd:a", TrAddr: "10.0.2.15",
			RDMAQPType: nvmeof.RDMAQPTypeRC, RDMAPRType: nvmeof.RDMAPRTypeNone, RDMACMS: nvmeof.RDMACMSRDMACM, RDMAPKey: 0x1234},
		{TrType: nvmeof.TrTypeTCP, AdrFam: nvmeof.AdrFamIPv6, SubType: nvmeof.SubTypeNVMe, TReq: 4,
			PortID: 2, CntlID: 0xffff, ASQSZ: 32, TrSvcID: "4421", SubNQN: "nqn.2024-01.io.nvmetd:<b&c>", TrAddr: "fd00::1"},
		{TrType: nvmeof.TrTypeTCP, AdrFam: nvmeof.AdrFamIPv4, SubType: nvmeof.SubTypeNVMe, PortID: 3, TrSvcID: "4422", SubNQN: "nqn.2024-01.io.nvmetd:c"},
		{TrType: nvmeof.TrTypeRDMA, AdrFam: nvmeof.AdrFamIPv4, SubType: 3, EFlags: 3, PortID: 4, TrSvcID: "8009",
			SubNQN: "nqn.2014-08.org.nvmexpress.discovery", TrAddr: "10.0.2.16"},
	}}
}

// TestDiscoveryGolden: the normal and JSON outputs of goldenDiscoveryLog,
// byte for byte, as the two printers made them before they became one
// field table (testdata/discovery.txt and .json), and an empty log.
func TestDiscoveryGolden(t *testing.T) {
	for _, tc := range []struct {
		file  string
		write func(io.Writer, *nvmeof.DiscoveryLog)
	}{{"testdata/discovery.txt", WriteDiscovery}, {"testdata/discovery.json", WriteDiscoveryJSON}} {
		want, err := os.ReadFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		tc.write(&b, goldenDiscoveryLog())
		if b.String() != string(want) {
			t.Errorf("%s: got:\n%s\nwant:\n%s", tc.file, b.String(), want)
		}
	}
	var b bytes.Buffer
	WriteDiscoveryJSON(&b, &nvmeof.DiscoveryLog{GenCtr: 1})
	if want := "{\n  \"genctr\": 1,\n  \"records\": []\n}\n"; b.String() != want {
		t.Errorf("empty log: got %q, want %q", b.String(), want)
	}
	b.Reset()
	WriteDiscovery(&b, &nvmeof.DiscoveryLog{GenCtr: 1})
	if want := "\nDiscovery Log Number of Records 0, Generation counter 1\n"; b.String() != want {
		t.Errorf("empty log: got %q, want %q", b.String(), want)
	}
}
