package backend_test

import (
	"path/filepath"
	"testing"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/backend/backendtest"
)

func must[T backend.Backend](t *testing.T) func(b T, err error) backend.Backend {
	return func(b T, err error) backend.Backend {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

func TestConformanceMemory(t *testing.T) {
	for _, bs := range []uint32{512, 4096} {
		t.Run(sizeName(bs), func(t *testing.T) {
			backendtest.Run(t, func(t *testing.T) backend.Backend {
				// Not a whole number of 1 MiB chunks: the last is partial.
				return must[*backend.Memory](t)(backend.OpenMemory(backend.MemoryOptions{Size: 9<<20 + 8192, BlockSize: bs}))
			}, backendtest.Options{})
		})
	}
	backendtest.RunReadOnly(t, func(t *testing.T) backend.Backend {
		return must[*backend.Memory](t)(backend.OpenMemory(backend.MemoryOptions{Size: 8 << 20, ReadOnly: true}))
	})
}

func TestConformanceNull(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		return must[*backend.Null](t)(backend.OpenNull(backend.NullOptions{Size: 1 << 40}))
	}, backendtest.Options{DiscardsWrites: true})
	backendtest.RunReadOnly(t, func(t *testing.T) backend.Backend {
		return must[*backend.Null](t)(backend.OpenNull(backend.NullOptions{Size: 8 << 20, ReadOnly: true}))
	})
}

func TestConformanceFile(t *testing.T) {
	for _, c := range []struct {
		name string
		opts backend.FileOptions
	}{
		{"512", backend.FileOptions{Size: 16 << 20}},
		{"4096", backend.FileOptions{Size: 16 << 20, BlockSize: 4096}},
		{"Direct512", backend.FileOptions{Size: 16 << 20, Direct: true}},
		{"Direct4096", backend.FileOptions{Size: 16 << 20, BlockSize: 4096, Direct: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			backendtest.Run(t, func(t *testing.T) backend.Backend {
				return must[*backend.File](t)(backend.OpenFile(filepath.Join(t.TempDir(), "ns.img"), c.opts))
			}, backendtest.Options{})
		})
	}
	// tmpfs has hole punching but no FALLOC_FL_ZERO_RANGE.
	t.Run("tmpfs", func(t *testing.T) {
		backendtest.Run(t, func(t *testing.T) backend.Backend {
			dir, err := mkdirTemp(t, "/dev/shm")
			if err != nil {
				t.Skipf("no tmpfs at /dev/shm: %v", err)
			}
			return must[*backend.File](t)(backend.OpenFile(filepath.Join(dir, "ns.img"), backend.FileOptions{Size: 16 << 20}))
		}, backendtest.Options{})
	})
	backendtest.RunReadOnly(t, func(t *testing.T) backend.Backend {
		path := filepath.Join(t.TempDir(), "ns.img")
		must[*backend.File](t)(backend.OpenFile(path, backend.FileOptions{Size: 8 << 20})).Close()
		return must[*backend.File](t)(backend.OpenFile(path, backend.FileOptions{ReadOnly: true}))
	})
}

func TestConformanceBlock(t *testing.T) {
	for _, bs := range []uint32{512, 4096} {
		t.Run(sizeName(bs), func(t *testing.T) {
			backendtest.Run(t, func(t *testing.T) backend.Backend {
				dev, _ := loopDevice(t, 16<<20, bs)
				return must[*backend.Block](t)(backend.OpenBlock(dev, backend.BlockOptions{}))
			}, backendtest.Options{})
		})
	}
	backendtest.RunReadOnly(t, func(t *testing.T) backend.Backend {
		dev, _ := loopDevice(t, 8<<20, 512)
		return must[*backend.Block](t)(backend.OpenBlock(dev, backend.BlockOptions{ReadOnly: true}))
	})
}

func sizeName(bs uint32) string { return backend.FormatSize(int64(bs)) }
