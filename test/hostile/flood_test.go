package hostile

import (
	"context"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/internal/testing/rawpeer"
)

// rssCap is where TestFlood stops a cycle to protect the machine (the
// suite runs beside other work): HOSTILE_RSS_CAP_MIB overrides it, to
// measure how far an unbounded daemon really grows.
func rssCap() int64 {
	if s := os.Getenv("HOSTILE_RSS_CAP_MIB"); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > 0 {
			return n << 20
		}
	}
	return 2 << 30
}

// floodResult is what one wave of silent peers did.
type floodResult struct {
	opened, replied, refused, closed, open int
	openedIn                               time.Duration // until the last MPA exchange ended
	worst                                  time.Duration // longest time to the daemon's close
	peakRSS                                int64         // largest RSS sampled during the wave
	capped                                 bool          // the RSS cap was hit: the wave was cut short
}

// silentWave opens n connections that complete the MPA exchange of an I/O
// queue of 128 entries (the attack) and then say nothing, at most
// conc at a time, and waits for the daemon to close each of them, up to
// guard(bound) after its TCP connect. It samples the daemon's RSS every
// 100 ms and cuts the wave short past rssCap.
func silentWave(t *testing.T, d *daemon, n, conc int, bound time.Duration) floodResult {
	t.Helper()
	var (
		res             floodResult
		mu              sync.Mutex
		wg              sync.WaitGroup
		peak            atomic.Int64
		capped          atomic.Bool
		replied, closed atomic.Int64
		refused         atomic.Int64
		lastOpen        atomic.Int64
	)
	waveStart := time.Now()
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			r, err := procStatus(d.pid, "VmRSS")
			if err == nil && r > peak.Load() {
				peak.Store(r)
			}
			if r > rssCap() && !capped.Swap(true) {
				t.Logf("RSS %s is past the cap %s: cutting the wave short", mib(r), mib(rssCap()))
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	var conns sync.Map
	sem := make(chan struct{}, conc)
	for i := range n {
		if capped.Load() {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		res.opened++
		go func() {
			defer wg.Done()
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), guard(bound))
			q, err := rawpeer.DialQueue(ctx, d.addr, rawpeer.QueueRequest(rawpeer.CMRequest(1, 128)), rawpeer.Options{})
			cancel()
			<-sem
			lastOpen.Store(int64(time.Since(waveStart)))
			if err != nil {
				refused.Add(1) // MPA reject, or closed during the exchange
				return
			}
			replied.Add(1)
			conns.Store(i, q)
			defer q.Abort()
			// Poll for the close in slices, so that a wave cut short by the
			// RSS cap ends soon.
			for time.Since(start) < guard(bound) && !capped.Load() {
				how, _ := q.WaitClosed(time.Now().Add(500 * time.Millisecond))
				if how != rawpeer.Open {
					took := time.Since(start)
					closed.Add(1)
					mu.Lock()
					res.worst = max(res.worst, took)
					mu.Unlock()
					return
				}
			}
			mu.Lock()
			res.open++
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	res.replied, res.closed, res.refused = int(replied.Load()), int(closed.Load()), int(refused.Load())
	res.openedIn = time.Duration(lastOpen.Load())
	res.peakRSS, res.capped = peak.Load(), capped.Load()
	return res
}

// TestFlood is the acceptance flood of issue 8: 2,000 peers that complete
// MPA (as I/O queues of 128 entries) and then stay silent, three times.
// Every connection must be closed by the daemon within connect_timeout;
// the daemon's peak RSS and its RSS after each wave are reported (goal:
// peak under 256 MiB, back within 64 MiB of the baseline within 30 s of
// the wave's end). Before the fix each such connection got its queue's
// buffers (about 5 MiB) at once and was never closed.
//
// A cycle whose peers were not closed, or that took the daemon past the
// test's safety cap on RSS (2 GiB, HOSTILE_RSS_CAP_MIB), ends the flood:
// later cycles would only repeat the failure, slowly.
//
// Bounds: transport.connect_timeout = 2s for each peer (guard 60 s); peak
// RSS (VmHWM) under 256 MiB; RSS back within 64 MiB of the baseline (the
// figure 30 s after the wave is reported; the test waits up to 2 minutes).
func TestFlood(t *testing.T) {
	t.Parallel()
	const (
		peers   = 2000
		conc    = 250
		bound   = 2 * time.Second
		peakMax = 256 << 20
		backMax = 64 << 20
	)
	d := startDaemon(t, config{Transport: []string{"connect_timeout: 2s"}})
	d.healthy(t, "before the flood")
	base := d.rss()
	baseFDs := d.fds()
	t.Logf("baseline: RSS %s, %d fds", mib(base), baseFDs)
	for cycle := 1; cycle <= 3; cycle++ {
		r := silentWave(t, d, peers, conc, bound)
		d.alive(t, "during the flood")
		hwm := d.hwm()
		t.Logf("flood cycle %d: %d peers connected in %v: %d completed MPA, %d refused during the exchange; %d closed by the daemon (the last %v after its TCP connect; bound %v), %d still open at the guard; peak RSS %s (VmHWM %s)",
			cycle, r.opened, r.openedIn.Round(time.Millisecond), r.replied, r.refused, r.closed, r.worst.Round(time.Millisecond), bound, r.open, mib(r.peakRSS), mib(hwm))
		if r.open > 0 {
			t.Errorf("cycle %d: %d of %d silent peers not closed within %v (connect_timeout %v)", cycle, r.open, r.replied, guard(bound), bound)
		}
		if hwm > peakMax {
			t.Errorf("cycle %d: peak RSS (VmHWM) %s, goal under %s", cycle, mib(hwm), mib(peakMax))
		}
		// Memory back within 64 MiB of the baseline: the figure 30 s after
		// the wave is reported (or the time it took, if sooner); the goal
		// must be met within 2 minutes, so that a loaded machine's slower
		// release of memory does not fail the test.
		var rss int64
		took, ok := waitFor(30*time.Second, func() bool {
			rss = d.rss()
			return rss <= base+backMax
		})
		t.Logf("flood cycle %d: RSS %s %v after the wave (baseline %s), %d fds (baseline %d)",
			cycle, mib(rss), took.Round(100*time.Millisecond), mib(base), d.fds(), baseFDs)
		if !ok && !r.capped && r.open == 0 {
			t.Logf("cycle %d: RSS not back within %s of the baseline 30 s after the wave; waiting up to 2 minutes", cycle, mib(backMax))
			took, ok = waitFor(90*time.Second, func() bool {
				rss = d.rss()
				return rss <= base+backMax
			})
			t.Logf("flood cycle %d: RSS %s %v later", cycle, mib(rss), took.Round(100*time.Millisecond))
		}
		if !ok {
			t.Errorf("cycle %d: RSS %s after the wave, more than %s above the baseline %s", cycle, mib(rss), mib(backMax), mib(base))
		}
		if os.Getenv("HOSTILE_FLOOD_SETTLE") != "" {
			// For the figures in notes: RSS and fds a full 30 s after the wave.
			time.Sleep(30*time.Second - took)
			t.Logf("flood cycle %d: RSS %s and %d fds 30 s after the wave", cycle, mib(d.rss()), d.fds())
		}
		if r.capped {
			t.Errorf("cycle %d: RSS passed %s (the test's safety cap, HOSTILE_RSS_CAP_MIB); the flood stops here", cycle, mib(rssCap()))
			break
		}
		if r.open > 0 {
			t.Errorf("the flood stops after cycle %d: its peers were not closed", cycle)
			break
		}
	}
	d.healthy(t, "after the flood")
}

// TestFloodFDLimit: with RLIMIT_NOFILE 512 on the daemon and 600 peers
// that open connections and send an MPA request (and then nothing), a
// legitimate host must still connect, write and read. Before the fix the
// daemon ran out of descriptors (accept4: too many open files) and the
// legitimate host timed out. connect_timeout is 5 minutes here, so that
// only the daemon's limits (limits.max_pending, max_connections and the
// reserve; default values) can let the host in, not the timeout.
//
// Bound: the legitimate host gets in within legitGuard, trying again when
// it is refused or evicted; the silent peers wait up to 30 s for an answer.
func TestFloodFDLimit(t *testing.T) {
	t.Parallel()
	const peers = 600
	d := startDaemon(t, config{Transport: []string{"connect_timeout: 5m"}, NoFile: 512})
	var replied, closed, started atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := rawpeer.Dial(context.Background(), d.addr, rawpeer.Options{})
			if err != nil {
				closed.Add(1)
				return
			}
			defer c.Abort()
			started.Add(1)
			if err := c.WriteMPA(rawpeer.QueueRequest(rawpeer.CMRequest(1, 128))); err != nil {
				closed.Add(1)
				return
			}
			if _, err := c.ReadMPA(0, time.Now().Add(30*time.Second)); err == nil {
				replied.Add(1)
			}
			select {
			case <-done:
			case <-time.After(2 * time.Minute):
			}
		}()
	}
	// Let the flood settle: until the answers stop changing for a second
	// (at most 30 s), so that the daemon is as full as it gets.
	last, stable := int64(-1), 0
	waitFor(30*time.Second, func() bool {
		n := replied.Load() + closed.Load()
		if n == last {
			stable++
		} else {
			stable, last = 0, n
		}
		return stable >= 100
	})
	fds := d.fds()
	t.Logf("%d silent peers connected: %d got an MPA reply, %d were refused or closed; the daemon holds %d fds (limit 512)",
		started.Load(), replied.Load(), closed.Load(), fds)
	// The legitimate host tries again when it is refused or evicted, as a
	// Linux host reconnects: the flood's connections still waiting in the
	// kernel's accept queue when it connects arrive after it, and on a
	// loaded machine the daemon may take enough of them while the host
	// logs in to evict it as the oldest pending connection (until the
	// queue is drained).
	var release sync.Once
	releasePeers := func() { release.Do(func() { close(done); wg.Wait() }) }
	defer releasePeers()
	start := time.Now()
	d.healthy(t, "under the fd-limit flood")
	t.Logf("a legitimate host connected, wrote and read %v after it started, during the flood", time.Since(start).Round(time.Millisecond))
	releasePeers()
	d.healthy(t, "after the fd-limit flood")
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
