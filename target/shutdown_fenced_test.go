package target

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// fencedBackend fails Flush as an rbd backend whose RADOS client is
// blocklisted does (EBLOCKLISTED is ESHUTDOWN).
type fencedBackend struct{ backend.Backend }

func (fencedBackend) Flush() error {
	return fmt.Errorf("backend: storage unavailable: %w", syscall.ESHUTDOWN)
}

// TestShutdownFencedAway: at shutdown, a namespace whose client is
// blocklisted and whose ANA group a gateway made inaccessible here (its
// new holder fenced this gateway's client of it) is not a shutdown error;
// the same failure on a group served here (optimized) is one. Before the
// fix both were errors (a drained gateway exited 1 on SIGTERM).
func TestShutdownFencedAway(t *testing.T) {
	for _, tc := range []struct {
		st      nvmeof.ANAState
		wantErr bool
	}{{nvmeof.ANAInaccessible, false}, {nvmeof.ANAOptimized, true}} {
		ns1 := memNS(1, "1MiB")
		ns1.ANAGroup = 1
		s := startServer(t, testConfig(t, ns1))
		tg := &Target{s: s}
		if err := tg.SetGatewayGuard(GatewayGuard{ANAGroups: []uint32{1}}); err != nil {
			t.Fatal(err)
		}
		if err := tg.SetGroupANA(1, tc.st); err != nil {
			t.Fatal(err)
		}
		s.regMu.RLock()
		ns := s.subsystems[testSubNQN].ns.Load().byID[1]
		s.regMu.RUnlock()
		ns.be = fencedBackend{ns.be}
		err := tg.Shutdown(context.Background())
		if got := err != nil; got != tc.wantErr {
			t.Fatalf("group %v: shutdown: %v, want an error %v", tc.st, err, tc.wantErr)
		}
		if tc.wantErr && !strings.Contains(err.Error(), "flush namespace 1") {
			t.Fatalf("group %v: shutdown: %v", tc.st, err)
		}
	}
}
