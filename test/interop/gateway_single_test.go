package interop_test

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/test/interop/lab"
)

// The single-path takeover (issue 21): the Linux host keeps ONLY the path
// of the gateway that will take over (it disconnects the owner's
// controller), then the owner is SIGKILLed: the survivor fences it and
// reopens the group's namespaces on new RADOS clients. The reopen must
// keep the namespace attached (target.ReopenNamespaces, 618da4d): the
// host's disk stays the same block device (no new multipath head, no
// "no available path - failing I/O"), its I/O stalls and resumes with no
// error. Before 618da4d the reopen disabled and re-enabled the namespace:
// 6.12 removed the head with its last path and made a new one (session 4:
// nvme0n3, ~500 000 write errors). It runs on testLinuxHostGateway's VM,
// gateways and vwriter, before vwriter's stop: that run's sweep of the
// whole disk judges these writes too.
//
// Without 618da4d (the old reopen: a reload with the group's namespaces
// disabled, then one with them enabled) the phase passes on 6.12 when the
// two reloads follow each other faster than the host rescans, and fails
// (a new head nvme0n2, "no available path - failing I/O") with 3 s between
// them, as on a loaded machine: test/bench/results/gateway/2026-11-28-s6-singlepath.

// singlePathGW is what the phase needs of testLinuxHostGateway.
type singlePathGW struct {
	vm      *lab.VM
	procs   [2]*gwProc
	ctrlOf  map[int]string // port → nvmeX
	dev     string         // the multipath disk, nvmeXnY
	sampler *ioSampler
	vw      *linuxWriter
	events  map[string]time.Time
}

// singlePathTakeover runs the phase; it returns the survivor's fence time
// (for the stall bound) and leaves the host with the survivor's path only.
func singlePathTakeover(t *testing.T, g singlePathGW) time.Duration {
	t.Helper()
	start := time.Now()
	defer func() { t.Logf("single path: the phase took %.1fs", time.Since(start).Seconds()) }()
	// The owner is the gateway whose path is optimized (gw-a after its
	// failback; gw-b if gw-a did not take the group back).
	states := step(t, g.vm, time.Minute, fmt.Sprintf(`for c in %s %s; do echo $c $(cat /sys/class/nvme/$c/nvme*c*n1/ana_state 2>/dev/null); done`,
		g.ctrlOf[g.procs[0].port], g.ctrlOf[g.procs[1].port]))
	owner, survivor := -1, -1
	for i, p := range g.procs {
		if strings.Contains(states, g.ctrlOf[p.port]+" optimized") {
			owner, survivor = i, 1-i
		}
	}
	if owner < 0 || g.procs[owner].cmd == nil {
		t.Fatalf("single path: no gateway's path is optimized:\n%s", states)
	}
	o, s := g.procs[owner], g.procs[survivor]
	ownerCtrl := g.ctrlOf[o.port]
	mark := kmsgMark(t, g.vm)
	// The host gives up the owner's path: its in-flight writes fail over
	// to the multipath head and wait there (the survivor's path is
	// inaccessible) until the takeover.
	g.events["single path: disconnect "+o.name] = time.Now()
	step(t, g.vm, time.Minute, "nvme disconnect -d "+ownerCtrl)
	step(t, g.vm, time.Minute, fmt.Sprintf(`for i in $(seq 1 600); do [ -e /sys/class/nvme/%s ] || exit 0; sleep 0.1; done; exit 1`, ownerCtrl))
	fmark := s.logSize()
	g.events["single path: kill "+o.name] = time.Now()
	o.stop(syscall.SIGKILL)
	// The survivor's path optimized, on whichever head (a new head would
	// be nvmeXcYnZ with another Z than the test's anaState glob).
	step(t, g.vm, 2*time.Minute, fmt.Sprintf(`for i in $(seq 1 1200); do s=$(cat /sys/class/nvme/%s/nvme*c*n*/ana_state 2>/dev/null); `+
		`[ "$s" = optimized ] && echo $s && exit 0; sleep 0.1; done; echo $s; exit 1`, g.ctrlOf[s.port]))
	// The same disk: the head the workload opened is still there, and it
	// is the only one of the subsystem's namespace 1. (Checked before the
	// waits for writes: without the in-place reopen every I/O on the old
	// head fails and the waits would only time out.)
	// (The hidden per-path disks, nvmeXcYnZ, are in /sys/block too.)
	heads := strings.Fields(step(t, g.vm, time.Minute, fmt.Sprintf(`for b in /sys/block/nvme*n*; do case ${b##*/} in nvme*c*) continue;; esac; `+
		`[ "$(cat $b/device/subsysnqn 2>/dev/null)" = %s ] && [ "$(cat $b/nsid 2>/dev/null)" = 1 ] && basename $b; done; true`, gatewayNQN)))
	d := dmesgSince(t, g.vm, mark)
	if len(heads) != 1 || heads[0] != g.dev || strings.Contains(d, "no available path") {
		t.Fatalf("FINDING: single path: the takeover took the namespace from the host (block device was %s, now %v); kernel log since the disconnect:\n%s\nvwriter's stderr (tail):\n%s",
			g.dev, heads, d, lastBytes(g.vw.file("err"), 4000))
	}
	g.sampler.waitProgress(t, survivor, 500, "after the single-path takeover")
	g.vw.waitWrites(200, "after the single-path takeover")
	s.waitLog(`(?s)fencing the previous holder.*group 1: set-ana optimized`)
	fence := singlePathFence(t, s, fmark)
	return fence
}

// singlePathFence is p's fence of the old owner from its log since mark:
// from "fencing the previous holder" to "group 1: set-ana optimized" (as
// testLinuxHostGateway's fenceTime, for either gateway).
func singlePathFence(t *testing.T, p *gwProc, mark int64) time.Duration {
	t.Helper()
	log := p.logSince(mark)
	fenceAt, ok1 := gwLogTime(log, `fencing the previous holder`)
	optAt, ok2 := gwLogTime(log, `group 1: set-ana optimized`)
	if !ok1 || !ok2 || optAt.Before(fenceAt) {
		t.Fatalf("%s's log: no fence before its optimized state:\n%s", p.name, log)
	}
	return optAt.Sub(fenceAt)
}

// lastBytes is the last n bytes of s.
func lastBytes(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
