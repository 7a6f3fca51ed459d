//go:build rbd

package gateway_test

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/gateway"
	"github.com/nvmetd/nvmetd/test/ceph/cephtest"
)

// holderRecord reads the record of ANA group 1 of p's gateway group from
// the cluster (as an operator would: rados getomapval).
func holderRecord(t *testing.T, g *gwPair, p *gwProc) gateway.Record {
	t.Helper()
	cfg, err := os.ReadFile(p.cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^  group: (\S+)$`).FindSubmatch(cfg)
	if m == nil {
		t.Fatalf("no gateway group in %s", p.cfg)
	}
	out := filepath.Join(t.TempDir(), "holder.json")
	admin(t, g.c, "rados", "-p", g.c.Pool, "getomapval", gateway.ObjectName(string(m[1]), 1), "holder", out)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r gateway.Record
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("the holder record %q: %v", b, err)
	}
	return r
}

// imageClients reads gw-a's record of group 1 and returns it with the
// addresses of its image clients, one by one.
func imageClients(t *testing.T, g *gwPair, a *gwProc) (gateway.Record, []string) {
	t.Helper()
	rec := holderRecord(t, g, a)
	if rec.Name != "gw-a" || len(rec.Addrs) == 0 {
		t.Fatalf("group 1's record: %+v, want gw-a's with its image clients", rec)
	}
	var addrs []string
	for _, v := range rec.Addrs {
		addrs = append(addrs, gateway.SplitAddrs(v)...)
	}
	return rec, addrs
}

// newImageClient checks that gw-a's record of group 1 names an image
// client that old did not (and the old ones, closed: a successor fences
// every client it ever had on the group).
func newImageClient(t *testing.T, g *gwPair, a *gwProc, old gateway.Record) {
	t.Helper()
	r := holderRecord(t, g, a)
	fresh := false
	for _, v := range r.Addrs {
		fresh = fresh || !slices.Contains(old.Addrs, v)
	}
	if r.Name != "gw-a" || !fresh {
		t.Errorf("gw-a's record after it took the group back: %+v, want a new image client (the old: %v)", r, old.Addrs)
	}
}

// TestGatewayBackendBlocklisted (issue 21, backend health): an operator
// blocklists the owner's image client alone (`ceph osd blocklist add` of
// the address its record names; the gateway's own client of the group
// objects is not touched, so its renewals go on) while the host writes
// with the verified workload. Before, gw-a kept the group while every
// write failed with EBLOCKLISTED, forever (the host's I/O never resumed).
// Now: gw-a sees its backend fenced, goes inaccessible and releases the
// group; gw-b fences gw-a's clients of the group and takes it; the host's
// I/O resumes through gw-b; after its backoff gw-a (the preferred owner)
// asks for the group back and serves it again on a new RADOS client. The
// whole image is read back at the end. The stall is reported against
// lease + fence + 2 × KATO, not asserted.
func TestGatewayBackendBlocklisted(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test with two nvmetd-rbd processes and a Ceph cluster: skipped in -short mode")
	}
	g := startGatewayPair(t, nil)
	a, b, pa, pb, h := g.a, g.b, g.pa, g.pb, g.h
	w := startWorkload(t, h, 8, 256)
	defer w.Stop()
	waitOn(t, w, pa, time.Time{}, 100)

	rec, addrs := imageClients(t, g, a)
	unblock(t, g.c, addrs...)
	amark, bmark := len(a.stderr.String()), len(b.stderr.String())
	at := time.Now()
	for _, addr := range addrs {
		admin(t, g.c, "ceph", "osd", "blocklist", "add", addr)
	}
	t.Logf("blocklisted gw-a's image client %v (not its client of the group objects)", addrs)

	waitOn(t, w, pb, at, 100)
	d, err := w.Stall(pa.Address(), at)
	if err != nil {
		t.Fatal(err)
	}
	const lease = 3 * time.Second
	t.Logf("failover on a backend-only blocklist: %v (last completion through gw-a to the first through gw-b); "+
		"bound lease + fence + 2 × KATO = %v + fence + %v", d, lease, 2*kato)
	iDown := a.waitLog(`stepped down from group[^\n]*EBLOCKLISTED`, amark)
	a.waitLog(`group 1: release to  \(no drain\): done`, amark)
	// Its client is blocklisted: what was still in its backends (if
	// anything) is answered at once, after the inaccessible change and
	// without an error (target.AnswerGroupInFlight accepted it).
	iAns := a.waitLog(`gateway: group 1: answer-in-flight \(stepped down for its backends: their RADOS client is blocklisted\)`, amark)
	if ans := a.stderr.String()[amark:iAns]; !strings.Contains(ans, "group 1: set-ana inaccessible") {
		t.Errorf("gw-a answered the group's commands early before its inaccessible change:\n%s", grepLines(ans, "set-ana|answer"))
	}
	if strings.Contains(a.stderr.String()[amark:], "answer-in-flight (stepped down for its backends: their RADOS client is blocklisted) failed") {
		t.Errorf("gw-a's early answer failed:\n%s", grepLines(a.stderr.String()[amark:], "answer"))
	}
	b.waitLog(`group 1: set-ana optimized`, bmark)
	blog := b.stderr.String()[bmark:]
	if i, j := strings.Index(blog, "fencing the previous holder"), strings.Index(blog, "group 1: set-ana optimized"); i < 0 || i > j {
		t.Fatalf("gw-b's log: fence at %d, optimized at %d: the fence must come first:\n%s", i, j, blog)
	}
	t.Logf("gw-a:\n%s", grepLines(a.stderr.String()[amark:], "stepped down|release|reopen|request"))

	// gw-a, the preferred owner, takes the group back after its backoff,
	// on a new RADOS client.
	at = time.Now()
	iBack := a.waitLog(`group 1: acquire \(reopen\): done`, iDown)
	a.waitLog(`group 1: set-ana optimized`, iBack)
	waitOptimized(t, pa)
	waitOn(t, w, pa, at, 100)
	// Its record names a new image client (and the old, closed one:
	// a successor fences every client it ever had on the group).
	newImageClient(t, g, a, rec)
	sweep(t, w, h)
	if st := a.readStatus(); st.Gateway == nil || !st.Gateway.Groups[0].Owned {
		t.Errorf("gw-a status at the end: %+v", st.Gateway)
	}
}

// TestGatewayProcessCNTLIDOverlap: two nvmetd-rbd gateways of one group
// serve one subsystem, the second with a CNTLID range that overlaps the
// first's (50..149 against 1..100): the second takes no group and is
// degraded, its log and status naming both ranges; the first is
// untouched. Before, both were accepted (the agreement compared only the
// shared configuration), and a host could get CNTLID 50..100 from both.
func TestGatewayProcessCNTLIDOverlap(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test with two nvmetd-rbd processes and a Ceph cluster: skipped in -short mode")
	}
	c := cephtest.Shared(t)
	image := c.CreateImage(t, 8<<20)
	bin := buildGateway(t)
	var rb [4]byte
	rand.Read(rb[:])
	group := "m" + hex.EncodeToString(rb[:])
	var procs []*gwProc
	for i, name := range []string{"gw-a", "gw-b"} {
		d := filepath.Join(t.TempDir(), name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		p := &gwProc{t: t, name: name, bin: bin, dir: d, cfg: filepath.Join(d, "nvmetd.yaml"), port: freePort(t)}
		p.writeConfig(c, image, group, 1+49*i) // gw-a 1..100, gw-b 50..149
		procs = append(procs, p)
	}
	t.Cleanup(func() {
		for _, p := range procs {
			if p.cmd != nil && p.cmd.ProcessState == nil {
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
				p.wait()
			}
			if t.Failed() {
				t.Logf("%s log (end):\n%s", p.name, tail(p.stderr.String(), 4000))
			}
		}
	})
	a, b := procs[0], procs[1]
	a.start()
	a.waitLog(`group 1: set-ana optimized`, 0)
	b.start()
	b.waitLog(`group configuration differs from the one stored in the cluster[^\n]*cntlid 50-149 here overlaps 1-100 of gateway gw-a`, 0)
	st := b.readStatus()
	if st.Gateway == nil || st.Gateway.Health != "degraded" || st.Gateway.Groups[0].Owned {
		t.Fatalf("gw-b status: %+v, want degraded", st.Gateway)
	}
	if st := a.readStatus(); st.Gateway == nil || st.Gateway.Health != "ok" || !st.Gateway.Groups[0].Owned {
		t.Fatalf("gw-a status: %+v, want the owner", st.Gateway)
	}
	t.Logf("gw-b refused:\n%s", grepLines(b.stderr.String(), "differs"))
}

// TestGatewayBackendOwnClientsFenced (issue 21): the owner steps its group
// down for its backends and, with no survivor (gw-b stopped), takes the
// group back itself after its backoff, on a new RADOS client. Its old
// image client may still have writes in librbd or in an OSD's queue (it
// stepped down because they were stuck): they must not land after newer
// writes through the new client, so before the group is optimized again
// the old client must be blocklisted by the gateway's own fence (its
// expiry: blocklist_expire, years), and the new client must have waited
// for the OSD map with it (the barrier of every acquisition). Here the
// step-down comes from an operator's blocklist of the old client, which
// the operator then removes (`ceph osd blocklist rm`), so that the old
// client is unfenced when gw-a takes the group back, as after a cut from
// the image's OSDs. Before, gw-a reopened and served without any fence:
// the old client was not in the blocklist when it was optimized again.
func TestGatewayBackendOwnClientsFenced(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test with two nvmetd-rbd processes and a Ceph cluster: skipped in -short mode")
	}
	g := startGatewayPair(t, func(a, _ *gwProc) {
		// A backoff long enough for the operator's blocklist removal to
		// be done before gw-a takes the group back (it is bounded by
		// the monitor, not by this test's timing: see below).
		b, err := os.ReadFile(a.cfg)
		if err != nil {
			t.Fatal(err)
		}
		b = []byte(strings.Replace(string(b), "  lease: 3s\n", "  lease: 3s\n  backend_backoff: 20s\n", 1))
		if err := os.WriteFile(a.cfg, b, 0o644); err != nil {
			t.Fatal(err)
		}
	})
	a, b, pa, h := g.a, g.b, g.pa, g.h
	// No survivor: gw-b stops (it owns nothing).
	b.signal(syscall.SIGTERM)
	if st := b.wait(); st != 0 {
		t.Fatalf("gw-b exited %d", st)
	}
	w := startWorkload(t, h, 8, 256)
	defer w.Stop()
	waitOn(t, w, pa, time.Time{}, 100)

	rec, old := imageClients(t, g, a)
	unblock(t, g.c, old...)
	amark := len(a.stderr.String())
	for _, addr := range old {
		admin(t, g.c, "ceph", "osd", "blocklist", "add", addr)
	}
	iDown := a.waitLog(`stepped down from group[^\n]*EBLOCKLISTED`, amark)
	iRel := a.waitLog(`group 1: release to  \(no drain\): done`, iDown)
	// The operator lifts the blocklist: the old client is unfenced
	// (as one cut from the OSDs is). gw-a takes the group back only
	// after its backoff (20 s from the release); if it already did,
	// the removal could undo its fence and the check below would be
	// meaningless: fail instead.
	for _, addr := range old {
		admin(t, g.c, "ceph", "osd", "blocklist", "rm", addr)
	}
	if regexp.MustCompile(`fencing|acquire`).MatchString(a.stderr.String()[iRel:]) {
		t.Fatalf("gw-a took the group back before the operator's blocklist removal was done:\n%s", grepLines(a.stderr.String()[iRel:], "acquire|fenc"))
	}
	t.Logf("gw-a stepped down and released; its old image client %v blocklisted then unblocklisted by the operator", old)

	at := time.Now()
	iBack := a.waitLog(`group 1: acquire \(reopen\): done`, iRel)
	iOpt := a.waitLog(`group 1: set-ana optimized`, iBack)
	alog := a.stderr.String()[iRel:iOpt]
	iFence := strings.Index(alog, "fencing the previous holder (this gateway's own old clients of the group included)")
	if iFence < 0 {
		t.Fatalf("gw-a took its group back on a new client without fencing its old one:\n%s", grepLines(alog, "fenc|acquire|set-ana|reopen"))
	}
	for _, addr := range old {
		if !strings.Contains(alog[iFence:], addr) {
			t.Errorf("gw-a's own fence does not name its old client %s:\n%s", addr, grepLines(alog, "fenc"))
		}
	}
	if i := strings.Index(alog, "acquire (reopen): done"); i < iFence {
		t.Errorf("gw-a acquired before its own fence:\n%s", grepLines(alog, "fenc|acquire|set-ana"))
	}
	// The old client is in the blocklist with the gateway's expiry
	// (years): the gateway's entry, not the operator's (removed).
	for _, addr := range old {
		exp := blocklistExpiry(t, g.c, addr)
		if min := time.Now().Add(gateway.DefaultBlocklistExpire - 24*time.Hour); exp.Before(min) {
			t.Errorf("gw-a's old client %s blocklisted until %s only, want the gateway's fence (about %s)", addr, exp, gateway.DefaultBlocklistExpire)
		}
	}
	waitOptimized(t, pa)
	waitOn(t, w, pa, at, 100)
	newImageClient(t, g, a, rec)
	t.Logf("gw-a:\n%s", grepLines(a.stderr.String()[amark:], "stepped down|release|fenc|reopen|set-ana"))
	sweep(t, w, h)
}
