// Package gwnet is the gateway tests' network: a Ceph cluster of the
// test's own on an address of its own, and a network namespace per
// gateway process linked to the root namespace by a veth pair, so that a
// partition (nftables rules inside a gateway's namespace) is a real one
// (docs/rbd.md, "How the tests partition"). Both the Go host's gateway
// tests (gateway/) and the Linux host's (test/interop) build on it.
//
//   - the network: an interface in the root namespace (the root end of a
//     veth pair whose peer is in a namespace of its own) holds the
//     cluster's address 10.77.S.1/32 (S a subnet picked at random among
//     those no interface uses); a Ceph cluster (test/ceph/cluster.sh with
//     NVMETD_CEPH_ADDR) is started on it;
//   - each gateway process runs in a namespace of its own (nsenter
//     --net), linked to the root namespace by a veth pair:
//     10.77.S.(16+4i+1) in the root namespace, 10.77.S.(16+4i+2) in the
//     gateway's, its default route through the pair;
//   - a partition is a set of nftables rules inside the gateway's
//     namespace that drop (not refuse) the packets to and from an address
//     (and, optionally, some of its TCP ports). Healing deletes them.
//
// Nothing else of the machine is touched: the names and addresses are
// the test's own, and removing a namespace removes its veth pair.
package gwnet

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/nvmetd/nvmetd/test/ceph/cephtest"
)

// Network is a test network with its cluster.
type Network struct {
	ID      string // random, in every name
	Subnet  int    // S of 10.77.S.0/24
	Cluster *cephtest.Cluster
	netns   string // the namespace of the cluster interface's peer
	stop    func() error
}

// Unavailable returns why the machine cannot hold a test network ("" if
// it can): the reason a test that needs one skips with.
func Unavailable() string {
	if os.Geteuid() != 0 {
		return "needs root: the gateways run in network namespaces of their own (ip netns, veth pairs, nftables)"
	}
	for _, tool := range []string{"ip", "nsenter", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Sprintf("needs %s (test/deps.sh installs it) to run the gateways in network namespaces and partition them", tool)
		}
	}
	return ""
}

// Start makes a test network and starts its cluster, with env added to
// cluster.sh's environment (NVMETD_CEPH_OSDS=3 for three OSDs). Close
// removes both, also after an error.
func Start(env []string) (*Network, error) {
	n := &Network{}
	var rb [3]byte
	rand.Read(rb[:])
	n.ID = hex.EncodeToString(rb[:])
	out, err := exec.Command("ip", "-o", "-4", "addr", "show").Output()
	if err != nil {
		return n, fmt.Errorf("ip addr show: %w", err)
	}
	for _, off := range mrand.Perm(150) {
		s := 100 + off
		if !strings.Contains(string(out), fmt.Sprintf(" inet 10.77.%d.", s)) {
			n.Subnet = s
			break
		}
	}
	if n.Subnet == 0 {
		return n, fmt.Errorf("no free subnet in 10.77.100-249.0/24")
	}
	// The cluster's interface: the root end of a veth pair whose other
	// end is in a namespace of its own (up, so that the root end has a
	// carrier); no packet crosses it.
	ns := "nvt" + n.ID + "-ceph"
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		return n, fmt.Errorf("ip netns add %s: %v: %s", ns, err, out)
	}
	n.netns = ns
	dev := "nvt" + n.ID + "c"
	for _, args := range [][]string{
		{"link", "add", dev, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"-n", ns, "link", "set", "eth0", "up"},
		{"addr", "add", n.CephAddr() + "/32", "dev", dev},
		{"link", "set", dev, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return n, fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	n.Cluster, n.stop, err = cephtest.StartPrivate(append([]string{"NVMETD_CEPH_ADDR=" + n.CephAddr()}, env...))
	return n, err
}

// Close stops the cluster and removes the network.
func (n *Network) Close() error {
	var errs []error
	if n.stop != nil {
		if err := n.stop(); err != nil {
			errs = append(errs, fmt.Errorf("stop the test network's cluster: %w", err))
		}
		n.stop = nil
	}
	if n.netns != "" {
		if out, err := exec.Command("ip", "netns", "del", n.netns).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip netns del %s: %v %s", n.netns, err, out))
		}
		n.netns = ""
	}
	return errors.Join(errs...)
}

// CephAddr is the cluster's address on the network.
func (n *Network) CephAddr() string { return fmt.Sprintf("10.77.%d.1", n.Subnet) }

// Netns is a gateway's network namespace.
type Netns struct {
	t    testing.TB
	Name string // ip netns name
	Host string // the root end's address: the host's, as the gateway sees it
	Addr string // the gateway's address
}

