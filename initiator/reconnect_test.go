package initiator

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/target"
)

// TestReconnectSchedule checks the reconnect timing against Linux's
// (reconnect_delay 10 s, ctrl_loss_tmo 600 s: 60 attempts, 10 s apart) with
// a fake clock.
func TestReconnectSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{ReconnectDelay: 10 * time.Second, CtrlLossTimeout: 600 * time.Second}
		start := time.Now()
		var at []time.Duration
		res := reconnectLoop(cfg.ReconnectDelay, cfg.maxReconnects(), nil, func(n int) (bool, bool) {
			at = append(at, time.Since(start))
			return false, false
		})
		if res != givenUp || len(at) != 60 || at[0] != 10*time.Second || at[59] != 600*time.Second {
			t.Fatalf("result %d after %d attempts (first %v, last %v)", res, len(at), at[0], at[len(at)-1])
		}
		// ctrl_loss_tmo 25 s with a 10 s delay: DIV_ROUND_UP = 3 attempts.
		cfg = Config{ReconnectDelay: 10 * time.Second, CtrlLossTimeout: 25 * time.Second}
		if m := cfg.maxReconnects(); m != 3 {
			t.Fatalf("max reconnects %d", m)
		}
		// ctrl_loss_tmo 0 (NoReconnect): no attempt at all.
		cfg = Config{ReconnectDelay: time.Second, NoReconnect: true}
		n := 0
		if res := reconnectLoop(time.Second, cfg.maxReconnects(), nil, func(int) (bool, bool) { n++; return false, false }); res != givenUp || n != 0 {
			t.Fatalf("no-reconnect: result %d, %d attempts", res, n)
		}
		// Success on the third attempt, 30 s in; a DNR failure stops at once.
		start = time.Now()
		res = reconnectLoop(10*time.Second, -1, nil, func(n int) (bool, bool) { return n == 3, false })
		if res != reconnected || time.Since(start) != 30*time.Second {
			t.Fatalf("result %d after %v", res, time.Since(start))
		}
		if res := reconnectLoop(time.Second, -1, nil, func(int) (bool, bool) { return false, true }); res != givenUp {
			t.Fatalf("DNR: %d", res)
		}
		// Close during the wait.
		stop := make(chan struct{})
		go func() { time.Sleep(5 * time.Second); close(stop) }()
		if res := reconnectLoop(10*time.Second, -1, stop, func(int) (bool, bool) { t.Error("attempted"); return false, false }); res != stopped {
			t.Fatalf("stop: %d", res)
		}
	})
}

// TestReconnectNoAcknowledgedWriteLost writes from many goroutines while the
// target drops every connection a few times; every write that returned
// success must be on the target, and every write must eventually succeed.
func TestReconnectNoAcknowledgedWriteLost(t *testing.T) {
	tg := startTarget(t)
	cfg := testConfig(t, tg.Addr())
	cfg.ReconnectDelay = 50 * time.Millisecond
	events := eventSink(&cfg, 64)
	c := connect(t, cfg)
	ns := c.Namespace(1)
	const workers, blocks = 16, 64
	ctx, stop := context.WithCancel(context.Background())
	var acked sync.Map // offset -> data
	var wg sync.WaitGroup
	var writes atomic.Int64
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				off := int64(w*blocks+i%blocks) * 4096
				buf := make([]byte, 4096<<(i%3))
				if off+int64(len(buf)) > int64(w+1)*blocks*4096 {
					buf = buf[:4096]
				}
				rand.Read(buf)
				if _, err := ns.WriteAt(buf, off); err != nil {
					errs <- err
					return
				}
				writes.Add(1)
				for j := 0; j < len(buf)/4096; j++ {
					acked.Store(off+int64(j)*4096, buf[j*4096:(j+1)*4096])
				}
			}
		}()
	}
	for drop := 0; drop < 3; drop++ {
		time.Sleep(100 * time.Millisecond)
		tg.DropConnections()
		waitEvent(t, events, EventReconnected)
	}
	time.Sleep(100 * time.Millisecond)
	stop()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if c.Reconnects() < 3 {
		t.Fatalf("%d reconnects", c.Reconnects())
	}
	n := 0
	acked.Range(func(k, v any) bool {
		got := make([]byte, 4096)
		if err := tg.ReadNamespace(1, got, k.(int64)); err != nil || !bytes.Equal(got, v.([]byte)) {
			t.Errorf("block at %d: acknowledged data not on the target (%v)", k, err)
		}
		n++
		return true
	})
	t.Logf("%d writes, %d blocks verified, %d reconnects", writes.Load(), n, c.Reconnects())
}

