//go:build rbd

package gateway_test

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/internal/testing/verify"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/test/ceph/cephtest"
)

// buildCtl builds nvmetctl for a test.
func buildCtl(t *testing.T) string {
	t.Helper()
	ctl := filepath.Join(t.TempDir(), "nvmetctl")
	if out, err := exec.Command("go", "build", "-o", ctl, "../cmd/nvmetctl").CombinedOutput(); err != nil {
		t.Fatalf("go build nvmetctl: %v\n%s", err, out)
	}
	return ctl
}

// ctl runs nvmetctl (built by buildCtl) against p's control socket.
func (p *gwProc) ctl(bin string, args ...string) (string, error) {
	out, err := exec.Command(bin, append([]string{"--socket", filepath.Join(p.dir, "ctl.sock")}, args...)...).CombinedOutput()
	return string(out), err
}

// drainedStatus is whether p's status says it is drained.
func (p *gwProc) drainedStatus() bool {
	p.t.Helper()
	var st struct {
		Gateway struct {
			Drained bool `json:"drained"`
		} `json:"gateway"`
	}
	if err := json.Unmarshal([]byte(p.get("ctl.sock", "/v1/status")), &st); err != nil {
		p.t.Fatalf("%s status: %v", p.name, err)
	}
	return st.Gateway.Drained
}

