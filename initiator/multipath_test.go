package initiator

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/internal/testing/verify/vblock"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/target"
)

// mpHang is the hang guard of the multipath tests: how long a wait for
// something that must happen may take on a loaded machine.
const mpHang = 2 * time.Minute

// twoPortTarget is a target serving the test subsystem on two ports: two
// paths to one namespace in one process.
func twoPortTarget(t *testing.T) (*testTarget, [2]string) {
	tg := startTarget(t, withConfig(func(c *target.Config) {
		c.Ports = append(c.Ports, target.PortConfig{ID: 2, Address: "127.0.0.1", ServiceID: freePort(t), Subsystems: []string{testSubNQN}})
	}))
	return tg, [2]string{tg.Addr(), portAddress(tg.cfg, 2)}
}

func portAddress(cfg *target.Config, id uint16) string {
	for _, p := range cfg.Ports {
		if p.ID == id {
			return p.Address + ":" + strconv.Itoa(p.ServiceID)
		}
	}
	return ""
}

// setANA sets group 1's state on port id.
func setANA(tg *testTarget, id uint16, state string) {
	tg.Reload(func(c *target.Config) {
		for i := range c.Ports {
			if c.Ports[i].ID == id {
				c.Ports[i].ANAGroups = []target.ANAGroupConfig{{ID: 1, State: state}}
			}
		}
	})
}

// newMultipath connects a subsystem through every address.
func newMultipath(t *testing.T, mc MultipathConfig, addrs ...string) *Subsystem {
	t.Helper()
	s := NewSubsystem(testSubNQN, mc)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), mpHang)
		defer cancel()
		_ = s.Close(ctx)
	})
	for _, a := range addrs {
		cfg := testConfig(t, a)
		cfg.ReconnectDelay = 50 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), mpHang)
		_, err := s.AddPath(ctx, cfg)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// mpDevice is a Head as a vblock.PathDevice (what verify.Head is, which
// the initiator's own tests cannot import: verify imports the initiator):
// each I/O one Request, its path the address of the controller whose
// completion ended it.
type mpDevice struct{ *Head }

func (d mpDevice) io(ctx context.Context, op Op, p []byte, off int64) (string, error) {
	done := make(chan struct{}, 1)
	r := &Request{Op: op, Data: p, Offset: off, Done: func(*Request) { done <- struct{}{} }}
	if err := d.Submit(ctx, r); err != nil {
		return "", err
	}
	<-done
	var path string
	if pa := r.Path(); pa != nil {
		path = pa.Address()
	}
	return path, r.Err
}

func (d mpDevice) ReadAtPath(ctx context.Context, p []byte, off int64) (string, error) {
	return d.io(ctx, OpRead, p, off)
}

func (d mpDevice) WriteAtPath(ctx context.Context, p []byte, off int64) (string, error) {
	return d.io(ctx, OpWrite, p, off)
}

// startWorkload starts the verified workload (vblock: versioned 4 KiB
// blocks, each write read back) on blocks of the head from workers
// goroutines.
func startWorkload(t *testing.T, h *Head, workers int, blocks int64) *vblock.Workload {
	t.Helper()
	w, err := vblock.Start(mpDevice{h}, vblock.Config{BlockSize: 4096, Blocks: blocks, Workers: workers, ReadBack: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

// waitOn waits until n I/Os of w completed through path p after since.
func waitOn(t *testing.T, w *vblock.Workload, p *Path, since time.Time, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), mpHang)
	defer cancel()
	if err := w.WaitCompletions(ctx, p.Address(), since, n); err != nil {
		t.Fatal(err)
	}
}

// sweepHead stops w and reads the whole namespace back through h: every
// block must hold its last acknowledged write or a later one, and the
// workload must have had no I/O or read-back error.
func sweepHead(t *testing.T, w *vblock.Workload, h *Head) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), mpHang)
	defer cancel()
	r := w.Sweep(ctx, mpDevice{h})
	if err := r.Err(); err != nil {
		t.Fatalf("sweep of the whole namespace: %v\n%s", err, r)
	}
	t.Logf("sweep of the whole namespace: %s; %d failovers", r, h.Failovers())
}

// reportFailover prints the failover time of the I/O from path from after
// an event at since: from the last completion through from to the first
// through another path.
func reportFailover(t *testing.T, w *vblock.Workload, what string, from *Path, since time.Time) {
	t.Helper()
	d, err := w.Stall(from.Address(), since)
	if err != nil {
		t.Errorf("failover %s: %v", what, err)
		return
	}
	t.Logf("failover %s: %v (last completion on %s to the first on the other path)", what, d, from.Address())
}

