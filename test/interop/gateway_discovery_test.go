package interop_test

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/test/ceph/cephtest"
)

// testLinuxHostGatewayDiscovery: discovery across the gateway group
// (issue 27) against the stock Linux host. Two nvmetd-rbd gateways of one
// group, each advertising the address the guest reaches the host at
// (gateway.advertise: they listen on the host's loopback). `nvme
// discover` against either gateway lists both gateways' ports for the
// subsystem; `nvme connect-all` against either gateway alone connects both paths
// (two live controllers of the subsystem, one per gateway). The
// gateways' own entries give the advertised address too: before, gw-a's
// own entry said 127.0.0.1 (its listen address), which connect-all in the
// guest could not use, and only gw-b's path came up.
func testLinuxHostGatewayDiscovery(t *testing.T, k kernel) {
	c := cephtest.Shared(t)
	image := c.CreateImage(t, 64<<20)
	bin := buildGatewayBinary(t)
	vm := startHealthyVM(t, k)
	addr := vm.HostAddr()
	procs := startGatewayPair(t, c, image, bin, "d", func(p *gwProc) { p.advertise = addr })
	a, b := procs[0], procs[1]
	// Each lists the other's port.
	a.waitLog(`the discovery log lists the group's other ports.*gw-b`)
	b.waitLog(`the discovery log lists the group's other ports.*gw-a`)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = vm.Exec(ctx, "nvme disconnect -n "+gatewayNQN)
	}()

	for _, p := range procs {
		out := step(t, vm, time.Minute, fmt.Sprintf("nvme discover -t rdma -a %s -s %d", addr, p.port))
		for _, q := range procs {
			if !regexp.MustCompile(fmt.Sprintf(`(?s)trsvcid:\s*%d\s.*subnqn:\s*%s`, q.port, regexp.QuoteMeta(gatewayNQN))).MatchString(out) {
				t.Fatalf("nvme discover through %s does not list %s's port %d for %s:\n%s", p.name, q.name, q.port, gatewayNQN, out)
			}
		}
	}
	// connect-all through each gateway alone connects every path (issue
	// 27: "connect-all against either gateway connects every path"); the
	// paths are disconnected between the two.
	for i, via := range procs {
		if i > 0 {
			step(t, vm, time.Minute, "nvme disconnect -n "+gatewayNQN+`; for i in $(seq 1 600); do n=0; for c in /sys/class/nvme/nvme*; do `+
				`[ "$(cat $c/subsysnqn 2>/dev/null)" = `+gatewayNQN+` ] && n=$((n+1)); done; [ $n = 0 ] && break; sleep 0.1; done; true`)
		}
		step(t, vm, time.Minute, fmt.Sprintf("nvme connect-all -t rdma -a %s -s %d -i 2 -c 1 -l 600", addr, via.port))
		// Up to 90 s for both controllers to go live (TCG on a loaded machine).
		out := step(t, vm, 2*time.Minute, fmt.Sprintf(`for i in $(seq 1 900); do n=0; for c in /sys/class/nvme/nvme*; do `+
			`[ "$(cat $c/subsysnqn 2>/dev/null)" = %s ] && [ "$(cat $c/state)" = live ] && n=$((n+1)); done; [ $n = 2 ] && break; sleep 0.1; done; `+
			`for c in /sys/class/nvme/nvme*; do [ "$(cat $c/subsysnqn 2>/dev/null)" = %s ] && echo $(basename $c) $(cat $c/address) $(cat $c/state); done; true`,
			gatewayNQN, gatewayNQN))
		for _, p := range procs {
			if !regexp.MustCompile(fmt.Sprintf(`trsvcid=%d\b.* live`, p.port)).MatchString(out) {
				t.Fatalf("after connect-all through %s, no live controller to %s (port %d):\n%s", via.name, p.name, p.port, out)
			}
		}
		t.Logf("connect-all through %s:\n%s", via.name, out)
	}
}