// NewNetns makes namespace i (0, 1, …) of the test and its veth pair,
// removed when the test ends (after the processes in it: call it before
// starting them).
func (n *Network) NewNetns(t testing.TB, i int) *Netns {
	t.Helper()
	var rb [2]byte
	rand.Read(rb[:])
	ns := &Netns{
		t:    t,
		Name: fmt.Sprintf("nvt%s-%s-%d", n.ID, hex.EncodeToString(rb[:]), i),
		Host: fmt.Sprintf("10.77.%d.%d", n.Subnet, 16+4*i+1),
		Addr: fmt.Sprintf("10.77.%d.%d", n.Subnet, 16+4*i+2),
	}
	root := fmt.Sprintf("nvt%s%s", n.ID, hex.EncodeToString(rb[:]))
	if len(root) > 15 {
		t.Fatalf("interface name %s too long", root)
	}
	Run(t, "ip", "netns", "add", ns.Name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns.Name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v %s", ns.Name, err, out)
		}
	})
	Run(t, "ip", "link", "add", root, "type", "veth", "peer", "name", "eth0", "netns", ns.Name)
	Run(t, "ip", "addr", "add", ns.Host+"/30", "dev", root)
	Run(t, "ip", "link", "set", root, "up")
	Run(t, "ip", "-n", ns.Name, "addr", "add", ns.Addr+"/30", "dev", "eth0")
	Run(t, "ip", "-n", ns.Name, "link", "set", "lo", "up")
	Run(t, "ip", "-n", ns.Name, "link", "set", "eth0", "up")
	Run(t, "ip", "-n", ns.Name, "route", "add", "default", "via", ns.Host)
	// The partition's table: two base chains, empty until a cut.
	ns.NFT("add table inet part")
	ns.NFT("add chain inet part in { type filter hook input priority 0; policy accept; }")
	ns.NFT("add chain inet part out { type filter hook output priority 0; policy accept; }")
	return ns
}

// Run runs a command and fails t if it fails; it returns its output.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// NFT runs an nft command inside the namespace.
func (ns *Netns) NFT(cmd string) string {
	ns.t.Helper()
	return Run(ns.t, "ip", "netns", "exec", ns.Name, "nft", cmd)
}

// Cut drops, inside the namespace, every packet to or from addr (and, if
// ports is not empty, only those to or from one of those TCP ports of
// addr).
func (ns *Netns) Cut(addr string, ports ...int) {
	ns.t.Helper()
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
	ns.NFT("add rule inet part out " + out + " counter drop")
	ns.NFT("add rule inet part in " + in + " counter drop")
}

// Heal deletes every cut and returns what the rules dropped.
func (ns *Netns) Heal() string {
	ns.t.Helper()
	rules := ns.NFT("list table inet part")
	ns.NFT("flush chain inet part out")
	ns.NFT("flush chain inet part in")
	return strings.Join(regexp.MustCompile(`counter packets \d+ bytes \d+`).FindAllString(rules, -1), ", ")
}

// IsCut returns whether a cut is in place.
func (ns *Netns) IsCut() bool {
	out, err := exec.Command("ip", "netns", "exec", ns.Name, "nft", "list", "table", "inet", "part").Output()
	return err == nil && strings.Contains(string(out), "drop")
}

// Forward relays every TCP connection accepted on listen (host:port, in
// the root namespace) to target, both ways as a byte stream, until the
// test ends: a host that reaches only this machine's loopback (the lab
// VM, through slirp) reaches a gateway in a namespace through it. Either
// side's close or reset closes the other (a reset as a reset: the
// relay's connection to the other side is closed with SO_LINGER 0), so
// that the host sees the gateway's resets. TCP re-segments the stream,
// which MPA (RFC 5044) and NVMe/TCP allow.
func Forward(t testing.TB, listen, target string) {
	t.Helper()
	ln, err := net.Listen("tcp4", listen)
	if err != nil {
		t.Fatalf("forward %s → %s: %v", listen, target, err)
	}
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	done := make(chan struct{})
	track := func(c net.Conn, add bool) bool {
		mu.Lock()
		defer mu.Unlock()
		if add {
			select {
			case <-done:
				return false
			default:
			}
			conns[c] = true
		} else {
			delete(conns, c)
		}
		return true
	}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		close(done)
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				u, err := net.Dial("tcp4", target)
				if err != nil {
					abort(c)
					return
				}
				if !track(c, true) || !track(u, true) {
					c.Close()
					u.Close()
					return
				}
				defer track(c, false)
				defer track(u, false)
				errc := make(chan error, 2)
				pipe := func(dst, src net.Conn) {
					_, err := io.Copy(dst, src)
					if err == nil {
						err = io.EOF
					}
					errc <- err
				}
				go pipe(u, c)
				go pipe(c, u)
				err = <-errc
				if errors.Is(err, io.EOF) {
					c.Close()
					u.Close()
				} else {
					abort(c)
					abort(u)
				}
				<-errc
			}()
		}
	}()
}

// abort closes c with a reset.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}
