//go:build rbd

package gateway_test

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// cephCut is a partition between one gateway process and the Ceph cluster
// that leaves its NVMe/iWARP connections to the host alone, made with
// nftables on the machine's loopback (where the test cluster listens):
//
//   - the gateway starts in a cgroup (v2) of its own (cgroup);
//   - a rule of the output hook marks every connection that a socket of
//     that cgroup opens (ct state new: the gateway is the client, and it
//     is the client of the cluster only; the host's connections to the
//     gateway are opened by the host) with a conntrack mark;
//   - cut adds a rule that drops every packet of a marked connection, in
//     both directions (on loopback both are sent through the output
//     hook), and heal deletes it: the packets are lost, not refused,
//     as in a real partition, and TCP retransmits through the heal.
//
// Cutting the gateway from the cluster this way needs no address other
// than 127.0.0.1 and no change to the shared test cluster.
type cephCut struct {
	t      *testing.T
	table  string
	cgroup *os.File
	cgPath string
	drop   string // the drop rule's handle while cut
}

const cutMark = "0x4e56" // "NV"

// newCephCut sets up the cgroup and the marking rule; the test's end
// removes both (after the processes, started later, are stopped).
func newCephCut(t *testing.T) *cephCut {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: a cgroup and nftables rules partition the gateway from the cluster")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("needs nft (Debian package nftables) to partition the gateway from the cluster")
	}
	mnt := cgroup2Mount(t)
	var rb [4]byte
	rand.Read(rb[:])
	name := "nvmetd-test-" + hex.EncodeToString(rb[:])
	c := &cephCut{t: t, table: strings.ReplaceAll(name, "-", "_"), cgPath: filepath.Join(mnt, name)}
	if err := os.Mkdir(c.cgPath, 0o755); err != nil {
		t.Skipf("cannot create a cgroup for the gateway: %v", err)
	}
	t.Cleanup(func() {
		if c.cgroup != nil {
			c.cgroup.Close()
		}
		_ = exec.Command("nft", "delete", "table", "inet", c.table).Run()
		// The processes are gone by now (their cleanup runs first); a
		// straggler would keep the directory: say so.
		if err := os.Remove(c.cgPath); err != nil {
			t.Logf("remove cgroup %s: %v", c.cgPath, err)
		}
	})
	f, err := os.Open(c.cgPath)
	if err != nil {
		t.Fatal(err)
	}
	c.cgroup = f
	// nft resolves a cgroupv2 path under /sys/fs/cgroup.
	rel, ok := strings.CutPrefix(c.cgPath, "/sys/fs/cgroup/")
	if !ok {
		t.Skipf("the cgroup2 hierarchy is mounted at %s, not under /sys/fs/cgroup where nft looks for cgroup paths", mnt)
	}
	c.nft("add", "table", "inet", c.table)
	c.nft("add", "chain", "inet", c.table, "out", "{ type filter hook output priority 0; policy accept; }")
	c.nft("add", "rule", "inet", c.table, "out", "socket", "cgroupv2", "level", "1", `"`+rel+`"`,
		"ct", "state", "new", "ct", "mark", "set", cutMark)
	return c
}

// cgroup2Mount returns where the cgroup2 hierarchy is mounted.
func cgroup2Mount(t *testing.T) string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Skipf("mountinfo: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID parent major:minor root mount-point options ... - fstype source options
		l := sc.Text()
		i := strings.Index(l, " - ")
		if i < 0 {
			continue
		}
		if fs := strings.Fields(l[i+3:]); len(fs) > 0 && fs[0] == "cgroup2" {
			if f := strings.Fields(l[:i]); len(f) >= 5 {
				return f[4]
			}
		}
	}
	t.Skip("no cgroup2 hierarchy mounted: the partition matches the gateway's sockets by cgroup")
	return ""
}

