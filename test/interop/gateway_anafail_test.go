package interop_test

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/internal/testing/faultinject"
	"github.com/nvmetd/nvmetd/test/interop/lab"
)

// The failback while the holder's step-down fails (issue 21, path 4: "a
// failed ANA change does not stop the hand-over"), with the Linux host. It
// is testLinuxHostGateway's failback: gw-b holds group 1 after gw-a's
// SIGKILL, and gw-a, its preferred owner, is restarted and asks for it
// back. In a real process the holder's step-down (SetGroupANA
// inaccessible) cannot fail, so the test's gateways are built with the
// test-only fault injector (build tag faultinject, inert unless armed:
// gateway/gwtarget/faultinject.go) and gw-b's next anaFailRefusals
// step-downs are refused. The product must stop the hand-over: gw-b writes
// no release while its ports say optimized, retries its step-down (the
// fault is used up), and releases only after a step-down that succeeded;
// gw-a serves only after that (the gateways' logs, one clock) and after
// fencing gw-b's client of the group. In the guest both controllers are
// sampled throughout: the ANA states the host holds (sysfs, logged) and
// the gateways' ANA logs read then (nvme ana-log, gw-a's first): never
// both optimized (anaFailLogs says why the logs are what is asserted). vwriter writes throughout; the run's
// final sweep (0 regressed, no I/O error) judges these writes too, and the
// stall of the hand-over is logged with the run's others.
//
// Then anaFailExit (below): the same failback with gw-b's step-down
// refused for good: gw-b exits 75 unreleased and gw-a fences it once its
// lease ended, then serves; gw-b is restarted.

// anaFailRefusals is how many of gw-b's step-downs are refused: a retry
// refused too, and well under a lease of retries (one each renew_interval
// and tick, about 1.25 s, against a 5 s lease: the success comes about
// 2.5 s after the first refusal, the exit would come at 5 s), so that gw-b
// retries and hands over (a lease of refusals makes it exit: anaFailExit,
// below, as the Go host's TestGatewayProcessFailbackStepDownFails).
const anaFailRefusals = 2

// anaFailGW is what the phase needs of testLinuxHostGateway.
type anaFailGW struct {
	vm      *lab.VM
	a, b    *gwProc
	ctrlOf  map[int]string // port → nvmeX
	sampler *ioSampler
	vw      *linuxWriter
	events  map[string]time.Time
}

// anaFailFailback restarts gw-a (SIGKILLed, group 1 with gw-b) and runs
// the failback with gw-b's step-down refused; it returns once gw-a carries
// the host's I/O.
func anaFailFailback(t *testing.T, g anaFailGW) {
	start := time.Now()
	defer func() { t.Logf("failback with refused step-downs: the phase took %.1fs", time.Since(start).Seconds()) }()
	a, b, vm := g.a, g.b, g.vm
	ca, cb := g.ctrlOf[a.port], g.ctrlOf[b.port]
	fault := filepath.Join(b.dir, "stepdown.fault")
	if err := faultinject.ArmStepDown(fault, anaFailRefusals); err != nil {
		t.Fatal(err)
	}
	// The guest samples both controllers throughout (startANASamplers).
	startANASamplers(t, vm, ca, cb)
	amark, bmark := a.logSize(), b.logSize()
	ev := fmt.Sprintf("restart gw-a (failback; gw-b's step-down refused %d times)", anaFailRefusals)
	g.events[ev] = time.Now()
	// The checks run also when a wait below fails (t.Fatal): they say
	// what went wrong.
	defer anaFailCheck(t, g, fault, amark, bmark)
	a.start()
	waitGuest := func(ctrl, file, want string) {
		t.Helper()
		waitGuestAttr(t, vm, ctrl, file, want)
	}
	waitGuest(ca, "state", "live")
	waitGuest(ca, "nvme*c*n1/ana_state", "optimized")
	waitGuest(cb, "nvme*c*n1/ana_state", "inaccessible")
	g.sampler.waitProgress(t, 0, 500, "after the failback to gw-a")
	g.vw.waitWrites(200, "after the failback to gw-a")
	b.waitLogFrom(`group 1: release to gw-a: done`, bmark)
}

