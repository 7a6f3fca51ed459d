//go:build rbd

package gateway_test

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/internal/testing/faultinject"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/test/ceph/cephtest"
)

// TestGatewayProcessFailbackStepDownFails (issue 21, path 4: "a failed ANA
// change does not stop the hand-over"): real nvmetd-rbd processes built
// with the test-only fault injector (build tag faultinject,
// gateway/gwtarget/faultinject.go: in a production build the holder's
// step-down cannot fail), the shared Ceph cluster, the Go host connected
// to both gateways with the versioned workload running. gw-b holds group 1
// (gw-a, its preferred owner, starts later) and its step-down to
// inaccessible is made to fail:
//
//  1. twice (a retry refused too; well under a lease of retries): gw-b must not write the
//     release while its ports say optimized, must retry the step-down
//     (the fault file is used up), and hand the group over only after a
//     step-down that succeeded; gw-a serves only after that (log times of
//     one clock) and after fencing gw-b's client of the group; the
//     gateways' ANA logs, read by the host gw-a's first, never both say
//     optimized (the host's own states are logged).
//  2. for good (gw-b again the holder after gw-a is SIGKILLed and
//     restarted): after a lease of refused step-downs gw-b exits
//     (ErrStepDownFailed) without a release; gw-a takes the group only by
//     fencing it, once its lease ended.
//
// The workload has no error; a full sweep at the end finds every
// acknowledged write. Before this test the path was exercised only with
// the fixture's applier (TestFailbackANAFails), never the target's.
func TestGatewayProcessFailbackStepDownFails(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test with two nvmetd-rbd processes and a Ceph cluster: skipped in -short mode")
	}
	c := cephtest.Shared(t)
	image := c.CreateImage(t, 64<<20)
	a, b := fbProcsOf(t, buildGateway(t, faultinject.Tag), func(p *gwProc, group string, cmin int) {
		p.fbConfig(c, group, cmin, map[uint32]string{1: "gw-a"}, []fbNS{{nsid: 1, group: 1, image: image}})
	})
	fault := filepath.Join(b.dir, "stepdown.fault")
	for _, p := range []*gwProc{a, b} {
		p.env = []string{faultinject.StepDownEnv + "=" + filepath.Join(p.dir, "stepdown.fault")}
	}
	b.start()
	b.waitLog(`group 1: set-ana optimized`, 0) // not preferred: after a lease
	if !strings.Contains(b.stderr.String(), "TEST BUILD (faultinject)") {
		t.Fatalf("gw-b does not say it is a fault-injecting build:\n%s", tail(b.stderr.String(), 3000))
	}
	s := fbHost(t)
	pb := connect(t, s, b)
	waitGroupState(t, pb, 1, nvmeof.ANAOptimized)
	h := s.Namespace(1)
	w := startWorkload(t, h, 8, 256)
	defer stopAll(t, s, w)
	waitOn(t, w, pb, time.Time{}, 100)

	// 1. Two refused step-downs, then the failback.
	const refusals = 2
	if err := faultinject.ArmStepDown(fault, refusals); err != nil {
		t.Fatal(err)
	}
	bmark := len(b.stderr.String())
	a.start()
	at := time.Now()
	pa := connect(t, s, a)
	both := watchBothOptimized(pa, pb)
	logs := watchLogsBothOptimized(pa, pb)
	waitGroupState(t, pa, 1, nvmeof.ANAOptimized)
	waitOn(t, w, pa, at, 100)
	b.waitLog(`group 1: release to gw-a: done`, bmark)
	if n, reads, first := logs(); n > 0 || reads == 0 {
		t.Errorf("FINDING: gw-a's and then gw-b's ANA log both said group 1 optimized in %d of %d samples (the first %.3fs after gw-a's start)", n, reads, first.Sub(at).Seconds())
	} else {
		t.Logf("the gateways' ANA logs, gw-a's then gw-b's: %d samples, never both optimized", reads)
	}
	if n, first := both(); n > 0 {
		// The host's states lag each gateway's by its ANA change notice
		// and log read: logged, not failed on (the logs above judge).
		t.Logf("FINDING (the host's view, not failed on): both paths live and optimized in %d samples, the first %.3fs after gw-a's start", n, first.Sub(at).Seconds())
	}
	if left, err := faultinject.StepDownLeft(fault); err != nil || left != 0 {
		t.Errorf("the fault file: %d refusals left (%v), want 0: gw-b did not retry its step-down", left, err)
	}
	blog := b.stderr.String()[bmark:]
	ok := stepDownRetried(t, blog, refusals)
	if d, err := w.Stall(pb.Address(), at); err == nil {
		t.Logf("failback with %d refused step-downs: stall %s (last completion through gw-b to the first through gw-a; bound %s)", refusals, d.Round(time.Millisecond), stallBound())
	}
	alog := a.stderr.String()
	aOpt, ok1 := logTime(alog, `group 1: set-ana optimized`)
	aFence, ok2 := logTime(alog, `fencing the previous holder`)
	if !ok1 || !ok2 || aOpt.Before(aFence) {
		t.Errorf("gw-a did not fence gw-b's client of the group before serving:\n%s", grepLines(alog, "fenc|set-ana"))
	}
	if ok1 && !ok.IsZero() && aOpt.Before(ok) {
		t.Errorf("FINDING: gw-a optimized at %s, before gw-b's step-down succeeded at %s", aOpt.Format(time.StampMilli), ok.Format(time.StampMilli))
	}
	if err := w.Stats().Err(); err != nil {
		t.Fatalf("the host's I/O during the failback: %v", err)
	}

	// 2. The step-down fails for good: gw-b exits, gw-a fences it.
	a.signal(syscall.SIGKILL)
	a.wait()
	waitGroupState(t, pb, 1, nvmeof.ANAOptimized)
	kill := time.Now()
	waitOn(t, w, pb, kill, 100)
	if err := faultinject.ArmStepDown(fault, 1000); err != nil {
		t.Fatal(err)
	}
	bmark = len(b.stderr.String())
	a.start() // a's log starts anew (start keeps the last run's in p.logs)
	at = time.Now()
	both = watchBothOptimized(pa, pb)
	if code := b.wait(); code != 75 {
		t.Errorf("gw-b exited %d, want 75 (EX_TEMPFAIL: a group could not be made inaccessible)", code)
	}
	exited := time.Now()
	blog = b.stderr.String()[bmark:]
	if strings.Contains(blog, "release to") {
		t.Errorf("FINDING: gw-b released the group although its step-down kept failing:\n%s", grepLines(blog, "release|set-ana"))
	}
	if !regexp.MustCompile(`set-ana inaccessible failed[^\n]*fault injected`).MatchString(blog) || !strings.Contains(blog, "could not be made inaccessible") {
		t.Errorf("gw-b's log does not show its refused step-downs and its exit:\n%s", tail(blog, 4000))
	}
	a.waitLog(`(?s)fencing the previous holder.*group 1: set-ana optimized`, 0)
	waitOn(t, w, pa, at, 100)
	// Not asserted: the Go host reads the ANA log of a reconnected path
	// after the path is live (initiator.Path.event), so gw-a's path may
	// say optimized (from part 1) for a moment after its reconnection,
	// while gw-b still holds the group; and gw-b's ports may still say
	// optimized while its target shuts down, but it is fenced by then.
	if n, first := both(); n > 0 {
		t.Logf("the host saw both paths live and optimized in %d samples, the first %.3fs after gw-a's restart (gw-b exited at %.3fs)", n, first.Sub(at).Seconds(), exited.Sub(at).Seconds())
	}
	alog = a.stderr.String()
	aOpt, _ = logTime(alog, `group 1: set-ana optimized`)
	aFence, _ = logTime(alog, `fencing the previous holder`)
	if aOpt.Before(aFence) {
		t.Errorf("gw-a optimized before it fenced gw-b:\n%s", grepLines(alog, "fenc|set-ana"))
	}
	blocklisted(t, c, alog)
	t.Logf("gw-b exited %.1fs after gw-a's restart; gw-a fenced it %.1fs and served %.1fs after that restart",
		exited.Sub(at).Seconds(), aFence.Sub(at).Seconds(), aOpt.Sub(at).Seconds())
	if d, err := w.Stall(pb.Address(), at); err == nil {
		t.Logf("hand-over after a lease of refused step-downs: stall %s (bound: lease %s of refusals + lease %s + fence + 2 × KATO %s)", d.Round(time.Millisecond), fbLease, fbLease, 2*kato)
	}
	r := sweep(t, w, h)
	t.Logf("%d verified writes, %d failovers", r.Workload.Writes, h.Failovers())
}

