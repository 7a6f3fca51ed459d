package target

import (
	"sync/atomic"
	"time"

	"github.com/nvmetd/nvmetd/internal/perfcount"
)

// keepAlive is a controller's keep-alive timer (NVMe Base 2.0 §3.9; nvmet
// nvmet_keep_alive_timer). It expires when a whole timeout passes with
// neither a Keep Alive command (reset) nor any other command (touch): the
// target advertises traffic based keep alive (CTRATT TBKAS), so the host may
// skip Keep Alive while other commands flow, and every command counts.
// As nvmet, an expiry is detected between one and two timeouts after the
// last command.
type keepAlive struct {
	expired func()
	traffic atomic.Bool // a command arrived since the timer last ran

	mu       perfcount.Mutex
	timeout  time.Duration
	deadline time.Time
	timer    *time.Timer
	stopped  bool
}

// newKeepAlive starts a timer of timeout that calls expired once, on its
// own goroutine, when the host has gone silent. A timeout of 0 disables it
// (KATO 0 on an I/O controller, as nvmet).
func newKeepAlive(timeout time.Duration, expired func()) *keepAlive {
	k := &keepAlive{expired: expired, timeout: timeout, deadline: time.Now().Add(timeout)}
	if timeout == 0 {
		k.timer = time.AfterFunc(time.Hour, k.fire)
		k.timer.Stop()
	} else {
		k.timer = time.AfterFunc(timeout, k.fire)
	}
	return k
}

// enabled reports whether the timer runs (the timeout is not 0).
func (k *keepAlive) enabled() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.timeout != 0
}

// touch records that a command arrived. It is on the I/O path: one atomic
// store.
func (k *keepAlive) touch() {
	if !k.traffic.Load() {
		k.traffic.Store(true)
	}
}

// reset restarts the full timeout (Keep Alive command, controller enable).
func (k *keepAlive) reset() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return
	}
	if k.timeout == 0 {
		k.timer.Stop()
		return
	}
	k.traffic.Store(false) // a whole new period starts now
	k.deadline = time.Now().Add(k.timeout)
	k.timer.Reset(k.timeout)
}

// set changes the timeout and restarts it (Set Features Keep Alive Timer).
func (k *keepAlive) set(timeout time.Duration) {
	k.mu.Lock()
	k.timeout = timeout
	k.mu.Unlock()
	k.reset()
}

// get returns the timeout in effect.
func (k *keepAlive) get() time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.timeout
}

// stop cancels the timer for good.
func (k *keepAlive) stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stopped = true
	k.timer.Stop()
}

func (k *keepAlive) fire() {
	k.mu.Lock()
	if k.stopped || k.timeout == 0 {
		k.mu.Unlock()
		return
	}
	now := time.Now()
	if k.traffic.Swap(false) {
		k.deadline = now.Add(k.timeout)
	}
	if now.Before(k.deadline) {
		// Reset or traffic since the timer was armed: wait for the rest.
		k.timer.Reset(k.deadline.Sub(now))
		k.mu.Unlock()
		return
	}
	k.stopped = true
	k.mu.Unlock()
	k.expired()
}
