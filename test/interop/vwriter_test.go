package interop_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/internal/testing/verify"
	"github.com/nvmetd/nvmetd/test/interop/lab"
)

// The Linux host's verified workload: vwriter
// (internal/testing/verify/cmd/vwriter, a static Go program put into the
// guest) writes versioned 4 KiB blocks with O_DIRECT on the multipath
// disk (/dev/nvmeXnY) from 16 workers, each write read back, recording
// per block the last acknowledged sequence; when told to stop it saves
// its record and sweeps the whole disk: every block must hold its last
// acknowledged write or a later one (issue 21, issue 28).

// linuxWriter is one vwriter run in the guest; its files are
// /root/<name>.*.
type linuxWriter struct {
	t    *testing.T
	vm   *lab.VM
	bin  string // vwriter in the guest
	name string
}

// vwriterBlocks is how many 4 KiB blocks at the start of the disk
// vwriter writes (16 MiB); its sweep reads the whole disk.
const vwriterBlocks = 4096

// startLinuxWriter starts vwriter on /dev/<dev>: it writes the first
// vwriterBlocks blocks and sweeps the whole disk at its stop.
func startLinuxWriter(t *testing.T, vm *lab.VM, dev, name string) *linuxWriter {
	t.Helper()
	bin := vm.BuildAndPut(t, "./internal/testing/verify/cmd/vwriter")
	w := &linuxWriter{t: t, vm: vm, bin: bin, name: name}
	step(t, vm, time.Minute, fmt.Sprintf(`rm -f /root/%[1]s.*; (%[2]s write -dev /dev/%[3]s -state /root/%[1]s.state -stop /root/%[1]s.stop `+
		`-progress /root/%[1]s.progress -blocks %[4]d -workers 16 -sweep > /root/%[1]s.out 2> /root/%[1]s.err; echo $? > /root/%[1]s.rc) >/dev/null 2>&1 &`+"\n"+
		`echo started`, name, bin, dev, vwriterBlocks))
	return w
}

// writes returns the writes vwriter counted acknowledged at its last
// progress report (-1: none yet).
func (w *linuxWriter) writes() int64 {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, _ := w.vm.Exec(ctx, fmt.Sprintf("cat /root/%s.progress 2>/dev/null || true", w.name))
	f := strings.Fields(out)
	if len(f) < 2 || f[0] != "writes" {
		return -1
	}
	n, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// waitWrites waits until vwriter acknowledged n more writes than when
// called.
func (w *linuxWriter) waitWrites(n int64, what string) {
	w.t.Helper()
	base := w.writes()
	deadline := time.Now().Add(5 * time.Minute)
	for w.writes() < max(base, 0)+n {
		if time.Now().After(deadline) {
			w.t.Fatalf("vwriter did not acknowledge %d more writes %s (%d before); its stderr:\n%s", n, what, base, w.file("err"))
		}
		time.Sleep(time.Second)
	}
}

func (w *linuxWriter) file(ext string) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, _ := w.vm.Exec(ctx, fmt.Sprintf("cat /root/%s.%s 2>/dev/null || true", w.name, ext))
	return out
}

// stop tells vwriter to stop and waits for its sweep of the whole disk
// (generous: the guest runs under TCG), and returns its summary, with the
// guest's clock's offset from this machine's (to place its stalls).
func (w *linuxWriter) stop() (verify.Summary, time.Duration) {
	w.t.Helper()
	step(w.t, w.vm, 20*time.Minute, fmt.Sprintf(`touch /root/%[1]s.stop; for i in $(seq 1 10800); do [ -s /root/%[1]s.rc ] && break; sleep 0.1; done; `+
		`echo rc=$(cat /root/%[1]s.rc); cat /root/%[1]s.err`, w.name))
	var s verify.Summary
	out := w.file("out")
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		w.t.Fatalf("vwriter's summary: %v\nstdout: %s\nstderr: %s", err, out, w.file("err"))
	}
	return s, w.clockOffset()
}

// clockOffset returns the guest's clock less this machine's (within half
// an Exec's round trip, logged).
func (w *linuxWriter) clockOffset() time.Duration {
	t := w.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t0 := time.Now()
	out, err := w.vm.Exec(ctx, w.bin+" now")
	t1 := time.Now()
	ns, perr := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil || perr != nil {
		t.Logf("the guest's clock: %v %v (stalls placed as if it were this machine's)", err, perr)
		return 0
	}
	mid := t0.Add(t1.Sub(t0) / 2)
	off := time.Unix(0, ns).Sub(mid)
	t.Logf("the guest's clock is %v from this machine's (±%v)", off.Round(time.Millisecond), (t1.Sub(t0) / 2).Round(time.Millisecond))
	return off
}

