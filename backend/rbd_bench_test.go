//go:build rbd

package backend_test

import (
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/test/ceph/cephtest"
)

// rbdBenchSize is the image the RBD benchmarks use (NVMETD_RBD_BENCH_IMAGE
// names an existing one instead, as test/ceph/bench.sh does, so that the
// backend and `rbd bench` run on the same image).
const rbdBenchSize = 1 << 30

// rbdBenchQD is the number of calls in flight, as `rbd bench --io-threads`.
var rbdBenchQD = envInt("NVMETD_RBD_BENCH_QD", 16)

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// BenchmarkRBD measures the rbd backend directly (no target, no network
// other than librados's): 4 KiB random and 128 KiB sequential writes and
// reads, rbdBenchQD calls in flight from as many goroutines: synchronous
// ReadAt/WriteAt (as the target's workers issue them), and, in the
// sub-benchmarks ending in -aio, the asynchronous path the target uses
// (StartReadAt/StartWriteAt, each goroutine waiting for its completion).
// Compare with `rbd bench` (librbd's own asynchronous I/O at the same
// depth): test/ceph/bench.sh runs them all.
func BenchmarkRBD(b *testing.B) {
	c := cephtest.Shared(b)
	image := os.Getenv("NVMETD_RBD_BENCH_IMAGE")
	fill := image == ""
	if fill {
		image = c.CreateImage(b, rbdBenchSize)
	}
	r, err := backend.OpenRBD(rbdOptions(c, image, 512))
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	span := r.Size()
	if fill {
		// Reads of data, not of holes librbd answers without an OSD.
		buf := pageBuffer(b, 4<<20)
		for off := int64(0); off < span; off += int64(len(buf)) {
			if err := r.WriteAt(buf[:min(int64(len(buf)), span-off)], off, false); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, c := range []struct {
		name  string
		size  int64
		write bool
		rand  bool
	}{
		{"randwrite-4KiB", 4 << 10, true, true},
		{"randread-4KiB", 4 << 10, false, true},
		{"seqwrite-128KiB", 128 << 10, true, false},
		{"seqread-128KiB", 128 << 10, false, false},
	} {
		for _, async := range []bool{false, true} {
			name := c.name + "-QD" + strconv.Itoa(rbdBenchQD)
			if async {
				name += "-aio"
			}
			b.Run(name, func(b *testing.B) { benchRBD(b, r, span, c.size, c.write, c.rand, async) })
		}
	}
}

// benchRBD is one sub-benchmark of BenchmarkRBD: size-byte operations,
// writes or reads, random or sequential, synchronous or asynchronous.
func benchRBD(b *testing.B, r *backend.RBD, span, size int64, write, random, async bool) {
	blocks := span / size
	var next atomic.Int64 // the next sequence number to issue
	var failed atomic.Bool
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := range rbdBenchQD {
		wg.Go(func() {
			p := pageBuffer(b, int(size))
			w := make(aioWaiter, 1)
			rng := rand.New(rand.NewPCG(uint64(g), 42))
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) || failed.Load() {
					return
				}
				off := (i % blocks) * size
				if random {
					off = rng.Int64N(blocks) * size
				}
				var err error
				switch {
				case async && write && r.StartWriteAt(p, off, false, w):
					err = <-w
				case async && !write && r.StartReadAt(p, off, w):
					err = <-w
				case write:
					err = r.WriteAt(p, off, false)
				default:
					err = r.ReadAt(p, off)
				}
				if err != nil {
					failed.Store(true)
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "IOPS")
}