// TestGatewayProcessRollingUpgrade (issue 27): the maintenance of a
// two-gateway group whose configuration is held in RADOS, under the
// versioned-block workload on two namespaces (ANA group 1 and 2), the Go
// host connected to both gateways (multipath):
//
//  1. both groups preferred by gw-a in the files (version 1): `nvmetctl
//     group move 2 gw-b` through gw-b stores version 2, and group 2 moves
//     to gw-b by the failback path (gw-a releases, gw-b fences gw-a's
//     client of the group, then serves);
//  2. the rolling upgrade: `nvmetctl gateway drain gw-a` (through gw-b)
//     hands group 1 to gw-b (released, fenced, taken); draining gw-b too
//     is refused (409: no other member could serve); gw-a is stopped
//     (SIGTERM) and started again: it stays drained (its status, no
//     group taken over a failback delay and a lease); `undrain gw-a`
//     (through gw-a): failback brings group 1 back; then the same for
//     gw-b (drained through gw-a; its restart keeps the stored preferred
//     owner of group 2, whose agreement text the move rewrote, so it is
//     not degraded) and group 2.
//
// Throughout, both gateways' ANA logs are sampled: never both optimized
// for a group; at the end 0 I/O errors and full sweeps of both images with
// 0 regressed blocks. Each move's stall (last completion through the old
// path to the first through the new) is logged against lease + fence +
// 2 × KATO, never asserted.
func TestGatewayProcessRollingUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test with two nvmetd-rbd processes and a Ceph cluster: skipped in -short mode")
	}
	c := cephtest.Shared(t)
	img1, img2 := c.CreateImage(t, 64<<20), c.CreateImage(t, 64<<20)
	a, b := fbProcs(t, func(p *gwProc, group string, cmin int) {
		p.group = group
		p.extra = "  group_config: rados\n"
		p.fbConfig(c, group, cmin, map[uint32]string{1: "gw-a", 2: "gw-a"},
			[]fbNS{{nsid: 1, group: 1, image: img1}, {nsid: 2, group: 2, image: img2}})
	})
	ctl := buildCtl(t)
	a.start()
	a.waitLog(`group 1: set-ana optimized`, 0)
	a.waitLog(`group 2: set-ana optimized`, 0)
	b.start()
	both := []uint32{1, 2}
	a.waitGroup(1, both)
	b.waitGroup(1, both)
	s := fbHost(t)
	pa, pb := connect(t, s, a), connect(t, s, b)
	for _, g := range both {
		waitGroupState(t, pa, g, nvmeof.ANAOptimized)
		waitGroupState(t, pb, g, nvmeof.ANAInaccessible)
	}
	h1, h2 := s.Namespace(1), s.Namespace(2)
	if h1 == nil || h2 == nil {
		t.Fatalf("namespaces %v, want 1 and 2", s.Namespaces())
	}
	w1, err := verify.Start(verify.Head(h1), verify.Config{BlockSize: 4096, Blocks: 256, Workers: 8, ReadBack: true, Writer: 1, Attempts: true})
	if err != nil {
		t.Fatal(err)
	}
	w2, err := verify.Start(verify.Head(h2), verify.Config{BlockSize: 4096, Blocks: 256, Workers: 8, ReadBack: true, Writer: 2, Attempts: true})
	if err != nil {
		t.Fatal(err)
	}
	defer stopAll(t, s, w1, w2)
	waitOn(t, w1, pa, time.Time{}, 100)
	waitOn(t, w2, pa, time.Time{}, 100)
	bothOptimized := watchLogsBothOptimized(pa, pb, both...)

	// moved runs nvmetctl args through via, then waits until the host
	// does I/O of w through to (after group g is optimized there) and
	// logs the stall away from from.
	moved := func(what string, via *gwProc, args []string, g uint32, w *verify.Workload, from, to *initiator.Path) {
		t.Helper()
		at := time.Now()
		out, err := via.ctl(ctl, args...)
		if err != nil {
			t.Fatalf("nvmetctl %s (through %s): %v\n%s", strings.Join(args, " "), via.name, err, out)
		}
		t.Logf("nvmetctl %s (through %s):\n%s", strings.Join(args, " "), via.name, out)
		waitGroupState(t, to, g, nvmeof.ANAOptimized)
		waitOn(t, w, to, at, 100)
		if d, err := w.Stall(from.Address(), at); err == nil {
			t.Logf("%s: group %d stall %s (last completion through %s to the first through %s; bound %s)",
				what, g, d.Round(time.Millisecond), from.Address(), to.Address(), stallBound())
		} else {
			t.Logf("%s: stall: %v", what, err)
		}
	}
	// fencedFirst: the new holder's log (from byte mark on) fenced the
	// releaser's client of group g before it made the group optimized.
	fencedFirst := func(p *gwProc, g uint32, from string, mark int) {
		t.Helper()
		p.waitLog(fmt.Sprintf(`group %d: set-ana optimized`, g), mark)
		log := p.stderr.String()[mark:]
		fi := regexp.MustCompile(fmt.Sprintf(`fencing the previous holder[^\n]*"group": %d,[^\n]*hand-over from %s `, g, from)).FindStringIndex(log)
		oi := regexp.MustCompile(fmt.Sprintf(`group %d: set-ana optimized`, g)).FindStringIndex(log)
		if fi == nil || fi[0] > oi[0] {
			t.Errorf("%s did not fence %s's client of group %d before serving it:\n%s", p.name, from, g, grepLines(log, "fenc|hand-over|set-ana"))
			return
		}
		fs, ok1 := logTime(log, fmt.Sprintf(`fencing the previous holder[^\n]*"group": %d,`, g))
		fd, ok2 := logTime(log, fmt.Sprintf(`group %d: fence .*: done`, g))
		op, ok3 := logTime(log, fmt.Sprintf(`group %d: set-ana optimized`, g))
		if ok1 && ok2 && ok3 {
			t.Logf("%s: group %d: fence of %s's client %s, optimized %s after the fence began", p.name, g, from, fd.Sub(fs), op.Sub(fs))
		}
	}
	groupShows := func(p *gwProc, what, re string) {
		t.Helper()
		waitGroupShows(t, ctl, p, what, re)
	}

	// 1. Group 2's preferred owner becomes gw-b: version 2; it moves.
	bmark := len(b.stderr.String())
	moved("group move", b, []string{"group", "move", "2", "gw-b", "--wait", hang.String()}, 2, w2, pa, pb)
	a.waitLog(`group 2: release to gw-b: done`, 0)
	fencedFirst(b, 2, "gw-a", bmark)
	a.waitGroup(2, both)
	b.waitGroup(2, both)
	if pb.ANAState(1) != nvmeof.ANAInaccessible {
		t.Errorf("group 1 through gw-b: %v, want inaccessible (gw-a still prefers it)", pb.ANAState(1))
	}

	// 2a. Drain gw-a (through gw-b): group 1 to gw-b.
	bmark = len(b.stderr.String())
	moved("drain gw-a", b, []string{"gateway", "drain", "gw-a", "--wait", hang.String()}, 1, w1, pa, pb)
	fencedFirst(b, 1, "gw-a", bmark)
	groupShows(b, "gw-a drained", `(?s)gw-a +3 +current, drained +-\n.*gw-b +3 +current +1,2\n.*1 +gw-a +gw-b\n2 +gw-b +gw-b\n.*health: ok\n`)
	if m := a.get("metrics.sock", "/metrics"); !strings.Contains(m, `nvmetd_gateway_drained{group="`+a.group+`"} 1`+"\n") {
		t.Errorf("gw-a's metrics:\n%s", grepLines(m, "drained"))
	}
	// Draining the other one too would leave nobody: refused, nothing
	// stored.
	out, err := a.ctl(ctl, "gateway", "drain", "gw-b")
	if err == nil || !strings.Contains(out, "no other member of the group could serve its ANA groups (drained: gw-a)") {
		t.Fatalf("drain gw-b while gw-a is drained: %v\n%s", err, out)
	}
	t.Logf("drain of the last member: %s", strings.TrimSpace(out))
	a.waitGroup(3, both)

	// 2b. Stop gw-a, start it again: it stays drained.
	a.signal(syscall.SIGTERM)
	if code := a.wait(); code != 0 {
		t.Fatalf("gw-a exited %d", code)
	}
	aStart := time.Now()
	a.start()
	a.waitGroup(3, both)
	if !a.drainedStatus() {
		t.Fatalf("gw-a restarted: its status does not say drained")
	}
	waitGroupState(t, pa, 1, nvmeof.ANAInaccessible)
	st := holdsOff(t, a, 1, aStart, fbDelay+fbLease, "drained")
	t.Logf("gw-a restarted drained, %s after its start: %+v", time.Since(aStart).Round(time.Millisecond), st)

	// 2c. Undrain gw-a (through gw-a): failback brings group 1 back.
	amark := len(a.stderr.String())
	moved("undrain gw-a (failback)", a, []string{"gateway", "undrain", "gw-a", "--wait", hang.String()}, 1, w1, pb, pa)
	b.waitLog(`group 1: release to gw-a: done`, bmark)
	fencedFirst(a, 1, "gw-b", amark)
	a.waitGroup(4, both)
	b.waitGroup(4, both)

	// 2d. The same for gw-b (drained through gw-a): group 2 to gw-a.
	amark = len(a.stderr.String())
	moved("drain gw-b", a, []string{"gateway", "drain", "gw-b", "--wait", hang.String()}, 2, w2, pb, pa)
	fencedFirst(a, 2, "gw-b", amark)
	a.waitGroup(5, both)
	b.waitGroup(5, both)
	b.signal(syscall.SIGTERM)
	if code := b.wait(); code != 0 {
		t.Fatalf("gw-b exited %d", code)
	}
	bStart := time.Now()
	b.start()
	b.waitGroup(5, both)
	if !b.drainedStatus() {
		t.Fatalf("gw-b restarted: its status does not say drained")
	}
	waitGroupState(t, pb, 2, nvmeof.ANAInaccessible)
	st = holdsOff(t, b, 2, bStart, fbDelay+fbLease, "drained")
	t.Logf("gw-b restarted drained, %s after its start: %+v", time.Since(bStart).Round(time.Millisecond), st)
	bmark = len(b.stderr.String())
	moved("undrain gw-b (failback)", b, []string{"gateway", "undrain", "gw-b", "--wait", hang.String()}, 2, w2, pa, pb)
	fencedFirst(b, 2, "gw-a", bmark)
	a.waitGroup(6, both)
	b.waitGroup(6, both)

	n, reads, first := bothOptimized()
	t.Logf("ANA logs of both gateways read %d times during the moves", reads)
	if n > 0 {
		t.Errorf("both gateways' ANA logs said a group optimized in %d samples (first at %s)", n, first.Format("15:04:05.000"))
	}
	groupShows(a, "at the end", `(?s)version 6 .*gw-a +6 +current +1\n.*gw-b +6 +current +2\n.*1 +gw-a +gw-a\n2 +gw-b +gw-b\n.*health: ok\n`)
	for _, p := range []*gwProc{a, b} {
		if log := p.stderr.String(); strings.Contains(log, "degraded") || strings.Contains(log, "differs from the one stored") {
			t.Errorf("%s degraded:\n%s", p.name, grepLines(log, "degraded|differs"))
		}
	}
	for i, w := range []*verify.Workload{w1, w2} {
		if err := w.Stats().Err(); err != nil {
			t.Errorf("group %d's I/O: %v", i+1, err)
		}
	}
	r1 := sweep(t, w1, h1)
	r2 := sweep(t, w2, h2)
	t.Logf("group 1: %d verified writes; group 2: %d verified writes; %d failovers", r1.Workload.Writes, r2.Workload.Writes, h1.Failovers()+h2.Failovers())
}

// waitGroupShows waits until nvmetctl group (the binary ctl) through p
// matches re (the members record their running versions after they
// applied them), and logs it.
func waitGroupShows(t *testing.T, ctl string, p *gwProc, what, re string) {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(hang)
	for {
		out, err := p.ctl(ctl, "group")
		if err == nil && rx.MatchString(out) {
			t.Logf("nvmetctl group, %s:\n%s", what, out)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nvmetctl group, %s: %v\n%s", what, err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
