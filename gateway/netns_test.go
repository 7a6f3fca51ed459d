//go:build rbd

package gateway_test

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

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

// testNet is the package's test network and cluster.
var testNet struct {
	once    sync.Once
	err     error
	skip    string
	id      string // random, in every name
	subnet  int    // S of 10.77.S.0/24
	netns   string // the namespace of the cluster interface's peer
	cluster *cephtest.Cluster
	stop    func() error
}

// TestMain removes the test network and stops its cluster after the
// tests (only if a test made them).
func TestMain(m *testing.M) {
	code := m.Run()
	if testNet.stop != nil {
		if err := testNet.stop(); err != nil {
			fmt.Fprintf(os.Stderr, "gateway tests: stop the test network's cluster: %v\n", err)
			code = 1
		}
	}
	if testNet.netns != "" {
		if out, err := exec.Command("ip", "netns", "del", testNet.netns).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "gateway tests: ip netns del %s: %v %s\n", testNet.netns, err, out)
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
		if os.Geteuid() != 0 {
			testNet.skip = "needs root: the gateways run in network namespaces of their own (ip netns, veth pairs, nftables)"
			return
		}
		for _, tool := range []string{"ip", "nsenter", "nft"} {
			if _, err := exec.LookPath(tool); err != nil {
				testNet.skip = fmt.Sprintf("needs %s (test/deps.sh installs it) to run the gateways in network namespaces and partition them", tool)
				return
			}
		}
		var rb [3]byte
		rand.Read(rb[:])
		testNet.id = hex.EncodeToString(rb[:])
		out, err := exec.Command("ip", "-o", "-4", "addr", "show").Output()
		if err != nil {
			testNet.err = fmt.Errorf("ip addr show: %w", err)
			return
		}
		for _, off := range mrand.Perm(150) {
			s := 100 + off
			if !strings.Contains(string(out), fmt.Sprintf(" inet 10.77.%d.", s)) {
				testNet.subnet = s
				break
			}
		}
		if testNet.subnet == 0 {
			testNet.err = fmt.Errorf("no free subnet in 10.77.100-249.0/24")
			return
		}
		// The cluster's interface: the root end of a veth pair whose
		// other end is in a namespace of its own (up, so that the root
		// end has a carrier); no packet crosses it. (A dummy
		// interface would do, where the kernel has the module.)
		ns := "nvt" + testNet.id + "-ceph"
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			testNet.err = fmt.Errorf("ip netns add %s: %v: %s", ns, err, out)
			return
		}
		testNet.netns = ns
		dev := "nvt" + testNet.id + "c"
		for _, args := range [][]string{
			{"link", "add", dev, "type", "veth", "peer", "name", "eth0", "netns", ns},
			{"-n", ns, "link", "set", "eth0", "up"},
			{"addr", "add", cephAddr() + "/32", "dev", dev},
			{"link", "set", dev, "up"},
		} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				testNet.err = fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
				return
			}
		}
		testNet.cluster, testNet.stop, testNet.err = cephtest.StartPrivate([]string{
			"NVMETD_CEPH_ADDR=" + cephAddr(), "NVMETD_CEPH_OSDS=3"})
	})
	if testNet.skip != "" {
		t.Skip(testNet.skip)
	}
	if testNet.err != nil {
		t.Fatalf("the gateway tests' network and cluster: %v", testNet.err)
	}
	return testNet.cluster
}

// cephAddr is the cluster's address on the test network.
func cephAddr() string { return fmt.Sprintf("10.77.%d.1", testNet.subnet) }

// gwNetns is a gateway's network namespace.
type gwNetns struct {
	t    *testing.T
	name string // ip netns name
	host string // the root end's address: the host's, as the gateway sees it
	addr string // the gateway's address
}

