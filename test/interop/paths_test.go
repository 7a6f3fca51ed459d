package interop_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/test/interop/lab"
)

// connectPaths connects the guest's kernel host to nqn once per port on
// addr (nvme connect -t rdma, 2 I/O queues, reconnect delay 1 s,
// ctrl_loss_tmo 600 s, so that a killed target's path comes back when it
// does), waits until each port has one live controller of nqn, and
// returns the controller (nvmeN) of each port.
func connectPaths(t *testing.T, vm *lab.VM, nqn, addr string, ports []int) map[int]string {
	t.Helper()
	for _, port := range ports {
		step(t, vm, time.Minute, fmt.Sprintf("nvme connect -t rdma -a %s -s %d -n %s -i 2 -c 1 -l 600", addr, port, nqn))
	}
	// Up to 90 s for the controllers to go live: the guest runs under TCG
	// on a machine that may be loaded.
	ctrls := step(t, vm, 2*time.Minute, fmt.Sprintf(`for i in $(seq 1 900); do n=0; for c in /sys/class/nvme/nvme*; do `+
		`[ "$(cat $c/subsysnqn 2>/dev/null)" = %s ] && [ "$(cat $c/state)" = live ] && n=$((n+1)); done; [ $n = %d ] && break; sleep 0.1; done; `+
		`for c in /sys/class/nvme/nvme*; do [ "$(cat $c/subsysnqn 2>/dev/null)" = %s ] && echo $(basename $c) $(cat $c/address) $(cat $c/cntlid) $(cat $c/state); done`,
		nqn, len(ports), nqn))
	ctrlOf := map[int]string{}
	for _, l := range strings.Split(strings.TrimSpace(ctrls), "\n") {
		f := strings.Fields(l)
		if len(f) < 4 || f[len(f)-1] != "live" {
			continue
		}
		for _, port := range ports {
			if strings.Contains(f[1], fmt.Sprintf("trsvcid=%d,", port)) || strings.HasSuffix(f[1], fmt.Sprintf("trsvcid=%d", port)) {
				ctrlOf[port] = f[0]
			}
		}
	}
	if len(ctrlOf) != len(ports) {
		t.Fatalf("want one live controller of %s per port %v, got:\n%s", nqn, ports, ctrls)
	}
	return ctrlOf
}

// stopWorkersAndDisconnect is the guest's cleanup after a multipath run:
// it asks the guest's background workers (vwriter runs named by tags,
// each polling /root/TAG.stop) to stop, waits up to 60 s for each to write
// /root/TAG.rc, and disconnects every controller of nqn. Errors are
// ignored: it runs deferred, also after a failure.
func stopWorkersAndDisconnect(vm *lab.VM, nqn string, tags ...string) {
	var stop, done []string
	for _, tag := range tags {
		stop = append(stop, "/root/"+tag+".stop")
		done = append(done, "[ -s /root/"+tag+".rc ]")
	}
	cmd := ""
	if len(tags) > 0 {
		cmd = "touch " + strings.Join(stop, " ") + "; for i in $(seq 1 600); do " + strings.Join(done, " && ") + " && break; sleep 0.1; done; "
	}
	vm.Exec(context.Background(), cmd+"nvme disconnect -n "+nqn+" >/dev/null 2>&1; true")
}

// logTail logs the last 6000 bytes of a target process's log, for a
// failed test.
func logTail(t *testing.T, name, path string) {
	t.Helper()
	b, _ := os.ReadFile(path)
	if len(b) > 6000 {
		b = b[len(b)-6000:]
	}
	t.Logf("%s:\n%s", name, b)
}