// waitLive waits until path p's controller is live again.
func waitLive(t *testing.T, p *Path) {
	t.Helper()
	deadline := time.Now().Add(mpHang)
	for p.Controller().State() != StateLive || p.ANAState(1) != nvmeof.ANAOptimized {
		if time.Now().After(deadline) {
			t.Fatalf("path %s not live and optimized within %v: %v %v", p.Address(), mpHang, p.Controller().State(), p.ANAState(1))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMultipathFailover: one namespace through two ports of one target is
// one Head with two paths; a verified write/read workload runs while the
// path it uses goes inaccessible (ANA, by reload), comes back, the other
// port goes away (its connections with it) and comes back, and the policy
// changes to round-robin and queue-depth: no I/O error, no read-back
// error, each failover lands on the other path, and the sweep of the whole
// namespace at the end finds every block at its last acknowledged write. The failover times are
// printed (-v), not asserted.
func TestMultipathFailover(t *testing.T) {
	tg, addrs := twoPortTarget(t)
	s := newMultipath(t, MultipathConfig{}, addrs[0], addrs[1])
	if n := len(s.Paths()); n != 2 {
		t.Fatalf("%d paths", n)
	}
	h := s.Namespace(1)
	if h == nil || len(s.Namespaces()) != 1 {
		t.Fatalf("namespaces %v", s.Namespaces())
	}
	pa, pb := s.Paths()[0], s.Paths()[1]
	if pa.Controller().CNTLID() == pb.Controller().CNTLID() {
		t.Fatalf("both paths have CNTLID %d", pa.Controller().CNTLID())
	}
	for _, p := range []*Path{pa, pb} {
		if gs := p.ANAGroups(); len(gs) != 1 || gs[0].ID != 1 || gs[0].State != nvmeof.ANAOptimized {
			t.Fatalf("path %s ANA groups %+v", p.Address(), gs)
		}
	}
	w := startWorkload(t, h, 8, 256)
	// numa: the first optimized path.
	waitOn(t, w, pa, time.Time{}, 50)

	// (a) path A's group goes inaccessible: I/O moves to B.
	at := time.Now()
	setANA(tg, 1, "inaccessible")
	waitOn(t, w, pb, at, 50)
	reportFailover(t, w, "on ANA inaccessible", pa, at)
	if st := pa.ANAState(1); st != nvmeof.ANAInaccessible {
		t.Fatalf("path A state %v after the ANA change", st)
	}
	// A optimized again: the I/O goes back to it, the first optimized
	// path (as Linux's nvme_mpath_set_live recomputes the current path).
	at = time.Now()
	setANA(tg, 1, "optimized")
	waitLive(t, pa)
	waitOn(t, w, pa, at, 50)

	// (b) port 1 goes away with its connections: I/O moves to B.
	at = time.Now()
	port1 := tg.cfg.Ports[0]
	tg.Reload(func(c *target.Config) { c.Ports = c.Ports[1:] })
	waitOn(t, w, pb, at, 50)
	reportFailover(t, w, "on lost connections", pa, at)
	// (c) it comes back and the path reconnects.
	tg.Reload(func(c *target.Config) { c.Ports = append(c.Ports, port1) })
	waitLive(t, pa)

	// Round-robin and queue-depth use both paths.
	for _, pol := range []IOPolicy{IOPolicyRoundRobin, IOPolicyQueueDepth} {
		s.SetIOPolicy(pol)
		at = time.Now()
		waitOn(t, w, pa, at, 50)
		waitOn(t, w, pb, at, 50)
	}
	sweepHead(t, w, h)
	if h.Failovers() == 0 {
		t.Fatal("no failover counted")
	}
}

// TestMultipathQueueWithoutPath: I/O submitted while every path is
// inaccessible waits on the head (no error) and completes once a path
// becomes optimized; with fast_io_fail_tmo, I/O fails with ErrNoPath once
// every controller has been reconnecting that long, and a controller given
// up (ctrl_loss_tmo) fails I/O at once.
func TestMultipathQueueWithoutPath(t *testing.T) {
	tg, addrs := twoPortTarget(t)
	s := newMultipath(t, MultipathConfig{IOPolicy: IOPolicyRoundRobin}, addrs[0], addrs[1])
	h := s.Namespace(1)
	setANA(tg, 1, "inaccessible")
	setANA(tg, 2, "change")
	waitState := func(p *Path, st nvmeof.ANAState) {
		deadline := time.Now().Add(mpHang)
		for p.ANAState(1) != st {
			if time.Now().After(deadline) {
				t.Fatalf("path %s: %v, want %v", p.Address(), p.ANAState(1), st)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitState(s.Paths()[0], nvmeof.ANAInaccessible)
	waitState(s.Paths()[1], nvmeof.ANAChange)
	buf := make([]byte, 4096)
	for i := range buf {
		buf[i] = byte(i)
	}
	done := make(chan error, 1)
	r := &Request{Op: OpWrite, Data: buf, Offset: 8192, Done: func(r *Request) { done <- r.Err }}
	if err := h.Submit(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	// It waits on the head's requeue list.
	deadline := time.Now().Add(mpHang)
	for {
		h.rqMu.Lock()
		n := len(h.requeue)
		h.rqMu.Unlock()
		if n == 1 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("completed without a usable path: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("not requeued")
		}
		time.Sleep(5 * time.Millisecond)
	}
	setANA(tg, 2, "non-optimized")
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(mpHang):
		t.Fatal("requeued write did not complete")
	}
	if got := r.Path(); got != s.Paths()[1] {
		t.Fatalf("completed on %v, want the non-optimized path", got.Address())
	}
	got := make([]byte, 4096)
	if err := tg.ReadNamespace(1, got, 8192); err != nil || string(got) != string(buf) {
		t.Fatalf("the write did not reach the backend (%v)", err)
	}

	// fast_io_fail_tmo: both ports gone, I/O fails once it passed.
	s2 := newMultipath(t, MultipathConfig{FastIOFailTimeout: 100 * time.Millisecond}, addrs[0], addrs[1])
	h2 := s2.Namespace(1)
	tg.Reload(func(c *target.Config) { c.Ports = nil })
	_, err := h2.WriteAt(buf, 0)
	if !errors.Is(err, ErrNoPath) {
		t.Fatalf("write with every path past fast_io_fail_tmo: %v, want ErrNoPath", err)
	}
}

// TestNoAllocPerIOMultipath: a Head adds no allocation per I/O to the
// controller's data path (Submit with a reused Request, ReadAt).
func TestNoAllocPerIOMultipath(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode: allocation counts need a warmed-up run of hundreds of I/Os")
	}
	tg := startTarget(t, memoryOnly, withConfig(func(c *target.Config) {
		c.Ports = append(c.Ports, target.PortConfig{ID: 2, Address: "127.0.0.1", ServiceID: freePort(t), Subsystems: []string{testSubNQN}})
	}))
	for _, pol := range []IOPolicy{IOPolicyNUMA, IOPolicyRoundRobin, IOPolicyQueueDepth} {
		s := newMultipath(t, MultipathConfig{IOPolicy: pol}, tg.Addr(), portAddress(tg.cfg, 2))
		h := s.Namespace(1)
		buf := make([]byte, 4096)
		for range 200 {
			h.WriteAt(buf, 0)
			h.ReadAt(buf, 0)
		}
		if a := testing.AllocsPerRun(500, func() { h.ReadAt(buf, 4096) }); a > 0.05 {
			t.Errorf("%v: ReadAt: %.2f allocations per I/O", pol, a)
		}
		done := make(chan struct{}, 1)
		r := &Request{Op: OpWrite, Data: buf, Done: func(*Request) { done <- struct{}{} }}
		ctx := context.Background()
		if a := testing.AllocsPerRun(500, func() {
			h.Submit(ctx, r)
			<-done
		}); a > 0.05 {
			t.Errorf("%v: Submit: %.2f allocations per I/O", pol, a)
		}
	}
}

// TestMultipathRetry: what a multipath request does with each outcome of
// one command, the target answering the first write to a marked LBA
// (through whichever path it came) as the case says: a path-related status
// fails over (the write arrives once more, the request succeeds, and an
// ANA status makes the host read the ANA log again); the same status with
// DNR fails the request (nvme_decide_disposition completes DNR first); an
// ordinary retryable status is retried on the controller without a
// failover; a connection closed under the command fails over once the
// command is over on the dropped connection.
func TestMultipathRetry(t *testing.T) {
	const markLBA = 4096
	for _, tc := range []struct {
		name     string
		verdict  target.Verdict
		wantErr  nvmeof.Status // 0: success
		failover bool
		anaRead  bool
	}{
		{"ANA transition", target.Verdict{Action: target.HookFail, Status: nvmeof.StatusANATransition}, 0, true, true},
		{"ANA inaccessible", target.Verdict{Action: target.HookFail, Status: nvmeof.StatusANAInaccessible}, 0, true, true},
		{"host path error", target.Verdict{Action: target.HookFail, Status: nvmeof.Status(0x370)}, 0, true, false},
		{"path status with DNR", target.Verdict{Action: target.HookFail, Status: nvmeof.StatusANAInaccessible | nvmeof.StatusDNR}, nvmeof.StatusANAInaccessible, false, false},
		{"retryable generic status", target.Verdict{Action: target.HookFail, Status: nvmeof.StatusDataTransferError}, 0, false, false},
		{"connection closed", target.Verdict{Action: target.HookDisconnect}, 0, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var seen atomic.Int32
			tg := startTarget(t, withConfig(func(c *target.Config) {
				c.Ports = append(c.Ports, target.PortConfig{ID: 2, Address: "127.0.0.1", ServiceID: freePort(t), Subsystems: []string{testSubNQN}})
			}), withCommandHook(func(q target.HookQueue, sqe *nvmeof.SQE) target.Verdict {
				if q.QID() != 0 && !sqe.IsFabrics() && sqe.Opcode() == nvmeof.NVMWrite && sqe.RWCmd().SLBA() == markLBA/512 {
					if seen.Add(1) == 1 {
						return tc.verdict
					}
				}
				return target.Verdict{}
			}))
			s := newMultipath(t, MultipathConfig{}, tg.Addr(), portAddress(tg.cfg, 2))
			h := s.Namespace(1)
			logReads := tg.AdminCommands(nvmeof.AdminGetLogPage)
			buf := make([]byte, 4096)
			for i := range buf {
				buf[i] = byte(i * 7)
			}
			_, err := h.WriteAt(buf, markLBA)
			switch {
			case tc.wantErr != 0:
				var st nvmeof.Status
				if !errors.As(err, &st) || st.Code() != tc.wantErr {
					t.Fatalf("write: %v, want %v", err, tc.wantErr)
				}
			case err != nil:
				t.Fatalf("write: %v", err)
			default:
				got := make([]byte, 4096)
				if err := tg.ReadNamespace(1, got, markLBA); err != nil || string(got) != string(buf) {
					t.Fatalf("written data not on the target (%v)", err)
				}
			}
			// Once more at least (a connection torn down under the second
			// try, on the same controller before its recovery marked it
			// down, sends it a third time).
			if n := seen.Load(); (tc.wantErr == 0) != (n >= 2) {
				t.Fatalf("the write arrived %d times", n)
			}
			if got := h.Failovers() > 0; got != tc.failover {
				t.Fatalf("failovers %d, want failover %v", h.Failovers(), tc.failover)
			}
			if tc.anaRead {
				deadline := time.Now().Add(mpHang)
				for tg.AdminCommands(nvmeof.AdminGetLogPage) == logReads {
					if time.Now().After(deadline) {
						t.Fatal("the ANA log was not read again after an ANA error")
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
		})
	}
}

// TestMultipathNamespaceRemoved: a namespace removed from the subsystem
// (reload) is gone from the head's subsystem on every path, and its I/O
// fails with ErrNamespaceGone instead of waiting for a path that will
// never carry it.
func TestMultipathNamespaceRemoved(t *testing.T) {
	tg, addrs := twoPortTarget(t)
	s := newMultipath(t, MultipathConfig{}, addrs[0], addrs[1])
	h := s.Namespace(1)
	buf := make([]byte, 4096)
	if _, err := h.WriteAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	tg.Reload(func(c *target.Config) { c.Subsystems[0].Namespaces = nil })
	deadline := time.Now().Add(mpHang)
	for !h.Gone() {
		if time.Now().After(deadline) {
			t.Fatal("the head never saw its namespace removed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := h.WriteAt(buf, 0); !errors.Is(err, ErrNamespaceGone) {
		t.Fatalf("write after the removal: %v", err)
	}
	if n := len(s.Namespaces()); n != 0 {
		t.Fatalf("%d namespaces after the removal", n)
	}
}

// TestReconnectingPathUnusableUntilANALog: a path whose association
// dropped is not chosen again until its ANA log has been read after the
// reconnect: its states may have changed while it was down, with the
// notice lost (a gateway group's hand-over), and Linux reads the log
// before the controller goes live (nvme_mpath_init_identify). The events
// are injected, so the window between "live again" and "log read" is
// scripted, not raced.
func TestReconnectingPathUnusableUntilANALog(t *testing.T) {
	_, addrs := twoPortTarget(t)
	s := newMultipath(t, MultipathConfig{}, addrs[0], addrs[1])
	h := s.Namespace(1)
	pa, pb := s.Paths()[0], s.Paths()[1]
	addr := func(p *Path) string {
		if p == nil {
			return "none"
		}
		return p.Address()
	}
	if p, _ := h.findPath(); p != pa {
		t.Fatalf("before: the first optimized path %v is not chosen (got %v)", pa.Address(), addr(p))
	}
	pa.event(Event{Kind: EventReconnecting})
	// The controller is still live here (the event is injected): only the
	// unknown ANA state keeps the path out.
	if p, _ := h.findPath(); p != pb {
		t.Fatalf("path A is chosen while its ANA state is unknown (got %v)", addr(p))
	}
	pa.event(Event{Kind: EventReconnected})
	deadline := time.Now().Add(mpHang)
	for pa.anaPending.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("path A's ANA log was not read after the reconnect within %v", mpHang)
		}
		time.Sleep(time.Millisecond)
	}
	if p, _ := h.findPath(); p != pa {
		t.Fatalf("after the log was read: path A is not chosen again (got %v)", addr(p))
	}
}