// TestControllerLoss: the target goes away for good; after ctrl_loss_tmo the
// controller is given up and waiting I/O fails with ErrControllerLost.
func TestControllerLoss(t *testing.T) {
	tg := startTarget(t)
	events := make(chan Event, 64)
	cfg := testConfig(t, tg.Addr())
	cfg.ReconnectDelay = 50 * time.Millisecond
	cfg.CtrlLossTimeout = 200 * time.Millisecond
	cfg.OnEvent = func(e Event) { events <- e }
	c := connect(t, cfg)
	ns := c.Namespace(1)
	tg.Close()
	e := waitEvent(t, events, EventLost)
	if !errors.Is(e.Err, ErrControllerLost) {
		t.Fatalf("lost event: %v", e.Err)
	}
	if _, err := ns.ReadAt(make([]byte, 512), 0); !errors.Is(err, ErrControllerLost) {
		t.Fatalf("read after loss: %v", err)
	}
	<-c.Done()
	if !errors.Is(c.Err(), ErrControllerLost) {
		t.Fatalf("Err %v", c.Err())
	}
}

// TestIOWaitsDuringReconnect: I/O submitted while the target is unreachable
// waits and completes once it is back.
func TestIOWaitsDuringReconnect(t *testing.T) {
	tg := startTarget(t)
	cfg := testConfig(t, tg.Addr())
	cfg.ReconnectDelay = 100 * time.Millisecond
	// The connect timeout ends the reconnect attempts the paused target
	// holds; it also bounds the first connect, which a loaded machine
	// may need seconds for (500 ms failed there).
	cfg.ConnectTimeout = 5 * time.Second
	events := eventSink(&cfg, 64)
	c := connect(t, cfg)
	ns := c.Namespace(1)
	tg.Pause() // silent: reconnects will fail until Resume
	tg.DropConnections()
	waitEvent(t, events, EventReconnectFailed)
	done := make(chan error, 1)
	buf := bytes.Repeat([]byte{0xA5}, 8192)
	go func() {
		_, err := ns.WriteAt(buf, 1<<20)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("write completed while the target was away: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	tg.Resume()
	tg.DropConnections() // a held Connect must not keep the attempt hanging
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(buf))
	if err := tg.ReadNamespace(1, got, 1<<20); err != nil || !bytes.Equal(got, buf) {
		t.Fatalf("write not on the target (%v)", err)
	}
}

// TestKeepAliveTimeout: a target that stops answering is detected by the
// Keep Alive timeout, and the controller reconnects when it answers again.
func TestKeepAliveTimeout(t *testing.T) {
	// The target's own keep-alive timer is out of the way (it clamps the
	// host's KATO to an hour): only the host notices the silence.
	tg := startTarget(t, withConfig(func(c *target.Config) {
		c.Tuning.KeepAlive, c.Tuning.KeepAliveMin, c.Tuning.KeepAliveMax = time.Hour, time.Hour, time.Hour
	}))
	cfg := testConfig(t, tg.Addr())
	cfg.KeepAliveTimeout = 400 * time.Millisecond
	cfg.ReconnectDelay = 50 * time.Millisecond
	cfg.ConnectTimeout = 2 * time.Second
	// Only the Keep Alive's own timeout (KATO) may end the association:
	// the admin command timeout, which would also fail the Keep Alive,
	// is out of reach.
	cfg.AdminTimeout = time.Hour
	events := eventSink(&cfg, 64)
	c := connect(t, cfg)
	// Keep alives flow while nothing else does (two at least, whatever the
	// machine's load: wait for them rather than for a time).
	before := tg.AdminCommands(nvmeof.AdminKeepAlive)
	for deadline := time.Now().Add(20 * time.Second); tg.AdminCommands(nvmeof.AdminKeepAlive)-before < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d keep alives in 20 s with KATO 400 ms", tg.AdminCommands(nvmeof.AdminKeepAlive)-before)
		}
	}
	tg.Pause()
	e := waitEvent(t, events, EventReconnecting)
	if !errors.Is(e.Err, ErrKeepAlive) || !strings.Contains(e.Err.Error(), "no completion within KATO") {
		t.Fatalf("recovery cause %v, want a Keep Alive without completion within KATO", e.Err)
	}
	tg.Resume()
	tg.DropConnections() // a Connect held before Resume must not keep the attempt hanging
	waitEvent(t, events, EventReconnected)
	if _, err := c.Namespace(1).ReadAt(make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
}

