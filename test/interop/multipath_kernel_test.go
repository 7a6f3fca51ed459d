package interop_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/internal/testing/verify"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// The multipath comparison (issue 13): our host (the initiator package's
// multipath) against the kernel target, nvmet-rdma in the guest serving one
// subsystem on two ports (4420 and 4421, forwarded from the host), with
// port 1's ANA state changed through configfs as nvmetcli does and its
// subsystem link removed (its controllers disconnected) and restored. The
// verified workload (internal/testing/verify: versioned blocks, each read
// back) runs throughout and ends with a sweep of the whole namespace: 0
// regressed blocks, no I/O error, no read-back error; the failover times (last completion on the old path
// to the first on the new) are printed, to compare with the kernel host's
// against nvmetd (LinuxHostMultipath). The namespace is 128 MiB (null_blk
// with memory), so that the sweep of the whole of it stays short under TCG.

func testInitiatorMultipathKernelTarget(t *testing.T, k kernel) {
	opts := k.opts(labOpts)
	opts.Forwards = []int{4420, 4421}
	vm := startHealthy(t, opts)
	mark := kmsgMark(t, vm)
	guest(t, vm, 2*time.Minute, "nvmet.sh teardown; export SIZE_MB=128; nvmet.sh setup && PORTID=2 TRSVCID=4421 nvmet.sh setup && nvmet.sh show | grep -E 'ana|ports' | head -20")
	defer vm.Exec(context.Background(), "nvmet.sh teardown >/dev/null 2>&1")
	for _, p := range []int{4420, 4421} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := vm.WaitListening(ctx, p)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	log := zap.NewNop()
	if testing.Verbose() {
		log = zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
	}
	sub := initiator.NewSubsystem(kernelNQN, initiator.MultipathConfig{Logger: log})
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = sub.Close(ctx)
	}()
	var paths [2]*initiator.Path
	for i, p := range []int{4420, 4421} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		path, err := sub.AddPath(ctx, initiator.Config{Address: "127.0.0.1:" + strconv.Itoa(vm.ForwardedPort(p)), SubNQN: kernelNQN,
			HostNQN: initHostNQN, NrIOQueues: 2, QueueSize: 32, ReconnectDelay: time.Second, Logger: log})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		paths[i] = path
	}
	h := sub.Namespace(1)
	if h == nil || len(sub.Namespaces()) != 1 {
		t.Fatalf("namespaces: %v", sub.Namespaces())
	}
	for i, p := range paths {
		t.Logf("path %d: %s cntlid %d, ANA groups %+v", i, p.Address(), p.Controller().CNTLID(), p.ANAGroups())
	}
	w, err := verify.Start(verify.Head(h), verify.Config{BlockSize: 4096, Blocks: 256, Workers: 4, ReadBack: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	waitOn := func(p *initiator.Path, since time.Time, n int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := w.WaitCompletions(ctx, p.Address(), since, n); err != nil {
			t.Fatal(err)
		}
	}
	// report logs the failover time: the last completion through from
	// before the first through another path after since, to that one.
	report := func(what string, from *initiator.Path, since time.Time) {
		t.Helper()
		stall, err := w.Stall(from.Address(), since)
		if err != nil {
			t.Errorf("failover on %s: %v", what, err)
			return
		}
		t.Logf("our host failover on %s: %v (last completion on %s to the first on the other path)", what, stall.Round(time.Microsecond), from.Address())
	}
	waitOn(paths[0], time.Time{}, 50)
	anaDir := func(port int) string {
		return fmt.Sprintf("/sys/kernel/config/nvmet/ports/%d/ana_groups/1/ana_state", port)
	}
	waitANA := func(p *initiator.Path, want nvmeof.ANAState) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for p.ANAState(1) != want || p.Controller().State() != initiator.StateLive {
			if time.Now().After(deadline) {
				t.Fatalf("path %s: %v %v, want live %v", p.Address(), p.Controller().State(), p.ANAState(1), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// (a) Port 1's group inaccessible (configfs, as nvmetcli): I/O moves to port 2.
	at := time.Now()
	guest(t, vm, time.Minute, "echo inaccessible > "+anaDir(1))
	waitOn(paths[1], at, 50)
	report("nvmet port 1 group inaccessible (configfs)", paths[0], at)
	guest(t, vm, time.Minute, "echo optimized > "+anaDir(1))
	waitANA(paths[0], nvmeof.ANAOptimized)

	// Port 1 optimized again: the I/O comes back to it (numa: the first
	// optimized path).
	waitOn(paths[0], time.Now(), 50)

	// (b) Port 1's subsystem link removed: nvmet disconnects its
	// controllers; the I/O moves to port 2.
	at = time.Now()
	guest(t, vm, time.Minute, "rm /sys/kernel/config/nvmet/ports/1/subsystems/"+kernelNQN)
	waitOn(paths[1], at, 50)
	report("nvmet port 1 unlinked (controllers disconnected)", paths[0], at)
	// (c) linked again: the path reconnects.
	guest(t, vm, time.Minute, "ln -s /sys/kernel/config/nvmet/subsystems/"+kernelNQN+" /sys/kernel/config/nvmet/ports/1/subsystems/"+kernelNQN)
	waitANA(paths[0], nvmeof.ANAOptimized)
	sub.SetIOPolicy(initiator.IOPolicyRoundRobin)
	at = time.Now()
	waitOn(paths[0], at, 20)
	waitOn(paths[1], at, 20)
	// The sweep of the whole namespace: every block at its last
	// acknowledged write or later, and no I/O or read-back error.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r := w.Sweep(ctx, verify.Head(h))
	if err := r.Err(); err != nil {
		t.Fatalf("sweep of the whole namespace: %v\n%s", err, r)
	}
	t.Logf("sweep of the whole namespace: %s; %d failovers", r, h.Failovers())
	dmesg := dmesgSince(t, vm, mark)
	t.Logf("guest kernel log since the test began (nvmet):\n%s", grepLines(dmesg, "nvmet"))
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(strings.ToLower(l), sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
