//go:build rbd

package gateway_test

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/nvmetd/nvmetd/internal/testing/gwnet"
	"github.com/nvmetd/nvmetd/test/ceph/cephtest"
)

// How the partition tests partition (docs/rbd.md, "How the tests
// partition"):
//
//   - the test network: an interface in the root namespace (the root end
//     of a veth pair whose peer is in a namespace of its own; created by
//     the first test that needs it, removed by TestMain) holds the
//     cluster's address 10.77.S.1/32 (S a subnet picked at random among
//     those no interface uses); a Ceph cluster of the package's own, three
//     OSDs and pool size 3, is started on it (cluster.sh with
//     NVMETD_CEPH_ADDR and NVMETD_CEPH_OSDS) and stopped by TestMain;
//   - each gateway process runs in a network namespace of its own
//     (nsenter --net), linked to the root namespace by a veth pair:
//     10.77.S.(16+4i+1) in the root namespace, 10.77.S.(16+4i+2) in the
//     gateway's, its default route through the pair. The gateway listens
//     on its address; the host (the Go initiator, in the test process, in
//     the root namespace) reaches it through the pair, from the root end's
//     address; the gateway reaches the cluster's address through the same
//     pair (an address of the root namespace: no forwarding);
//   - a partition is a set of nftables rules inside the gateway's
//     namespace that drop (not refuse) the packets of one side: to and
//     from the cluster's address (cut from Ceph), to and from some OSDs'
//     ports only (cut from those OSDs, the monitor and the other OSDs
//     still reached), or to and from the root end's address (cut from the
//     host, the cluster still reached). Healing deletes them; TCP
//     retransmits through it, as after a real partition.
//
// Nothing else of the machine is touched: the names and addresses are
// the test's own, and removing a namespace removes its veth pair.

// testNet is the package's test network and cluster
// (internal/testing/gwnet, shared with the Linux host's tests in
// test/interop).
var testNet struct {
	once sync.Once
	err  error
	skip string
	net  *gwnet.Network
}

// TestMain removes the test network and stops its cluster after the
// tests (only if a test made them).
func TestMain(m *testing.M) {
	code := m.Run()
	if testNet.net != nil {
		if err := testNet.net.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "gateway tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// netCluster returns the cluster of the test network, making both on
// first use.
func netCluster(t *testing.T) *cephtest.Cluster {
	t.Helper()
	testNet.once.Do(func() {
		if testNet.skip = gwnet.Unavailable(); testNet.skip != "" {
			return
		}
		testNet.net, testNet.err = gwnet.Start([]string{"NVMETD_CEPH_OSDS=3"})
	})
	if testNet.skip != "" {
		t.Skip(testNet.skip)
	}
	if testNet.err != nil {
		t.Fatalf("the gateway tests' network and cluster: %v", testNet.err)
	}
	return testNet.net.Cluster
}

// cephAddr is the cluster's address on the test network.
func cephAddr() string { return testNet.net.CephAddr() }

// gwNetns is a gateway's network namespace.
type gwNetns struct {
	*gwnet.Netns
	name string // ip netns name
	host string // the root end's address: the host's, as the gateway sees it
	addr string // the gateway's address
}

// newGwNetns makes namespace i (0, 1, …) of the test and its veth pair,
// removed when the test ends (after the processes in it: register it
// before starting them).
func newGwNetns(t *testing.T, i int) *gwNetns {
	t.Helper()
	n := testNet.net.NewNetns(t, i)
	return &gwNetns{Netns: n, name: n.Name, host: n.Host, addr: n.Addr}
}

// cut drops, inside the namespace, every packet to or from addr (and, if
// ports is not empty, only those to or from one of those TCP ports of
// addr).
func (n *gwNetns) cut(addr string, ports ...int) { n.Cut(addr, ports...) }

// heal deletes every cut and returns what the rules dropped.
func (n *gwNetns) heal() string { return n.Heal() }

// isCut returns whether a cut is in place.
func (n *gwNetns) isCut() bool { return n.IsCut() }

// startGatewayPairNet is startGatewayPair with each gateway in a network
// namespace of its own, on the test network's cluster (3 OSDs).
func startGatewayPairNet(t *testing.T, setup func(a, b *gwProc)) (*gwPair, [2]*gwNetns) {
	t.Helper()
	c := netCluster(t)
	ns := [2]*gwNetns{newGwNetns(t, 0), newGwNetns(t, 1)}
	g := startGatewayPairOn(t, c, func(a, b *gwProc) {
		for i, p := range []*gwProc{a, b} {
			p.netns, p.host = ns[i].name, ns[i].addr
		}
		if setup != nil {
			setup(a, b)
		}
	})
	// Heal before the processes are stopped, should the test end early.
	t.Cleanup(func() {
		for _, n := range ns {
			if n.isCut() {
				n.heal()
			}
		}
	})
	return g, ns
}
