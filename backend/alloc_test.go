package backend_test

import (
	"path/filepath"
	"testing"

	"github.com/nvmetd/nvmetd/backend"
)

// TestNoAllocs: the data path allocates nothing per call in steady state
// (DEVELOPERS.md), with page-aligned buffers as the target passes. Error
// paths may allocate.
func TestNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates; run without -race")
	}
	dev, _ := loopDevice(t, 16<<20, 512)
	for _, c := range []struct {
		name string
		open func(t *testing.T) backend.Backend
	}{
		{"file", func(t *testing.T) backend.Backend {
			return must[*backend.File](t)(backend.OpenFile(filepath.Join(t.TempDir(), "ns.img"), backend.FileOptions{Size: 16 << 20}))
		}},
		{"file-direct", func(t *testing.T) backend.Backend {
			return must[*backend.File](t)(backend.OpenFile(filepath.Join(t.TempDir(), "ns.img"), backend.FileOptions{Size: 16 << 20, Direct: true}))
		}},
		{"block", func(t *testing.T) backend.Backend {
			return must[*backend.Block](t)(backend.OpenBlock(dev, backend.BlockOptions{}))
		}},
		{"memory", func(t *testing.T) backend.Backend {
			return must[*backend.Memory](t)(backend.OpenMemory(backend.MemoryOptions{Size: 16 << 20}))
		}},
		{"null", func(t *testing.T) backend.Backend {
			return must[*backend.Null](t)(backend.OpenNull(backend.NullOptions{Size: 16 << 20}))
		}},
		{"null-pattern", func(t *testing.T) backend.Backend {
			return must[*backend.Null](t)(backend.OpenNull(backend.NullOptions{Size: 16 << 20, Pattern: []byte("xyz")}))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := c.open(t)
			defer b.Close()
			checkNoAllocs(t, b, 50)
		})
	}
}

// checkNoAllocs checks that every data method of b allocates nothing per
// call, over runs calls each, with 4 KiB and 128 KiB page-aligned buffers.
func checkNoAllocs(t *testing.T, b backend.Backend, runs int) {
	t.Helper()
	buf := pageBuffer(t, 128<<10)
	for _, n := range []int{4096, 128 << 10} {
		p := buf[:n]
		// Warm up: the memory backend allocates a chunk on first write.
		if err := b.WriteAt(p, 1<<20, false); err != nil {
			t.Fatal(err)
		}
		for name, fn := range map[string]func() error{
			"ReadAt":                func() error { return b.ReadAt(p, 1<<20) },
			"WriteAt":               func() error { return b.WriteAt(p, 1<<20, false) },
			"WriteAtFUA":            func() error { return b.WriteAt(p, 1<<20, true) },
			"WriteZeroes":           func() error { return b.WriteZeroes(2<<20, int64(n), false) },
			"WriteZeroesDeallocate": func() error { return b.WriteZeroes(2<<20, int64(n), true) },
			"Discard":               func() error { return b.Discard(2<<20, int64(n)) },
			"Flush":                 b.Flush,
		} {
			var err error
			allocs := testing.AllocsPerRun(runs, func() {
				if e := fn(); e != nil {
					err = e
				}
			})
			if err != nil {
				t.Fatalf("%s %d bytes: %v", name, n, err)
			}
			if allocs != 0 {
				t.Errorf("%s of %d bytes: %v allocations per call, want 0", name, n, allocs)
			}
		}
	}
}