// stepDownRetried checks a holder's log of a failback whose first refusals
// step-downs were refused: that many failures, each the injected fault,
// then one success, and the release only after it. It returns the
// success's time.
func stepDownRetried(t *testing.T, log string, refusals int) time.Time {
	t.Helper()
	failed := regexp.MustCompile(`(?m)^.*group 1: set-ana inaccessible failed.*$`).FindAllStringIndex(log, -1)
	okAt := regexp.MustCompile(`(?m)^.*group 1: set-ana inaccessible$`).FindStringIndex(log)
	rel := strings.Index(log, "group 1: release to gw-a")
	lines := grepLines(log, "set-ana|release|step-down")
	t.Logf("gw-b's step-down:\n%s", lines)
	if len(failed) != refusals {
		t.Errorf("gw-b: %d refused step-downs, want %d", len(failed), refusals)
	}
	for _, f := range failed {
		if !strings.Contains(log[f[0]:f[1]], "fault injected") {
			t.Errorf("a refused step-down that was not the injected fault: %s", log[f[0]:f[1]])
		}
	}
	if okAt == nil {
		t.Errorf("gw-b: no successful step-down")
		return time.Time{}
	}
	if len(failed) > 0 && okAt[0] < failed[len(failed)-1][0] {
		t.Errorf("gw-b's step-down succeeded before its last refusal")
	}
	if rel < 0 || rel < okAt[0] {
		t.Errorf("FINDING: gw-b wrote its release (at byte %d) before its step-down succeeded (at byte %d): its ports said optimized", rel, okAt[0])
	}
	at, _ := logTime(log[okAt[0]:], `set-ana inaccessible$`)
	return at
}

