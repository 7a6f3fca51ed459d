package target

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
)

// benchTarget starts a quiet target with one namespace of the given kind
// and a host with one I/O queue of 128 entries.
func benchTarget(tb testing.TB, kind string, size int64) *host {
	tb.Helper()
	nc := NamespaceConfig{NSID: 1, Backend: BackendConfig{Kind: kind, Size: fmt.Sprint(size)}}
	if kind == "file" || kind == "direct" {
		// direct: a file on O_DIRECT, every command on a backend worker
		nc.Backend.Kind, nc.Backend.Direct = "file", kind == "direct"
		nc.Backend.Path = filepath.Join(tb.TempDir(), "bench.img")
	}
	cfg := testConfig(tb, nc)
	c := cfg.Clone()
	c.ApplyDefaults()
	s := newServer(c, zap.NewNop())
	if err := s.start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.shutdown(context.Background()) })
	h := mustConnect(tb, portAddr(s, 1), testSubNQN)
	h.setup(0)
	if _, err := h.setFeature(nvmeof.FeatNumQueues, nvmeof.EncodeNumQueues(1, 1)); err != nil {
		tb.Fatal(err)
	}
	if _, err := h.connectIO(1, 128); err != nil {
		tb.Fatal(err)
	}
	return h
}

// runIO keeps qd commands of size bytes outstanding on q for n commands,
// random or sequential over span bytes, and returns the mean latency.
func runIO(tb testing.TB, q *rdma.HostQueue, n, qd, size int, write, random bool, span int64) time.Duration {
	done := make(chan *rdma.HostRequest, qd)
	reqs := make([]*rdma.HostRequest, qd)
	for i := range reqs {
		r := &rdma.HostRequest{Data: make([]byte, size), Write: write, Done: func(r *rdma.HostRequest) { done <- r }}
		reqs[i] = r
	}
	blocks := uint64(span / 512)
	per := uint64(size / 512)
	rng := rand.New(rand.NewPCG(1, 2))
	next := uint64(0)
	set := func(r *rdma.HostRequest) {
		var lba uint64
		if random {
			lba = rng.Uint64N(blocks/per) * per
		} else {
			lba = next
			next = (next + per) % (blocks - blocks%per)
		}
		if write {
			r.SQE.BuildWrite(1, lba, uint32(per))
		} else {
			r.SQE.BuildRead(1, lba, uint32(per))
		}
	}
	start := time.Now()
	inflight := 0
	for i := 0; i < n; i++ {
		var r *rdma.HostRequest
		if inflight < qd {
			r = reqs[inflight]
		} else {
			r = <-done
			inflight--
			if r.Err != nil || r.CQE.Status() != nvmeof.StatusSuccess {
				tb.Fatal(r.Status())
			}
		}
		set(r)
		if err := q.Submit(r); err != nil {
			tb.Fatal(err)
		}
		inflight++
	}
	for ; inflight > 0; inflight-- {
		if r := <-done; r.Status() != nil {
			tb.Fatal(r.Status())
		}
	}
	el := time.Since(start)
	return el * time.Duration(qd) / time.Duration(max(n, 1))
}

// BenchmarkTargetIO measures commands through the whole target over
// loopback: host side of the binding → iWARP over TCP → the target's
// checks, the backend (null: no data; memory: a memcpy) → RDMA Write /
// Read → completion. It reports IOPS and the mean latency per command
// (queue depth × elapsed / commands). The file backend (a sparse file in
// the page cache) adds the hop to a worker goroutine.
func BenchmarkTargetIO(b *testing.B) {
	for _, kind := range []string{"null", "memory", "file"} {
		for _, tc := range []struct {
			name   string
			size   int
			qd     int
			write  bool
			random bool
		}{
			{"randread/4KiB/qd1", 4096, 1, false, true},
			{"randread/4KiB/qd32", 4096, 32, false, true},
			{"seqread/128KiB/qd8", 128 << 10, 8, false, false},
			{"randwrite/4KiB/qd1", 4096, 1, true, true},
			{"randwrite/4KiB/qd32", 4096, 32, true, true},
			{"seqwrite/128KiB/qd8", 128 << 10, 8, true, false},
		} {
			b.Run(kind+"/"+tc.name, func(b *testing.B) {
				h := benchTarget(b, kind, 256<<20)
				q := h.io[0]
				runIO(b, q, 2000, tc.qd, tc.size, tc.write, tc.random, 256<<20) // warm up
				b.SetBytes(int64(tc.size))
				b.ReportAllocs()
				b.ResetTimer()
				lat := runIO(b, q, b.N, tc.qd, tc.size, tc.write, tc.random, 256<<20)
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "IOPS")
				b.ReportMetric(float64(lat.Microseconds()), "µs/cmd")
			})
		}
	}
}

// TestIOAllocations checks that the data path allocates nothing in steady
// state: reads and writes (in-capsule and keyed) through the target with
// the memory and null backends (inline) and a file on O_DIRECT (the
// worker pool), counted across every goroutine.
func TestIOAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode: it measures allocations over thousands of commands")
	}
	for _, kind := range []string{"null", "memory", "direct"} {
		for _, tc := range []struct {
			name  string
			size  int
			write bool
		}{{"read 4KiB", 4096, false}, {"write 4KiB in-capsule", 4096, true}, {"write 128KiB keyed", 128 << 10, true}, {"read 128KiB", 128 << 10, false}} {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				if kind == "direct" && raceEnabled {
					t.Skip("the race detector makes sync.Pool drop items at random, and the O_DIRECT file backend takes its bounce buffers from one: run without -race")
				}
				h := benchTarget(t, kind, 64<<20)
				q := h.io[0]
				runIO(t, q, 3000, 16, tc.size, tc.write, true, 64<<20) // warm up: pools, maps, goroutines
				const n = 5000
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				runIO(t, q, n, 16, tc.size, tc.write, true, 64<<20)
				runtime.ReadMemStats(&after)
				per := float64(after.Mallocs-before.Mallocs) / n
				t.Logf("%.3f allocations per command (both sides, all goroutines)", per)
				if per > 0.05 {
					t.Errorf("%.3f allocations per command", per)
				}
			})
		}
	}
}