// waitGuestAttr waits (up to 2 minutes) until the guest's
// /sys/class/nvme/ctrl/file says one of the words of want.
func waitGuestAttr(t *testing.T, vm *lab.VM, ctrl, file, want string) {
	t.Helper()
	step(t, vm, 2*time.Minute, fmt.Sprintf(`for i in $(seq 1 1200); do s=$(cat /sys/class/nvme/%s/%s 2>/dev/null); case " %s " in *" $s "*) echo $s; exit 0;; esac; sleep 0.1; done; echo $s; exit 1`,
		ctrl, file, want))
}

// startANASamplers starts the guest's two samplers of gw-a's controller
// ca and gw-b's cb (stopped and read by stopANASamplers). The host's view:
// uptime, then per controller its state and the ANA state of its path to
// namespace 1 (the state read first: Linux reads the ANA log of a
// (re)connecting controller before it goes live, so a live state read
// before the ANA state vouches for it). The gateways' own: uptime, then
// group 1's state in gw-a's ANA log and then in gw-b's, each read at that
// moment (nvme ana-log: a Get Log Page to the gateway; "-" if it fails).
// The first loop is fast (sysfs); the second waits for nvme-cli.
func startANASamplers(t *testing.T, vm *lab.VM, ca, cb string) {
	t.Helper()
	anaLog := func(v, ctrl string) string {
		return fmt.Sprintf(`s=$(nvme ana-log /dev/%[2]s 2>/dev/null); case $s in *non-optimized*) %[1]s=non-optimized;; *optimized*) %[1]s=optimized;; `+
			`*inaccessible*) %[1]s=inaccessible;; *) %[1]s=-;; esac; `, v, ctrl)
	}
	step(t, vm, time.Minute, fmt.Sprintf(`rm -f /root/gw.ana.*; (while [ ! -e /root/gw.ana.stop ]; do read up _ < /proc/uptime; `+
		`sa=-; read sa < /sys/class/nvme/%[1]s/state; aa=-; for f in /sys/class/nvme/%[1]s/nvme*c*n1/ana_state; do read aa < $f; done; `+
		`sb=-; read sb < /sys/class/nvme/%[2]s/state; ab=-; for f in /sys/class/nvme/%[2]s/nvme*c*n1/ana_state; do read ab < $f; done; `+
		`echo $up $sa $aa $sb $ab; sleep 0.05; done > /root/gw.ana.host 2>/dev/null; echo 0 > /root/gw.ana.rc1) >/dev/null 2>&1 &`+"\n"+
		`(while [ ! -e /root/gw.ana.stop ]; do read up _ < /proc/uptime; %[3]s%[4]secho $up $la $lb; done > /root/gw.ana.logs 2>/dev/null; echo 0 > /root/gw.ana.rc2) >/dev/null 2>&1 &`+"\n"+
		`echo sampling`, ca, cb, anaLog("la", ca), anaLog("lb", cb)))
}

// stopANASamplers stops the guest's samplers and checks their samples
// (anaFailLogs, anaFailHostView).
func stopANASamplers(t *testing.T, vm *lab.VM) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	out, err := vm.Exec(ctx, `touch /root/gw.ana.stop; for i in $(seq 1 200); do [ -s /root/gw.ana.rc1 ] && [ -s /root/gw.ana.rc2 ] && break; sleep 0.1; done; `+
		`cat /root/gw.ana.host; echo ==; cat /root/gw.ana.logs`)
	cancel()
	host, logs, ok := strings.Cut(out, "==\n")
	if err != nil || !ok {
		t.Errorf("the guest's ANA samples: %v\n%s", err, out)
		return
	}
	anaFailLogs(t, logs)
	anaFailHostView(t, host)
}