func (c *cephCut) nft(args ...string) string {
	c.t.Helper()
	out, err := exec.Command("nft", args...).CombinedOutput()
	if err != nil {
		c.t.Fatalf("nft %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// cut drops every packet between the gateway and the cluster.
func (c *cephCut) cut() {
	c.t.Helper()
	out := c.nft("--echo", "--handle", "add", "rule", "inet", c.table, "out", "ct", "mark", cutMark, "counter", "drop")
	m := regexp.MustCompile(`# handle (\d+)`).FindStringSubmatch(out)
	if m == nil {
		c.t.Fatalf("nft gave no handle for the drop rule: %s", out)
	}
	c.drop = m[1]
}

// heal lets them through again and returns what the rule dropped.
func (c *cephCut) heal() string {
	c.t.Helper()
	rules := c.nft("list", "chain", "inet", c.table, "out")
	c.nft("delete", "rule", "inet", c.table, "out", "handle", c.drop)
	c.drop = ""
	m := regexp.MustCompile(`counter packets \d+ bytes \d+`).FindString(rules)
	return m
}

// TestGatewayProcessCephCut is issue 21's second scenario: the owner
// (gw-a) is cut from the cluster, but not from the host, while the host
// writes through it with the verified workload; then the partition
// heals. gw-a must stop serving (its renewals fail: it steps down before
// its lease ends), gw-b must fence it and take the group over, the host's
// I/O must continue through gw-b, and no I/O may complete through gw-a
// once one has completed through gw-b (one writer). Once the partition
// heals, gw-a's RADOS clients reach the cluster again and find
// themselves blocklisted: nothing gw-a had in flight may land (the sweep
// of the whole image finds 0 regressed blocks). gw-a stays a member (only
// its clients of the group were fenced) and takes the group back
// (failback: it fences gw-b's client of the group and reopens its own),
// and the host's I/O moves back to it.
func TestGatewayProcessCephCut(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test with two nvmetd-rbd processes and a Ceph cluster: skipped in -short mode")
	}
	cc := newCephCut(t)
	g := startGatewayPair(t, func(a, _ *gwProc) { a.cgroup = cc.cgroup })
	// Heal before the processes are stopped, should the test end early.
	t.Cleanup(func() {
		if cc.drop != "" {
			cc.heal()
		}
	})
	a, b, pa, pb := g.a, g.b, g.pa, g.pb
	w := startWorkload(t, g.h, 8, 1024)
	defer w.Stop()
	waitOn(t, w, pa, time.Time{}, 200)

	// Cut gw-a from the cluster with writes in flight.
	amark, bmark := len(a.stderr.String()), len(b.stderr.String())
	_, _, e0 := ioTotals(pa)
	cutAt := time.Now()
	cc.cut()
	t.Logf("gw-a cut from the cluster at %s", cutAt.Format("15:04:05.000"))

	// gw-a steps down; gw-b fences it, takes the group, and the host's
	// I/O goes on through it.
	a.waitLog(`stepped down from group`, amark)
	b.waitLog(`group 1: set-ana optimized`, bmark)
	waitOn(t, w, pb, cutAt, 200)
	blog := b.stderr.String()[bmark:]
	iFence, iOpt := strings.Index(blog, "fencing the previous holder"), strings.Index(blog, "group 1: set-ana optimized")
	if iFence < 0 || iFence > iOpt {
		t.Fatalf("gw-b's log: fence at %d, optimized at %d: the fence must come first:\n%s", iFence, iOpt, blog)
	}
	fenced := blocklisted(t, g.c, blog)
	oneWriterUntil(t, w, pa, pb, cutAt, time.Time{})
	_, _, e1 := ioTotals(pa)
	t.Logf("the host's I/Os completed with an error status through gw-a after the cut (failed over to gw-b): %d", e1-e0)
	if e1 == e0 {
		t.Errorf("no I/O of the host failed through gw-a after the cut: none was in flight, the scenario did not run as meant")
	}
	stall, err := w.Stall(pa.Address(), cutAt)
	if err != nil {
		t.Fatal(err)
	}
	alog := a.stderr.String()[amark:]
	t.Logf("gw-a while cut:\n%s", grepLines(alog, "step|set-ana|unavailable|renew|fenced"))
	downAt, ok0 := logTime(alog, `stepped down from group`)
	fenceAt, ok1 := logTime(blog, `fencing the previous holder`)
	optAt, ok2 := logTime(blog, `group 1: set-ana optimized`)
	if ok0 && ok1 && ok2 {
		fence := optAt.Sub(fenceAt)
		bound := gwLease + fence + 2*kato
		verdict := "within"
		if stall > bound {
			verdict = "OVER"
		}
		t.Logf("stall of the host's I/O on cutting the owner from the cluster: %v; bound lease %v + fence %v + 2 × KATO %v = %v: %s; gw-a stepped down at +%v, gw-b fenced at +%v, optimized at +%v after the cut",
			stall.Round(time.Millisecond), gwLease, fence.Round(time.Millisecond), kato, bound.Round(time.Millisecond), verdict,
			downAt.Sub(cutAt).Round(time.Millisecond), fenceAt.Sub(cutAt).Round(time.Millisecond), optAt.Sub(cutAt).Round(time.Millisecond))
	} else {
		t.Logf("stall of the host's I/O on cutting the owner from the cluster: %v", stall)
	}
	if stall > 10*(gwLease+2*kato) {
		t.Errorf("the host's I/O stood still for %v, more than ten times lease + 2 × KATO", stall)
	}

	// The partition lasts three leases in all while the host writes
	// through gw-b (the scenario's length, not a bound).
	if d := time.Until(cutAt.Add(3 * gwLease)); d > 0 {
		time.Sleep(d)
	}
	if pa.ANAState(1) == nvmeof.ANAOptimized {
		t.Errorf("gw-a still reports group 1 optimized to the host while cut from the cluster")
	}
	before := w.Completions(pa.Address())
	amark = len(a.stderr.String())
	healAt := time.Now()
	dropped := cc.heal()
	t.Logf("partition healed at %s, %v after the cut (the drop rule: %s); %d completions through gw-a before",
		healAt.Format("15:04:05.000"), healAt.Sub(cutAt).Round(time.Millisecond), dropped, before)

	// gw-a reaches the cluster again. Only its clients of the group were
	// fenced (issue 21.3: fencing per ANA group), so it stays a member
	// and, as the group's preferred owner, takes it back: it fences
	// gw-b's client of the group and reopens its namespace on a new RADOS
	// client before it serves. Until then, nothing completes through it.
	iBack := a.waitLog(`group 1: set-ana optimized`, amark)
	alog = a.stderr.String()[amark:iBack]
	t.Logf("gw-a after the heal:\n%s", grepLines(alog, "fenc|step|set-ana|reopen|renew|acquire"))
	if !strings.Contains(alog, "fencing the previous holder") {
		t.Errorf("gw-a took the group back without fencing gw-b's client of the group:\n%s", tail(alog, 4000))
	}
	// From its acquisition on (the lock and the record are its own; the
	// ANA change to optimized follows) gw-a is the owner again.
	backAt, ok := logTime(alog, `group 1: acquire[^:]*: done`)
	if !ok {
		t.Fatalf("gw-a's log has no acquisition before it went optimized:\n%s", tail(alog, 4000))
	}
	if late := w.CompletionsSince(pa.Address(), healAt) - w.CompletionsSince(pa.Address(), backAt); late != 0 {
		t.Errorf("FINDING: %d I/Os completed through gw-a after the heal, before it took the group back: two writers", late)
	}
	oneWriterUntil(t, w, pa, pb, cutAt, backAt)
	waitOptimized(t, pa)
	waitOn(t, w, pa, backAt, 200)
	b.waitLog(`group 1: release to gw-a: done`, bmark)

	r := sweep(t, w, g.h)
	if r.Regressed != 0 {
		t.Errorf("FINDING: %d regressed blocks", r.Regressed)
	}
	t.Logf("gw-b fenced %v; completions per path %s", fenced, fmt.Sprint(r.Paths))
}