// newGwNetns makes namespace i (0, 1, …) of the test and its veth pair,
// removed when the test ends (after the processes in it: register it
// before starting them).
func newGwNetns(t *testing.T, i int) *gwNetns {
	t.Helper()
	var rb [2]byte
	rand.Read(rb[:])
	n := &gwNetns{
		t:    t,
		name: fmt.Sprintf("nvt%s-%s-%d", testNet.id, hex.EncodeToString(rb[:]), i),
		host: fmt.Sprintf("10.77.%d.%d", testNet.subnet, 16+4*i+1),
		addr: fmt.Sprintf("10.77.%d.%d", testNet.subnet, 16+4*i+2),
	}
	root := fmt.Sprintf("nvt%s%s", testNet.id, hex.EncodeToString(rb[:]))
	if len(root) > 15 {
		t.Fatalf("interface name %s too long", root)
	}
	sh(t, "ip", "netns", "add", n.name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", n.name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v %s", n.name, err, out)
		}
	})
	sh(t, "ip", "link", "add", root, "type", "veth", "peer", "name", "eth0", "netns", n.name)
	sh(t, "ip", "addr", "add", n.host+"/30", "dev", root)
	sh(t, "ip", "link", "set", root, "up")
	sh(t, "ip", "-n", n.name, "addr", "add", n.addr+"/30", "dev", "eth0")
	sh(t, "ip", "-n", n.name, "link", "set", "lo", "up")
	sh(t, "ip", "-n", n.name, "link", "set", "eth0", "up")
	sh(t, "ip", "-n", n.name, "route", "add", "default", "via", n.host)
	// The partition's table: two base chains, empty until a cut.
	n.nft("add table inet part")
	n.nft("add chain inet part in { type filter hook input priority 0; policy accept; }")
	n.nft("add chain inet part out { type filter hook output priority 0; policy accept; }")
	return n
}

func sh(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// nft runs an nft command inside the namespace.
func (n *gwNetns) nft(cmd string) string {
	n.t.Helper()
	return sh(n.t, "ip", "netns", "exec", n.name, "nft", cmd)
}

// cut drops, inside the namespace, every packet to or from addr (and, if
// ports is not empty, only those to or from one of those TCP ports of
// addr).
func (n *gwNetns) cut(addr string, ports ...int) {
	n.t.Helper()
	var out, in string
	if len(ports) == 0 {
		out, in = "ip daddr "+addr, "ip saddr "+addr
	} else {
		ps := make([]string, len(ports))
		for i, p := range ports {
			ps[i] = strconv.Itoa(p)
		}
		set := "{ " + strings.Join(ps, ", ") + " }"
		out, in = "ip daddr "+addr+" tcp dport "+set, "ip saddr "+addr+" tcp sport "+set
	}
	n.nft("add rule inet part out " + out + " counter drop")
	n.nft("add rule inet part in " + in + " counter drop")
}

// heal deletes every cut and returns what the rules dropped.
func (n *gwNetns) heal() string {
	n.t.Helper()
	rules := n.nft("list table inet part")
	n.nft("flush chain inet part out")
	n.nft("flush chain inet part in")
	return strings.Join(regexp.MustCompile(`counter packets \d+ bytes \d+`).FindAllString(rules, -1), ", ")
}

// cut returns whether a cut is in place.
func (n *gwNetns) isCut() bool {
	out, err := exec.Command("ip", "netns", "exec", n.name, "nft", "list", "table", "inet", "part").Output()
	return err == nil && strings.Contains(string(out), "drop")
}

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

// osdPorts returns each OSD's public (client) TCP port on the cluster's
// address.
func osdPorts(t *testing.T, c *cephtest.Cluster) map[int]int {
	t.Helper()
	out, err := adminCeph(c, "osd", "dump", "--format", "json")
	if err != nil {
		t.Fatalf("ceph osd dump: %v\n%s", err, out)
	}
	var d struct {
		OSDs []struct {
			OSD         int `json:"osd"`
			PublicAddrs struct {
				AddrVec []struct {
					Addr string `json:"addr"`
				} `json:"addrvec"`
			} `json:"public_addrs"`
		} `json:"osds"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &d); err != nil {
		t.Fatalf("ceph osd dump: %v\n%s", err, out)
	}
	ports := map[int]int{}
	for _, o := range d.OSDs {
		for _, a := range o.PublicAddrs.AddrVec {
			_, p, ok := strings.Cut(a.Addr, ":")
			if n, err := strconv.Atoi(p); ok && err == nil {
				ports[o.OSD] = n
			}
		}
	}
	if len(ports) != len(d.OSDs) {
		t.Fatalf("ceph osd dump: ports %v of %d OSDs\n%s", ports, len(d.OSDs), out)
	}
	return ports
}

// primaryOSD returns the primary OSD of object obj in the cluster's pool
// (ceph osd map).
func primaryOSD(t *testing.T, c *cephtest.Cluster, obj string) int {
	t.Helper()
	out, err := adminCeph(c, "osd", "map", c.Pool, obj, "--format", "json")
	if err != nil {
		t.Fatalf("ceph osd map %s %s: %v\n%s", c.Pool, obj, err, out)
	}
	var m struct {
		ActingPrimary int `json:"acting_primary"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &m); err != nil {
		t.Fatalf("ceph osd map: %v\n%s", err, out)
	}
	return m.ActingPrimary
}
