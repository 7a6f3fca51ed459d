package target

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/nvmetd/nvmetd/backend"
)

// TestBackendHealth: per ANA group, the bytes of completed reads and
// writes, the commands that failed because the storage could not be
// reached, and those whose RADOS client was blocklisted (ESHUTDOWN); a
// failure of another kind (a media error) is not a path error; another
// group's counts are its own.
func TestBackendHealth(t *testing.T) {
	cfg := anaConfig(t, "optimized") // namespace 1 in group 1, 2 in group 2
	s := startServer(t, cfg)
	h := mustConnect(t, portAddr(s, 1), testSubNQN)
	h.setup(1)
	tgt := &Target{s: s}
	data := make([]byte, 4096)
	if err := do(t, h.io[0], rw(true, 1, 0, data, 512)); err != nil {
		t.Fatal(err)
	}
	if err := do(t, h.io[0], rw(false, 1, 0, data, 512)); err != nil {
		t.Fatal(err)
	}
	if got := tgt.BackendHealth(1); got.Transferred != 8192 || got.PathErrors != 0 {
		t.Fatalf("group 1 after a write and a read: %+v", got)
	}
	ns, _ := s.subsystems[testSubNQN].ns.Load().lookup(1)
	ns.put()
	ns.ioFailed(nil, backend.OpWrite, fmt.Errorf("backend rbd p/i: write: %w: %w", backend.ErrUnavailable, syscall.ETIMEDOUT))
	ns.ioFailed(nil, backend.OpWrite, fmt.Errorf("backend rbd p/i: write: %w: %w", backend.ErrUnavailable, syscall.ESHUTDOWN))
	ns.ioFailed(nil, backend.OpRead, &backend.IOError{Kind: backend.KindFile, Op: backend.OpRead, Err: syscall.EIO})
	got := tgt.BackendHealth(1)
	if got.Transferred != 8192 || got.PathErrors != 2 || got.Blocklisted != 1 || got.LastError == "" {
		t.Fatalf("group 1 after a timeout, a blocklisted write and a media error: %+v", got)
	}
	if got := tgt.BackendHealth(2); got != (BackendHealth{}) {
		t.Fatalf("group 2: %+v", got)
	}
}
