package backend_test

import (
	"path/filepath"
	"testing"

	"github.com/nvmetd/nvmetd/backend"
)

// benchSpan is the region benchmarks cycle through; it is written once
// first so that reads return data (page cache, allocated chunks) rather
// than holes.
const benchSpan = 64 << 20

func benchBackends(b *testing.B) []struct {
	name string
	open func(b *testing.B) backend.Backend
} {
	return []struct {
		name string
		open func(b *testing.B) backend.Backend
	}{
		{"file", func(b *testing.B) backend.Backend {
			f, err := backend.OpenFile(filepath.Join(b.TempDir(), "ns.img"), backend.FileOptions{Size: benchSpan})
			if err != nil {
				b.Fatal(err)
			}
			return f
		}},
		{"file-direct", func(b *testing.B) backend.Backend {
			f, err := backend.OpenFile(filepath.Join(b.TempDir(), "ns.img"), backend.FileOptions{Size: benchSpan, Direct: true})
			if err != nil {
				b.Fatal(err)
			}
			return f
		}},
		{"block-loop", func(b *testing.B) backend.Backend {
			dev, _ := loopDevice(b, benchSpan, 512)
			d, err := backend.OpenBlock(dev, backend.BlockOptions{})
			if err != nil {
				b.Fatal(err)
			}
			return d
		}},
		{"memory", func(b *testing.B) backend.Backend {
			m, err := backend.OpenMemory(backend.MemoryOptions{Size: benchSpan})
			if err != nil {
				b.Fatal(err)
			}
			return m
		}},
		{"null", func(b *testing.B) backend.Backend {
			n, err := backend.OpenNull(backend.NullOptions{Size: benchSpan})
			if err != nil {
				b.Fatal(err)
			}
			return n
		}},
	}
}

func benchIO(b *testing.B, write bool) {
	for _, c := range benchBackends(b) {
		for _, size := range []int{4 << 10, 128 << 10} {
			b.Run(c.name+"/"+backend.FormatSize(int64(size)), func(b *testing.B) {
				be := c.open(b)
				defer be.Close()
				buf := pageBuffer(b, 1<<20)
				for off := int64(0); off < benchSpan; off += int64(len(buf)) {
					if err := be.WriteAt(buf, off, false); err != nil {
						b.Fatal(err)
					}
				}
				p := buf[:size]
				b.SetBytes(int64(size))
				b.ReportAllocs()
				off := int64(0)
				for b.Loop() {
					var err error
					if write {
						err = be.WriteAt(p, off, false)
					} else {
						err = be.ReadAt(p, off)
					}
					if err != nil {
						b.Fatal(err)
					}
					if off += int64(size); off >= benchSpan {
						off = 0
					}
				}
			})
		}
	}
}

func BenchmarkReadAt(b *testing.B)  { benchIO(b, false) }
func BenchmarkWriteAt(b *testing.B) { benchIO(b, true) }

// BenchmarkReadAtParallel measures 4 KiB reads from all Ps at once, as
// the target's worker pool issues them.
func BenchmarkReadAtParallel(b *testing.B) {
	for _, c := range benchBackends(b) {
		b.Run(c.name, func(b *testing.B) {
			be := c.open(b)
			defer be.Close()
			init := pageBuffer(b, 1<<20)
			for off := int64(0); off < benchSpan; off += int64(len(init)) {
				if err := be.WriteAt(init, off, false); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(4096)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				p := pageBuffer(b, 4096)
				off := int64(0)
				for pb.Next() {
					if err := be.ReadAt(p, off); err != nil {
						b.Error(err)
						return
					}
					if off += 4096; off >= benchSpan {
						off = 0
					}
				}
			})
		})
	}
}