// anaFailCheck stops the guest's sampler and checks its samples, gw-b's
// step-down (its log from bmark on, the fault file) and gw-a's takeover
// (its log from amark on).
func anaFailCheck(t *testing.T, g anaFailGW, fault string, amark, bmark int64) {
	a, b := g.a, g.b
	stopANASamplers(t, g.vm)

	blog, alog := b.logSince(bmark), a.logSince(amark)
	stepped := anaFailStepDown(t, blog)
	if left, err := faultinject.StepDownLeft(fault); err != nil || left != 0 {
		t.Errorf("FINDING: gw-b's fault file has %d refusals left (%v), want 0: it did not retry its step-down", left, err)
	}
	fenceAt, ok1 := gwLogTime(alog, `fencing the previous holder`)
	optAt, ok2 := gwLogTime(alog, `group 1: set-ana optimized`)
	if !ok1 || !ok2 || optAt.Before(fenceAt) {
		t.Errorf("gw-a did not fence gw-b's client of the group before serving it:\n%s", grepRe(alog, `fenc|set-ana`))
	}
	if ok2 && !stepped.IsZero() && optAt.Before(stepped) {
		t.Errorf("FINDING: gw-a served group 1 at %s, before gw-b's step-down succeeded at %s", optAt.Format(time.StampMilli), stepped.Format(time.StampMilli))
	}
	if reqAt, ok := gwLogTime(alog, `group 1: request-handover`); ok && ok2 && !stepped.IsZero() {
		t.Logf("failback with %d refused step-downs: gw-a asked at %s; gw-b's step-down succeeded %.1fs later (its refusals retried every renew_interval); gw-a served %.1fs after asking (fence %.1fs)",
			anaFailRefusals, reqAt.Format(time.StampMilli), stepped.Sub(reqAt).Seconds(), optAt.Sub(reqAt).Seconds(), optAt.Sub(fenceAt).Seconds())
	}
}

// anaFailLogs checks the samples of the gateways' ANA logs (uptime, group
// 1's state in gw-a's log, then in gw-b's read after it): never both
// optimized. Timing plays no part: gw-a's log says optimized only once
// gw-b has stepped down (if the product is right), and gw-b's is read
// after it, so a sample with both optimized is a window with two
// gateways serving the group.
func anaFailLogs(t *testing.T, out string) {
	t.Helper()
	var (
		n, both     int
		reads       [2]int
		bothAt      []string
		interesting []string
		prev        string
	)
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			continue
		}
		if _, err := strconv.ParseFloat(f[0], 64); err != nil {
			continue
		}
		n++
		for i, v := range f[1:] {
			if v != "-" {
				reads[i]++
			}
		}
		if f[1] == "optimized" && f[2] == "optimized" {
			if both++; len(bothAt) < 10 {
				bothAt = append(bothAt, l)
			}
		}
		if k := f[1] + " " + f[2]; k != prev {
			interesting, prev = append(interesting, l), k
		}
	}
	t.Logf("the gateways' ANA logs read by the host (uptime; group 1 in gw-a's, then in gw-b's), the changes of %d samples (%d and %d read):\n%s",
		n, reads[0], reads[1], strings.Join(interesting, "\n"))
	if reads[0] == 0 || reads[1] == 0 {
		t.Errorf("the sampler read no ANA log of gw-a (%d samples) or of gw-b (%d)", reads[0], reads[1])
	}
	if both > 0 {
		t.Errorf("FINDING: gw-a's and then gw-b's ANA log both said group 1 optimized in %d of %d samples:\n%s", both, n, strings.Join(bothAt, "\n"))
	}
}