// TestIOTimeout: a command the target never completes starts error
// recovery after IOTimeout and is sent again on the new association.
func TestIOTimeout(t *testing.T) {
	var held atomic.Bool
	tg := startTarget(t, withCommandHook(func(q target.HookQueue, sqe *nvmeof.SQE) target.Verdict {
		if q.QID() > 0 && sqe.Opcode() == nvmeof.NVMRead && held.CompareAndSwap(false, true) {
			return target.Verdict{Action: target.HookHold}
		}
		return target.Verdict{}
	}))
	cfg := testConfig(t, tg.Addr())
	cfg.IOTimeout = 300 * time.Millisecond
	cfg.ReconnectDelay = 50 * time.Millisecond
	c := connect(t, cfg)
	start := time.Now()
	if _, err := c.Namespace(1).ReadAt(make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 300*time.Millisecond || c.Reconnects() != 1 {
		t.Fatalf("read took %v with %d reconnects", d, c.Reconnects())
	}
}

// TestStatusRetry: a status without DNR is retried (nvme_max_retries), one
// with DNR fails at once.
func TestStatusRetry(t *testing.T) {
	var fails atomic.Int32
	var dnr atomic.Bool
	tg := startTarget(t, withCommandHook(func(q target.HookQueue, sqe *nvmeof.SQE) target.Verdict {
		if q.QID() > 0 && sqe.Opcode() == nvmeof.NVMWrite && fails.Add(-1) >= 0 {
			if dnr.Load() {
				return target.Verdict{Action: target.HookFail, Status: nvmeof.StatusWriteFault | nvmeof.StatusDNR}
			}
			return target.Verdict{Action: target.HookFail, Status: nvmeof.StatusNamespaceNotReady}
		}
		return target.Verdict{}
	}))
	c := connect(t, testConfig(t, tg.Addr()))
	ns := c.Namespace(1)
	fails.Store(3)
	if _, err := ns.WriteAt(make([]byte, 4096), 0); err != nil {
		t.Fatalf("3 retryable failures: %v", err)
	}
	fails.Store(MaxRetries + 1)
	var st nvmeof.Status
	if _, err := ns.WriteAt(make([]byte, 4096), 0); !errors.As(err, &st) || st.Code() != nvmeof.StatusNamespaceNotReady {
		t.Fatalf("%d retryable failures: %v", MaxRetries+1, err)
	}
	fails.Store(1)
	dnr.Store(true)
	_, err := ns.WriteAt(make([]byte, 4096), 0)
	var ioe *IOError
	if !errors.As(err, &ioe) || !errors.As(err, &st) || st.Code() != nvmeof.StatusWriteFault || fails.Load() != 0 {
		t.Fatalf("DNR failure: %v (fails left %d)", err, fails.Load())
	}
	t.Log(err)
}

// TestCloseWhileReconnecting: Close during reconnect attempts fails the
// waiting I/O with ErrControllerClosed and returns promptly.
func TestCloseWhileReconnecting(t *testing.T) {
	tg := startTarget(t)
	cfg := testConfig(t, tg.Addr())
	cfg.ReconnectDelay = 50 * time.Millisecond
	events := eventSink(&cfg, 64)
	c := connect(t, cfg)
	ns := c.Namespace(1)
	tg.Close()
	waitEvent(t, events, EventReconnectFailed)
	done := make(chan error, 1)
	go func() {
		_, err := ns.WriteAt(make([]byte, 4096), 0)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Promptly: not after a reconnect attempt's connect timeout (30 s by
	// default); the bound is loose so that a loaded machine passes.
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("close took %v", d)
	}
	if err := <-done; !errors.Is(err, ErrControllerClosed) {
		t.Fatalf("waiting write: %v", err)
	}
}

// TestReconnectStormCompletesEachRequestOnce drops every connection again
// and again while many requests are in flight, with a short reconnect delay:
// commands are failed by their queues' end, kept, sent again on the next
// association, sometimes while a Submit on the dying one is still under way.
// Every request must complete exactly once, and every write whose request
// succeeded must be on the target.
func TestReconnectStormCompletesEachRequestOnce(t *testing.T) {
	tg := startTarget(t)
	cfg := testConfig(t, tg.Addr())
	cfg.ReconnectDelay = 10 * time.Millisecond
	cfg.QueueSize = 16 // the smallest: a full queue keeps commands pending
	events := eventSink(&cfg, 256)
	c := connect(t, cfg)
	ns := c.Namespace(1)
	const workers, drops = 24, 8
	type req struct {
		Request
		dones atomic.Int32
		ch    chan struct{}
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &req{ch: make(chan struct{}, 2)}
			r.Done = func(*Request) {
				r.dones.Add(1)
				r.ch <- struct{}{}
			}
			buf := make([]byte, 8192)
			for i := 0; ctx.Err() == nil; i++ {
				off := int64(w*16+i%16) * 8192
				r.Op, r.Offset, r.Data = OpRead, off, buf
				if i%2 == 0 {
					r.Op = OpWrite
					buf[0], buf[1] = byte(w), byte(i)
				}
				r.dones.Store(0)
				if err := ns.Submit(context.Background(), &r.Request); err != nil {
					errs <- err
					return
				}
				select {
				case <-r.ch:
				case <-time.After(20 * time.Second):
					errs <- fmt.Errorf("worker %d: request %d did not complete", w, i)
					return
				}
				if r.Err != nil {
					errs <- fmt.Errorf("worker %d: request %d: %w", w, i, r.Err)
					return
				}
				if r.Op == OpWrite {
					got := make([]byte, 2)
					if err := tg.ReadNamespace(1, got, off); err != nil || got[0] != byte(w) || got[1] != byte(i) {
						errs <- fmt.Errorf("worker %d: acknowledged write %d not on the target (%v)", w, i, err)
						return
					}
				}
				if n := r.dones.Load(); n != 1 {
					errs <- fmt.Errorf("worker %d: request %d completed %d times", w, i, n)
					return
				}
			}
		}()
	}
	for d := 0; d < drops; d++ {
		tg.DropConnections()
		waitEvent(t, events, EventReconnected)
	}
	stop()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if c.Reconnects() < drops {
		t.Fatalf("%d reconnects, want %d", c.Reconnects(), drops)
	}
}

