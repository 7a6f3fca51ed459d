package interop_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// The multipath comparison (issue 13): our host (the initiator package's
// multipath) against the kernel target, nvmet-rdma in the guest serving one
// subsystem on two ports (4420 and 4421, forwarded from the host), with
// port 1's ANA state changed through configfs as nvmetcli does and its
// subsystem link removed (its controllers disconnected) and restored. A
// verified write/read workload runs throughout: no I/O error, no
// verification error; the failover times (last completion on the old path
// to the first on the new) are printed, to compare with the kernel host's
// against nvmetd (LinuxHostMultipath).

func testInitiatorMultipathKernelTarget(t *testing.T, k kernel) {
	opts := k.opts(labOpts)
	opts.Forwards = []int{4420, 4421}
	vm := startHealthy(t, opts)
	mark := kmsgMark(t, vm)
	guest(t, vm, 2*time.Minute, "nvmet.sh teardown; nvmet.sh setup && PORTID=2 TRSVCID=4421 nvmet.sh setup && nvmet.sh show | grep -E 'ana|ports' | head -20")
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
	w := startKernelWorkload(h, 4, 256)
	defer w.finish()
	w.waitOn(t, paths[0], time.Time{}, 50)
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
	w.waitOn(t, paths[1], at, 50)
	w.report(t, "nvmet port 1 group inaccessible (configfs)", paths[0], at)
	guest(t, vm, time.Minute, "echo optimized > "+anaDir(1))
	waitANA(paths[0], nvmeof.ANAOptimized)

	// Port 1 optimized again: the I/O comes back to it (numa: the first
	// optimized path).
	w.waitOn(t, paths[0], time.Now(), 50)

	// (b) Port 1's subsystem link removed: nvmet disconnects its
	// controllers; the I/O moves to port 2.
	at = time.Now()
	guest(t, vm, time.Minute, "rm /sys/kernel/config/nvmet/ports/1/subsystems/"+kernelNQN)
	w.waitOn(t, paths[1], at, 50)
	w.report(t, "nvmet port 1 unlinked (controllers disconnected)", paths[0], at)
	// (c) linked again: the path reconnects.
	guest(t, vm, time.Minute, "ln -s /sys/kernel/config/nvmet/subsystems/"+kernelNQN+" /sys/kernel/config/nvmet/ports/1/subsystems/"+kernelNQN)
	waitANA(paths[0], nvmeof.ANAOptimized)
	sub.SetIOPolicy(initiator.IOPolicyRoundRobin)
	at = time.Now()
	w.waitOn(t, paths[0], at, 20)
	w.waitOn(t, paths[1], at, 20)
	w.finish()
	if n, v := w.ioErrs.Load(), w.verifyErrs.Load(); n != 0 || v != 0 {
		t.Fatalf("%d I/O errors, %d verification errors (first: %v)", n, v, w.first())
	}
	t.Logf("%d verified I/Os, %d failovers, 0 errors", w.ops.Load(), h.Failovers())
	dmesg := dmesgSince(t, vm, mark)
	t.Logf("guest kernel log since the test began (nvmet):\n%s", grepLines(dmesg, "nvmet"))
}

// kernelWorkload is the interop copy of the initiator tests' verified
// workload: goroutines each own blocks, write (block, sequence) into every
// 16 bytes, read back and compare, and log every completion's path.
type kernelWorkload struct {
	h                  *initiator.Head
	blocks, workers    int
	ioErrs, verifyErrs atomic.Int64
	ops                atomic.Int64
	firstErr           atomic.Pointer[error]
	mu                 sync.Mutex
	log                []kernelCompletion
	stop               chan struct{}
	stopOnce           sync.Once
	wg                 sync.WaitGroup
}

type kernelCompletion struct {
	at   time.Time
	path *initiator.Path
}

