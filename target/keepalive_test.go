package target

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestKeepAliveTimer checks the timer logic in a synctest bubble: expiry
// after a silent timeout, a Keep Alive restarting it, traffic postponing it
// by up to one more timeout, Set Features changing it, stop.
func TestKeepAliveTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var at time.Time
		setAt := func() { mu.Lock(); at = time.Now(); mu.Unlock() }
		expiredAt := func() time.Time { mu.Lock(); defer mu.Unlock(); return at }
		start := time.Now()
		k := newKeepAlive(5*time.Second, setAt)
		expired := func() bool { synctest.Wait(); return !expiredAt().IsZero() }

		time.Sleep(4 * time.Second)
		k.reset() // Keep Alive at 4 s: deadline 9 s
		time.Sleep(4 * time.Second)
		if expired() {
			t.Fatal("expired 4 s after a Keep Alive")
		}
		k.touch() // a command at 8 s
		time.Sleep(5 * time.Second)
		// The timer ran at 9 s, saw the command and waits a whole timeout
		// more: until 14 s.
		if expired() {
			t.Fatalf("expired at %v despite traffic at 8 s", expiredAt().Sub(start))
		}
		time.Sleep(2 * time.Second)
		if !expired() || expiredAt().Sub(start) != 14*time.Second {
			t.Fatalf("expired at %v, want 14s", expiredAt().Sub(start))
		}
		// Nothing happens after the expiry.
		k.reset()
		k.touch()
		time.Sleep(time.Minute)

		// Set Features Keep Alive Timer shortens a running timer.
		mu.Lock()
		at = time.Time{}
		mu.Unlock()
		start = time.Now()
		k = newKeepAlive(time.Hour, setAt)
		time.Sleep(time.Second)
		k.set(2 * time.Second)
		if k.get() != 2*time.Second {
			t.Fatal(k.get())
		}
		time.Sleep(10 * time.Second)
		if !expired() || expiredAt().Sub(start) != 3*time.Second {
			t.Fatalf("expired at %v, want 3s", expiredAt().Sub(start))
		}

		// stop: never expires.
		mu.Lock()
		at = time.Time{}
		mu.Unlock()
		k = newKeepAlive(time.Second, setAt)
		k.stop()
		time.Sleep(time.Hour)
		if expired() {
			t.Fatal("expired after stop")
		}
	})
}

func TestKeepAliveTimeout(t *testing.T) {
	tun := &TuningConfig{KeepAlive: 120 * time.Second, KeepAliveMin: time.Second, KeepAliveMax: time.Hour}
	for _, tc := range []struct {
		kato uint32
		want time.Duration
	}{
		{0, 120 * time.Second},      // nvmet's discovery default, for everybody
		{1, time.Second},            // rounded up to seconds
		{1500, 2 * time.Second},     // rounded up
		{5000, 5 * time.Second},     // the Linux default
		{15000, 15 * time.Second},   // older Linux hosts
		{1 << 31, time.Hour},        // clamped
		{0xFFFFFFFF, time.Hour},     // no overflow
		{999, time.Second},          // rounded up to the minimum
		{3600000, time.Hour},        // the maximum itself
		{3600001, time.Hour},        // rounded up, then clamped
		{120000, 120 * time.Second}, // explicit
	} {
		if got := keepAliveTimeout(tc.kato, tun); got != tc.want {
			t.Errorf("KATO %d ms: %v, want %v", tc.kato, got, tc.want)
		}
	}
}