// anaFailHostView logs the host's view (uptime; state and ANA state of
// gw-a's controller, of gw-b's): the changes, and the time neither path
// was optimized. Both live and optimized is counted and logged as a
// FINDING to look at, not failed on: the host's states lag each
// gateway's by its ANA change notice and log read, so that could be the
// host's lag (anaFailLogs judges the gateways).
func anaFailHostView(t *testing.T, out string) {
	t.Helper()
	var (
		n, both          int
		first, last      float64
		lastB, firstA    float64 = -1, -1
		bothAt           []string
		optimizedLive    = func(st, ana string) bool { return st == "live" && ana == "optimized" }
		interesting      []string
		prev             string
		lastLineB, lineA string
	)
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) != 5 {
			continue
		}
		up, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		if n == 0 {
			first = up
		}
		n, last = n+1, up
		oa, ob := optimizedLive(f[1], f[2]), optimizedLive(f[3], f[4])
		if oa && ob {
			if both++; len(bothAt) < 10 {
				bothAt = append(bothAt, l)
			}
		}
		if ob {
			lastB, lastLineB = up, l
		}
		if oa && firstA < 0 {
			firstA, lineA = up, l
		}
		if k := strings.Join(f[1:], " "); k != prev {
			interesting, prev = append(interesting, l), k
		}
	}
	if n == 0 {
		t.Errorf("the guest's sampler of the host's ANA states wrote no sample:\n%s", out)
		return
	}
	t.Logf("the host's ANA states (uptime; gw-a's controller state and path ANA state, gw-b's), the changes of %d samples over %.1fs:\n%s",
		n, last-first, strings.Join(interesting, "\n"))
	if both > 0 {
		t.Logf("FINDING (the host's view, not failed on): group 1 optimized on both gateways' live paths in %d of %d samples:\n%s", both, n, strings.Join(bothAt, "\n"))
	}
	if lastB >= 0 && firstA > lastB {
		t.Logf("the host's view of the hand-over: gw-b's path optimized last at %s, gw-a's first at %s: %.2fs with neither", lastLineB, lineA, firstA-lastB)
	}
}

// anaFailStepDown checks gw-b's log of the failback: anaFailRefusals
// refused step-downs, each the injected fault, then one that succeeded,
// and the release only after it. It returns that success's time.
func anaFailStepDown(t *testing.T, log string) time.Time {
	t.Helper()
	t.Logf("gw-b's step-down and release:\n%s", grepRe(log, `set-ana|release|step-down|could not be made`))
	failed := regexp.MustCompile(`(?m)^.*group 1: set-ana inaccessible failed.*$`).FindAllStringIndex(log, -1)
	ok := regexp.MustCompile(`(?m)^.*group 1: set-ana inaccessible$`).FindStringIndex(log)
	rel := strings.Index(log, "group 1: release to gw-a")
	if len(failed) != anaFailRefusals {
		t.Errorf("gw-b: %d refused step-downs, want %d", len(failed), anaFailRefusals)
	}
	for _, f := range failed {
		if !strings.Contains(log[f[0]:f[1]], "fault injected") {
			t.Errorf("a refused step-down that is not the injected fault: %s", log[f[0]:f[1]])
		}
	}
	if ok == nil {
		t.Errorf("FINDING: gw-b's step-down never succeeded:\n%s", log)
		return time.Time{}
	}
	if len(failed) > 0 && ok[0] < failed[len(failed)-1][0] {
		t.Errorf("gw-b's step-down succeeded before its last refusal")
	}
	if rel < 0 || rel < ok[0] {
		t.Errorf("FINDING: gw-b wrote its release (byte %d of its log) before its step-down succeeded (byte %d): its ports still said optimized", rel, ok[0])
	}
	at, _ := gwLogTime(log[ok[0]:], `set-ana inaccessible$`)
	return at
}