func startKernelWorkload(h *initiator.Head, workers, blocks int) *kernelWorkload {
	w := &kernelWorkload{h: h, blocks: blocks, workers: workers, stop: make(chan struct{})}
	for i := range workers {
		w.wg.Add(1)
		go w.run(i)
	}
	return w
}

func (w *kernelWorkload) first() error {
	if p := w.firstErr.Load(); p != nil {
		return *p
	}
	return nil
}

func (w *kernelWorkload) run(id int) {
	defer w.wg.Done()
	wbuf, rbuf := make([]byte, 4096), make([]byte, 4096)
	ch := make(chan struct{}, 1)
	r := &initiator.Request{Done: func(*initiator.Request) { ch <- struct{}{} }}
	do := func(op initiator.Op, buf []byte, off int64) error {
		r.Op, r.Data, r.Offset = op, buf, off
		if err := w.h.Submit(context.Background(), r); err != nil {
			return err
		}
		<-ch
		if r.Err == nil {
			w.mu.Lock()
			w.log = append(w.log, kernelCompletion{time.Now(), r.Path()})
			w.mu.Unlock()
			w.ops.Add(1)
		}
		return r.Err
	}
	fail := func(c *atomic.Int64, err error) {
		c.Add(1)
		w.firstErr.CompareAndSwap(nil, &err)
	}
	for seq := uint64(1); ; seq++ {
		select {
		case <-w.stop:
			return
		default:
		}
		blk := uint64(id + w.workers*int(seq%uint64(w.blocks/w.workers)))
		off := int64(blk) * 4096
		for i := 0; i < len(wbuf); i += 16 {
			binary.LittleEndian.PutUint64(wbuf[i:], blk)
			binary.LittleEndian.PutUint64(wbuf[i+8:], seq)
		}
		if err := do(initiator.OpWrite, wbuf, off); err != nil {
			fail(&w.ioErrs, fmt.Errorf("write block %d: %w", blk, err))
			continue
		}
		if err := do(initiator.OpRead, rbuf, off); err != nil {
			fail(&w.ioErrs, fmt.Errorf("read block %d: %w", blk, err))
			continue
		}
		for i := 0; i < len(rbuf); i += 16 {
			if b, s := binary.LittleEndian.Uint64(rbuf[i:]), binary.LittleEndian.Uint64(rbuf[i+8:]); b != blk || s != seq {
				fail(&w.verifyErrs, fmt.Errorf("block %d: read (block %d, seq %d), wrote seq %d", blk, b, s, seq))
				break
			}
		}
	}
}

func (w *kernelWorkload) finish() {
	w.stopOnce.Do(func() { close(w.stop) })
	w.wg.Wait()
}

// waitOn waits until n completions came through p after since.
func (w *kernelWorkload) waitOn(t *testing.T, p *initiator.Path, since time.Time, n int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		w.mu.Lock()
		k := 0
		for _, c := range w.log {
			if c.path == p && !c.at.Before(since) {
				k++
			}
		}
		w.mu.Unlock()
		if k >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %d completions on %s (errors: %d I/O, %d verify; first %v)", n, p.Address(), w.ioErrs.Load(), w.verifyErrs.Load(), w.first())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// report prints the failover time: the last completion on from before the
// first completion on another path after since, to that one.
func (w *kernelWorkload) report(t *testing.T, what string, from *initiator.Path, since time.Time) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := len(w.log) - 1; i >= 0; i-- {
		if w.log[i].at.Before(since) {
			if w.log[i].path != from {
				t.Errorf("failover on %s: the I/O was not on %s when the event came", what, from.Address())
				return
			}
			break
		}
	}
	for i, c := range w.log {
		if c.path == from || c.at.Before(since) {
			continue
		}
		for j := i - 1; j >= 0; j-- {
			if w.log[j].path == from {
				t.Logf("our host failover on %s: %v (last completion on %s to the first on the other path)",
					what, c.at.Sub(w.log[j].at).Round(time.Microsecond), from.Address())
				return
			}
		}
		return
	}
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
