//go:build rbd

package gateway_test

import (
	"fmt"
	"os"
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

// TestGatewayProcessRebalance (issue 27: "adding a third gateway
// rebalances"): gw-a and gw-b serve three ANA groups (1: gw-a, 2: gw-b,
// 3: gw-a) with group_config: rados and rebalance: auto, the versioned
// workload on each group's namespace, the Go host on every path, the ANA
// logs of every pair of gateways sampled throughout.
//
//  1. `nvmetctl group pin 3` (version 2): group 3 never moves by a
//     rebalance.
//  2. gw-c starts (a member with no group): once its watch answered the
//     liveness probes for the hold-down, the decider (gw-a, the first live
//     member) stores version 3: group 1 (gw-a's unpinned group: gw-a had
//     two, gw-c none) preferred by gw-c, which takes it by the failback
//     path (fencing gw-a's client of the group before serving). Group 3,
//     pinned, stays on gw-a.
//  3. gw-c stops cleanly (SIGTERM, exit 0): it releases group 1, its watch
//     goes; after the hold-down version 4 gives group 1 back to gw-a (the
//     least loaded live member, first by name among equals).
//
// Never two gateways optimized for a group; 0 I/O errors; full sweeps with
// 0 regressed blocks. Stalls are logged, never asserted.
func TestGatewayProcessRebalance(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test with three nvmetd-rbd processes and a Ceph cluster: skipped in -short mode")
	}
	c := cephtest.Shared(t)
	imgs := []string{c.CreateImage(t, 64<<20), c.CreateImage(t, 64<<20), c.CreateImage(t, 64<<20)}
	bin := buildGateway(t)
	group := fmt.Sprintf("r%d", time.Now().UnixNano()%1_000_000_000)
	dir := t.TempDir()
	var procs []*gwProc
	for i, name := range []string{"gw-a", "gw-b", "gw-c"} {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		p := &gwProc{t: t, name: name, bin: bin, dir: d, cfg: filepath.Join(d, "nvmetd.yaml"), port: freePort(t),
			group: group, rebalance: "auto", extra: "  group_config: rados\n"}
		p.fbConfig(c, group, 1+100*i, map[uint32]string{1: "gw-a", 2: "gw-b", 3: "gw-a"},
			[]fbNS{{nsid: 1, group: 1, image: imgs[0]}, {nsid: 2, group: 2, image: imgs[1]}, {nsid: 3, group: 3, image: imgs[2]}})
		procs = append(procs, p)
	}
	t.Cleanup(func() {
		for _, p := range procs {
			if p.cmd != nil && p.cmd.ProcessState == nil {
				_ = p.cmd.Process.Signal(syscall.SIGCONT)
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
				p.wait()
			}
			if t.Failed() {
				t.Logf("%s log (end):\n%s", p.name, tail(p.stderr.String(), 6000))
			}
		}
	})
	a, b, gc := procs[0], procs[1], procs[2]
	ctl := buildCtl(t)
	all := []uint32{1, 2, 3}
	a.start()
	a.waitLog(`group 1: set-ana optimized`, 0)
	a.waitLog(`group 3: set-ana optimized`, 0)
	b.start()
	b.waitLog(`group 2: set-ana optimized`, 0)
	s := fbHost(t)
	pa, pb := connect(t, s, a), connect(t, s, b)
	waitGroupState(t, pa, 1, nvmeof.ANAOptimized)
	waitGroupState(t, pb, 2, nvmeof.ANAOptimized)
	waitGroupState(t, pa, 3, nvmeof.ANAOptimized)
	var ws []*verify.Workload
	var hs []*initiator.Head
	for i := range 3 {
		h := s.Namespace(uint32(i + 1))
		if h == nil {
			t.Fatalf("namespaces %v, want 1, 2 and 3", s.Namespaces())
		}
		w, err := verify.Start(verify.Head(h), verify.Config{BlockSize: 4096, Blocks: 256, Workers: 4, ReadBack: true, Writer: uint16(i + 1), Attempts: true})
		if err != nil {
			t.Fatal(err)
		}
		ws, hs = append(ws, w), append(hs, h)
	}
	defer stopAll(t, s, ws...)
	waitOn(t, ws[0], pa, time.Time{}, 50)
	waitOn(t, ws[1], pb, time.Time{}, 50)
	waitOn(t, ws[2], pa, time.Time{}, 50)
	samplers := []func() (int, int, time.Time){watchLogsBothOptimized(pa, pb, all...)}

	groupShows := func(p *gwProc, what, re string) {
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

	// 1. Pin group 3 (through gw-b): version 2.
	if out, err := b.ctl(ctl, "group", "pin", "3"); err != nil {
		t.Fatalf("nvmetctl group pin 3: %v\n%s", err, out)
	}
	a.waitGroup(2, all)
	b.waitGroup(2, all)
	groupShows(a, "group 3 pinned", `(?m)^3 +gw-a +gw-a \(pinned\)$`)

	// 2. gw-c joins: the group rebalances (version 3: group 1 to gw-c).
	amark, bmark := len(a.stderr.String()), len(b.stderr.String())
	cStart := time.Now()
	gc.start()
	gc.waitGroup(2, all)
	pc := connect(t, s, gc)
	samplers = append(samplers, watchLogsBothOptimized(pa, pc, all...), watchLogsBothOptimized(pb, pc, all...))
	a.waitLog(`gateway: rebalance ANA groups \(1: gw-a → gw-c\) over gw-a, gw-b, gw-c`, amark)
	waitGroupState(t, pc, 1, nvmeof.ANAOptimized)
	waitOn(t, ws[0], pc, cStart, 50)
	t.Logf("gw-c holds group 1 %s after its start (hold-down %d leases of %s, failback delay %s)",
		time.Since(cStart).Round(time.Millisecond), 3, fbLease, fbDelay)
	if d, err := ws[0].Stall(pa.Address(), cStart); err == nil {
		t.Logf("rebalance to gw-c: group 1 stall %s (last completion through gw-a to the first through gw-c; bound %s)", d.Round(time.Millisecond), stallBound())
	} else {
		t.Logf("rebalance to gw-c: stall: %v", err)
	}
	a.waitLog(`group 1: release to gw-c: done`, amark)
	clog := gc.stderr.String()
	fi := regexp.MustCompile(`fencing the previous holder[^\n]*"group": 1,[^\n]*hand-over from gw-a `).FindStringIndex(clog)
	oi := regexp.MustCompile(`group 1: set-ana optimized`).FindStringIndex(clog)
	if fi == nil || oi == nil || fi[0] > oi[0] {
		t.Errorf("gw-c did not fence gw-a's client of group 1 before serving it:\n%s", grepLines(clog, "fenc|hand-over|set-ana"))
	}
	for _, p := range procs {
		p.waitGroup(3, all)
	}
	groupShows(b, "after gw-c joined", `(?s)1 +gw-c +gw-c\n2 +gw-b +gw-b\n3 +gw-a +gw-a \(pinned\)\n`)
	if strings.Contains(b.stderr.String()[bmark:], "gateway: rebalance ANA groups") {
		t.Errorf("gw-b (not the decider) stored a rebalance:\n%s", grepLines(b.stderr.String()[bmark:], "rebalance"))
	}

	// 3. gw-c stops cleanly: group 1 goes back to gw-a (version 4).
	amark = len(a.stderr.String())
	stopAt := time.Now()
	gc.signal(syscall.SIGTERM)
	if code := gc.wait(); code != 0 {
		t.Fatalf("gw-c exited %d", code)
	}
	a.waitLog(`gateway: rebalance ANA groups \(1: gw-c → gw-a\) over gw-a, gw-b`, amark)
	waitGroupState(t, pa, 1, nvmeof.ANAOptimized)
	waitOn(t, ws[0], pa, stopAt, 50)
	if d, err := ws[0].Stall(pc.Address(), stopAt); err == nil {
		t.Logf("gw-c stopped: group 1 stall %s (last completion through gw-c to the first through gw-a)", d.Round(time.Millisecond))
	} else {
		t.Logf("gw-c stopped: stall: %v", err)
	}
	a.waitGroup(4, all)
	b.waitGroup(4, all)
	groupShows(a, "after gw-c left", `(?s)gw-c +3 +[^\n]*not alive.*1 +gw-a +gw-a\n2 +gw-b +gw-b\n3 +gw-a +gw-a \(pinned\)\n`)
	if alog := a.stderr.String()[amark:]; !regexp.MustCompile(`fencing the previous holder[^\n]*"group": 1,`).MatchString(alog) &&
		!regexp.MustCompile(`"group": 1,[^\n]*gw-c`).MatchString(b.stderr.String()) {
		t.Logf("group 1's taking after gw-c's stop (gw-a's log):\n%s", grepLines(alog, "group 1|fenc"))
	}

	for i, sample := range samplers {
		n, reads, first := sample()
		t.Logf("sampler %d: ANA logs read %d times", i, reads)
		if n > 0 {
			t.Errorf("sampler %d: two gateways' ANA logs said a group optimized in %d samples (first at %s)", i, n, first.Format("15:04:05.000"))
		}
	}
	for i, w := range ws {
		if err := w.Stats().Err(); err != nil {
			t.Errorf("group %d's I/O: %v", i+1, err)
		}
	}
	for i := range ws {
		r := sweep(t, ws[i], hs[i])
		t.Logf("group %d: %d verified writes", i+1, r.Workload.Writes)
	}
}
