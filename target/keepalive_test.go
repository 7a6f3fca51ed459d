package target

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
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

		// A disabled timer (KATO 0) never expires; Set Features can start it.
		mu.Lock()
		at = time.Time{}
		mu.Unlock()
		start = time.Now()
		k = newKeepAlive(0, setAt)
		k.reset()
		k.touch()
		time.Sleep(time.Hour)
		if expired() || k.enabled() {
			t.Fatal("a disabled timer expired")
		}
		k.set(time.Second)
		time.Sleep(3 * time.Second)
		if !expired() || expiredAt().Sub(start) != time.Hour+time.Second {
			t.Fatalf("enabled timer expired at %v", expiredAt().Sub(start))
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
		{0, 120 * time.Second},      // nvmet's discovery default
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
		if got := keepAliveTimeout(tc.kato, tun, true); got != tc.want {
			t.Errorf("KATO %d ms: %v, want %v", tc.kato, got, tc.want)
		}
		if got := keepAliveTimeout(tc.kato, tun, false); got != tc.want {
			t.Errorf("KATO %d ms on an I/O controller: %v, want %v", tc.kato, got, tc.want)
		}
	}
}

// TestKATOZeroGetsTheDefault: KATO 0 does not disable keep alive (nvmet
// lets it on I/O controllers, which gives any host an immortal controller):
// the controller gets tuning.keep_alive, Keep Alive works, Set Features
// with 0 gets the default too, and a host that goes silent loses its
// controller once the (shorter) timeout it set passes.
func TestKATOZeroGetsTheDefault(t *testing.T) {
	s := startServer(t, testConfig(t, memNS(1, "1MiB")))
	h, err := connectHost(t, portAddr(s, 1), testSubNQN, testHostNQN, 0)
	if err != nil {
		t.Fatal(err)
	}
	h.setup(0)
	if v, err := h.getFeature(nvmeof.FeatKeepAliveTimer); err != nil || v != 120000 {
		t.Fatalf("KATO %d %v, want 120000", v, err)
	}
	ka := &rdma.HostRequest{}
	ka.SQE.BuildKeepAlive()
	if err := h.adminDo(ka); err != nil {
		t.Fatal(err)
	}
	if v, err := h.setFeature(nvmeof.FeatKeepAliveTimer, 0); err != nil || v != 120000 {
		t.Fatalf("set KATO 0: %d %v, want the default 120000", v, err)
	}
	// The Set Features is the host's last command (a command after it
	// could come too late on a loaded machine: the timeout is short).
	if v, err := h.setFeature(nvmeof.FeatKeepAliveTimer, 1500); err != nil || v != 2000 {
		t.Fatalf("set KATO: %d %v", v, err)
	}
	// Expiry is detected between one and two timeouts after the last
	// command; the wait only guards against a hang.
	select {
	case <-h.admin.Done():
	case <-time.After(hang):
		t.Fatalf("controller alive %v after KATO 2 s was set and the host went silent", hang)
	}
}