// watchBothOptimized samples the host's two paths until the returned
// function is called, which returns the number of samples in which both
// were live and reported group 1 optimized, and the time of the first.
func watchBothOptimized(x, y *initiator.Path) func() (int, time.Time) {
	var (
		mu    sync.Mutex
		n     int
		first time.Time
		stop  = make(chan struct{})
		ended = make(chan struct{})
	)
	opt := func(p *initiator.Path) bool {
		return p.Controller().State() == initiator.StateLive && p.ANAState(1) == nvmeof.ANAOptimized
	}
	go func() {
		defer close(ended)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			if opt(x) && opt(y) {
				mu.Lock()
				if n++; n == 1 {
					first = time.Now()
				}
				mu.Unlock()
			}
		}
	}()
	return func() (int, time.Time) {
		close(stop)
		<-ended
		mu.Lock()
		defer mu.Unlock()
		return n, first
	}
}

// watchLogsBothOptimized reads the ANA logs of x's and then y's gateway
// (Get Log Page, RAE set: the host's own reads are not disturbed) until
// the returned function is called, which returns the number of samples in
// which both said one of groups (default: group 1) optimized, the number
// of samples with both logs read, and the time of the first with both
// optimized. Timing plays no part: x's gateway says optimized only once
// y's stepped down (if the product is right), and y's log is read after
// x's.
func watchLogsBothOptimized(x, y *initiator.Path, groups ...uint32) func() (int, int, time.Time) {
	if len(groups) == 0 {
		groups = []uint32{1}
	}
	var (
		mu       sync.Mutex
		n, reads int
		first    time.Time
		stop     = make(chan struct{})
		ended    = make(chan struct{})
	)
	states := func(p *initiator.Path) (map[uint32]nvmeof.ANAState, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		buf := make([]byte, 4096)
		if err := p.Controller().GetLogPage(ctx, nvmeof.LIDANA, nvmeof.NSIDAll, 0, true, buf); err != nil {
			return nil, false
		}
		l, err := nvmeof.ParseANALog(buf)
		if err != nil {
			return nil, false
		}
		out := map[uint32]nvmeof.ANAState{}
		for _, g := range l.Groups {
			out[g.ID] = g.State
		}
		return out, true
	}
	go func() {
		defer close(ended)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			sx, okx := states(x)
			if !okx {
				continue
			}
			sy, oky := states(y)
			if !oky {
				continue
			}
			mu.Lock()
			reads++
			for _, g := range groups {
				if gx, ok := sx[g]; ok && gx == nvmeof.ANAOptimized && sy[g] == nvmeof.ANAOptimized {
					if n++; n == 1 {
						first = time.Now()
					}
					break
				}
			}
			mu.Unlock()
		}
	}()
	return func() (int, int, time.Time) {
		close(stop)
		<-ended
		mu.Lock()
		defer mu.Unlock()
		return n, reads, first
	}
}