// TestCloseWhenTargetGoesAway: the target drops the connection of the flush
// that Close sends. Error recovery has stopped, so nothing would ever send
// the flush again: Close must fail it and return, not wait for it.
func TestCloseWhenTargetGoesAway(t *testing.T) {
	var armed atomic.Bool
	tg := startTarget(t, withCommandHook(func(q target.HookQueue, sqe *nvmeof.SQE) target.Verdict {
		if q.QID() > 0 && sqe.Opcode() == nvmeof.NVMFlush && armed.Load() {
			return target.Verdict{Action: target.HookDisconnect}
		}
		return target.Verdict{}
	}))
	cfg := testConfig(t, tg.Addr())
	cfg.ReconnectDelay = 10 * time.Millisecond
	c := connect(t, cfg)
	if _, err := c.Namespace(1).WriteAt(make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	done := make(chan error, 1)
	go func() { done <- c.Close(context.Background()) }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrControllerClosed) {
			t.Fatalf("Close: %v, want the flush failed with ErrControllerClosed", err)
		}
		t.Log(err)
	case <-time.After(20 * time.Second):
		t.Fatal("Close hangs on a flush whose connection is gone")
	}
	if c.State() != StateDead || tg.IOCommands(nvmeof.NVMFlush) == 0 {
		t.Fatalf("state %v, %d flushes", c.State(), tg.IOCommands(nvmeof.NVMFlush))
	}
}

// TestCloseRespectsContext: a target that holds a write never lets Close's
// drain finish; Close returns when its context ends, with the write failed.
func TestCloseRespectsContext(t *testing.T) {
	arrived := make(chan struct{}, 1)
	tg := startTarget(t, withCommandHook(func(q target.HookQueue, sqe *nvmeof.SQE) target.Verdict {
		if q.QID() > 0 && sqe.Opcode() == nvmeof.NVMWrite {
			select {
			case arrived <- struct{}{}:
			default: // hooks must not block
			}
			return target.Verdict{Action: target.HookHold}
		}
		return target.Verdict{}
	}))
	c := connect(t, testConfig(t, tg.Addr()))
	wdone := make(chan error, 1)
	go func() {
		_, err := c.Namespace(1).WriteAt(make([]byte, 4096), 0)
		wdone <- err
	}()
	<-arrived
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Close(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Close: %v, want the context's error", err)
		}
		t.Log(err)
	case <-time.After(20 * time.Second):
		t.Fatal("Close ignores its context")
	}
	select {
	case err := <-wdone:
		if !errors.Is(err, ErrControllerClosed) {
			t.Fatalf("write held by the target: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the held write never completed")
	}
}