// grepRe returns the lines of s that match re.
func grepRe(s, re string) string {
	rx := regexp.MustCompile(re)
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if rx.MatchString(l) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// anaFailForGood is the refusals armed for the step-down refused for
// good: far more than a lease of retries (one each renew_interval).
const anaFailForGood = 1000

// anaFailExit is the failback while the holder's step-down is refused for
// a whole lease (issue 21, path 4; the Go host's
// TestGatewayProcessFailbackStepDownFails part 2), run after
// anaFailFailback (gw-a owns group 1, both paths live). gw-b takes the
// group again (gw-a SIGKILLed, as at the run's first kill), every one of
// its step-downs is refused from then on, and gw-a, its preferred owner,
// is restarted: the failback is due once the host is connected to gw-a
// again. Required: gw-b never writes a release; after a lease of refused
// step-downs it exits 75 (EX_TEMPFAIL, ErrStepDownFailed) and its log
// says why; gw-a fences gw-b's clients of the group only after that (gw-b
// renewed its lease until it exited) and serves only after its fence; the
// gateways' ANA logs, read by the guest gw-a's first, never both say
// optimized (startANASamplers, anaFailLogs). gw-b is then restarted
// disarmed (as its service manager would; the run's later phases expect
// both gateways). vwriter writes throughout; the run's sweep judges it and
// logs the stalls after this phase's events. It returns gw-a's fence time
// (from "fencing the previous holder" to optimized) for the stall bound.
func anaFailExit(t *testing.T, g anaFailGW) (fence time.Duration) {
	start := time.Now()
	defer func() {
		t.Logf("failback with the step-down refused for good: the phase took %.1fs", time.Since(start).Seconds())
	}()
	a, b, vm := g.a, g.b, g.vm
	ca, cb := g.ctrlOf[a.port], g.ctrlOf[b.port]
	fault := filepath.Join(b.dir, "stepdown.fault")

	// gw-b takes the group again.
	kmark := b.logSize()
	g.events["kill gw-a (gw-b takes the group again)"] = time.Now()
	a.stop(syscall.SIGKILL)
	waitGuestAttr(t, vm, ca, "state", "resetting connecting")
	waitGuestAttr(t, vm, cb, "nvme*c*n1/ana_state", "optimized")
	g.sampler.waitProgress(t, 1, 500, "after gw-b took the group again")
	b.waitLogFrom(`(?s)fencing the previous holder.*group 1: set-ana optimized`, kmark)
	if err := faultinject.ArmStepDown(fault, anaFailForGood); err != nil {
		t.Fatal(err)
	}
	startANASamplers(t, vm, ca, cb)
	amark, bmark := a.logSize(), b.logSize()
	restart := time.Now()
	g.events["restart gw-a (failback; gw-b's step-down refused for good)"] = restart
	var (
		exited time.Time
		bexit  int64 = -1 // gw-b's log size at its exit
		used         = -1 // refusals used (the fault file before it is disarmed)
	)
	// The checks run also when a wait below fails (t.Fatal).
	defer func() { fence = anaFailExitCheck(t, g, amark, bmark, bexit, used, restart, exited) }()
	a.start()

	// gw-b exits after a lease of refusals; a release is a FINDING.
	deadline := time.Now().Add(2 * time.Minute)
	for code := -1; code < 0; {
		select {
		case <-b.exited:
			exited, code = time.Now(), b.cmd.ProcessState.ExitCode()
			b.cmd, bexit = nil, b.logSize()
			if left, err := faultinject.StepDownLeft(fault); err == nil {
				used = anaFailForGood - left
			}
			if code != 75 {
				t.Errorf("gw-b exited %d, want 75 (EX_TEMPFAIL: a group could not be made inaccessible)", code)
			}
			continue
		default:
		}
		if log := b.logSince(bmark); strings.Contains(log, "release to gw-a") {
			t.Fatalf("FINDING: gw-b released group 1 although every step-down was refused (its ports still say optimized):\n%s", grepRe(log, `set-ana|release|could not be made`))
		}
		if time.Now().After(deadline) {
			t.Fatalf("gw-b did not exit within 2 minutes of gw-a's restart, with every step-down refused:\n%s", grepRe(b.logSince(bmark), `set-ana|release|could not be made|request-handover`))
		}
		time.Sleep(50 * time.Millisecond)
	}
	waitGuestAttr(t, vm, ca, "state", "live")
	waitGuestAttr(t, vm, ca, "nvme*c*n1/ana_state", "optimized")
	g.sampler.waitProgress(t, 0, 500, "after gw-b's exit")
	g.vw.waitWrites(200, "after gw-b's exit")

	// gw-b restarted, disarmed.
	if err := faultinject.ArmStepDown(fault, 0); err != nil {
		t.Fatal(err)
	}
	g.events["restart gw-b (exited 75; disarmed)"] = time.Now()
	b.start()
	waitGuestAttr(t, vm, cb, "state", "live")
	waitGuestAttr(t, vm, cb, "nvme*c*n1/ana_state", "inaccessible")
	return fence
}

// anaFailExitCheck stops the guest's samplers and checks their samples,
// gw-b's log from bmark to its exit at bexit (refused step-downs, the
// exit's reason, no release; -1: it did not exit, to its end) and gw-a's
// from amark on (the fence after gw-b's exit, then optimized). used is the
// refusals gw-b's fault file counted (-1: unknown). It returns gw-a's
// fence time.
func anaFailExitCheck(t *testing.T, g anaFailGW, amark, bmark, bexit int64, used int, restart, exited time.Time) time.Duration {
	stopANASamplers(t, g.vm)
	blog, alog := g.b.logSince(bmark), g.a.logSince(amark)
	if bexit >= bmark && bexit-bmark <= int64(len(blog)) {
		blog = blog[:bexit-bmark]
	}
	t.Logf("gw-b with every step-down refused, to its exit:\n%s", grepRe(blog, `set-ana|release|step-down|could not be made|request-handover`))
	refused := regexp.MustCompile(`(?m)^.*group 1: set-ana inaccessible failed.*fault injected.*$`).FindAllString(blog, -1)
	if len(refused) == 0 {
		t.Errorf("gw-b's log shows no refused step-down (the injected fault)")
	}
	if strings.Contains(blog, "release to") {
		t.Errorf("FINDING: gw-b released the group although its step-down kept failing")
	}
	exitAt, okExit := gwLogTime(blog, `could not be made inaccessible`)
	if !okExit {
		t.Errorf("gw-b's log does not say why it exits (\"could not be made inaccessible\")")
	}
	if used >= 0 {
		t.Logf("gw-b's fault file: %d of %d refusals used", used, anaFailForGood)
	}
	fenceAt, ok1 := gwLogTime(alog, `fencing the previous holder`)
	optAt, ok2 := gwLogTime(alog, `group 1: set-ana optimized`)
	if !ok1 || !ok2 || optAt.Before(fenceAt) {
		t.Errorf("gw-a did not fence gw-b's client of the group before serving it:\n%s", grepRe(alog, `fenc|set-ana`))
		return 0
	}
	if okExit && fenceAt.Before(exitAt) {
		t.Errorf("FINDING: gw-a fenced gw-b at %s, before gw-b gave up at %s (gw-b renews its lease until then)", fenceAt.Format(time.StampMilli), exitAt.Format(time.StampMilli))
	}
	firstRefusal, _ := gwLogTime(blog, `set-ana inaccessible failed`)
	reqAt, _ := gwLogTime(alog, `group 1: request-handover`)
	if !okExit || exited.IsZero() || firstRefusal.IsZero() {
		t.Logf("failback with the step-down refused for good: gw-a restarted at %s, asked at %s, fenced at %s, served at %s (gw-b did not give up and exit)",
			restart.Format(time.StampMilli), reqAt.Format(time.StampMilli), fenceAt.Format(time.StampMilli), optAt.Format(time.StampMilli))
		return optAt.Sub(fenceAt)
	}
	t.Logf("failback with the step-down refused for good: gw-a restarted at %s, asked at %s; gw-b refused first at %s (%d refusals logged), gave up at %s (%.1fs after its first refusal; lease %v) and exited %.1fs after gw-a's restart; gw-a fenced it %.1fs after that and served %.1fs after its restart (fence %.1fs)",
		restart.Format(time.StampMilli), reqAt.Format(time.StampMilli), firstRefusal.Format(time.StampMilli), len(refused), exitAt.Format(time.StampMilli),
		exitAt.Sub(firstRefusal).Seconds(), gatewayLease, exited.Sub(restart).Seconds(), fenceAt.Sub(exitAt).Seconds(), optAt.Sub(restart).Seconds(), optAt.Sub(fenceAt).Seconds())
	return optAt.Sub(fenceAt)
}