// checkLinuxSweep fails t unless the sweep found every block as it must
// be (0 regressed, torn, foreign, misplaced or beyond the last submitted;
// every block read) and vwriter's I/O had no error, except EIOs that
// Linux's own post_send race makes at a target's SIGKILL (dmesg holds
// its signature: docs/linux-interop.md), which are given-up writes, never
// counted as acknowledged: the sweep still judges their blocks.
func checkLinuxSweep(t *testing.T, s verify.Summary, dmesg string) {
	t.Helper()
	t.Logf("Linux host's verified workload (vwriter), sweep of the whole disk: %s", s.Text)
	if s.SweepErr != "" || s.Regressed != 0 {
		t.Errorf("FINDING: the sweep of the whole disk: %s", s.SweepErr)
	}
	if s.Workload.ReadBackErrors != 0 {
		t.Errorf("FINDING: %d reads back did not find the write just acknowledged: %s", s.Workload.ReadBackErrors, strings.Join(s.Errors, "; "))
	}
	if n := s.Workload.WriteErrors + s.Workload.ReadErrors; n > 0 {
		postSend := regexp.MustCompile(`nvme_rdma_post_send failed with error code -107`).MatchString(dmesg)
		onlyEIO := len(s.Errors) > 0
		for _, e := range s.Errors {
			if !strings.HasSuffix(e, "input/output error") {
				onlyEIO = false
			}
		}
		if !postSend || !onlyEIO {
			t.Errorf("vwriter's I/O had %d errors (post_send race signature in the kernel log: %v): %s", n, postSend, strings.Join(s.Errors, "; "))
			return
		}
		t.Logf("vwriter saw %d EIOs from Linux's post_send race at the SIGKILL (nvme_rdma_post_send -107 → BLK_STS_IOERR, not retried by native multipath): "+
			"given-up writes, judged by the sweep; see docs/linux-interop.md", n)
	}
}

// logLinuxStalls logs vwriter's stalls (its gaps between two completions,
// placed on this machine's clock with the guest's offset): after each of
// the test's events, the longest that began before the next event, each
// against bound if set; and every other one longer than a second. A
// measure, never asserted: the machine is loaded and the guest runs under
// TCG.
func logLinuxStalls(t *testing.T, s verify.Summary, off time.Duration, events map[string]time.Time, bound time.Duration, boundWhy string) {
	t.Helper()
	names := make([]string, 0, len(events))
	for k := range events {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return events[names[i]].Before(events[names[j]]) })
	// event returns the index of the last event at or before at (-1: none).
	event := func(at time.Time) int {
		i := -1
		for j, k := range names {
			if !events[k].After(at) {
				i = j
			}
		}
		return i
	}
	longest := make([]int, len(names))
	for i := range longest {
		longest[i] = -1
	}
	for j, g := range s.Gaps {
		if e := event(g.End.Add(-off)); e >= 0 && (longest[e] < 0 || g.Duration() > s.Gaps[longest[e]].Duration()) {
			longest[e] = j
		}
	}
	for i, k := range names {
		if longest[i] < 0 {
			t.Logf("Linux host stall after %s: none longer than 200 ms", k)
			continue
		}
		g := s.Gaps[longest[i]]
		verdict := ""
		if bound > 0 {
			verdict = "within"
			if g.Duration() > bound {
				verdict = "OVER"
			}
			verdict = fmt.Sprintf("; bound %s = %v: %s", boundWhy, bound.Round(time.Millisecond), verdict)
		}
		t.Logf("Linux host stall after %s (the longest time no vwriter I/O completed): %v, from %.1fs after it%s",
			k, g.Duration().Round(time.Millisecond), g.Start.Add(-off).Sub(events[k]).Seconds(), verdict)
	}
	for j, g := range s.Gaps {
		if e := event(g.End.Add(-off)); g.Duration() > time.Second && (e < 0 || longest[e] != j) {
			t.Logf("Linux host stall of %v at %s", g.Duration().Round(time.Millisecond), g.Start.Add(-off).Format("15:04:05.000"))
		}
	}
}
