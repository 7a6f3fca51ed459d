package backend_test

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nvmetd/nvmetd/backend/backendtest"
)

// pageBuffer returns n bytes of page-aligned memory from mmap, as the
// target allocates its registered buffers.
func pageBuffer(t testing.TB, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatalf("mmap %d bytes: %v", n, err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

// loopDevice attaches a loop device over a sparse file for the test
// (backendtest.LoopDevice).
var loopDevice = backendtest.LoopDevice

// allocatedBytes returns the bytes a file occupies on disk.
func allocatedBytes(t testing.TB, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// mkdirTemp makes a directory under parent removed when the test ends.
func mkdirTemp(t testing.TB, parent string) (string, error) {
	dir, err := os.MkdirTemp(parent, "backend-test-")
	if err != nil {
		return "", err
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir, nil
}
