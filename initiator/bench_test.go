package initiator

import (
	"context"
	"testing"

	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/target"
)

// TestNoAllocPerIO checks that the data path allocates nothing per I/O in
// steady state: ReadAt/WriteAt (pooled requests, fixed command slots, the
// caller's buffer used in place) and Submit with a reused Request.
func TestNoAllocPerIO(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode: allocation counts need a warmed-up run of hundreds of I/Os")
	}
	tg := startTarget(t, memoryOnly)
	c := connect(t, testConfig(t, tg.Addr()))
	ns := c.Namespace(1)
	small := make([]byte, 4096)  // in-capsule write
	large := make([]byte, 65536) // keyed
	for i := 0; i < 200; i++ {   // warm up pools and engine buffers
		ns.WriteAt(small, 0)
		ns.ReadAt(large, 0)
		ns.WriteAt(large, 0)
	}
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"read 4k", func() { ns.ReadAt(small, 4096) }},
		{"read 64k", func() { ns.ReadAt(large, 65536) }},
		{"write 4k in-capsule", func() { ns.WriteAt(small, 8192) }},
		{"write 64k keyed", func() { ns.WriteAt(large, 65536) }},
	} {
		if a := testing.AllocsPerRun(500, tc.f); a > 0.05 {
			t.Errorf("%s: %.2f allocations per I/O", tc.name, a)
		}
	}
	done := make(chan struct{}, 1)
	r := &Request{Op: OpRead, Data: large, Done: func(*Request) { done <- struct{}{} }}
	ctx := context.Background()
	if a := testing.AllocsPerRun(500, func() {
		ns.Submit(ctx, r)
		<-done
	}); a > 0.05 {
		t.Errorf("Submit: %.2f allocations per I/O", a)
	}
}

// memoryOnly makes namespace 1 a memory backend: the target then completes
// I/O on its engine goroutines, and the benchmarks measure the host's path
// and the transport rather than a file system.
var memoryOnly = withConfig(func(c *target.Config) {
	c.Subsystems[0].Namespaces = []target.NamespaceConfig{memNS(1, "64MiB")}
})

// BenchmarkReadAt4K is QD1 4 KiB reads over loopback (one goroutine).
func BenchmarkReadAt4K(b *testing.B) { benchIO(b, 4096, false, 1) }

// BenchmarkWriteAt4K is QD1 4 KiB (in-capsule) writes.
func BenchmarkWriteAt4K(b *testing.B) { benchIO(b, 4096, true, 1) }

// BenchmarkReadAt128K is QD1 128 KiB reads.
func BenchmarkReadAt128K(b *testing.B) { benchIO(b, 128<<10, false, 1) }

// BenchmarkReadAt4KParallel is 4 KiB reads from GOMAXPROCS×16 goroutines.
func BenchmarkReadAt4KParallel(b *testing.B) { benchIO(b, 4096, false, 16) }

// BenchmarkTCPReadAt4K is BenchmarkReadAt4K over NVMe/TCP.
func BenchmarkTCPReadAt4K(b *testing.B) { benchTCP(b, 4096, false, 1) }

// BenchmarkTCPWriteAt4K is BenchmarkWriteAt4K over NVMe/TCP.
func BenchmarkTCPWriteAt4K(b *testing.B) { benchTCP(b, 4096, true, 1) }

// BenchmarkTCPReadAt128K is BenchmarkReadAt128K over NVMe/TCP.
func BenchmarkTCPReadAt128K(b *testing.B) { benchTCP(b, 128<<10, false, 1) }

// BenchmarkTCPReadAt4KParallel is BenchmarkReadAt4KParallel over NVMe/TCP:
// many commands outstanding on each queue, where completions can share a
// system call.
func BenchmarkTCPReadAt4KParallel(b *testing.B) { benchTCP(b, 4096, false, 16) }

func benchTCP(b *testing.B, size int, write bool, par int) {
	tg := startTarget(b, memoryOnly, withConfig(tcpPort))
	cfg := testConfig(b, tg.Addr())
	cfg.TrType = nvmeof.TrTypeTCP
	runBench(b, connect(b, cfg), size, write, par)
}

func benchIO(b *testing.B, size int, write bool, par int) {
	tg := startTarget(b, memoryOnly)
	runBench(b, connect(b, testConfig(b, tg.Addr())), size, write, par)
}

func runBench(b *testing.B, c *Controller, size int, write bool, par int) {
	ns := c.Namespace(1)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	if par == 1 {
		buf := make([]byte, size)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			off := int64(i%256) * int64(size)
			var err error
			if write {
				_, err = ns.WriteAt(buf, off)
			} else {
				_, err = ns.ReadAt(buf, off)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	b.SetParallelism(par)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, size)
		i := 0
		for pb.Next() {
			off := int64(i%256) * int64(size)
			i++
			if _, err := ns.ReadAt(buf, off); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
